"""Filters for the cuda role's apt route: NVIDIA's repository for a host, and the exact-version pins.

The logic lives in module_utils/cuda_repo.py (pure, unit-tested); these are thin wrappers that turn its
CudaRepoError into an AnsibleFilterError carrying the same message.

    ansible_facts | cuda_repo_path                      -> "ubuntu2404/x86_64/" (error naming the supported set)
    ansible_facts | cuda_repo_problem                   -> "" or the refusal (what was found, what is supported)
    components | cuda_apt_pins(meta, version)           -> {meta: version, component: version, ...}
    madison_stdout | cuda_apt_missing(pins)             -> ["pkg=version", ...] no repository offers
    dpkg_query_stdout | cuda_apt_pin_mismatches(pins)   -> [{"package", "pinned", "installed"}, ...]
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ansible.errors import AnsibleFilterError

MODULE_UTILS = Path(__file__).resolve().parent.parent / "module_utils"


def _lib():
    """module_utils/cuda_repo.py, loaded by path: filters run on the controller, outside ansible.module_utils."""
    name = "cuda_role_cuda_repo"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, MODULE_UTILS / "cuda_repo.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _call(func, *args):
    lib = _lib()
    try:
        return func(lib)(*args)
    except lib.CudaRepoError as exc:
        raise AnsibleFilterError(f"cuda: {exc}") from None


def cuda_repo_path(facts):
    return _call(lambda lib: lib.repo_path_from_facts, dict(facts or {}))


def cuda_repo_problem(facts):
    return _lib().repo_problem_from_facts(dict(facts or {}))


def cuda_apt_pins(components, meta, version):
    return _call(lambda lib: lib.pinned_packages, meta, version, dict(components or {}))


def cuda_apt_missing(madison_stdout, pins):
    return _call(lambda lib: lib.missing_from_repository, madison_stdout, dict(pins))


def cuda_apt_pin_mismatches(dpkg_query_stdout, pins):
    return _call(lambda lib: lib.pin_mismatches, dpkg_query_stdout, dict(pins))


class FilterModule:
    def filters(self):
        return {
            "cuda_repo_path": cuda_repo_path,
            "cuda_repo_problem": cuda_repo_problem,
            "cuda_apt_pins": cuda_apt_pins,
            "cuda_apt_missing": cuda_apt_missing,
            "cuda_apt_pin_mismatches": cuda_apt_pin_mismatches,
        }
