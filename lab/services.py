"""The test doubles the lab runs on its gateway for the whole lab's life (LAB_SERVICES: the test Hub, the SGLang
fork's git server): start each and wait until it listens, stop them, tell whether each still runs."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab.error import LabError
from lab.paths import CACHE_DIR, ROOT
from lab.system import pid_alive

# Test doubles the lab runs on its gateway for the whole lab's life (hosts reach them directly, no proxy):
# name -> (port, argv after `python -m`). "{gateway}", "{port}" and "{dir}" are filled in at start.
LAB_SERVICES = {
    "testhub": (8090, ["lab.testhub", "--bind", "{gateway}", "--port", "{port}", "--file-port", "8091",
                       "--seed", "0", "--ready-file", "{dir}/testhub.ready",
                       # the real pair's name parts (a model directory names its repo); the drafter's block size
                       # is the nvlink profile's (group_vars/nvlink/sglang_service.yml), checked before every restart
                       "--repo", "demo/Kimi-K2.6:shards=4,shard_size=8MiB",
                       "--repo", "demo/Kimi-K2.6-DFlash:shards=1,shard_size=4MiB,block_size=8",
                       "--repo", "lab/sharegpt-mini:type=dataset"]),
    # The operator's SGLang "fork" for the venv role's clone route (lab/gitfork.py): the stand-in with the lab's DDTree
    # patch committed, built from the working tree at start (fixed identity and dates: a stable sha), a bare repo
    # served with git's dumb HTTP protocol. It describes itself in {dir}/gitfork.json: lab_services.gitfork.url
    # (the repository URL) and .commit (branch ddtree; .base_commit: the stand-in without the patch).
    "gitfork": (8092, ["lab.gitfork", "--bind", "{gateway}", "--port", "{port}", "--dir", "{dir}/gitfork",
                       "--info", "{dir}/gitfork.json"]),
}


def ensure_services(state: dict, sdir: Path) -> None:
    """Start the lab's test doubles (LAB_SERVICES) on the gateway; bounded wait until each listens."""
    services = state.setdefault("services", {})
    sdir.mkdir(parents=True, exist_ok=True)
    for name, (port, template) in LAB_SERVICES.items():
        current = services.get(name, {})
        if current.get("pid") and pid_alive(current["pid"], template[0]):
            continue
        argv = [a.format(gateway=state["gateway"], port=port, dir=sdir) for a in template]
        log = open(sdir / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "TESTHUB_CACHE": str(CACHE_DIR / "testhub")})
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise LabError(f"lab service {name} exited at start: {(sdir / f'{name}.log').read_text()[-600:]}")
            with contextlib.suppress(OSError), socket.create_connection((state["gateway"], port), timeout=0.5):
                break
            if time.monotonic() > deadline:
                raise LabError(f"lab service {name} did not listen on {state['gateway']}:{port} within 60s.")
            time.sleep(0.1)
        services[name] = {"pid": proc.pid, "url": f"http://{state['gateway']}:{port}"}
        # a service may describe itself further in {dir}/<name>.json, written before it listens (gitfork: url, commit)
        with contextlib.suppress(OSError, ValueError):
            services[name].update(json.loads((sdir / f"{name}.json").read_text()))


def stop_services(state: dict) -> None:
    for name, svc in state.get("services", {}).items():
        pid = svc.get("pid", 0)
        needle = LAB_SERVICES.get(name, ("", [""]))[1][0]
        if pid and pid_alive(pid, needle):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while pid_alive(pid, needle) and time.monotonic() < deadline:
                time.sleep(0.05)
            if pid_alive(pid, needle):
                os.kill(pid, signal.SIGKILL)


def services_status(state: dict) -> dict:
    """Each known service's recorded state plus whether its process still runs (for `python -m lab status`)."""
    return {n: {**s, "running": pid_alive(s.get("pid", 0), LAB_SERVICES[n][1][0])}
            for n, s in state.get("services", {}).items() if n in LAB_SERVICES}
