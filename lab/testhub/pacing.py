"""Link pacing of the test Hub's file bytes (off by default; TestHub.set_link, POST /_testhub/link).

File bytes leave at most at R MB/s summed over every connection (the client's NIC or the CDN's share of it) and at
most C MB/s on each connection (what one TCP stream from a CDN gets; the reason hf_transfer opens several). Paced in
SEND_STEP pieces, with at most one piece of burst.
"""
from __future__ import annotations

import threading
import time

SEND_STEP = 1 << 20


class Pacer:
    """Holds a byte stream to `rate` bytes/s: take(n) returns once n more bytes fit in the schedule."""

    def __init__(self, rate: float, burst: int = SEND_STEP):
        self.rate = float(rate)
        self.burst_s = burst / self.rate
        self.lock = threading.Lock()
        self.due = time.monotonic()

    def take(self, n: int, stop: threading.Event) -> None:
        with self.lock:
            now = time.monotonic()
            self.due = max(self.due, now - self.burst_s) + n / self.rate
            wait = self.due - now - self.burst_s
        if wait > 0:
            stop.wait(wait)

