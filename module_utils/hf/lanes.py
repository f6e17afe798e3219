# -*- coding: utf-8 -*-
"""Lanes: the child processes that run hf_transfer, one file at a time each, and the means to kill a process.

hf_transfer 0.1.9 holds the GIL while it runs and sets no read timeout, so every call runs in a lane, a child process
(the GIL and a hung transfer stay out of the watchdog's way; PR_SET_PDEATHSIG kills it with its parent). A lane
reads one JSON job a line on stdin and answers one JSON line on stdout. One file per lane; lanes work on different
files.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import signal
import subprocess
import time

MiB = 1 << 20

# The lane's program (python -c): one JSON job a line in (id, url, file, max_files, chunk_size; optional retries,
# parallel_failures, headers), one JSON result a line out (id, ok, error).
LANE_CODE = r"""
import ctypes, json, sys
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG: die with the parent
except Exception:
    pass
import hf_transfer
for line in sys.stdin:
    job = json.loads(line)
    kw = {}
    if job.get("retries"):
        kw["max_retries"] = job["retries"]
        kw["parallel_failures"] = job["parallel_failures"]
    if job.get("headers"):
        kw["headers"] = job["headers"]
    try:
        hf_transfer.download(job["url"], job["file"], job["max_files"], job["chunk_size"], **kw)
        out = {"id": job["id"], "ok": True}
    except Exception as err:
        out = {"id": job["id"], "ok": False, "error": str(err)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"""


# hf_transfer buffers each chunk (chunk_size bytes) in fresh heap memory; with glibc's default thresholds every
# chunk is a new mmap that the kernel zero-fills page by page and unmaps after the write. Keeping such buffers in
# the heap (reused, not returned to the kernel) halves the lane's page faults and its system CPU time, which is
# what a loaded 2-core host runs short of. Values set in the environment win.
LANE_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * MiB), "MALLOC_TRIM_THRESHOLD_": str(256 * MiB),
                   "MALLOC_ARENA_MAX": "2"}


def lane_env(no_proxy=()):
    env = dict(os.environ)
    for k, v in LANE_MALLOC_ENV.items():
        env.setdefault(k, v)
    if no_proxy:  # fleet peers are reached directly, never through the host's proxy
        for key in ("no_proxy", "NO_PROXY"):
            env[key] = ",".join([x for x in [env.get(key, "")] if x] + list(no_proxy))
    return env


class Lane:
    """One lane process; `job` is the Job it works on (None: idle), `buf` its unparsed stdout."""

    def __init__(self, python, no_proxy=()):
        self.proc = subprocess.Popen([python, "-c", LANE_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, close_fds=True, env=lane_env(no_proxy))
        self.job = None
        self.buf = b""

    def send(self, job, spec):
        self.job = job
        job.lane = self
        self.proc.stdin.write((json.dumps(spec) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def rss_bytes(pid):
    """Resident memory of a process (0 when unknown)."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def kill_pid(pid, grace=10.0):
    """SIGTERM, then SIGKILL after `grace` seconds; True once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
