"""filter_plugins/overrides.py: a config (the sweep's) or a fragment (a proposal's, rolling_apply) lands on top of the
host's own overrides (the service interface's short keys), by one rule, so what is applied is what was measured."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.overrides import VARIABLES, sglang_overrides_layer, sglang_overrides_on

# sglang_service_interface.overrides of a host
HOST = {"server": {"context_length": 8192, "sampling_backend": "pytorch"}, "env": {"CC": "/opt/gcc/bin/gcc"},
        "speculative": {}, "extra_args": {}, "validation_overrides": [{"rule": "x", "reason": "host"}]}


def test_an_empty_fragment_keeps_every_override_of_the_host():
    # the H200 rehearsal's proposal: the winner's fragment has empty server/env overrides
    fragment = {"sglang_service_speculative_overrides": {"algorithm": "NONE", "draft_model_path": None},
                "sglang_service_server_overrides": {}, "sglang_service_env_overrides": {},
                "sglang_service_extra_args": {}, "sglang_service_validation_overrides": []}
    out = sglang_overrides_on(fragment, HOST)
    assert out["sglang_service_server_overrides"] == {"context_length": 8192, "sampling_backend": "pytorch"}
    assert out["sglang_service_env_overrides"] == {"CC": "/opt/gcc/bin/gcc"}
    assert out["sglang_service_speculative_overrides"] == {"algorithm": "NONE", "draft_model_path": None}
    assert out["sglang_service_validation_overrides"] == [{"rule": "x", "reason": "host"}]


def test_the_fragments_values_win_key_by_key_and_its_list_is_appended():
    fragment = {"sglang_service_server_overrides": {"context_length": 4096, "cuda_graph_max_bs": 8},
                "sglang_service_validation_overrides": [{"rule": "y", "reason": "sweep"}]}
    out = sglang_overrides_on(fragment, HOST)
    assert out["sglang_service_server_overrides"] == {"context_length": 4096, "sampling_backend": "pytorch",
                                                      "cuda_graph_max_bs": 8}
    assert [v["rule"] for v in out["sglang_service_validation_overrides"]] == ["x", "y"]
    assert out["sglang_service_env_overrides"] == HOST["env"]
    assert HOST["server"]["context_length"] == 8192       # the host's dict is not changed


def test_unknown_keys_and_wrong_types_are_refused():
    with pytest.raises(AnsibleFilterError, match="unknown keys"):
        sglang_overrides_on({"sglang_service_model": "x"}, HOST)
    with pytest.raises(AnsibleFilterError, match="is a mapping"):
        sglang_overrides_on({"sglang_service_server_overrides": ["a"]}, HOST)
    with pytest.raises(AnsibleFilterError, match="is a list"):
        sglang_overrides_on({"sglang_service_validation_overrides": {"a": 1}}, HOST)
    with pytest.raises(AnsibleFilterError, match="is a mapping"):
        sglang_overrides_layer({"server": {}}, {"server": "context_length=8"})


def test_a_sweep_config_and_the_same_fragment_land_alike():
    """The sweep measures `config | sglang_overrides_layer(current)`; apply_proposal deploys the winner's fragment
    through `sglang_overrides_on`: the same rule, so the deployed overrides are the measured ones."""
    config = {"name": "ngram", "speculative": {"algorithm": "NGRAM"}, "server": {"cuda_graph_max_bs": 8},
              "env": {}, "validation_overrides": [{"rule": "y", "reason": "sweep"}]}
    measured = sglang_overrides_layer(config, HOST)
    fragment = {"sglang_service_speculative_overrides": {"algorithm": "NGRAM"},
                "sglang_service_server_overrides": {"cuda_graph_max_bs": 8}, "sglang_service_env_overrides": {},
                "sglang_service_validation_overrides": [{"rule": "y", "reason": "sweep"}]}
    deployed = sglang_overrides_on(fragment, HOST)
    assert {key: deployed[variable] for key, variable in VARIABLES.items()} == measured
    assert "name" not in measured and measured["server"] == {"context_length": 8192, "sampling_backend": "pytorch",
                                                             "cuda_graph_max_bs": 8}


def test_the_keys_of_a_fragment_are_the_filters_answer_on_nothing():
    assert sorted(sglang_overrides_on({}, {})) == sorted([
        "sglang_service_speculative_overrides", "sglang_service_server_overrides", "sglang_service_env_overrides",
        "sglang_service_extra_args", "sglang_service_validation_overrides"])
