"""Filters for the cuda role's apt route: NVIDIA's repository for a host, and the exact-version pins.

The logic lives in module_utils/gpu/cuda_repo.py (pure, unit-tested); these are thin wrappers that turn its
CudaRepoError into an AnsibleFilterError carrying the same message.

    ansible_facts | cuda_repo_path                      -> "ubuntu2404/x86_64/" (error naming the supported set)
    ansible_facts | cuda_repo_problem                   -> "" or the refusal (what was found, what is supported)
    components | cuda_apt_pins(meta, version)           -> {meta: version, component: version, ...}
    madison_stdout | cuda_apt_missing(pins)             -> ["pkg=version", ...] no repository offers
    dpkg_query_stdout | cuda_apt_pin_mismatches(pins)   -> [{"package", "pinned", "installed"}, ...]
    dpkg_query_stdout | cuda_apt_newer_installed(pins)  -> those installed NEWER than the pin (dpkg's order)
    pins | cuda_apt_guarded_pins(patterns)              -> ["pkg (pattern)", ...] the driver guard would block
"""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleFilterError

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.gpu import cuda_repo as cuda_repo_lib  # noqa: E402


def _call(func, *args):
    lib = cuda_repo_lib
    try:
        return func(lib)(*args)
    except lib.CudaRepoError as exc:
        raise AnsibleFilterError(f"cuda: {exc}") from None


def cuda_repo_path(facts):
    return _call(lambda lib: lib.repo_path_from_facts, dict(facts or {}))


def cuda_repo_problem(facts):
    return cuda_repo_lib.repo_problem_from_facts(dict(facts or {}))


def cuda_apt_pins(components, meta, version):
    return _call(lambda lib: lib.pinned_packages, meta, version, dict(components or {}))


def cuda_apt_missing(madison_stdout, pins):
    return _call(lambda lib: lib.missing_from_repository, madison_stdout, dict(pins))


def cuda_apt_pin_mismatches(dpkg_query_stdout, pins):
    return _call(lambda lib: lib.pin_mismatches, dpkg_query_stdout, dict(pins))


def cuda_apt_newer_installed(dpkg_query_stdout, pins):
    return _call(lambda lib: lib.newer_installed, dpkg_query_stdout, dict(pins))


def cuda_apt_guarded_pins(pins, patterns):
    return cuda_repo_lib.guarded_pins(dict(pins), list(patterns or []))


class FilterModule:
    def filters(self):
        return {
            "cuda_repo_path": cuda_repo_path,
            "cuda_repo_problem": cuda_repo_problem,
            "cuda_apt_pins": cuda_apt_pins,
            "cuda_apt_missing": cuda_apt_missing,
            "cuda_apt_pin_mismatches": cuda_apt_pin_mismatches,
            "cuda_apt_newer_installed": cuda_apt_newer_installed,
            "cuda_apt_guarded_pins": cuda_apt_guarded_pins,
        }
