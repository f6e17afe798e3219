"""Real ansible-playbook runs against a lab, for the integration tests: ansible-runner with its events kept
(run_playbook -> PlaybookRun), or a background ansible-playbook for tests that kill the controller mid-run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner

from lab.lab import Lab

ROOT = Path(__file__).resolve().parents[2]


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
                 envvars: dict | None = None, timeout: int = 900, inventory: str | list | None = None) -> PlaybookRun:
    """Run a repo playbook (path relative to the repo root) with ansible-runner against `lab`. inventory: a source
    relative to the repo root (default inventory/lab), or a list of sources (absolute paths stay as given)."""
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
        sources = [str(ROOT / i) for i in inventory] if isinstance(inventory, list) else \
            str(ROOT / (inventory or "inventory/lab"))
        r = ansible_runner.run(
            private_data_dir=pdd, project_dir=str(ROOT), playbook=str(ROOT / playbook),
            inventory=sources, limit=limit, extravars=extravars or {},
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
