"""Lab fixtures for integration tests: real hosts (systemd-nspawn, systemd PID 1, sshd) and real playbook runs.

Each test module may pick its own lab with a module-level `LAB_NAME = "..."`; otherwise the session lab
"itest" is used. Labs are brought up once per name and taken down at the end of the session (unless
LAB_KEEP=1), so test files that share a lab share hosts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
import pytest

from lab.lab import Lab

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


@dataclass
class PlaybookRun:
    rc: int
    status: str
    events: list = field(repr=False)
    stdout: str = field(repr=False)

    def results(self, task: str, host: str | None = None) -> list[dict]:
        """event_data['res'] of every runner_on_ok/failed/skipped event of the task named `task`."""
        out = []
        for ev in self.events:
            if ev.get("event") not in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
                continue
            data = ev.get("event_data", {})
            if data.get("task") == task and (host is None or data.get("host") == host):
                out.append({**data.get("res", {}), "_event": ev["event"], "_host": data.get("host")})
        return out

    def result(self, task: str, host: str | None = None) -> dict:
        found = self.results(task, host)
        assert found, f"task {task!r} did not run; tasks that ran: {sorted(self.task_names())}\n{self.stdout[-3000:]}"
        return found[-1]

    def failures(self) -> str:
        """Every failed or unreachable task with its message: the evidence an assertion should show."""
        out = []
        for ev in self.events:
            if ev.get("event") in ("runner_on_failed", "runner_on_unreachable") and not ev["event_data"].get("ignore_errors"):
                data = ev["event_data"]
                res = data.get("res", {})
                out.append(f"{data.get('host')} | {data.get('task')}: {res.get('msg', '')} "
                           f"{res.get('stderr', '')[-800:]} {res.get('stdout', '')[-400:]}".strip())
        return "\n".join(out) or "(no failed task events)"

    def task_names(self) -> set[str]:
        return {ev["event_data"].get("task") for ev in self.events if ev.get("event", "").startswith("runner_on_")}

    def stats(self) -> dict:
        for ev in reversed(self.events):
            if ev.get("event") == "playbook_on_stats":
                return ev["event_data"]
        return {}

    def changed_count(self, host: str) -> int:
        return self.stats().get("changed", {}).get(host, 0)


def run_playbook(lab: Lab, playbook: str, *, limit: str | None = None, extravars: dict | None = None,
                 tags: str | None = None, skip_tags: str | None = None, check: bool = False, verbosity: int = 0,
                 envvars: dict | None = None, timeout: int = 900, inventory: str | None = None) -> PlaybookRun:
    """Run a repo playbook (path relative to the repo root) with ansible-runner against `lab`."""
    cmdline = []
    if check:
        cmdline.append("--check")
    if skip_tags:
        cmdline += ["--skip-tags", skip_tags]
    with tempfile.TemporaryDirectory(prefix="runner-") as pdd:
        # ansible-runner replaces the callback path with its own; ours (task_timer) is added back beside it.
        env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "LAB_NAME": lab.name, "PYTHONPATH": str(ROOT),
               "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "callback_plugins"),
               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", **(envvars or {})}
        r = ansible_runner.run(
            private_data_dir=pdd, project_dir=str(ROOT), playbook=str(ROOT / playbook),
            inventory=str(ROOT / (inventory or "inventory/lab")), limit=limit, extravars=extravars or {},
            tags=tags, cmdline=" ".join(cmdline) or None, verbosity=verbosity, envvars=env, timeout=timeout,
            quiet=True, json_mode=False)
        stdout = r.stdout.read() if r.stdout else ""
        events = list(r.events)
    return PlaybookRun(rc=r.rc, status=r.status, events=events, stdout=stdout)


def start_playbook(lab: Lab, playbook: str, extravars: dict, limit: str) -> "subprocess.Popen":
    """Start ansible-playbook in the background in its own session, for tests that kill the controller mid-run
    (the caller signals the process group and waits)."""
    env = {**os.environ, "LAB_NAME": lab.name, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT)}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/lab", playbook, "-l", limit,
           "-e", json.dumps(extravars)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


@pytest.fixture
def playbook(lab):
    """`playbook("playbooks/x.yml", limit=..., ...)` -> PlaybookRun against this module's lab."""
    def _run(path: str, **kw) -> PlaybookRun:
        return run_playbook(lab, path, **kw)
    return _run


def lab_json(lab: Lab) -> str:
    return json.dumps(lab.state(), indent=2)
