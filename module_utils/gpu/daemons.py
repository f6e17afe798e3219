"""The GPU daemons a service is ordered after (nvidia-persistenced, nvidia-fabricmanager): which of them this host
has, which of those the service requires, and a refusal when a required one has failed.

Their states come from one `systemctl show` through module_utils/systemd/unit.py (show_many: one block per unit,
KEY=VALUE, so a unit's values never slide onto the next one's name). Present = LoadState loaded (a unit systemd
knows); not-found = not installed. A present daemon the service requires (Requires=) that is in ActiveState failed is
refused with its states and its journal's last lines: systemd would not start the service after it anyway, and the
operator has to see why the daemon failed. A present daemon that is not required and has failed is only reported (a
fabric manager installed on a PCIe host without NVSwitch has no NVSwitch to manage and may not run).
"""
from __future__ import annotations

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.systemd import unit as systemd_unit


class GpuDaemonError(EvidenceError):
    """A required GPU daemon is in a state the service cannot start after."""

    default_kind = "gpu_daemon"


def read(units: list, require: list, run=systemd_unit.default_run, journal_lines: int = 20) -> dict:
    """{"states": {unit: {load_state, active_state, sub_state}}, "present": [units loaded], "required": [present
    units in require], "failed_daemons": [present units in ActiveState failed]}, in the order of `units`.
    GpuDaemonError (evidence: the daemon's states and journal lines) when a required present unit has failed;
    SystemdError when systemctl cannot answer; ValueError when `require` names a unit not in `units`."""
    units, require = list(units), list(require)
    stray = [u for u in require if u not in units]
    if stray:
        raise ValueError(f"required GPU daemons {stray} are not among the daemons read {units}")
    states = systemd_unit.show_many(units, run)
    present = [u for u in units if states[u].loaded]
    required = [u for u in present if u in require]
    failed = [u for u in present if states[u].active_state == "failed"]
    broken = [u for u in required if u in failed]
    if broken:
        evidence = {u: dict(states[u].summary(), load_state=states[u].load_state,
                            journal=systemd_unit.journal(u, "", journal_lines, run)) for u in broken}
        raise GpuDaemonError(
            "required GPU daemon(s) failed: " + "; ".join(
                f"{u} ActiveState={states[u].active_state} SubState={states[u].sub_state} ({states[u].exit_description}); "
                f"last journal lines: {' | '.join(evidence[u]['journal'][-5:]) or '(none)'}" for u in broken),
            daemons=evidence)
    return {"states": {u: {"load_state": s.load_state, "active_state": s.active_state, "sub_state": s.sub_state}
                       for u, s in states.items()},
            "present": present, "required": required, "failed_daemons": failed}
