"""Stdlib client for SGLang's router (PyPI `smg`, formerly `sglang-router`), as recorded from smg 1.13.0.

Routes used (tests/fixtures/router/smg-1.13.0/NOTES.md has the recordings and the behaviour behind them):
- GET /readiness: 200 {"status": "ready", "healthy_workers", "total_workers"}; 503 {"status": "not ready",
  "reason"} when no worker is healthy. Open without a key. GET /liveness and /health: "OK" whenever the
  process answers (also with every worker down): they are not readiness.
- GET /workers (needs the router's key when it has one): {"workers": [{"id" (UUID), "url", "is_healthy",
  "status" (ready | not_ready | failed | draining | pending), "load", "model_id", ...}], "total", "stats"}.
  A worker still registering (or one whose registration keeps failing) is NOT listed.
- POST /workers {"url", "api_key"}: 202 {"worker_id", ...}; 409 when the URL is already there (or being added).
  The router's --api-key is not used towards a worker added this way: pass the worker's key.
- DELETE /workers/{id}: 202; the worker is drained (~5 s) then gone. Ids are UUIDs; a URL is refused (400).
- Per-worker traffic: the Prometheus listener's `smg_worker_requests_total{worker="<url>",model=...}` counter,
  and the `x-smg-routed-worker-id: <url>` header on each proxied answer.

Network errors never raise from `call`-level helpers (sglang_http.Response carries them); RouterError carries
the evidence when an operation cannot be done.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.evidence.error import EvidenceError

ROUTED_HEADER = "x-smg-routed-worker-id"
_METRIC_RE = re.compile(r'^smg_worker_requests_total\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)\s*$')
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class RouterError(EvidenceError):
    def __init__(self, kind: str, message: str, evidence: dict | None = None):
        super().__init__(message, kind=kind, evidence=evidence)  # kind: "timeout" | "error" | "conflict" | "not_found" | "unauthorized"


def norm_url(url: str) -> str:
    return (url or "").strip().rstrip("/")


def normalise_worker(raw: dict) -> dict:
    """One /workers entry -> {url, id, healthy, status, load, model_id}: the fields readiness reasons about."""
    return {"url": norm_url(str(raw.get("url", ""))), "id": str(raw.get("id", "")),
            "healthy": bool(raw.get("is_healthy")), "status": str(raw.get("status", "")),
            "load": raw.get("load"), "model_id": raw.get("model_id")}


def parse_worker_requests(metrics_text: str) -> dict:
    """Prometheus text -> {worker url: requests dispatched to it} (summed over models)."""
    out: dict = {}
    for line in metrics_text.splitlines():
        m = _METRIC_RE.match(line.strip())
        if not m:
            continue
        labels = dict(_LABEL_RE.findall(m.group("labels")))
        url = norm_url(labels.get("worker", ""))
        if url:
            out[url] = out.get(url, 0.0) + float(m.group("value"))
    return out


@dataclass
class RouterClient:
    url: str
    api_key: str | None = None
    metrics_url: str = ""
    timeout: float = 5.0
    http: Callable = sglang_http.call
    clock: Callable = time.monotonic
    sleep: Callable = time.sleep
    answers: list = field(default_factory=list)  # last raw answers, for evidence

    def _call(self, path: str, method: str = "GET", payload=None, base: str | None = None):
        resp = self.http(base or self.url, path, method=method, payload=payload, api_key=self.api_key,
                         timeout=self.timeout)
        entry = {"method": method, "path": path, "status": resp.status, "error": resp.error,
                 "body": resp.body[:2000].decode("utf-8", "replace")}
        self.answers = (self.answers + [entry])[-10:]
        return resp

    def _json(self, resp, what: str):
        if resp.error:
            raise RouterError("error", f"{what}: {resp.error}", {"answers": self.answers})
        if resp.status == 401:
            raise RouterError("unauthorized", f"{what}: HTTP 401 (router API key missing or wrong)",
                              {"answers": self.answers})
        try:
            return resp.json()
        except ValueError:
            raise RouterError("error", f"{what}: not JSON: {resp.describe()}", {"answers": self.answers})

    def health(self) -> dict:
        """/readiness and /liveness: {ready, live, healthy_workers, total_workers, status, reason, http}."""
        live = self._call("/liveness")
        ready = self._call("/readiness")
        out = {"live": live.status == 200, "ready": ready.status == 200, "http": ready.status,
               "error": ready.error, "healthy_workers": None, "total_workers": None, "status": "", "reason": ""}
        if ready.status:
            try:
                body = ready.json() or {}
            except ValueError:
                body = {}
            if isinstance(body, dict):
                out.update(healthy_workers=body.get("healthy_workers"), total_workers=body.get("total_workers"),
                           status=str(body.get("status", "")), reason=str(body.get("reason", "")))
        return out

    def workers(self) -> list[dict]:
        resp = self._call("/workers")
        body = self._json(resp, "GET /workers")
        if resp.status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
            raise RouterError("error", f"GET /workers: {resp.describe()}", {"answers": self.answers})
        return [normalise_worker(w) for w in body["workers"]]

    def find(self, url: str) -> dict | None:
        want = norm_url(url)
        return next((w for w in self.workers() if w["url"] == want), None)

    def add_worker(self, url: str, worker_api_key: str | None = None) -> dict:
        """POST /workers; returns {worker_id, status}. 409 (already there) -> RouterError kind conflict."""
        payload = {"url": norm_url(url)}
        if worker_api_key:
            payload["api_key"] = worker_api_key
        resp = self._call("/workers", "POST", payload)
        body = self._json(resp, "POST /workers")
        if resp.status == 409:
            raise RouterError("conflict", f"POST /workers {url}: {body.get('error', body)}", {"answers": self.answers})
        if resp.status not in (200, 201, 202):
            raise RouterError("error", f"POST /workers {url}: {resp.describe()}", {"answers": self.answers})
        return {"worker_id": body.get("worker_id", ""), "status": resp.status}

    def remove_worker(self, url: str) -> dict:
        """DELETE /workers/<id of url>; the router drains it (~5 s) before it leaves /workers."""
        worker = self.find(url)
        if worker is None:
            raise RouterError("not_found", f"{url} is not listed by the router", {"answers": self.answers})
        resp = self._call("/workers/" + quote(worker["id"], safe=""), "DELETE")
        body = self._json(resp, f"DELETE /workers/{worker['id']}")
        if resp.status not in (200, 202, 204):
            raise RouterError("error", f"DELETE {url}: {resp.describe()}", {"answers": self.answers})
        return {"worker_id": worker["id"], "status": resp.status, "body": body}

    def wait_gone(self, url: str, timeout: float = 30.0, interval: float = 0.2) -> float:
        started = self.clock()
        while self.find(url) is not None:
            if self.clock() - started >= timeout:
                raise RouterError("timeout", f"{url} still listed {timeout:.0f}s after its removal",
                                  {"answers": self.answers})
            self.sleep(interval)
        return round(self.clock() - started, 3)

    def readiness(self, min_healthy: int = 1, expected: list | None = None) -> dict:
        """One look: {ok, healthy, unhealthy, missing, health, workers, why}."""
        health = self.health()
        try:
            listed = self.workers()
            listed_error = ""
        except RouterError as exc:
            listed, listed_error = [], exc.message
        by_url = {w["url"]: w for w in listed}
        healthy = sorted(u for u, w in by_url.items() if w["healthy"])
        unhealthy = sorted(f"{u} ({w['status']})" for u, w in by_url.items() if not w["healthy"])
        want = [norm_url(u) for u in (expected or [])]
        missing = [u for u in want if u not in by_url]
        expected_unhealthy = [u for u in want if u in by_url and not by_url[u]["healthy"]]
        why = []
        if not health["live"]:
            why.append(f"router not answering /liveness ({health['error'] or health['http']})")
        if listed_error:
            why.append(listed_error)
        if len(healthy) < min_healthy:
            why.append(f"{len(healthy)} healthy worker(s), want >= {min_healthy}")
        if min_healthy > 0 and not health["ready"]:
            why.append(f"/readiness HTTP {health['http'] or health['error']} {health['reason']}".strip())
        if missing:
            why.append("not listed: " + ", ".join(missing))
        if expected_unhealthy:
            why.append("unhealthy: " + ", ".join(f"{u} ({by_url[u]['status']})" for u in expected_unhealthy))
        return {"ok": not why, "healthy": healthy, "unhealthy": unhealthy, "missing": missing,
                "expected_unhealthy": expected_unhealthy, "health": health, "workers": listed, "why": why}

    def wait_ready(self, min_healthy: int = 1, timeout: float = 60.0, expected: list | None = None,
                   interval: float = 0.5, watch: Callable | None = None) -> dict:
        """Poll readiness() until ok; bounded. Raises RouterError('timeout') with the last look as evidence.
        `watch()` (optional) runs before every look and raises RouterError to end the wait at once (e.g. the
        router's unit died: unit_watch below)."""
        started = self.clock()
        polls = 0
        while True:
            if watch is not None:
                watch()
            look = self.readiness(min_healthy, expected)
            polls += 1
            if look["ok"]:
                look.update(time_to_ready=round(self.clock() - started, 3), polls=polls)
                return look
            if self.clock() - started >= timeout:
                raise RouterError("timeout", f"router {self.url} not ready after {timeout:.0f}s: "
                                  + "; ".join(look["why"]), dict(look, answers=self.answers, polls=polls))
            self.sleep(interval)

    def worker_requests(self) -> dict:
        if not self.metrics_url:
            raise RouterError("error", "no metrics_url (the router's --prometheus-host/--prometheus-port)")
        resp = self._call("/metrics", base=self.metrics_url)
        if not resp.ok:
            raise RouterError("error", f"GET {self.metrics_url}/metrics: {resp.describe()}",
                              {"answers": self.answers})
        return parse_worker_requests(resp.body.decode("utf-8", "replace"))

    def wait_routed(self, url: str | None = None, send: Callable | None = None, baseline: dict | None = None,
                    timeout: float = 30.0, interval: float = 0.2) -> dict:
        """Until smg_worker_requests_total{worker=url} (any worker when url is None) exceeds its baseline (taken
        now when not given). `send()` (optional) sends one request through the router each round. Returns
        {url, to (workers whose counter rose), before, after, rounds, seconds}."""
        want = norm_url(url) if url else None
        base = dict(baseline if baseline is not None else self.worker_requests())
        started = self.clock()
        rounds = 0
        while True:
            if send is not None:
                send()
            rounds += 1
            now = self.worker_requests()
            rose = sorted(u for u, v in now.items() if v > base.get(u, 0.0))
            if (want in rose) if want else rose:
                key = want or rose[0]
                return {"url": key, "to": rose, "before": base.get(key, 0.0), "after": now[key], "rounds": rounds,
                        "seconds": round(self.clock() - started, 3)}
            if self.clock() - started >= timeout:
                raise RouterError("timeout", f"no request reached {want or 'any worker'} through {self.url} in "
                                  f"{timeout:.1f}s ({rounds} rounds; counters {now})",
                                  {"counters": now, "answers": self.answers})
            self.sleep(interval)


def unit_watch(unit: str, show: Callable, journal: Callable, journal_lines: int = 40) -> Callable:
    """A wait_ready watch for the router's systemd unit: the first look pins its main pid and invocation; the wait
    ends (RouterError kind "failed", with the unit's state and that invocation's journal) at the first poll where
    the unit is not active/running, its main pid changed, or systemd restarted it. `show(unit)` returns a
    ansible.module_utils.systemd.unit.UnitState, `journal(unit, invocation_id, lines)` a list of lines."""
    pinned: dict = {}

    def watch():
        state = show(unit)
        if not pinned and state.running:
            pinned.update(pid=state.main_pid, invocation=state.invocation_id, restarts=state.n_restarts)
        why = ""
        if not state.running:
            why = (f"{unit} is {state.active_state}/{state.sub_state}" +
                   (f": {state.exit_description}" if state.exec_main_code else ""))
        elif pinned and (state.main_pid != pinned["pid"] or state.n_restarts > pinned["restarts"]):
            why = (f"{unit} was restarted while waiting (main pid {pinned['pid']} -> {state.main_pid}, "
                   f"NRestarts {pinned['restarts']} -> {state.n_restarts})")
        if why:
            lines = journal(unit, pinned.get("invocation") or state.invocation_id, journal_lines)
            raise RouterError("failed", why, {"unit": state.summary(), "journal": lines})
    return watch
