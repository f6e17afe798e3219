"""The GPU host's readings for gpu_facts: nvidia-smi, the fabric manager's unit, and the torch probe (stdlib only).

Runs on the target. Commands go through a `runner(argv, timeout, env=None) -> (rc, stdout, stderr)` so tests can feed
captured text instead of running anything; default_runner runs them. Nothing here judges what it read: the driver
gate (module_utils/gpu/gate.py) does, and module_utils/gpu/facts.py puts the two together for the module.

The torch probe is module_utils/gpu/probe_script.py, a standalone script: its source is written to a temporary file
on the host and run with the target venv's python (it judges that venv's torch), never imported here to run.
"""

import json
import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.gpu import probe_script
from ansible.module_utils.gpu.nvidia_smi import (
    GATE_FIELDS, HEALTH_FIELDS, TOPO_ARGS, NvidiaSmiParseError, parse_query_gpu, parse_topology, query_args,
    summarize_links, unknown_field)
from ansible.module_utils.shipping.source import SourceError, module_source
from ansible.module_utils.systemd import unit as systemd_unit

# NVLink multicast (NVLS) stays off in every probe: on shared hosts it can take the GPUs out of service.
PROBE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def default_runner(argv, timeout, env=None):
    """Run argv; never raise for a missing program or a timeout: report them as rc 127 / 124."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, check=False)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, "timed out after %ss" % timeout
    return proc.returncode, proc.stdout, proc.stderr


def read_nvidia_smi(nvidia_smi, runner, timeout=60):
    """Facts from nvidia-smi: {"present", "error", "gpus", "topology", "links", "unknown_fields", "raw": {...}}.

    One `--query-gpu` call asks for GATE_FIELDS. A health field this driver does not know fails that call (rc 2,
    `Field "X" is not a valid field to query.`): it goes into unknown_fields {field: nvidia-smi's message} and
    the query runs again without it, at most once per health field. raw.query_fields = what raw.query answers.
    """
    facts = {"present": False, "error": None, "gpus": [], "topology": None, "links": None, "unknown_fields": {},
             "raw": {"query": "", "query_fields": [], "topo": ""}}
    binary = nvidia_smi if os.path.sep in nvidia_smi else shutil.which(nvidia_smi)
    if not binary or not os.path.exists(binary):
        facts["error"] = "nvidia-smi not found (looked for %r)" % nvidia_smi
        return facts
    facts["present"] = True
    fields = list(GATE_FIELDS)
    while True:
        rc, out, err = runner([binary] + list(query_args(fields)), timeout)
        facts["raw"]["query"] = out
        facts["raw"]["query_fields"] = list(fields)
        if rc == 0:
            break
        rejected = unknown_field(err) or unknown_field(out)
        if rejected in HEALTH_FIELDS and rejected in fields:
            facts["unknown_fields"][rejected] = (err or out).strip()[:300]
            fields.remove(rejected)
            continue
        facts["error"] = "nvidia-smi --query-gpu failed rc=%s: %s" % (rc, (err or out).strip()[:500])
        return facts
    try:
        facts["gpus"] = parse_query_gpu(out, fields)
    except NvidiaSmiParseError as exc:
        facts["error"] = str(exc)
        return facts
    rc, out, err = runner([binary] + list(TOPO_ARGS), timeout)
    facts["raw"]["topo"] = out
    if rc != 0:
        facts["error"] = "nvidia-smi topo -m failed rc=%s: %s" % (rc, (err or out).strip()[:500])
        return facts
    if len(facts["gpus"]) > 0:
        try:
            facts["topology"] = parse_topology(out)
        except NvidiaSmiParseError as exc:
            facts["error"] = str(exc)
            return facts
        facts["links"] = summarize_links(facts["topology"])
    return facts


def read_fabric_manager(systemctl, unit, runner, timeout=30):
    """The fabric manager's systemd unit: {"unit", "read", "load_state", "active_state", "sub_state", "error"}.

    Read through module_utils/systemd/unit.py's show() (`systemctl show UNIT --property=...`; ActiveState is what
    `systemctl is-active` prints; LoadState=not-found = not installed). read=False with error when systemctl is
    missing or cannot answer (a container without systemd as PID 1).
    """
    info = {"unit": unit, "read": False, "load_state": None, "active_state": None, "sub_state": None, "error": None}
    binary = systemctl if os.path.sep in systemctl else shutil.which(systemctl)
    if not binary or not os.path.exists(binary):
        info["error"] = "systemctl not found (looked for %r)" % systemctl
        return info
    try:
        state = systemd_unit.show(unit, run=lambda argv: runner(argv, timeout), systemctl=binary)
    except systemd_unit.SystemdError as exc:
        info["error"] = str(exc)[:400]
        return info
    if not state.active_state:
        info["error"] = "systemctl show %s answered no ActiveState" % unit
        return info
    info.update(read=True, load_state=state.load_state, active_state=state.active_state,
                sub_state=state.sub_state)
    return info


def probe_script_source():
    """Source text of module_utils/gpu/probe_script.py (also from inside an AnsiballZ payload)."""
    return module_source(probe_script)


def run_torch_probe(python, runner, timeout=300):
    """Run module_utils/gpu/probe_script.py with `python` (a venv's interpreter); returns its JSON report."""
    if not os.path.exists(python):
        return {"ok": False, "error": "probe python %s does not exist" % python}
    try:
        source = probe_script_source()
    except SourceError as exc:
        return {"ok": False, "error": "cannot read the torch probe script: %s" % exc}
    with tempfile.TemporaryDirectory(prefix="gpu_probe_") as tmp:
        script = os.path.join(tmp, "torch_probe.py")
        out = os.path.join(tmp, "report.json")
        with open(script, "w") as fh:
            fh.write(source)
        rc, stdout, stderr = runner([python, script, out], timeout, PROBE_ENV)
        try:
            with open(out) as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            report = {"ok": False, "error": "probe wrote no report (rc=%s): %s" % (rc, (stderr or stdout)[-1000:])}
        report["rc"] = rc
        if rc != 0 and report.get("ok"):
            report["ok"] = False
            report["error"] = "probe exited rc=%s: %s" % (rc, (stderr or stdout)[-1000:])
    return report
