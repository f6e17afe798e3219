"""Filters over Hub repositories for the models and service roles: the directory each repository lives in.

The rule is module_utils/hf/model_dir.py's (a model directory names the repository it holds: its name part); these
filters only expose it, so the models role (which checks the directories it fills) and the service role (which
derives the directories it loads) read one rule.

    "z-lab/Kimi-K2.6-DFlash" | hf_model_dir                    -> "Kimi-K2.6-DFlash"
    models_list | hf_model_dir_problems                         -> [] or ["models_list entry 'X' holds org/Y: ...", ...]
    [{"name": n, "repo_id": r}] | hf_model_dir_problems(what)   -> the same lines, each entry called `what`
"""
from __future__ import annotations

from pathlib import Path

import ansible.module_utils
from ansible.errors import AnsibleFilterError

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.hf.model_dir import ModelDirError, dir_problems, model_dir  # noqa: E402


def hf_model_dir(repo_id) -> str:
    """The directory name a repository lives in under the models root (refused for a malformed repo id)."""
    try:
        return model_dir(repo_id)
    except ModelDirError as exc:
        raise AnsibleFilterError(exc.message) from exc


def hf_model_dir_problems(entries, what: str = "models_list entry") -> list:
    """[] when every {name, repo_id} entry's name is its repository's directory, else one line per entry."""
    return dir_problems(entries, what)


class FilterModule:
    def filters(self):
        return {"hf_model_dir": hf_model_dir, "hf_model_dir_problems": hf_model_dir_problems}
