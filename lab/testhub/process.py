"""Run the test Hub in its own process (hf_transfer holds the GIL while downloading, so a client in the same
process would starve an in-process server) and drive its control endpoints over HTTP."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class HubProcess:
    __test__ = False

    def __init__(self, seed: int = 0, bind: str = "127.0.0.1", port: int = 0, file_port: int = 0,
                 repos: list[str] | None = None, page_size: int = 50, token: str | None = None,
                 faults: list[dict] | None = None, cache_dir: str | None = None, start_timeout: float = 120.0):
        cmd = [sys.executable, "-m", "lab.testhub", "--bind", bind, "--port", str(port), "--file-port",
               str(file_port), "--seed", str(seed), "--page-size", str(page_size), "--faults", json.dumps(faults or [])]
        for r in repos or []:
            cmd += ["--repo", r]
        if cache_dir:
            cmd += ["--cache-dir", cache_dir]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("TESTHUB_TOKEN", None)
        if token:
            env["TESTHUB_TOKEN"] = token
        self.proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the ready line; EOF if it died
        if not line:
            self.proc.wait(timeout=start_timeout)
            raise RuntimeError(f"test hub exited with {self.proc.returncode} before it was ready")
        self.ready = json.loads(line)
        self.endpoint = self.ready["endpoint"]
        self.repos = self.ready["repos"]
        self.repo_types = self.ready.get("repo_types", {})

    def _call(self, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.endpoint + path, data=data, method="POST" if data is not None else "GET")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as r:
            return json.loads(r.read())

    def set_faults(self, rules: list[dict]) -> None:
        self._call("/_testhub/faults", rules)

    def set_link(self, rate_mbps: float = 0.0, conn_rate_mbps: float = 0.0) -> dict:
        return self._call("/_testhub/link", {"rate_mbps": rate_mbps, "conn_rate_mbps": conn_rate_mbps})

    def stats(self) -> dict:
        return self._call("/_testhub/stats")

    def reset(self) -> None:
        self._call("/_testhub/reset", {})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "HubProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
