"""Filters for the venv role's preflight: the clone route's inputs, judged by the venv_build module's own check, and the
host's base interpreter against the Python the flavour's lock was resolved for.

The rule lives in module_utils/venv/clone.py (clone_input_problems, the function venv_build runs before anything is
made); this filter only names the inputs as the role's variables, so the controller refuses exactly what the host
would, before anything is copied.

    venv_clone_repo | venv_clone_input_problems(commit, subdir)   -> [] or ["venv_clone_subdir 'sub/' must be ...", ...]
    registered_run | venv_python_problem(floor, venv_python, lock_path, same_as)   -> "" or the refusal
    venv_lock_file | venv_pinned_version(dist, local_packages)     -> the version the flavour installs of dist, or ""

The interpreter rule lives in module_utils/venv/lock.py (python_problem); the floor is the lock's own header (the
venv_lock module returns it as ``python``), never a second copy of "3.11".
"""
from __future__ import annotations

from pathlib import Path

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.venv.clone import clone_input_problems  # noqa: E402
from ansible.module_utils.venv.lock import pinned_version, python_problem, read  # noqa: E402


def venv_clone_input_problems(repo, commit, subdir):
    """The clone route's repo, commit and subdir as venv_build checks them: [] when good, else the problems."""
    return clone_input_problems(repo, commit, subdir, prefix="venv_")


def venv_python_problem(run, floor, interpreter, lock_path="lock", same_as=""):
    """The registered result of `<venv_python> -c 'print(platform.python_version())'` (command, failed_when false)
    judged against the lock's Python (floor) and, for a stream, the source venv's Python: "" when good."""
    run = run if isinstance(run, dict) else {}
    found = str(run.get("stdout") or "").strip() if run.get("rc", 1) == 0 else ""
    error = str(run.get("stderr") or run.get("msg") or "").strip()
    return python_problem(found, str(floor or ""), str(interpreter), str(lock_path), error, str(same_as or ""))


def venv_pinned_version(lock_path, dist, local_packages=()):
    """The version of dist the flavour installs (its lock's entry, else a local package's pyproject): what an
    adopted venv must have (roles/takeover takeover_venv) and what keeps one adopted (venv_build adopted_pin)."""
    return pinned_version(read(str(lock_path)), str(dist), [str(t) for t in (local_packages or [])])


class FilterModule:
    def filters(self):
        return {"venv_clone_input_problems": venv_clone_input_problems, "venv_python_problem": venv_python_problem,
                "venv_pinned_version": venv_pinned_version}
