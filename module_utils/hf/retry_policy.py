# -*- coding: utf-8 -*-
"""The retry policy: what a failed attempt at a file costs, and when the run gives up on it.

A failure from a fleet peer (it died, lost the file or stalled) sends the file to another source at once, without
backoff and without spending a Hub retry. Any other failure is retried after exponential backoff (Retry-After for
429), at most `retries` times; then the run fails naming the file, the bytes done and the last error. ENOSPC and size
lies fail at once (ENOSPC keeps the partial file for a later resume). A hash mismatch deletes the file and fetches it
again, at most `hash_retries` times, then fails with both hashes; a peer's bad copy is never asked of it again.
"""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.hf.fetch_errors import FetchError


class RetryPolicy:
    """Decides the next attempt of a FileTask (its state, attempts and not_before) or raises FetchError. stats: the
    fetcher's counters; sources: module_utils/fanout/sources.SourceSet or None; clock: the fetcher's clock."""

    def __init__(self, retries, hash_retries, backoff, backoff_max, clock, sources, stats):
        self.retries = retries
        self.hash_retries = hash_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.clock = clock
        self.sources = sources
        self.stats = stats

    def failed(self, t, err, fatal, retry_after):
        """An attempt at t failed with `err` (fatal: no retry can help; retry_after: the server's wish, or None)."""
        src = t.source
        local_disk = "No space left" in (err or "") or "os error 28" in (err or "")
        if src is not None and src.is_peer and not local_disk and \
                t.peer_attempts < self.retries + 2 * len(self.sources.views):
            # a peer that died, lost the file or stalled: another source next (no backoff, no Hub retry spent)
            self.stats["peer_failures"] += 1
            self.stats["errors"].append("%s (from peer %s)" % (err, src.name))
            del self.stats["errors"][:-20]
            t.last_error = err
            t.peer_attempts += 1
            t.state = "pending"
            t.not_before = self.clock()
            self.sources.failed(src, t.remote.path, err)
            return
        self.stats["failures"] += 1
        self.stats["errors"].append(err)
        del self.stats["errors"][:-20]
        t.last_error = err
        t.attempts += 1
        t.state = "pending"
        if fatal or t.attempts > self.retries:
            kind = "enospc" if ("No space left" in err or "os error 28" in err) else "transfer"
            done = t.on_disk()
            raise FetchError("%s: giving up after %d attempt(s); %d of %d bytes on disk; last error: %s"
                             % (t.remote.path, t.attempts, done, t.remote.size, err),
                             path=t.remote.path, bytes_done=done, last_error=err, kind=kind)
        delay = retry_after if retry_after is not None else min(self.backoff_max, self.backoff * 2 ** (t.attempts - 1))
        t.not_before = self.clock() + delay

    def mismatch(self, t, info):
        """t's bytes did not hash to the expected value (info: both hashes): fetch it again, from another source
        when a peer served the bad copy."""
        if t.source is not None and t.source.is_peer:
            # a peer served a bad copy: never ask it for this file again; fetch it from another source
            self.stats["hash_mismatches"] += 1
            self.stats["peer_hash_mismatches"].append({"file": t.remote.path, "peer": t.source.name,
                                                       "detail": info})
            self.stats["errors"].append("%s (copy from peer %s)" % (info, t.source.name))
            self.sources.mismatch(t.source, t.remote.path)
            t.wipe()
            t.state = "pending"
            t.source = None
            t.data_url = None
            return
        self.stats["hash_mismatches"] += 1
        self.stats["errors"].append(info)
        t.hash_failures += 1
        t.wipe()
        t.state = "pending"
        t.attempts = 0
        if t.hash_failures > self.hash_retries:
            raise FetchError(info + " (after %d fetches; the file was deleted)" % t.hash_failures,
                             path=t.remote.path, bytes_done=0, last_error=info, kind="hash")
