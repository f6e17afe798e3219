"""Take over a hand-made deployment's units: stop each (bounded: systemd/unit.py stop_and_wait), disable it, and record
on the host what was done, before doing it, so it can be undone (playbooks/takeover_revert.yml reads the record).

The record (JSON, root-only) is a list of takeovers, newest last; each: {"time", "units": [{unit, fragment_path,
unit_file (its text), active_state, unit_file_state, main_pid, user, exec_start, stopped, disabled}]}. A unit already
inactive and disabled is left alone and not recorded again, so a rerun changes nothing.

    plan(units, run)                          -> [unit state before]     (read-only)
    take_over(units, record_path, timeout)    -> {"changed", "units", "record_path"}
"""
from __future__ import annotations

import json
import os
import time

from ansible.module_utils.sglang import existing
from ansible.module_utils.systemd import unit as systemd_unit


class TakeoverError(systemd_unit.SystemdError):
    """A unit that would not stop or disable; evidence: the unit, its state and journal tail, the record's path."""

    default_kind = "takeover"


def plan(units, run=systemd_unit.default_run) -> list[dict]:
    """Each unit's state now, and what a takeover would do to it (stop, disable)."""
    out = []
    for raw in systemd_unit.show_units(list(units), existing.PROPERTIES, run):
        rec = existing.unit_record(raw)
        rec["stop"] = rec["active_state"] in systemd_unit.LIVE_STATES
        rec["disable"] = rec["unit_file_state"] in existing.ENABLED_STATES
        out.append(rec)
    return out


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        return f"(unreadable: {exc})"


def load_record(path: str) -> list:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def save_record(path: str, takeovers: list) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(takeovers, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def take_over(units, record_path: str, timeout: float = 60.0, run=systemd_unit.default_run,
              clock=time.time) -> dict:
    todo = [u for u in plan(units, run) if u["stop"] or u["disable"]]
    if not todo:
        return {"changed": False, "units": [], "record_path": record_path}
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock())),
             "units": [dict(u, unit_file=_read(u["fragment_path"]) if u["fragment_path"] else "",
                            stopped=False, disabled=False) for u in todo]}
    takeovers = load_record(record_path) + [entry]
    save_record(record_path, takeovers)  # what is about to change, before it changes
    for rec in entry["units"]:
        name = rec["unit"]
        try:
            if rec["stop"]:
                systemd_unit.stop_and_wait(name, run, timeout=timeout)
                rec["stopped"] = True
            if rec["disable"]:
                systemd_unit.systemctl("disable", name, run, no_block=False)
                rec["disabled"] = True
        except systemd_unit.SystemdError as exc:
            state = systemd_unit.show(name, run).summary()
            raise TakeoverError(f"taking over {name} failed: {exc.message}", unit=name, unit_state=state,
                                journal=systemd_unit.journal(name, "", 30, run), record_path=record_path) from None
        finally:
            save_record(record_path, takeovers)
    return {"changed": True, "units": entry["units"], "record_path": record_path}
