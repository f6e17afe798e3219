"""Fail-fast readiness of an SGLang systemd service.

One loop watches both the unit (systemctl show: ActiveState, SubState, MainPID, InvocationID, NRestarts,
ExecMainStatus) and HTTP (health 200, then /v1/models listing the expected model id):

- the unit failing, being auto-restarted, or its main process changing ends the wait at the next poll (default
  0.25 s) with the failed invocation's journal lines in the message;
- an answer counts only when it comes from the invocation started by this wait: the invocation id captured
  before the (re)start is never accepted, and every listening socket on the port must belong to a process of
  the unit's current cgroup (so an old or stray process still bound to the port can never make it "ready");
- a timeout names the phase it was stuck in: stopping previous process, starting, not listening, old process
  listening, warming up, answering.

Stdlib only; all side effects go through a `Probe` so tests can drive the loop without systemd.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.systemd import unit as systemd_unit
from ansible.module_utils.evidence.error import EvidenceError

PHASE_STOPPING = "stopping previous process"
PHASE_STARTING = "starting"
PHASE_NOT_LISTENING = "not listening"
PHASE_FOREIGN = "old process listening"
PHASE_WARMING = "warming up"
PHASE_ANSWERING = "answering"
SYSTEMD_DONE_MARKERS = ("Main process exited", "Failed with result", "Deactivated successfully", "Scheduled restart")


class ReadyError(EvidenceError):
    def __init__(self, kind: str, phase: str, message: str, evidence: dict):
        super().__init__(message, kind=kind, evidence=evidence)  # kind: "failed" | "timeout" | "error"
        self.phase = phase


@dataclass
class Probe:
    show: Callable = systemd_unit.show
    systemctl: Callable = systemd_unit.systemctl
    journal: Callable = systemd_unit.journal
    listeners: Callable = systemd_unit.listening_pids
    unit_pids: Callable = systemd_unit.unit_pids
    http: Callable = sglang_http.call
    clock: Callable = time.monotonic
    sleep: Callable = time.sleep


@dataclass
class Options:
    unit: str
    base_url: str
    model_id: str = ""
    api_key: str | None = None
    timeout: float = 900.0
    poll: float = 0.25
    health_path: str = "/health"
    check_listener_owner: bool = True
    journal_lines: int = 40
    journal_wait: float = 1.5
    http_timeout: float = 3.0
    port: int = 0

    def __post_init__(self):
        if not self.port:
            parts = urlsplit(self.base_url)
            self.port = parts.port or (443 if parts.scheme == "https" else 80)


@dataclass
class Tracker:
    phase: str = PHASE_STARTING
    detail: str = ""
    phase_since: float = 0.0
    history: list = field(default_factory=list)

    def set(self, phase: str, detail: str, now: float) -> None:
        if phase != self.phase:
            self.history.append({"phase": self.phase, "seconds": round(now - self.phase_since, 3)})
            self.phase, self.phase_since = phase, now
        self.detail = detail


def journal_excerpt(opts: Options, invocation_id: str, probe: Probe) -> list[str]:
    """The invocation's journal, waiting (bounded) until systemd's own verdict line has been written."""
    deadline = probe.clock() + opts.journal_wait
    lines = probe.journal(opts.unit, invocation_id, opts.journal_lines)
    while not any(m in ln for ln in lines for m in SYSTEMD_DONE_MARKERS) and probe.clock() < deadline:
        probe.sleep(0.1)
        lines = probe.journal(opts.unit, invocation_id, opts.journal_lines)
    return lines


def _fail(opts, probe, tracker, state, invocation_id, why, started) -> ReadyError:
    lines = journal_excerpt(opts, invocation_id, probe)
    where = state.exit_description if state is not None else ""
    message = (f"{opts.unit} {why} while {tracker.phase} ({where}; NRestarts={getattr(state, 'n_restarts', '?')}, "
               f"invocation {invocation_id or '?'}, {probe.clock() - started:.2f}s after the wait began). "
               f"Last journal lines of this invocation:\n" + "\n".join(lines[-opts.journal_lines:]))
    # CLOCK_MONOTONIC is system-wide: systemd's exit timestamp and our clock compare directly (also in nspawn).
    exited_us = int((state.raw if state is not None else {}).get("ExecMainExitTimestampMonotonic") or 0)
    latency = round(probe.clock() - exited_us / 1e6, 3) if exited_us and probe.clock is time.monotonic else None
    return ReadyError("failed", tracker.phase, message, {
        "unit": state.summary() if state is not None else {}, "journal": lines, "phases": tracker.history,
        "crash_to_verdict_s": latency})


def capture(unit: str, probe: Probe | None = None):
    """The unit's state before a (re)start: its invocation id and pid must never be taken for the new one."""
    return (probe or Probe()).show(unit)


def start(unit: str, action: str, probe: Probe | None = None):
    """Capture the current state, reset-failed, then `systemctl <action> --no-block`; returns the captured state."""
    probe = probe or Probe()
    before = probe.show(unit)
    # An operator's (re)start must not be refused by the crash-loop limiter (StartLimitBurst) of earlier runs.
    try:
        probe.systemctl("reset-failed", unit, no_block=False)
    except systemd_unit.SystemdError:
        pass  # nothing to reset
    probe.systemctl(action, unit)
    return before


