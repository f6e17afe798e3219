"""A steady client stream through SGLang's router, for tests that change the fleet behind it (test double side).

`Load(url, api_key)` runs `concurrency` client threads, each sending one small /generate after another until
stopped or until `max_seconds` (a bound: the stream never outlives a test). Every request is recorded: start and end
time, HTTP status or network error, the worker the router says it routed to (`x-smg-routed-worker-id`), and whether
the answer carried generated text. Only the URL given is contacted (the tests pass a lab host's address).
"""
from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

ROUTED_HEADER = "x-smg-routed-worker-id"


@dataclass
class Request:
    start: float
    end: float = 0.0
    status: int = 0
    error: str = ""
    worker: str = ""
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error and bool(self.text)


@dataclass
class Load:
    url: str
    api_key: str
    concurrency: int = 4
    max_new_tokens: int = 24
    request_timeout: float = 60.0
    max_seconds: float = 900.0
    ignore_eos: bool = False
    prompt: str = "the capital city of France is"
    requests: list = field(default_factory=list)

    def __post_init__(self):
        parts = urlsplit(self.url)
        self._host, self._port = parts.hostname, parts.port or 80
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._t0 = time.monotonic()

    def _one(self, n: int) -> Request:
        req = Request(start=time.monotonic() - self._t0)
        body = json.dumps({"text": f"Request {n}: {self.prompt}",
                           "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0,
                                               "ignore_eos": self.ignore_eos}})
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self.request_timeout)
        try:
            conn.request("POST", "/generate", body=body, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
            resp = conn.getresponse()
            data = resp.read()
            req.status = resp.status
            req.worker = (resp.getheader(ROUTED_HEADER) or "").rstrip("/")
            if resp.status == 200:
                try:
                    req.text = str(json.loads(data).get("text", ""))
                except ValueError:
                    req.error = f"not JSON: {data[:200]!r}"
            else:
                req.error = data[:300].decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            req.error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        req.end = time.monotonic() - self._t0
        return req

    def _worker(self, index: int) -> None:
        n = index
        while not self._stop.is_set() and time.monotonic() - self._t0 < self.max_seconds:
            req = self._one(n)
            with self._lock:
                self.requests.append(req)
            n += self.concurrency

    def start(self) -> "Load":
        for i in range(self.concurrency):
            t = threading.Thread(target=self._worker, args=(i,), daemon=True, name=f"load-{i}")
            t.start()
            self._threads.append(t)
        return self

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` requests were answered OK (the stream is flowing); bounded."""
        deadline = time.monotonic() + timeout
        while sum(r.ok for r in self.snapshot()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the load did not get {count} answers in {timeout}s: {self.summary()}")
            time.sleep(0.1)

    def stop(self) -> dict:
        self._stop.set()
        for t in self._threads:
            t.join(self.request_timeout + 5)
        return self.summary()

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def summary(self) -> dict:
        reqs = self.snapshot()
        failed = [r for r in reqs if not r.ok]
        by_worker: dict = {}
        for r in reqs:
            if r.ok:
                by_worker[r.worker] = by_worker.get(r.worker, 0) + 1
        return {"sent": len(reqs), "ok": len(reqs) - len(failed), "failed": len(failed),
                "failures": [{"t": round(r.start, 2), "status": r.status, "error": r.error[:200]} for r in failed[:10]],
                "by_worker": by_worker, "seconds": round(time.monotonic() - self._t0, 1)}

    def gaps(self, worker: str, after: float = 0.0) -> float:
        """The longest time (s) between two requests served by `worker` (the client's view of its time out of
        rotation), counted from `after`."""
        times = sorted(r.start for r in self.snapshot() if r.ok and r.worker == worker.rstrip("/") and r.start >= after)
        return round(max((b - a for a, b in zip(times, times[1:])), default=0.0), 2)
