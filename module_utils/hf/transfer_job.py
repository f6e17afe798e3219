# -*- coding: utf-8 -*-
"""One attempt at one file (a Job): its mode, its progress for the watchdog, its error, and the sockets to shut when
it is aborted. Lanes, the fill window, whole-body streams and the fetcher all report through it."""
from __future__ import absolute_import, division, print_function

import socket
import threading
import time


class Job:
    """One attempt at one file: an hf_transfer call in a lane, or a whole-body stream written by our own code."""

    def __init__(self, jid, ftask, mode):
        self.id = jid
        self.ftask = ftask
        self.mode = mode  # "direct" | "fill" | "stream" (a whole-body answer written by our own code)
        self.length = ftask.remote.size
        self.received = 0  # bytes from upstream through the window
        self.skipped = 0  # bytes answered from disk (already written)
        self.last_progress = time.monotonic()
        self.alloc = 0
        self.error = None
        self.fatal = False
        self.retry_after = None
        self.aborted = False
        self.probed = False
        self.range_ignored = 0  # answers to this job's ranged requests that were a whole body (200)
        self.overrun = False  # a direct hf_transfer wrote past the tree's size: the partial file is discarded
        self.stall_noted = False
        self.retired = threading.Event()  # set once the job's hf_transfer is gone (taken over, or the job ended)
        self.socks = set()
        self.lane = None
        self.fd = None
        self.lock = threading.Lock()

    def touch(self, n):
        with self.lock:
            self.received += n
            self.last_progress = time.monotonic()

    def abort(self):
        with self.lock:
            self.aborted = True
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
