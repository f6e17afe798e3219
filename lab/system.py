"""Controller-side plumbing every part of the lab uses: run a command (LabError on failure), tell whether a PID is
still the process the lab started, hold a file lock, unmount everything below a directory."""
from __future__ import annotations

import contextlib
import fcntl
import subprocess
from pathlib import Path

from lab.error import LabError


def run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(cmd)}` failed with exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def pid_alive(pid: int, needle: str = "") -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return False
    return needle in cmdline


@contextlib.contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def unmount_under(path: Path) -> None:
    prefix = str(path.resolve())
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mnt in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)