def wait_ready(opts: Options, stale_invocation: str = "", stale_pid: int = 0, probe: Probe | None = None) -> dict:
    """Block until the unit's *new* invocation answers; raise ReadyError on failure or timeout."""
    probe = probe or Probe()
    started = probe.clock()
    deadline = started + opts.timeout
    tracker = Tracker(phase=PHASE_STOPPING if stale_invocation else PHASE_STARTING, phase_since=started)
    ours_inv, ours_pid, base_restarts, state = "", 0, None, None
    while True:
        now = probe.clock()
        state = probe.show(opts.unit)
        if state.load_state == "not-found":
            raise ReadyError("error", tracker.phase, f"unit {opts.unit} not found", {"unit": state.summary()})
        inv = state.invocation_id
        if not ours_inv and (not inv or inv == stale_invocation):
            tracker.set(PHASE_STOPPING if stale_invocation and inv else PHASE_STARTING,
                        f"{state.active_state}/{state.sub_state} pid {state.main_pid} invocation {inv or '-'}", now)
        else:
            if not ours_inv:
                # A manual (re)start resets NRestarts to 0: any restart after ours counts against it.
                ours_inv, base_restarts = inv, (0 if stale_invocation else state.n_restarts)
                tracker.set(PHASE_STARTING, f"invocation {inv}", now)
            if inv != ours_inv:
                raise _fail(opts, probe, tracker, state, ours_inv, "was restarted by systemd (new invocation "
                            f"{inv}) after its process ended", started)
            if state.n_restarts > base_restarts:
                raise _fail(opts, probe, tracker, state, ours_inv, "was restarted by systemd", started)
            if state.active_state in ("failed", "inactive", "deactivating") or state.sub_state in (
                    "auto-restart", "failed", "dead", "exited", "stop-sigterm", "stop-sigkill"):
                raise _fail(opts, probe, tracker, state, ours_inv,
                            f"stopped ({state.active_state}/{state.sub_state})", started)
            if state.main_pid and ours_pid and state.main_pid != ours_pid:
                raise _fail(opts, probe, tracker, state, ours_inv,
                            f"changed main pid {ours_pid} -> {state.main_pid}", started)
            if state.running and state.main_pid != stale_pid:
                ours_pid = ours_pid or state.main_pid
                result = _probe_http(opts, probe, tracker, state, now)
                if result is not None:
                    tracker.set("ready", result["listener"], probe.clock())
                    result.update(time_to_ready=round(probe.clock() - started, 3), invocation_id=ours_inv,
                                  n_restarts=state.n_restarts, phases=tracker.history)
                    return result
            else:
                tracker.set(PHASE_STARTING, f"{state.active_state}/{state.sub_state} pid {state.main_pid}", now)
        if probe.clock() >= deadline:
            waited = probe.clock() - tracker.phase_since
            raise ReadyError("timeout", tracker.phase, (
                f"{opts.unit} not ready after {opts.timeout:.0f}s: stuck {waited:.0f}s in phase '{tracker.phase}' "
                f"({tracker.detail})"), {"unit": state.summary(), "phases": tracker.history,
                                          "journal": probe.journal(opts.unit, ours_inv, opts.journal_lines)})
        probe.sleep(opts.poll)


def _owner_ok(opts: Options, probe: Probe, state) -> tuple[bool, str]:
    if not opts.check_listener_owner:
        return True, "owner check disabled"
    lst = probe.listeners(opts.port)
    if not lst["sockets"]:
        return False, PHASE_NOT_LISTENING
    ours = probe.unit_pids(state)
    holders = set(lst["pids"])
    foreign = sorted(holders - ours)
    if foreign:
        return False, f"port {opts.port} held by pids {foreign} outside {state.unit} (pid {state.main_pid})"
    if not holders:  # a socket closing with its exiting process, or owners we may not inspect (not root?)
        return False, (f"{PHASE_NOT_LISTENING}: port {opts.port} has a listening socket with no visible owner "
                       f"({lst.get('unreadable', 0)} processes unreadable)")
    return True, f"port {opts.port} held by {sorted(holders)}"


def _probe_http(opts: Options, probe: Probe, tracker: Tracker, state, now: float):
    ok, why = _owner_ok(opts, probe, state)
    if not ok:
        tracker.set(PHASE_NOT_LISTENING if why.startswith(PHASE_NOT_LISTENING) else PHASE_FOREIGN, why, now)
        return None
    health = probe.http(opts.base_url, opts.health_path, api_key=opts.api_key, timeout=opts.http_timeout)
    if health.error == "refused":
        tracker.set(PHASE_NOT_LISTENING, f"{opts.health_path}: connection refused", now)
        return None
    if not health.ok:
        tracker.set(PHASE_WARMING, f"{opts.health_path}: {health.describe()}", now)
        return None
    models = probe.http(opts.base_url, "/v1/models", api_key=opts.api_key, timeout=opts.http_timeout)
    ids = sglang_http.model_ids(models) if models.ok else []
    if not models.ok or (opts.model_id and opts.model_id not in ids):
        tracker.set(PHASE_ANSWERING, f"/v1/models: {models.describe() if not models.ok else ids} "
                                     f"(want {opts.model_id!r})", now)
        return None
    # The answer must still come from the same invocation and the same listener owner afterwards.
    after = probe.show(opts.unit)
    ok_after, why_after = _owner_ok(opts, probe, after)
    if after.invocation_id != state.invocation_id or after.main_pid != state.main_pid or not after.running \
            or not ok_after:
        tracker.set(PHASE_ANSWERING, f"unit changed while probing ({why_after})", now)
        return None
    return {"pid": state.main_pid, "model_ids": ids, "listener": why_after}
