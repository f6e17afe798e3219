"""The hf filters expose module_utils/hf/model_dir.py's rule to the models and service roles, unchanged."""
import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.hf import FilterModule, hf_model_dir, hf_model_dir_problems


def test_filters_are_registered_and_read_the_one_rule():
    assert set(FilterModule().filters()) == {"hf_model_dir", "hf_model_dir_problems"}
    assert hf_model_dir("z-lab/Kimi-K2.6-DFlash") == "Kimi-K2.6-DFlash"
    assert hf_model_dir_problems([{"name": "Kimi-K2.6-DFlash", "repo_id": "z-lab/Kimi-K2.6-DFlash"}]) == []
    assert "must be named 'Kimi-K2.6-DFlash'" in hf_model_dir_problems(
        [{"name": "Kimi-K2.6-DFlash-tmp-long", "repo_id": "z-lab/Kimi-K2.6-DFlash"}])[0]


def test_a_malformed_repo_id_fails_the_template():
    with pytest.raises(AnsibleFilterError, match="'Kimi-K2.6' is not a Hub repository id"):
        hf_model_dir("Kimi-K2.6")
