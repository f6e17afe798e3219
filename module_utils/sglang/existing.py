"""What already serves on this host besides our own service, read before the play changes anything: other SGLang
systemd units, other listeners on the service's port, other processes holding GPU memory; and the verdict: refuse
with that evidence and the way out, unless the operator named those units for a takeover.

    find(port, own_units, ...)        -> {"units", "listeners", "gpu"}       (read-only; systemd/unit.py, gpu/nvidia_smi.py)
    verdict(found, own_units, takeover) -> {"conflicts", "covered_units", "uncovered", "message"}

A unit is an SGLang unit when its ExecStart launches SGLang (`python -m sglang.launch_server`, `-m sglang...`, the
`sglang` CLI, the lab's `sglang_standin.launch_server`) or its name is sglang*.service; ours (own_units: the service
role's unit, the router's, the models role's peer unit) never are. A foreign unit conflicts when it runs (or is on its
way up or down) or is enabled (it would start at the next boot, beside ours). A listener on the port or a GPU process
conflicts unless it lives in one of our units. Without nvidia-smi (the lab) the GPU is reported unchecked, not clean.
"""
from __future__ import annotations

import fnmatch
import os

from ansible.module_utils.gpu import nvidia_smi
from ansible.module_utils.systemd import unit as systemd_unit

PROPERTIES = ("LoadState", "ActiveState", "SubState", "MainPID", "UnitFileState", "FragmentPath", "User",
              "ExecStart", "ControlGroup")
ENABLED_STATES = ("enabled", "enabled-runtime", "linked", "linked-runtime", "alias")
NAME_PATTERN = "sglang*.service"


def launches_sglang(cmdline: str) -> bool:
    """Whether a command line starts SGLang: `-m sglang...` / `-m sglang_standin.launch_server` (any python), the
    `sglang` CLI (`sglang serve`), or a path to sglang's launch_server.py."""
    tokens = cmdline.split()
    for i, tok in enumerate(tokens):
        if tok == "-m" and i + 1 < len(tokens) and tokens[i + 1].split(".")[0] in ("sglang", "sglang_standin"):
            return True
        if tok.startswith("-msglang"):
            return True
        if i == 0 and os.path.basename(tok) == "sglang":
            return True
        if tok.endswith("/launch_server.py") and "sglang" in tok:
            return True
    return False


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns or ())


def unit_record(raw: dict) -> dict:
    argvs = systemd_unit.exec_start_argvs(raw.get("ExecStart", ""))
    return {"unit": raw.get("Id", ""), "active_state": raw.get("ActiveState", ""),
            "sub_state": raw.get("SubState", ""), "main_pid": int(raw.get("MainPID") or 0),
            "unit_file_state": raw.get("UnitFileState", ""), "fragment_path": raw.get("FragmentPath", ""),
            "user": raw.get("User") or "root", "exec_start": argvs,
            "launches_sglang": any(launches_sglang(a) for a in argvs)}


def find_units(own_units, run=systemd_unit.default_run) -> list[dict]:
    """Every service unit that runs SGLang or is named sglang*, ours left out."""
    names = [n for n in systemd_unit.service_names(run) if not _matches(n, own_units)]
    shown = systemd_unit.show_units(names, PROPERTIES, run)
    out = []
    for raw in shown:
        rec = unit_record(raw)
        if rec["unit"] and (rec["launches_sglang"] or fnmatch.fnmatchcase(rec["unit"], NAME_PATTERN)):
            out.append(rec)
    return out


def find_listeners(port: int, proc: str = "/proc") -> list[dict]:
    """The processes listening on `port` (pid, unit, user, cmdline)."""
    held = systemd_unit.listening_pids(port, proc)
    return [dict(systemd_unit.process_info(pid, proc), port=port) for pid in sorted(held["pids"])]


def find_gpu(nvidia_smi_path: str = nvidia_smi.BINARY, run=None, proc: str = "/proc") -> dict:
    """{"checked": bool, "note": why not, "processes": [{pid, unit, user, cmdline, gpu_uuid, used_memory_mib,
    memory_total_mib, percent}]}."""
    apps = nvidia_smi.query_compute_apps(nvidia_smi_path, run)
    if apps is None:
        return {"checked": False, "processes": [],
                "note": "no nvidia-smi on this host: GPU processes were not checked (a host with GPUs needs the "
                        "driver's nvidia-smi; the lab has no GPU)"}
    totals = {g["uuid"]: g["memory_total_mib"] for g in nvidia_smi.query_gpus(nvidia_smi_path, run) or []}
    procs = []
    for app in apps:
        total = totals.get(app["gpu_uuid"])
        used = app["used_memory_mib"]
        pct = round(100.0 * used / total, 1) if used is not None and total else None
        procs.append(dict(systemd_unit.process_info(app["pid"], proc), gpu_uuid=app["gpu_uuid"],
                          used_memory_mib=used, memory_total_mib=total, percent=pct,
                          process_name=app["process_name"]))
    return {"checked": True, "note": "", "processes": procs}


