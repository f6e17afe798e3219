"""Lab fixtures for integration tests: real hosts (systemd-nspawn, systemd PID 1, sshd) and real playbook runs.

Each test module may pick its own lab with a module-level `LAB_NAME = "..."`; otherwise the session lab
"itest" is used. Labs are brought up once per name, and taken down when the worker's next test uses another lab
(unless LAB_KEEP=1), so test files that share a lab share hosts.
"""
from __future__ import annotations

import ast
import functools
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


# The suite runs on two workers (pytest-xdist, `make integration`): every test of one lab runs in one worker, one after
# the other (LabScheduling below), and a worker has one lab up at a time. Labs are handed out in the order below; a
# worker is handed its next lab as soon as 2 of its tests are left (xdist's LoadScopeScheduling), so a lab of two
# tests (site, takeover) brings the next one with it. The order is the one whose simulated hand-out ends the two
# workers closest together, over the per-test times of a fresh-clone run on this machine's two cores (the molecule
# scenarios a lab hosts included), with the bench, service and cuda labs' cuts of this order's commit, the ~90 s test
# being added to rolling, and each lab's time varied by +-20%: 2057 s for the longer worker, against 2100 s
# costliest-first and 2179 s for the order before. A test of no lab (a molecule scenario on a lab of its own, made and
# removed by molecule) is a unit of its own, handed out last.
GROUP_COST_ORDER = ("site", "takeover", "multinode", "cuda", "bench", "rolling", "service", "fleet", "itest", "venv",
                    "models")


def _module_lab(module) -> str | None:
    return getattr(module, "LAB_NAME", None)


@functools.lru_cache(maxsize=None)
def _file_lab(path: str) -> str | None:
    """A test file's module-level `LAB_NAME = "..."`, read without importing it (the xdist controller collects
    nothing: it sees node ids only)."""
    try:
        tree = ast.parse((ROOT / path).read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["LAB_NAME"]
                and isinstance(node.value, ast.Constant)):
            return node.value.value
    return None


def pytest_xdist_make_scheduler(config, log):
    """Units of work = labs: all the tests of one LAB_NAME (across files) go to one worker, in collection order. (Not
    `--dist loadgroup`: with pytest 9.2 its xdist_group marks no longer reach the node ids it schedules by.)"""
    from xdist.scheduler import LoadScopeScheduling

    class LabScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _file_lab(nodeid.split("::", 1)[0]) or nodeid

    config.option.loadscopereorder = False      # keep the cost order of the collection
    return LabScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Labs in cost order, each lab's tests in their collected order; tests of no lab last."""
    def rank(item):
        lab = _module_lab(item.module)
        return GROUP_COST_ORDER.index(lab) if lab in GROUP_COST_ORDER else len(GROUP_COST_ORDER) + (lab is None)
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank(item), order[id(item)]))


# Each booted host runs its own systemd, and each systemd takes inotify instances from the one per-user pool
# (fs.inotify.max_user_instances, 128 by default): a lab goes down as soon as the next test of this worker uses
# another one (xdist hands a worker the next test before it runs this one, so `nextitem` is exact), not at the end.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield      # this test's fixtures (the module's, when it was the module's last test) are torn down first
    here = _module_lab(item.module) or os.environ.get("ITEST_LAB_NAME", "itest")
    there = None if nextitem is None else _module_lab(nextitem.module) or os.environ.get("ITEST_LAB_NAME", "itest")
    if os.environ.get("LAB_KEEP") != "1" and there != here:
        lab = _labs.pop(here, None)
        if lab is not None:
            lab.down(log=lambda *_: None)
    return result


@pytest.fixture(scope="module")
def lab(request, _lab_registry) -> Lab:
    """An up lab (hosts b300-lab and ct200-lab). Module attribute LAB_NAME picks which one."""
    name = getattr(request.module, "LAB_NAME", os.environ.get("ITEST_LAB_NAME", "itest"))
    if name not in _lab_registry:
        _lab_registry[name] = Lab(name)
    lab = _lab_registry[name]
    lab.up(log=lambda *_: None)
    return lab


# The lab venv and the lab drafter's config (the service scenario's prepare.yml), which every module that serves
# starts from. Several modules of one lab each need it (the service lab: test_compile_cache, test_service and
# test_service_home, one after the other in one worker): it runs once per boot of the lab's hosts (their nspawn pids
# key it), so a module that runs alone, or after its lab was taken down and brought up again, still gets it; on a lab
# that ran it already, a rerun would change nothing (the venv role's idempotence is its molecule scenario's).
SERVICE_PREPARE = "roles/sglang_service/molecule/default/prepare.yml"
_prepared: dict[str, tuple] = {}


@pytest.fixture(scope="module")
def lab_prepared(lab) -> Lab:
    """`lab`, with SERVICE_PREPARE run on all its hosts since they booted (run here unless it already was)."""
    boot = lab.boot()
    if _prepared.get(lab.name) != boot:
        prep = run_playbook(lab, SERVICE_PREPARE)
        assert prep.rc == 0, prep.stdout[-3000:]
        _prepared[lab.name] = boot
    return lab


@pytest.fixture
def playbook(lab):
    """`playbook("playbooks/x.yml", limit=..., ...)` -> PlaybookRun against this module's lab."""
    def _run(path: str, **kw) -> PlaybookRun:
        return run_playbook(lab, path, **kw)
    return _run


def lab_json(lab: Lab) -> str:
    return json.dumps(lab.state(), indent=2)
