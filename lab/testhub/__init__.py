"""Hub-compatible test server (a test double): `python -m lab.testhub --bind ADDR --port N --seed S`.

Speaks the subset of the Hugging Face Hub protocol that huggingface_hub and hf_transfer use (revision, paged tree,
resolve with HEAD/GET/Range, LFS redirect to a separate file server, X-Error-Code 404s), serves model and dataset
repositories generated from a seed (lazily, so multi-GiB files are never stored) and injects faults on request.
Never imported by roles or module_utils.
"""
from .repos import DEFAULT_REPOS, parse_repo_arg, parse_size
from .process import HubProcess
from .hub import TestHub

__all__ = ["DEFAULT_REPOS", "HubProcess", "TestHub", "parse_repo_arg", "parse_size"]
