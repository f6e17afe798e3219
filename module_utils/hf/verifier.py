# -*- coding: utf-8 -*-
"""Verification beside the fetch loop: a file is moved into place only when its hash matches (sha256 for LFS, git
blob sha1 otherwise).

A follower thread hashes the written prefix of every running file while it arrives and keeps its dirty pages moving
to disk, so what is left after the last byte is short; one verifier thread per lane then hashes the rest, fsyncs,
checks and places each finished file while lanes fetch the next files. Outcomes go back to the fetch loop as events
through post(): ("done", task, None), ("mismatch", task, detail), ("error", task, exception). A mismatch deletes the
file and fetches it again (module_utils/hf/retry_policy.py decides how often).
"""
from __future__ import absolute_import, division, print_function

import os
import shutil
import threading
import time

from ansible.module_utils.hf.sparse import start_writeback
from ansible.module_utils.hf.verify import fsync_dir

MiB = 1 << 20


class Verifier:
    """The follower and `workers` verifier threads of one run. post(event) hands an outcome to the fetch loop;
    on_verified(remote, final_path, sha256) is called for every file moved into place, which stats
    ["files_by_source"] counts (under stats_lock)."""

    def __init__(self, workers, stats, stats_lock, post, on_verified=None):
        self.workers = max(1, workers)
        self.stats = stats
        self.stats_lock = stats_lock
        self.post = post
        self.on_verified = on_verified
        self.place_lock = threading.Lock()
        self.queue = []
        self.queue_cv = threading.Condition()
        self.follow_stop = threading.Event()
        self.threads = []
        self.follower = None

    def start(self, tasks):
        # one verifier per lane: files finishing together are fsynced and hashed in parallel, not queued
        self.threads = [threading.Thread(target=self._verify_queue, daemon=True) for _ in range(self.workers)]
        for thread in self.threads:
            thread.start()
        self.follower = threading.Thread(target=self._follow, args=(tasks,), daemon=True)
        self.follower.start()

    def stop(self):
        """Stop the follower, let the verifiers finish what is queued, and wait for them."""
        self.follow_stop.set()
        self.follower.join(timeout=600)
        with self.queue_cv:
            self.queue.extend([None] * len(self.threads))
            self.queue_cv.notify_all()
        for thread in self.threads:
            thread.join(timeout=3600)

    def submit(self, t):
        """Queue a file whose every byte is on disk."""
        t.state = "hashing"
        with self.queue_cv:
            self.queue.append(t)
            self.queue_cv.notify()

    def _follow(self, tasks):
        """Hash files while they arrive and keep their written bytes moving to disk, so that what is left to do
        after the last byte (hash the rest, fsync) is short."""
        last_writeback = 0.0
        while not self.follow_stop.is_set():
            busy = False
            writeback = time.monotonic() - last_writeback >= 0.25
            for t in tasks:
                if t.state == "running":
                    if writeback:
                        t.start_writeback()
                    if t.hashed_to < t.remote.size:
                        busy = t.advance_hash(limit=64 * MiB) > 0 or busy
            if writeback:
                last_writeback = time.monotonic()
            if not busy:
                self.follow_stop.wait(0.05)

    def _verify_queue(self):
        while True:
            with self.queue_cv:
                while not self.queue:
                    self.queue_cv.wait()
                t = self.queue.pop(0)
            if t is None:
                return
            try:
                self._verify_and_place(t)
            except Exception as err:  # pylint: disable=broad-except
                self.post(("error", t, err))

    def _verify_and_place(self, t):
        if t.remote.size == 0 and not os.path.exists(t.data):
            open(t.data, "wb").close()
        fd = os.open(t.data, os.O_RDONLY)
        try:
            start_writeback(fd)  # the disk writes the tail while the rest is hashed from the page cache
            t.advance_hash()  # the rest of what the follower has not hashed yet
            os.fsync(fd)
        finally:
            os.close(fd)
        h = t.hasher
        if t.hashed_to != t.remote.size:
            self.post(("mismatch", t, "%s: only %d of %d bytes readable for hashing" % (t.remote.path, t.hashed_to,
                                                                                        t.remote.size)))
            return
        algo, want = t.remote.expected
        got = h.digests()[algo]
        if got != want:
            self.post(("mismatch", t, "%s: %s mismatch, expected %s, got %s" % (t.remote.path, algo, want, got)))
            return
        with self.place_lock:  # verifiers hash in parallel; placing and the manifest update go one at a time
            parent = os.path.dirname(t.final)
            os.makedirs(parent, mode=0o755, exist_ok=True)
            os.chmod(t.data, 0o644)
            if os.path.isdir(t.final) and not os.path.islink(t.final):
                raise OSError("%s: a directory is in the way" % t.final)
            os.replace(t.data, t.final)
            fsync_dir(parent)
            shutil.rmtree(t.dir, ignore_errors=True)
            name = t.source.name if t.source is not None else "hub"
            with self.stats_lock:
                self.stats["files_by_source"][name] = self.stats["files_by_source"].get(name, 0) + 1
            if self.on_verified:
                self.on_verified(t.remote, t.final, h.digests()["sha256"])
        self.post(("done", t, None))
