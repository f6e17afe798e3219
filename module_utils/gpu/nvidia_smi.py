"""nvidia-smi's one home: its arguments, the parsers of its per-GPU CSV query and `topo -m` link matrix, and the
plain GPU query that callers needing only the GPU list run (query_gpus).

Stdlib only (and evidence/error.py): it runs on the target (Python 3.11) inside the modules and is unit-tested on
the controller without Ansible, on recorded output (tests/fixtures/nvidia-smi/). The parsers are pure functions over
text; query_gpus is the one function here that runs nvidia-smi (through a subprocess.run-like `run`, so tests feed
recordings). The driver gate's probe (gpu/probe.py) runs its own retrying GATE_FIELDS query and `topo -m` with the
arguments from here; tests/unit/gpu/test_nvidia_smi.py holds that no other file builds an nvidia-smi command line.

Formats parsed (as documented by `nvidia-smi --help-query-gpu` and `nvidia-smi topo -h`):

* ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``: one line per GPU, values separated
  by ", "; unavailable values read "[N/A]", "N/A" or "[Not Supported]". The GPU name is queried last so a name
  that contains a comma still parses.
* The same with GATE_FIELDS: QUERY_FIELDS plus the health fields the driver gate reads (persistence, MIG, ECC,
  retired pages, remapped rows, NVSwitch fabric). A field this driver does not know fails the whole query with
  rc 2 and ``Field "<name>" is not a valid field to query.``; `unknown_field()` reads that name back so the
  caller can query again without it. Field names and value formats: ``nvidia-smi --help-query-gpu`` of driver
  580.159.04, recorded in tests/fixtures/nvidia-smi/h200-help-query-gpu.txt.
* ``nvidia-smi topo -m``: a matrix whose header names the columns (GPU0..GPUn-1, then NIC0.., then
  "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"), one row per GPU/NIC, and a legend. Cells between GPUs are
  ``X`` (self), ``NV#`` (a bonded set of # NVLinks), or a PCIe path: ``PIX``, ``PXB``, ``PHB``, ``NODE``,
  ``SYS``. Columns are tab-separated; a terminal may add ANSI escapes, which are stripped.
"""

import os
import re
import shutil
import subprocess

from ansible.module_utils.evidence.error import EvidenceError

BINARY = "nvidia-smi"

# Order matters: `name` is last (it may contain ", "); the rest never contain a comma.
QUERY_FIELDS = ("index", "uuid", "pci.bus_id", "memory.total", "driver_version", "compute_cap", "name")
QUERY_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
TOPO_ARGS = ("topo", "-m")

# What the driver gate reads besides QUERY_FIELDS, kept per GPU as the raw text under gpu["health"]. Values
# (--help-query-gpu): persistence_mode, mig.mode.*, ecc.mode.current "Enabled"/"Disabled"; ecc.errors.* a count;
# retired_pages.pending, remapped_rows.pending/failure "Yes"/"No"; fabric.state "Not Supported"/"Not Started"/
# "In Progress"/"Completed" (NVML nvmlGpuFabricState_t) and fabric.status an NVML status ("Success"), which is
# valid only once the state is "Completed". None of them contains a comma.
HEALTH_FIELDS = (
    "persistence_mode",
    "mig.mode.current",
    "mig.mode.pending",
    "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "fabric.state",
    "fabric.status",
)
GATE_FIELDS = QUERY_FIELDS[:-1] + HEALTH_FIELDS + QUERY_FIELDS[-1:]
# What the GPU metrics timer (monitoring/gpu_textfile.py) reads besides: the live readings, kept per GPU as raw text
# under gpu["readings"] (--help-query-gpu; nounits: power.draw W, memory.used MiB, utilization.gpu %,
# temperature.gpu degrees C). Recorded on the H200: tests/fixtures/nvidia-smi/h200-metrics-query.txt.
READING_FIELDS = ("power.draw", "memory.used", "utilization.gpu", "temperature.gpu")
METRICS_FIELDS = QUERY_FIELDS[:-1] + READING_FIELDS + HEALTH_FIELDS + QUERY_FIELDS[-1:]
CSV_FORMAT = "--format=csv,noheader,nounits"

# PCIe path kinds from nearest to farthest (nvidia-smi topo legend).
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NA = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "")
# Health values that say "not available here" rather than a state (the gate reports them as not checked).
UNAVAILABLE = _NA + ("Not Supported", "[Insufficient Permissions]", "[GPU is lost]")
_UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")


class NvidiaSmiParseError(EvidenceError, ValueError):
    """The text is not the documented nvidia-smi format; the message quotes the offending line."""

    default_kind = "nvidia_smi_format"


class NvidiaSmiError(EvidenceError):
    """An nvidia-smi that is there but does not answer (not runnable, a non-zero exit): the message names the
    command and quotes what it printed."""

    default_kind = "nvidia_smi"


