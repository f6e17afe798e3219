"""The readiness of a multi-node serving group: rank 0 ready, every other rank answering, then a settle window.

Rank 0 runs the HTTP API; ranks >= 1 only a dummy server whose /health says 200 once that node's schedulers are up,
so rank 0 is judged the way module_utils/sglang/ready decides it and the other ranks can only be watched as live
processes.

  wait_group(GroupOptions, ...)       -> rank 0 ready, every other rank answering, then a settle window; any rank
                                         silent for rank_dead_after seconds fails it (GroupError), naming that rank.
  lost_rank(journal_lines, ranks)     -> the rank >= 1 that rank 0's journal says it lost (pure)

Every side effect is injectable (tests run it on 127.0.0.1 without systemd or a GPU). Stdlib only (runs on the
target with the system python3, 3.10+).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.multinode.plan import canonical_address
from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.sglang import ready as sglang_ready
from ansible.module_utils.systemd import unit as systemd_unit

PHASE_RANK0 = "rank 0 starting"
PHASE_RANKS = "waiting for ranks"
PHASE_SETTLE = "settling"


# ================================================================ pure: which rank rank 0 lost
# gloo's lines when a peer is gone (tests/fixtures/real_sglang/multinode-0.5.11.md): they name the peer's address,
# not its rank; the lab stand-in adds "(stand-in: lost node rank N)".
LOST_PEER_RE = re.compile(r"(?:Connection closed by peer|Read error) \[([^\]]+)\]:\d+")
LOST_RANK_RE = re.compile(r"lost node rank (\d+)")


def _url_address(url: str) -> str:
    host = urlsplit(url).hostname or ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        try:
            return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
        except (OSError, IndexError):
            return host


def lost_rank(journal_lines, ranks, resolve_url=_url_address):
    """(rank, line): the rank >= 1 that rank 0's journal says it lost (gloo's 'Connection closed by peer [ADDR]:P'
    or 'Read error [ADDR]:P', matched to the one rank whose URL has that address; or a 'lost node rank N'),
    else (None, ""). An address shared by several ranks names none of them."""
    by_rank = {r.node_rank: r for r in ranks}
    addresses = None
    for line in journal_lines or ():
        m = LOST_RANK_RE.search(line)
        if m and int(m.group(1)) in by_rank:
            return by_rank[int(m.group(1))], line
        m = LOST_PEER_RE.search(line)
        if not m:
            continue
        if addresses is None:
            addresses = {}
            for r in ranks:
                addresses.setdefault(canonical_address(resolve_url(r.url)), []).append(r)
        hits = addresses.get(canonical_address(m.group(1).removeprefix("::ffff:")), [])
        if len(hits) == 1:
            return hits[0], line
    return None, ""


# ================================================================ the group's readiness
@dataclass
class RankSpec:
    name: str
    url: str
    node_rank: int
    restarted: bool = False  # answers count only after the rank was seen down once (its old process gone)


@dataclass
class RankStatus:
    spec: RankSpec
    checks: int = 0
    oks: int = 0
    seen_down: bool = False
    first_ok: float | None = None
    last_ok: float | None = None
    last_answer: str = "not probed yet"

    @property
    def answered(self) -> bool:
        return self.first_ok is not None

    def view(self, now: float) -> dict:
        return {"name": self.spec.name, "node_rank": self.spec.node_rank, "url": self.spec.url,
                "answered": self.answered, "checks": self.checks, "oks": self.oks,
                "last_ok_ago_s": round(now - self.last_ok, 3) if self.last_ok is not None else None,
                "last_answer": self.last_answer}


@dataclass
class GroupOptions:
    ready: sglang_ready.Options          # rank 0: unit, url, model, timeout, poll, health path...
    ranks: list                          # RankSpec of ranks >= 1, in rank order
    rank0_name: str = "rank 0"
    rank_health_path: str = "/health"
    rank_dead_after: float = 2.0
    rank_http_timeout: float = 1.0
    settle: float = 5.0


class GroupError(EvidenceError):
    """The group is not ready: which rank (its name, node_rank), in which phase, with the evidence (every rank's
    view, rank 0's unit and journal, the detection time). kind: "rank_dead" | "failed" (rank 0's unit) | "timeout" |
    "error"."""

    def __init__(self, kind: str, rank: str, node_rank, phase: str, message: str, evidence: dict):
        super().__init__(message, kind=kind, evidence=evidence)
        self.rank, self.node_rank, self.phase = rank, node_rank, phase


class _Aborted(Exception):
    pass


class _Watcher(threading.Thread):
    """Polls one rank's health path; records when it last answered 200 (the verdict is the caller's)."""

    def __init__(self, status: RankStatus, path: str, http, timeout: float, poll: float, lock, stop, changed, clock):
        super().__init__(daemon=True, name=f"rank-{status.spec.node_rank}")
        self.status, self.path, self.http, self.timeout, self.poll = status, path, http, timeout, poll
        self.lock, self.stop, self.changed, self.clock = lock, stop, changed, clock

    def run(self):
        while not self.stop.is_set():
            began = self.clock()
            resp = self.http(self.status.spec.url, self.path, timeout=self.timeout)
            now = self.clock()
            with self.lock:
                st = self.status
                st.checks += 1
                st.last_answer = resp.describe() if not resp.ok else "HTTP 200"
                if not resp.ok:
                    st.seen_down = True
                elif st.seen_down or not st.spec.restarted:
                    st.oks += 1
                    st.last_ok = now
                    if st.first_ok is None:
                        st.first_ok = now
            self.changed.set()
            self.stop.wait(max(0.0, self.poll - (now - began)))


def wait_group(gopts: GroupOptions, stale_invocation: str = "", stale_pid: int = 0,
               probe: sglang_ready.Probe | None = None, rank_http=None, on_event: Callable | None = None,
               wall: Callable[[], float] = time.time) -> dict:
    """Block until rank 0 is ready (sglang_ready.wait_ready, run in a thread) and every rank >= 1 answers its
    health path, then watch all of them for `settle` seconds. Raises GroupError as soon as a rank that answered
    has not answered for `rank_dead_after` seconds (rank 0: also its unit failing, restarting or changing pid,
    with its journal), or when the time runs out (naming what it waited for)."""
    probe = probe or sglang_ready.Probe()
    http = rank_http or sglang_http.call
    clock = probe.clock
    opts = gopts.ready
    poll = max(0.02, min(opts.poll, 0.25))
    emit = on_event or (lambda name, detail: None)
    lock, stop, changed = threading.Lock(), threading.Event(), threading.Event()
    started = clock()
    hard_deadline = started + opts.timeout + 30.0  # wait_ready ends itself at opts.timeout; this only bounds a hang
    statuses = [RankStatus(spec) for spec in gopts.ranks]
    watchers = [_Watcher(s, gopts.rank_health_path, http, gopts.rank_http_timeout, poll, lock, stop, changed, clock)
                for s in statuses]
    holder: dict = {}

    def abortable_sleep(seconds):
        if stop.wait(seconds):
            raise _Aborted()

    worker_probe = dataclasses.replace(probe, sleep=abortable_sleep)

    def rank0():
        try:
            holder["result"] = sglang_ready.wait_ready(opts, stale_invocation=stale_invocation, stale_pid=stale_pid,
                                                       probe=worker_probe)
        except _Aborted:
            holder["aborted"] = True
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            holder["error"] = exc
        finally:
            changed.set()

    rank0_status = RankStatus(RankSpec(gopts.rank0_name, opts.base_url, 0))
    worker = threading.Thread(target=rank0, daemon=True, name="rank-0")
    phase, ready0, ready_at, settle_from, unit_checked = PHASE_RANK0, None, None, None, float("-inf")

    def views(now):
        with lock:
            out = [s.view(now) for s in ([rank0_status] if settle_from is not None else []) + statuses]
        return out

    def evidence(now, **extra):
        return dict({"ranks": views(now), "phases": (ready0 or {}).get("phases", []), "unit": {}, "journal": [],
                     "detect_s": None, "waited_s": round(now - started, 3), "lost_line": "",
                     "failed_at": round(wall(), 3)}, **extra)

    def rank0_failure(kind, phase_now, message, ev):
        """Rank 0 went down: when its journal says it lost a rank >= 1, that rank is the one to name."""
        spec, line = lost_rank(ev.get("journal", []), [s.spec for s in statuses])
        if spec is None:
            return GroupError(kind, gopts.rank0_name, 0, phase_now, message, ev)
        ev["lost_line"] = line
        return GroupError("rank_dead", spec.name, spec.node_rank, phase_now, (
            f"rank {spec.node_rank} ({spec.name}, {spec.url}) was lost: rank 0 ({gopts.rank0_name}) logged "
            f"{line.strip()!r} and went down. Its journal: journalctl -u {opts.unit} -n 80 on {spec.name}\n"
            f"rank 0: {message}"), ev)

    try:
        worker.start()
        for w in watchers:
            w.start()
        while True:
            changed.wait(poll)
            changed.clear()
            now = clock()
            # ---- a rank that answered and went silent
            with lock:
                watched = ([rank0_status] if settle_from is not None else []) + statuses
                dead = next((s for s in watched if s.answered and now - s.last_ok >= gopts.rank_dead_after), None)
            if dead is not None:
                silent = now - dead.last_ok
                spec = dead.spec
                ev = evidence(now, detect_s=round(silent, 3))
                if spec.node_rank == 0:
                    state = probe.show(opts.unit)
                    ev.update(unit=state.summary(), journal=sglang_ready.journal_excerpt(
                        opts, state.invocation_id or (ready0 or {}).get("invocation_id", ""), probe))
                    lost, _line = lost_rank(ev["journal"], [s.spec for s in statuses])
                    if lost is not None:
                        raise rank0_failure("rank_dead", phase, f"stopped answering {opts.health_path} for "
                                            f"{silent:.2f}s", ev)
                path = gopts.rank_health_path if spec.node_rank else opts.health_path
                tail = (f". Its journal: journalctl -u {opts.unit} -n 80 on {spec.name}" if spec.node_rank else
                        ". Last journal lines of rank 0:\n" + "\n".join(ev["journal"][-opts.journal_lines:]))
                raise GroupError("rank_dead", spec.name, spec.node_rank, phase, (
                    f"rank {spec.node_rank} ({spec.name}, {spec.url}) stopped answering {path}: no 200 for "
                    f"{silent:.2f}s (rank_dead_after {gopts.rank_dead_after:g}s; last answer: {dead.last_answer}) "
                    f"while {phase}, {now - started:.2f}s after the wait began{tail}"), ev)
            # ---- rank 0's own wait
            if ready0 is None and not worker.is_alive():
                if "error" in holder:
                    exc = holder["error"]
                    if isinstance(exc, sglang_ready.ReadyError):
                        ev = evidence(now, unit=exc.evidence.get("unit", {}), journal=exc.evidence.get("journal", []),
                                      phases=exc.evidence.get("phases", []),
                                      crash_to_verdict_s=exc.evidence.get("crash_to_verdict_s"))
                        waiting = [s.spec.name for s in statuses if not s.answered]
                        message = (f"rank 0 ({gopts.rank0_name}): {exc.message}"
                                   + (f"\nranks not answering yet: {waiting}" if waiting else ""))
                        if exc.kind == "failed":
                            raise rank0_failure(exc.kind, exc.phase, message, ev)
                        raise GroupError(exc.kind, gopts.rank0_name, 0, exc.phase, message, ev)
                    if isinstance(exc, systemd_unit.SystemdError):
                        raise GroupError("error", gopts.rank0_name, 0, phase, f"rank 0 ({gopts.rank0_name}): {exc}",
                                         evidence(now))
                    raise exc
                ready0 = holder["result"]
                ready_at = now
                phase = PHASE_RANKS
                emit("rank0_ready", ready0)
            # ---- everyone answers: settle
            if ready0 is not None and settle_from is None:
                with lock:
                    waiting = [s for s in statuses if not s.answered]
                if not waiting:
                    settle_from, phase = now, PHASE_SETTLE
                    with lock:
                        rank0_status.checks = rank0_status.oks = 1
                        rank0_status.first_ok = rank0_status.last_ok = ready_at
                        rank0_status.last_answer = "HTTP 200"
                    w0 = _Watcher(rank0_status, opts.health_path, lambda base, path, timeout: probe.http(
                        base, path, api_key=opts.api_key, timeout=timeout), max(opts.http_timeout,
                                                                                 gopts.rank_http_timeout),
                        poll, lock, stop, changed, clock)
                    w0.start()
                    watchers.append(w0)
                    emit("settling", now - started)
            if settle_from is not None and (now - unit_checked >= poll or now - settle_from >= gopts.settle):
                unit_checked = now
                state = probe.show(opts.unit)
                why = ""
                if state.invocation_id != ready0["invocation_id"]:
                    why = f"was restarted (invocation {ready0['invocation_id']} -> {state.invocation_id or '-'})"
                elif state.main_pid != ready0["pid"]:
                    why = f"changed main pid {ready0['pid']} -> {state.main_pid}"
                elif not state.running:
                    why = f"stopped ({state.active_state}/{state.sub_state}; {state.exit_description})"
                if why:
                    lines = sglang_ready.journal_excerpt(opts, ready0["invocation_id"], probe)
                    raise rank0_failure("failed", phase, (
                        f"rank 0 ({gopts.rank0_name}): {opts.unit} {why} while {phase}, "
                        f"{clock() - settle_from:.2f}s into the settle window. Last journal lines:\n"
                        + "\n".join(lines[-opts.journal_lines:])), evidence(clock(), unit=state.summary(),
                                                                            journal=lines))
            if settle_from is not None:
                if now - settle_from >= gopts.settle:
                    return {"time_to_ready": ready0["time_to_ready"], "group_ready_s": round(settle_from - started, 3),
                            "settle_s": round(now - settle_from, 3), "pid": ready0["pid"],
                            "invocation_id": ready0["invocation_id"], "n_restarts": ready0["n_restarts"],
                            "phases": ready0["phases"], "ranks": views(now)}
            # ---- out of time
            if settle_from is None and ((ready0 is not None and now >= started + opts.timeout)
                                        or now >= hard_deadline):
                with lock:
                    never = [s for s in statuses if not s.answered]
                    waiting = [f"rank {s.spec.node_rank} ({s.spec.name}, {s.spec.url}): {s.last_answer}"
                               for s in never]
                if ready0 is not None:
                    raise GroupError("timeout", never[0].spec.name, never[0].spec.node_rank, phase, (
                        f"group not ready after {opts.timeout:.0f}s: rank 0 ({gopts.rank0_name}) is ready but "
                        f"these ranks never answered {gopts.rank_health_path}: " + "; ".join(waiting)), evidence(now))
                raise GroupError("timeout", gopts.rank0_name, 0, phase, (
                    f"group not ready after {now - started:.0f}s: the wait for rank 0 ({gopts.rank0_name}) did not "
                    "end by itself"), evidence(now))
    finally:
        stop.set()
        changed.set()
