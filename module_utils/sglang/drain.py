"""Wait until an SGLang server has no request in flight (its router removed it first): the drain of a rolling change.

The signal is the server's own live count, `GET /v1/loads?include=core` (SGLang 0.5.11
sglang/srt/entrypoints/v1_loads.py; recorded from the real server in tests/fixtures/real_sglang/loads/): the scheduler
counts running and waiting requests when asked, per DP rank, and `aggregate.total_reqs` sums them. The Prometheus
gauges of `/metrics` (`sglang:num_running_reqs`) are updated only at the scheduler's log intervals and exist only with
--enable-metrics, so they are not used. A request that the tokenizer has not yet handed to the scheduler, or whose last
tokens are still being streamed, is not in the count: the server must stay at zero for `quiet_for` seconds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.evidence.error import EvidenceError

LOADS_PATH = "/v1/loads?include=core"


class DrainError(EvidenceError):
    def __init__(self, kind: str, message: str, evidence: dict):
        super().__init__(message, kind=kind, evidence=evidence)  # kind: "timeout" | "unsupported" | "unauthorized" | "down"


def in_flight(answer) -> tuple[int, int]:
    """(running, waiting) summed over DP ranks of a /v1/loads answer; ValueError when it is not one."""
    if not isinstance(answer, dict) or not isinstance(answer.get("loads"), list):
        raise ValueError(f"not a /v1/loads answer: {str(answer)[:200]}")
    running = waiting = 0
    for load in answer["loads"]:
        if not isinstance(load, dict) or "num_running_reqs" not in load or "num_waiting_reqs" not in load:
            raise ValueError(f"a /v1/loads entry without num_running_reqs/num_waiting_reqs: {str(load)[:200]}")
        running += int(load["num_running_reqs"])
        waiting += int(load["num_waiting_reqs"])
    return running, waiting


@dataclass
class Drain:
    url: str
    api_key: str | None = None
    timeout: float = 600.0
    interval: float = 0.5
    quiet_for: float = 2.0
    http_timeout: float = 5.0
    down_after: float = 10.0  # a server that stops answering for this long is not draining, it is gone
    http: Callable = sglang_http.call
    clock: Callable = time.monotonic
    sleep: Callable = time.sleep
    samples: list = field(default_factory=list)  # [t, running, waiting] or [t, "error"]

    def look(self) -> tuple[int, int]:
        resp = self.http(self.url, LOADS_PATH, api_key=self.api_key, timeout=self.http_timeout)
        if resp.error:
            raise ConnectionError(resp.error)
        if resp.status == 401:
            raise DrainError("unauthorized", f"{self.url}{LOADS_PATH}: HTTP 401 (wrong or missing API key)",
                             self.evidence())
        if resp.status == 404:
            raise DrainError("unsupported", f"{self.url} has no {LOADS_PATH} (HTTP 404): this SGLang version cannot "
                             "report its in-flight requests; a drain cannot be proven", self.evidence())
        if resp.status != 200:
            raise ConnectionError(resp.describe())
        try:
            return in_flight(resp.json())
        except ValueError as exc:
            raise DrainError("unsupported", f"{self.url}{LOADS_PATH}: {exc}", self.evidence()) from None

    def evidence(self) -> dict:
        return {"samples": self.samples[-40:], "polls": len(self.samples)}

    def wait(self) -> dict:
        """Until running + waiting == 0 for quiet_for seconds; bounded by timeout. Returns {waited_s, peak,
        first_zero_s, polls, samples}."""
        started = self.clock()
        zero_since = None
        first_zero = None
        peak = 0
        last_answer = started
        while True:
            now = self.clock()
            t = round(now - started, 3)
            try:
                running, waiting = self.look()
            except ConnectionError as exc:
                self.samples.append([t, str(exc)])
                zero_since = None
                if now - last_answer >= self.down_after:
                    raise DrainError("down", f"{self.url} stopped answering {LOADS_PATH} for {now - last_answer:.1f}s "
                                     f"while draining ({exc})", self.evidence()) from None
            else:
                last_answer = now
                self.samples.append([t, running, waiting])
                total = running + waiting
                peak = max(peak, total)
                if total == 0:
                    if zero_since is None:
                        zero_since = now
                        first_zero = first_zero if first_zero is not None else t
                    if now - zero_since >= self.quiet_for:
                        return {"waited_s": t, "peak": peak, "first_zero_s": first_zero, "polls": len(self.samples),
                                "samples": self.samples[-40:]}
                else:
                    zero_since = None
            if now - started >= self.timeout:
                last = self.samples[-1] if self.samples else None
                raise DrainError("timeout", f"{self.url} still had requests in flight after {self.timeout:.0f}s "
                                 f"(last [t, running, waiting]: {last}; peak {peak})", self.evidence())
            self.sleep(self.interval)