def _value(raw):
    raw = raw.strip()
    return None if raw in _NA else raw


def query_args(fields):
    """The nvidia-smi arguments that query `fields` (a sequence ending with "name") as headerless CSV."""
    if not fields or fields[-1] != "name":
        raise ValueError("the queried fields must end with name, got %r" % (fields,))
    return ("--query-gpu=" + ",".join(fields), CSV_FORMAT)


def unknown_field(text):
    """The field name in nvidia-smi's `Field "X" is not a valid field to query.` message, else None."""
    match = _UNKNOWN_FIELD.search(text or "")
    return match.group(1) if match else None


def parse_query_gpu(text, fields=QUERY_FIELDS):
    """Parse `--query-gpu=<fields> --format=csv,noheader,nounits` output into one dict per GPU.

    `fields` is what was queried: QUERY_FIELDS (the default) or any sequence holding all of QUERY_FIELDS, with
    "name" last, and otherwise HEALTH_FIELDS and READING_FIELDS. Each dict: index (int), uuid, pci_bus_id, memory_total_mib (int
    or None), driver_version, compute_capability ("9.0" style string or None), name, and health: {field: raw
    text} for each HEALTH_FIELDS entry queried (the text as nvidia-smi wrote it, "[N/A]" included), and readings:
    {field: raw text} likewise when any READING_FIELDS entry was queried. Blank
    lines are ignored; a line with too few fields raises NvidiaSmiParseError quoting it.
    """
    fields = tuple(fields)
    missing = [f for f in QUERY_FIELDS if f not in fields]
    extra = [f for f in fields if f not in QUERY_FIELDS and f not in HEALTH_FIELDS and f not in READING_FIELDS]
    if missing or extra or fields[-1] != "name":
        raise ValueError("cannot parse a query of %r (missing %r, unknown %r)" % (fields, missing, extra))
    gpus = []
    for line in text.splitlines():
        line = _ANSI.sub("", line).strip()
        if not line:
            continue
        parts = line.split(",")
        if len(parts) < len(fields):
            raise NvidiaSmiParseError(
                "expected %d comma-separated fields (%s), got %d in line %r"
                % (len(fields), ",".join(fields), len(parts), line))
        raw = dict(zip(fields[:-1], (p.strip() for p in parts[:len(fields) - 1])))
        name = _value(",".join(parts[len(fields) - 1:]))
        index, uuid, bus_id, memory, driver, cap = (_value(raw[f]) for f in QUERY_FIELDS[:-1])
        try:
            index = int(index)
        except (TypeError, ValueError):
            raise NvidiaSmiParseError("GPU index is not an integer in line %r" % line)
        try:
            memory = int(float(memory)) if memory is not None else None
        except ValueError:
            raise NvidiaSmiParseError("memory.total is not a number in line %r" % line)
        if cap is not None and not re.match(r"^\d+\.\d+$", cap):
            raise NvidiaSmiParseError("compute_cap is not MAJOR.MINOR in line %r" % line)
        gpu = {
            "index": index,
            "uuid": uuid,
            "pci_bus_id": bus_id,
            "memory_total_mib": memory,
            "driver_version": driver,
            "compute_capability": cap,
            "name": name,
            "health": {f: raw[f] for f in fields[:-1] if f in HEALTH_FIELDS},
        }
        if any(f in READING_FIELDS for f in fields):
            gpu["readings"] = {f: raw[f] for f in fields[:-1] if f in READING_FIELDS}
        gpus.append(gpu)
    gpus.sort(key=lambda g: g["index"])
    return gpus


def find_binary(nvidia_smi=BINARY):
    """The nvidia-smi to run: a path as given (when it exists) or a name looked up on PATH; None when there is none."""
    if os.sep in nvidia_smi:
        return nvidia_smi if os.path.exists(nvidia_smi) else None
    return shutil.which(nvidia_smi)


def _stdout(argv, run, timeout):
    """Run nvidia-smi (`run`: subprocess.run or a stand-in called the same way) and return its stdout; NvidiaSmiError
    with the argv, rc and output when it cannot be run or exits non-zero."""
    run = run or subprocess.run
    try:
        out = run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NvidiaSmiError("%s: %s" % (" ".join(argv), exc), evidence={"argv": argv})
    if out.returncode != 0:
        said = (out.stderr or out.stdout or "").strip()[-500:]
        raise NvidiaSmiError("%s exited %s: %s" % (" ".join(argv), out.returncode, said),
                             evidence={"argv": argv, "rc": out.returncode, "output": said})
    return out.stdout


