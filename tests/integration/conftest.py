"""Lab fixtures for integration tests: real hosts (systemd-nspawn, systemd PID 1, sshd) and real playbook runs.

Each test module may pick its own lab with a module-level `LAB_NAME = "..."`; otherwise the session lab
"itest" is used. Labs are brought up once per name and taken down at the end of the session (unless
LAB_KEEP=1), so test files that share a lab share hosts.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.lab import Lab
from tests.helpers.playbook import PlaybookRun, run_playbook

ROOT = Path(__file__).resolve().parents[2]
_labs: dict[str, Lab] = {}


@pytest.fixture(scope="session")
def _lab_registry():
    yield _labs
    if os.environ.get("LAB_KEEP") != "1":
        for lab in _labs.values():
            lab.down(log=lambda *_: None)


# (module name, lab name) of every collected test module, in run order: a lab goes down after the last module that
# uses it. Each booted host runs its own systemd, and each systemd takes inotify instances from the one per-user
# pool (fs.inotify.max_user_instances, 128 by default): with every lab of the suite kept up to the end, the hosts
# booted late failed with "Failed to allocate manager object".
_MODULE_LABS: list[tuple[str, str]] = []


def _module_lab_name(module) -> str:
    return getattr(module, "LAB_NAME", os.environ.get("ITEST_LAB_NAME", "itest"))


def pytest_collection_modifyitems(session, config, items):
    seen = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ not in seen:
            seen.add(module.__name__)
            _MODULE_LABS.append((module.__name__, _module_lab_name(module)))


@pytest.fixture(scope="module", autouse=True)
def _release_labs(request, _lab_registry):
    """After a module (its own fixtures torn down first): take down every lab no later module uses (LAB_KEEP=1
    keeps them)."""
    yield
    if os.environ.get("LAB_KEEP") == "1":
        return
    names = [m for m, _ in _MODULE_LABS]
    here = request.module.__name__
    later = {lab for _, lab in _MODULE_LABS[names.index(here) + 1:]} if here in names else set()
    for name in [n for n in _lab_registry if n not in later]:
        _lab_registry.pop(name).down(log=lambda *_: None)


@pytest.fixture(scope="module")
def lab(request, _lab_registry) -> Lab:
    """An up lab (hosts b300-lab and ct200-lab). Module attribute LAB_NAME picks which one."""
    name = getattr(request.module, "LAB_NAME", os.environ.get("ITEST_LAB_NAME", "itest"))
    if name not in _lab_registry:
        _lab_registry[name] = Lab(name)
    lab = _lab_registry[name]
    lab.up(log=lambda *_: None)
    return lab


@pytest.fixture
def playbook(lab):
    """`playbook("playbooks/x.yml", limit=..., ...)` -> PlaybookRun against this module's lab."""
    def _run(path: str, **kw) -> PlaybookRun:
        return run_playbook(lab, path, **kw)
    return _run


def lab_json(lab: Lab) -> str:
    return json.dumps(lab.state(), indent=2)
