# -*- coding: utf-8 -*-
"""The watchdog: a job that makes no byte progress, or a direct hf_transfer that got a whole body, loses its lane.

No byte progress (the allocated bytes of the file for a direct transfer, the window's or the stream's byte counter
otherwise) for `stall_timeout` seconds kills the lane (SIGKILL; a stream is aborted by shutting its socket), and the
file is retried in fill mode (module_utils/hf/retry_policy.py says when). A direct hf_transfer is also watched for a
server that ignores Range: its file growing past the tree's size (a whole body written at a chunk offset: the file is
discarded) or its resident memory above LANE_RSS_BASE + 3 x connections x chunk (a whole body being buffered) kills
it, and the file continues through the fill window; no later file goes direct in this run.
"""
from __future__ import absolute_import, division, print_function

import os

from ansible.module_utils.hf.lanes import rss_bytes

MiB = 1 << 20
# Resident memory a direct hf_transfer lane may hold besides its chunk buffers (3 x connections x chunk: chunks being
# received, their copy on completion, chunks queued for writing) before it is taken for buffering a whole body.
LANE_RSS_BASE = 256 * MiB


class Watchdog:
    """Judges the fetch loop's busy lanes. stats: the fetcher's counters (stalls); note_range_ignored(task) counts an
    answer that ignored Range (no later file goes direct); no_more_direct() stops direct transfers without counting
    one."""

    def __init__(self, stall_timeout, max_files, chunk_size, stats, note_range_ignored, no_more_direct):
        self.stall_timeout = stall_timeout
        self.max_files = max_files
        self.chunk_size = chunk_size
        self.stats = stats
        self.note_range_ignored = note_range_ignored
        self.no_more_direct = no_more_direct

    def inspect(self, lane, job, now):
        """Called by the fetch loop for the job of every busy lane: returns why the lane must die (it is also
        job.error), or None. A stalled whole-body stream has no lane process to kill: its socket is shut, and it
        ends and reports stream_end."""
        if job.mode == "direct":
            # hf_transfer writes a chunk once all of it arrived: progress = allocated bytes of the file
            alloc = job.ftask.allocated()
            if alloc != job.alloc:
                job.received += max(0, alloc - job.alloc)
                job.alloc = alloc
                job.last_progress = now
            why = self.direct_guard(lane, job)
            if why:
                job.error = why
                return why
        with job.lock:
            idle = now - job.last_progress
        if idle > self.stall_timeout and job.mode == "stream":
            if not job.stall_noted:
                job.stall_noted = True
                self.stats["stalls"] += 1
                job.error = job.error or "stalled: no byte progress for %.0fs on %s (whole-body stream)" % (
                    idle, job.ftask.remote.path)
                job.abort()
            return None
        if idle > self.stall_timeout:
            self.stats["stalls"] += 1
            job.error = job.error or "stalled: no byte progress for %.0fs on %s (%s mode)" % (
                idle, job.ftask.remote.path, job.mode)
            return job.error
        return None

    def stream_timed_out(self, job):
        """A whole-body stream's socket read timed out (its timeout is stall_timeout): a stall the watchdog did not
        see first."""
        if not job.stall_noted:
            job.stall_noted = True
            self.stats["stalls"] += 1
            job.error = job.error or "stalled: no byte progress for %.0fs on %s (whole-body stream)" % (
                self.stall_timeout, job.ftask.remote.path)

    def direct_guard(self, lane, job, memory=True):
        """A direct hf_transfer that got a whole body for a chunk (a server ignoring Range): its file grows past the
        tree's size once it wrote it, its memory grows while it buffers it (checked when `memory`). Returns why the
        lane must die, or None. Either way no later file goes direct in this run."""
        t = job.ftask
        try:
            length = os.stat(t.data).st_size
        except OSError:
            length = 0
        if length > t.remote.size:
            job.overrun = True
            self.note_range_ignored(t)
            return ("%s: the file grew to %d bytes, past the tree's %d: the server answered a ranged request with the "
                    "whole body (Range ignored); the partial file is discarded and fetched again through checked "
                    "requests" % (t.remote.path, length, t.remote.size))
        if not memory:
            return None
        bound = LANE_RSS_BASE + 3 * self.max_files * self.chunk_size
        rss = rss_bytes(lane.proc.pid)
        if rss > bound:
            self.no_more_direct()
            return ("%s: hf_transfer held %d MiB, more than the %d MiB its chunks need: an answer larger than the "
                    "range asked for (a server ignoring Range?); fetched again through checked requests"
                    % (t.remote.path, rss // MiB, bound // MiB))