def find(port: int, own_units, nvidia_smi_path: str = nvidia_smi.BINARY, run=systemd_unit.default_run,
         smi_run=None, proc: str = "/proc") -> dict:
    return {"units": find_units(own_units, run), "listeners": find_listeners(port, proc),
            "gpu": find_gpu(nvidia_smi_path, smi_run, proc)}


# ------------------------------------------------------------------------------------------------ the verdict
def conflicting(rec: dict) -> bool:
    return rec["active_state"] in systemd_unit.LIVE_STATES or rec["unit_file_state"] in ENABLED_STATES


def describe_unit(rec: dict) -> str:
    pid = f", pid {rec['main_pid']}" if rec["main_pid"] else ""
    return (f"unit {rec['unit']} ({rec['active_state']}/{rec['sub_state']}, {rec['unit_file_state'] or 'no unit file'}"
            f", user {rec['user']}{pid}) from {rec['fragment_path'] or '?'}; ExecStart: "
            f"{' | '.join(rec['exec_start']) or '?'}")


def describe_process(p: dict) -> str:
    where = f"unit {p['unit']}" if p["unit"] else "no systemd unit"
    mem = ""
    if "used_memory_mib" in p:
        share = f" ({p['percent']}% of {p['memory_total_mib']} MiB)" if p.get("percent") is not None else ""
        mem = f" holds {p['used_memory_mib']} MiB on {p['gpu_uuid']}{share};"
    port = f" listens on port {p['port']};" if "port" in p else ""
    return f"pid {p['pid']} ({where}, user {p['user'] or '?'}):{port}{mem} {p['cmdline'] or p.get('process_name', '')}"


def verdict(found: dict, own_units, takeover, record_hint: str = "") -> dict:
    """covered_units: the foreign units in the way that the takeover names (to stop and disable): conflicting SGLang
    units and any service unit holding the port or GPU memory; uncovered: what still stands in the way. message: the
    refusal, with the evidence and the way out ("" when nothing is in the way)."""
    units = [u for u in found["units"] if conflicting(u)]
    procs = [p for p in found["listeners"] + found["gpu"]["processes"] if not _matches(p["unit"], own_units)]
    stoppable = sorted({u["unit"] for u in units} | {p["unit"] for p in procs if p["unit"].endswith(".service")})
    covered = [n for n in stoppable if _matches(n, takeover)]
    in_way_units = [u for u in units if u["unit"] not in covered]
    in_way_procs = [p for p in procs if p["unit"] not in covered]
    uncovered = {"units": in_way_units, "listeners": [p for p in in_way_procs if "port" in p],
                 "gpu_processes": [p for p in in_way_procs if "gpu_uuid" in p]}
    if not (in_way_units or in_way_procs):
        return {"conflicts": bool(stoppable), "covered_units": covered, "uncovered": uncovered, "message": ""}
    lines = ["another deployment is in the way of ours (%s); nothing was changed." % ", ".join(sorted(own_units))]
    lines += ["- " + describe_unit(u) for u in in_way_units]
    lines += ["- " + describe_process(p) for p in in_way_procs]
    if not found["gpu"]["checked"]:
        lines.append("- GPU: " + found["gpu"]["note"])
    names = [n for n in stoppable if n not in covered]
    stray = sorted({p["pid"] for p in in_way_procs if not p["unit"].endswith(".service")})
    if names:
        lines.append("Way out: take them over with -e '{\"takeover_units\": [%s]}' (stops and disables them, records "
                     "what it did%s, adopts their weights from takeover_models_dirs; undone by "
                     "playbooks/takeover_revert.yml), or stop them yourself: systemctl disable --now %s"
                     % (", ".join('\"%s\"' % n for n in names), record_hint and " in " + record_hint, " ".join(names)))
    if stray:
        lines.append("pid %s %s in no service unit a takeover could stop: stop %s yourself (kill %s)"
                     % (", ".join(map(str, stray)), "is" if len(stray) == 1 else "are",
                        "it" if len(stray) == 1 else "them", " ".join(map(str, stray))))
    return {"conflicts": True, "covered_units": covered, "uncovered": uncovered, "message": "\n".join(lines)}