def query_gpus(nvidia_smi=BINARY, run=None, timeout=60, fields=QUERY_FIELDS):
    """The host's GPUs: `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` run and parsed
    (parse_query_gpu), or None when the host has no nvidia-smi (find_binary). `run` is subprocess.run or a
    stand-in called the same way. NvidiaSmiError when it is there but cannot be run or exits non-zero,
    NvidiaSmiParseError when it answers in another format."""
    binary = find_binary(nvidia_smi)
    if not binary:
        return None
    argv = [binary] + list(query_args(tuple(fields)))
    return parse_query_gpu(_stdout(argv, run, timeout), fields)


# The processes holding GPU memory: `--query-compute-apps` (nvidia-smi --help-query-compute-apps: pid, gpu_uuid,
# used_memory in MiB with nounits, process_name). process_name is last: a path may contain ", ".
COMPUTE_APPS_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")
COMPUTE_APPS_ARGS = ("--query-compute-apps=" + ",".join(COMPUTE_APPS_FIELDS), CSV_FORMAT)


def parse_compute_apps(text):
    """Parse `--query-compute-apps=<COMPUTE_APPS_FIELDS> --format=csv,noheader,nounits` into one dict per process:
    pid (int), gpu_uuid, used_memory_mib (int or None when unavailable), process_name. A host with no GPU process
    prints nothing (some drivers print "No running processes found"): []. A malformed line raises
    NvidiaSmiParseError quoting it."""
    apps = []
    for line in text.splitlines():
        line = _ANSI.sub("", line).strip()
        if not line or line.lower().startswith("no running"):
            continue
        parts = line.split(",")
        if len(parts) < len(COMPUTE_APPS_FIELDS):
            raise NvidiaSmiParseError("expected %d comma-separated fields (%s), got %d in line %r"
                                      % (len(COMPUTE_APPS_FIELDS), ",".join(COMPUTE_APPS_FIELDS), len(parts), line))
        pid, uuid, memory = (_value(p) for p in parts[:3])
        try:
            pid = int(pid)
            memory = int(float(memory)) if memory is not None else None
        except (TypeError, ValueError):
            raise NvidiaSmiParseError("pid or used_memory is not a number in line %r" % line)
        apps.append({"pid": pid, "gpu_uuid": uuid, "used_memory_mib": memory,
                     "process_name": _value(",".join(parts[3:])) or ""})
    return apps


def query_compute_apps(nvidia_smi=BINARY, run=None, timeout=60):
    """The processes holding GPU memory now (parse_compute_apps), or None when the host has no nvidia-smi: the
    caller says so instead of reading "no process". Errors as query_gpus."""
    binary = find_binary(nvidia_smi)
    if not binary:
        return None
    argv = [binary] + list(COMPUTE_APPS_ARGS)
    return parse_compute_apps(_stdout(argv, run, timeout))


# GPU power: `--query-gpu=index,power.draw,power.limit` (nvidia-smi --help-query-gpu: power.draw is the board's
# last measured draw in W, a 1 s average on Ampere and newer; power.limit the software power limit in W; "[N/A]"
# where power management is not supported). Recorded on the H200: tests/fixtures/nvidia-smi/h200-power-query.txt.
POWER_FIELDS = ("index", "power.draw", "power.limit")
POWER_ARGS = ("--query-gpu=" + ",".join(POWER_FIELDS), CSV_FORMAT)


def parse_power(text):
    """Parse `--query-gpu=<POWER_FIELDS> --format=csv,noheader,nounits` into one dict per GPU: index (int), draw_w
    and limit_w (float, or None where nvidia-smi reports them unavailable). A malformed line raises
    NvidiaSmiParseError quoting it."""
    gpus = []
    for line in text.splitlines():
        line = _ANSI.sub("", line).strip()
        if not line:
            continue
        parts = [_value(p) for p in line.split(",")]
        if len(parts) != len(POWER_FIELDS):
            raise NvidiaSmiParseError("expected %d comma-separated fields (%s), got %d in line %r"
                                      % (len(POWER_FIELDS), ",".join(POWER_FIELDS), len(parts), line))
        try:
            index = int(parts[0])
            draw, limit = (float(v) if v is not None else None for v in parts[1:])
        except (TypeError, ValueError):
            raise NvidiaSmiParseError("index, power.draw or power.limit is not a number in line %r" % line)
        gpus.append({"index": index, "draw_w": draw, "limit_w": limit})
    gpus.sort(key=lambda g: g["index"])
    return gpus


def query_power(nvidia_smi=BINARY, run=None, timeout=10):
    """The GPUs' power now (parse_power), or None when the host has no nvidia-smi. Errors as query_gpus."""
    binary = find_binary(nvidia_smi)
    if not binary:
        return None
    argv = [binary] + list(POWER_ARGS)
    return parse_power(_stdout(argv, run, timeout))


IDENTITY_FIELDS = (("gpu_name", "name"), ("compute_capability", "compute_capability"),
                   ("driver_version", "driver_version"))


