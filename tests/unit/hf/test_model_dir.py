"""A model directory names the repository it holds: the repository's name part, exactly (module_utils/hf/model_dir)."""
import pytest

from ansible.module_utils.hf.model_dir import ModelDirError, dir_problems, model_dir


def test_the_directory_is_the_repositorys_name_part():
    assert model_dir("z-lab/Kimi-K2.6-DFlash") == "Kimi-K2.6-DFlash"
    assert model_dir("moonshotai/Kimi-K2.6") == "Kimi-K2.6"
    assert model_dir("lab/sharegpt-mini") == "sharegpt-mini"


@pytest.mark.parametrize("bad", ["Kimi-K2.6", "a/b/c", "/b", "a/", "", None, "a/../b", "a/b@main"])
def test_a_repo_id_that_is_not_namespace_name_names_no_directory(bad):
    with pytest.raises(ModelDirError, match="is not a Hub repository id"):
        model_dir(bad)


def test_a_name_that_is_not_its_repositorys_is_refused_naming_both():
    entries = [{"name": "Kimi-K2.6", "repo_id": "moonshotai/Kimi-K2.6"},
               {"name": "Kimi-K2.6-DFlash-tmp-long", "repo_id": "z-lab/Kimi-K2.6-DFlash"},
               {"name": "kimi-k2.6-dflash", "repo_id": "z-lab/Kimi-K2.6-DFlash"},        # case is part of the name
               {"name": "Kimi-K2.6-DFlash@c1462ef", "repo_id": "z-lab/Kimi-K2.6-DFlash"},  # no revision suffix
               {"name": "x", "repo_id": "not-a-repo"}]
    problems = dir_problems(entries)
    assert len(problems) == 4
    assert problems[0].startswith("models_list entry 'Kimi-K2.6-DFlash-tmp-long' holds z-lab/Kimi-K2.6-DFlash, so its "
                                  "directory must be named 'Kimi-K2.6-DFlash'")
    assert "'kimi-k2.6-dflash' holds" in problems[1] and "'Kimi-K2.6-DFlash@c1462ef' holds" in problems[2]
    assert problems[3].startswith("models_list entry 'x': 'not-a-repo' is not a Hub repository id")
    assert dir_problems(entries[:1]) == [] and dir_problems([]) == [] and dir_problems(None) == []
    assert dir_problems([{"name": "d", "repo_id": "o/D"}], "drafter")[0].startswith("drafter 'd' holds o/D")
