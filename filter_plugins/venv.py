"""Filters for the venv role's preflight: the clone route's inputs, judged by the venv_build module's own check.

The rule lives in module_utils/venv/clone.py (clone_input_problems, the function venv_build runs before anything is
made); this filter only names the inputs as the role's variables, so the controller refuses exactly what the host
would, before anything is copied.

    venv_clone_repo | venv_clone_input_problems(commit, subdir)   -> [] or ["venv_clone_subdir 'sub/' must be ...", ...]
"""
from __future__ import annotations

from pathlib import Path

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.venv.clone import clone_input_problems  # noqa: E402


def venv_clone_input_problems(repo, commit, subdir):
    """The clone route's repo, commit and subdir as venv_build checks them: [] when good, else the problems."""
    return clone_input_problems(repo, commit, subdir, prefix="venv_")


class FilterModule:
    def filters(self):
        return {"venv_clone_input_problems": venv_clone_input_problems}