def gpu_identity(gpus):
    """{gpu_name, compute_capability, driver_version} of parsed GPUs (parse_query_gpu): each the distinct values
    sorted and joined with "+" (a host with GPUs of different kinds names them all), a value nvidia-smi reports
    as unavailable as "[N/A]"; "" for all three when there is no GPU."""
    return {key: "+".join(sorted({g[field] if g[field] is not None else "[N/A]" for g in gpus}))
            for key, field in IDENTITY_FIELDS}


def driver_major(version):
    """580 for "580.159.04"; None when the version is unknown or not numeric."""
    if not version:
        return None
    match = re.match(r"^(\d+)", str(version))
    return int(match.group(1)) if match else None


def parse_topology(text):
    """Parse `nvidia-smi topo -m` into {"gpus": [labels], "matrix": {gpu: {gpu: cell}}, "nics": [labels]}.

    Only GPU-to-GPU cells are kept in the matrix. Raises NvidiaSmiParseError when no header with GPU
    columns is found or a GPU row has fewer cells than there are GPU columns.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = None
    columns = []
    for pos, line in enumerate(lines):
        tokens = line.split()
        if tokens and _GPU_LABEL.match(tokens[0]) and line[:1].isspace():
            header_at, columns = pos, tokens
            break
    if header_at is None:
        raise NvidiaSmiParseError("no topology header (a line of GPU0 GPU1 ... columns) in: %r" % text[:200])
    gpu_columns = []
    for token in columns:
        if not _GPU_LABEL.match(token):
            break
        gpu_columns.append(token)
    nic_columns = [t for t in columns[len(gpu_columns):] if re.match(r"^NIC\d+$", t)]
    matrix = {}
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens:
            break
        label = tokens[0]
        if not _GPU_LABEL.match(label):
            if re.match(r"^NIC\d+$", label) or label.startswith("mlx"):
                continue
            break
        cells = tokens[1:1 + len(gpu_columns)]
        if len(cells) < len(gpu_columns):
            raise NvidiaSmiParseError("row %s has %d cells for %d GPU columns: %r"
                                      % (label, len(cells), len(gpu_columns), line))
        matrix[label] = dict(zip(gpu_columns, cells))
    missing = [g for g in gpu_columns if g not in matrix]
    if missing:
        raise NvidiaSmiParseError("topology lists columns %s without rows" % ", ".join(missing))
    return {"gpus": gpu_columns, "matrix": matrix, "nics": nic_columns}


def summarize_links(topology):
    """Classify every GPU pair of a parsed topology.

    Returns {"interconnect": "nvlink"|"pcie"|"mixed"|"none", "pairs": n, "nvlink_pairs": n,
    "pcie_pairs": {"PIX": n, ...}, "min_nvlinks": n or None, "unknown": [cells]}.
    "nvlink": every pair has NV#; "pcie": no pair has; "mixed": some do; "none": fewer than two GPUs.
    """
    gpus = topology["gpus"]
    matrix = topology["matrix"]
    pcie = {}
    nvlinks = []
    unknown = []
    pairs = 0
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            pairs += 1
            cell = matrix[a][b]
            nv = _NVLINK.match(cell)
            if nv:
                nvlinks.append(int(nv.group(1)))
            elif cell in PCIE_LINKS:
                pcie[cell] = pcie.get(cell, 0) + 1
            else:
                unknown.append("%s-%s:%s" % (a, b, cell))
    if pairs == 0:
        kind = "none"
    elif len(nvlinks) == pairs:
        kind = "nvlink"
    elif nvlinks:
        kind = "mixed"
    else:
        kind = "pcie"
    return {
        "interconnect": kind,
        "pairs": pairs,
        "nvlink_pairs": len(nvlinks),
        "pcie_pairs": pcie,
        "min_nvlinks": min(nvlinks) if nvlinks else None,
        "unknown": unknown,
    }


def suggest_profile(links):
    """The deployment profile these links call for: ("nvlink"|"pcie"|"", reason).

    Every pair on NVLink -> "nvlink"; any pair that has to cross PCIe -> "pcie" (the PCIe NCCL tuning is
    the safe one there); fewer than two GPUs -> "" (no GPU-to-GPU traffic: let the inventory decide).
    """
    kind = links["interconnect"]
    if kind == "nvlink":
        return "nvlink", "all %d GPU pairs joined by NVLink (at least NV%d)" % (links["pairs"], links["min_nvlinks"])
    if kind in ("pcie", "mixed"):
        return "pcie", "%d of %d GPU pairs cross PCIe (%s)" % (
            links["pairs"] - links["nvlink_pairs"], links["pairs"],
            ", ".join("%s x%d" % kv for kv in sorted(links["pcie_pairs"].items())) or "unknown links")
    return "", "fewer than two GPUs: no GPU-to-GPU link to choose a profile from"
