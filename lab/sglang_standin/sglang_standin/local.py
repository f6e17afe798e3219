"""Run the stand-in as a local subprocess on loopback (unit tests and benchmarks on the controller).

    with LocalServer(["--model-path", "/m"], env={"SGLANG_STANDIN_LOAD_S": "0.2"}) as srv:
        srv.wait_for_line("fired up")
        ... http://127.0.0.1:{srv.port} ...
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
READY_LINE = "The server is fired up and ready to roll!"
# The lab patch series (the venv role applies it to a lab venv): its stand-in patches add DDTREE, as the operator's
# series does to real SGLang.
LAB_SERIES = PACKAGE_ROOT.parent.parent / "roles" / "venv" / "files" / "patches" / "lab"


def patched_root(dest: Path, series_dir: Path = LAB_SERIES) -> Path:
    """A copy of the stand-in at dest with the series' patches to sglang_standin/ applied (`patch -p1`, no fuzz),
    in series order: the stand-in as a lab venv has it. Returns dest, for PYTHONPATH / LocalServer(package_root=)."""
    dest = Path(dest)
    shutil.copytree(PACKAGE_ROOT / "sglang_standin", dest / "sglang_standin", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__"))
    names = [n.strip() for n in (series_dir / "series").read_text().splitlines() if n.strip() and not n.startswith("#")]
    for name in names:
        patch = series_dir / name
        if "+++ b/sglang_standin/" not in patch.read_text():
            continue
        subprocess.run(["patch", "-p1", "--batch", "--fuzz=0", "-d", str(dest), "-i", str(patch)], check=True,
                       capture_output=True, text=True, timeout=60)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    def __init__(self, args: list[str], env: dict | None = None, port: int | None = None,
                 module: str = "sglang_standin.launch_server", python: str = sys.executable,
                 package_root: Path | None = None):
        self.port = port or free_port()
        self.args = list(args)
        if "--port" not in self.args:
            self.args += ["--port", str(self.port)]
        self.env = dict(os.environ)
        self.env.update({"PYTHONPATH": str(package_root or PACKAGE_ROOT), "PYTHONUNBUFFERED": "1",
                         "SGLANG_STANDIN_TTFT_MS": "5", "SGLANG_STANDIN_ITL_MS": "1"})
        self.env.update(env or {})
        self.cmd = [python, "-m", module] + self.args
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        self.exited_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "LocalServer":
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()
        return self

    def _pump(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line)
        self.proc.wait()
        self.exited_at = time.monotonic()
        self._q.put(None)

    def wait_for_line(self, needle: str, timeout: float = 60.0) -> str:
        """Block until a log line contains needle; raise if the process ends or the timeout passes first."""
        for line in self.lines:
            if needle in line:
                return line
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no log line with {needle!r} within {timeout}s; log:\n" + "\n".join(self.lines))
            try:
                line = self._q.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"stand-in exited ({self.proc.returncode}) before {needle!r}; log:\n"
                                   + "\n".join(self.lines))
            if needle in line:
                return line

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The exit status, once the process ended AND its last log lines are in self.lines (the pump has read the
        pipe to its end): a test may read the log right after."""
        assert self.proc
        rc = self.proc.wait(timeout=timeout)
        self._pumper.join(timeout)
        if self._pumper.is_alive():  # something else still holds the pipe: the log is not complete, say so
            raise TimeoutError(f"stand-in exited ({rc}) but its log pipe stayed open for {timeout}s; log so far:\n"
                               + "\n".join(self.lines))
        return rc

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
