# -*- coding: utf-8 -*-
"""Progress file of a model download (<dir>/.hf_model/progress.json) and its one-line summary.

The worker rewrites it about once a second: state (running|done|failed), pid, bytes done/total, rate, ETA, the
files in flight, counters (stalls, transfer_failures, range_ignored: answers of the server that ignored Range) and
the last error. The play polls it (library/hf_model_progress.py), so a long run
shows percent, rate and ETA per model, and a dead worker is noticed by its pid, not by a directory size.
"""
from __future__ import absolute_import, division, print_function

import json
import os
import time


class RateMeter:
    """Bytes/s over a sliding window of samples."""

    def __init__(self, window=10.0, clock=time.monotonic):
        self.window = window
        self.clock = clock
        self.samples = []

    def add(self, done):
        now = self.clock()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window:
            self.samples.pop(0)

    def rate(self):
        if len(self.samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return max(0.0, (b1 - b0) / (t1 - t0)) if t1 > t0 else 0.0


def human_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0
    return "%.1f TiB" % n


def human_eta(seconds):
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return "%d:%02d:%02d" % (seconds // 3600, seconds % 3600 // 60, seconds % 60)


def summary(p):
    """One line: '<name> <state> 41.2% 2.3 GiB/5.6 GiB 180.1 MiB/s ETA 0:00:19' (+ ' server ignored Range 3x'
    when it did)."""
    if not p:
        return "no progress yet"
    total = p.get("bytes_total") or 0
    done = p.get("bytes_done") or 0
    pct = 100.0 * done / total if total else 100.0
    line = "%s %s %.1f%% %s/%s %s/s ETA %s" % (p.get("name", "?"), p.get("state", "?"), pct, human_bytes(done),
                                                human_bytes(total), human_bytes(p.get("rate") or 0),
                                                human_eta(p.get("eta")))
    if p.get("range_ignored"):
        line += " server ignored Range %dx" % p["range_ignored"]
    if p.get("state") == "failed" and p.get("error"):
        line += " error: %s" % p["error"]
    return line


def write(path, data):
    """Best effort (a full disk must not hide the real error): True when written."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def pid_alive(pid):
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def async_job_state(job_file):
    """(finished, failed) from an Ansible async job file (~/.ansible_async/<jid>): the wrapper writes
    {"started": 1, "finished": 0} at start and the module's result at the end."""
    data = read(job_file) if job_file else None
    if not isinstance(data, dict):
        return False, False
    if data.get("started") and not data.get("finished"):
        return False, False
    return True, bool(data.get("failed"))


def poll(path, wait=10.0, since=None, clock=time.monotonic, sleep=time.sleep, step=0.5, job_file=None,
         newer_than=None):
    """Wait up to `wait` s for the progress file to change (updated != since) or the run to end. Returns
    (progress or None, finished, failed). A 'running' file whose pid is gone counts as finished and failed, and so
    does an async job (job_file) that ended, even one that died before writing any progress."""
    deadline = clock() + wait
    while True:
        job_finished, job_failed = async_job_state(job_file)
        if job_finished:
            p = read(path) or {}
            return dict(p, state="failed" if job_failed else "done"), True, job_failed
        p = read(path)
        if p is not None and newer_than is not None and (p.get("started") or 0) < newer_than:
            p = None  # written by an earlier worker (e.g. the one a rerun is taking over from)
        if p is not None:
            state = p.get("state")
            if state in ("done", "failed"):
                return p, True, state == "failed"
            if state == "running" and not pid_alive(p.get("pid")):
                p = dict(p, state="failed", error=p.get("error") or "worker pid %s is gone" % p.get("pid"))
                return p, True, True
            if since is not None and p.get("updated") != since:
                return p, False, False
        if clock() >= deadline:
            return p, False, False
        sleep(step)
