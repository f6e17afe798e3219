"""GPU metrics for the node exporter's textfile collector where the operator has no DCGM exporter: power, memory,
utilisation, temperature, ECC, retired pages, remapped rows and the NVSwitch fabric state of every GPU, read with the
project's one nvidia-smi query (gpu/nvidia_smi.py METRICS_FIELDS) and written atomically as one .prom file.

Standalone on the serving host (no Ansible there): the monitoring role installs this file with gpu/nvidia_smi.py and
evidence/error.py under <dir>/ansible/module_utils/ and its timer runs

    python3 -m ansible.module_utils.monitoring.gpu_textfile --out <textfile dir>/sglang_gpu.prom [--nvidia-smi PATH]

with PYTHONPATH=<dir>, so the host imports exactly the modules the unit tests import. Stdlib only.

The series (GPU_TEXTFILE_METRICS is their one home; the alert rules in monitoring/rules.py read them): per GPU with
labels gpu (index) and uuid; `gpu_textfile_ok` (1 read, 0 not: no nvidia-smi, or it failed; the reason is a label)
and `gpu_textfile_last_run_timestamp_seconds` once per host. A field the driver does not know (nvidia-smi rc 2,
`Field "X" is not a valid field to query.`) is dropped and the query asked again: its series are then absent, never 0.
A value nvidia-smi reports as unavailable ("[N/A]", "[Not Supported]") gives no sample.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from ansible.module_utils.gpu import nvidia_smi

# name -> (type, help, nvidia-smi field, how the raw text becomes the value). Kinds: "num" (float), "bytes_mib"
# (MiB -> bytes), "ratio_pct" (% -> 0..1), "yes_no" (Yes 1, No 0); the fabric state is a state-set series of its own.
GPU_TEXTFILE_METRICS = {
    "gpu_power_draw_watts": ("gauge", "nvidia-smi power.draw (W)", "power.draw", "num"),
    "gpu_memory_used_bytes": ("gauge", "nvidia-smi memory.used", "memory.used", "bytes_mib"),
    "gpu_memory_total_bytes": ("gauge", "nvidia-smi memory.total", "memory.total", "bytes_mib"),
    "gpu_utilization_ratio": ("gauge", "nvidia-smi utilization.gpu (0..1)", "utilization.gpu", "ratio_pct"),
    "gpu_temperature_celsius": ("gauge", "nvidia-smi temperature.gpu", "temperature.gpu", "num"),
    "gpu_ecc_uncorrected_volatile_errors": (
        "gauge", "nvidia-smi ecc.errors.uncorrected.volatile.total (count since driver load)",
        "ecc.errors.uncorrected.volatile.total", "num"),
    "gpu_ecc_uncorrected_aggregate_errors": (
        "gauge", "nvidia-smi ecc.errors.uncorrected.aggregate.total (lifetime count)",
        "ecc.errors.uncorrected.aggregate.total", "num"),
    "gpu_retired_pages_pending": ("gauge", "nvidia-smi retired_pages.pending: 1 Yes, 0 No", "retired_pages.pending",
                                  "yes_no"),
    "gpu_remapped_rows_pending": ("gauge", "nvidia-smi remapped_rows.pending: 1 Yes, 0 No", "remapped_rows.pending",
                                  "yes_no"),
    "gpu_remapped_rows_failure": ("gauge", "nvidia-smi remapped_rows.failure: 1 Yes, 0 No", "remapped_rows.failure",
                                  "yes_no"),
    "gpu_fabric_state": ("gauge", "nvidia-smi fabric.state: 1 for the GPU's current state (label state)",
                         "fabric.state", "state"),
    "gpu_textfile_ok": ("gauge", "1 when nvidia-smi was read, else 0 (label reason)", None, "host"),
    "gpu_textfile_last_run_timestamp_seconds": ("gauge", "when the GPU metrics were last written", None, "host"),
}
FILE_NAME = "sglang_gpu.prom"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels):
    return "{" + ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels.items()) + "}"


def _field(gpu, field):
    """The raw text of `field` for this GPU (None when unavailable or not queried)."""
    if field == "memory.total":
        value = gpu.get("memory_total_mib")
        return None if value is None else str(value)
    raw = (gpu.get("readings") or {}).get(field, (gpu.get("health") or {}).get(field))
    return None if raw is None or raw.strip() in nvidia_smi.UNAVAILABLE else raw.strip()


def _value(raw, kind):
    if kind == "yes_no":
        return {"Yes": 1.0, "No": 0.0}.get(raw)
    try:
        number = float(raw)
    except ValueError:
        return None
    return number * 1048576 if kind == "bytes_mib" else number / 100.0 if kind == "ratio_pct" else number


def render(gpus, now, error=None):
    """The .prom text for the parsed GPUs (nvidia_smi.parse_query_gpu with METRICS_FIELDS) at time `now`; `error`
    (a short reason) when nvidia-smi could not be read: then only gpu_textfile_ok 0 and the timestamp."""
    lines = []
    for name, (kind_type, help_text, field, kind) in GPU_TEXTFILE_METRICS.items():
        samples = []
        if kind == "host":
            if name == "gpu_textfile_ok":
                samples.append(("{}" if error is None else _labels({"reason": error}), 0.0 if error else 1.0))
            else:
                samples.append(("", float(now)))
        else:
            for gpu in gpus if error is None else ():
                raw = _field(gpu, field)
                if raw is None:
                    continue
                labels = {"gpu": gpu["index"], "uuid": gpu["uuid"] or ""}
                if kind == "state":
                    samples.append((_labels(dict(labels, state=raw)), 1.0))
                    continue
                value = _value(raw, kind)
                if value is not None:
                    samples.append((_labels(labels), value))
        if samples:
            lines += ["# HELP %s %s" % (name, help_text), "# TYPE %s %s" % (name, kind_type)]
            lines += ["%s%s %s" % (name, labels if labels != "{}" else "", repr(value)) for labels, value in samples]
    return "\n".join(lines) + "\n"


def read(binary, run=None, timeout=30):
    """(gpus, error): the GPUs parsed from the METRICS_FIELDS query, fields this driver does not know dropped and
    asked again; error is a short reason when there is no nvidia-smi or it fails."""
    fields = list(nvidia_smi.METRICS_FIELDS)
    required = set(nvidia_smi.QUERY_FIELDS)
    while True:
        try:
            gpus = nvidia_smi.query_gpus(binary, run=run, timeout=timeout, fields=tuple(fields))
        except nvidia_smi.NvidiaSmiError as exc:
            unknown = nvidia_smi.unknown_field(str(exc.evidence.get("output") or exc.message))
            if unknown in fields and unknown not in required:
                fields.remove(unknown)
                continue
            return [], "nvidia_smi_failed"
        except nvidia_smi.NvidiaSmiParseError:
            return [], "nvidia_smi_format"
        return ([], "no_nvidia_smi") if gpus is None else (gpus, None)


def write_atomic(path, text):
    """Write text to path so the collector never reads half a file: a temporary file in the same directory (its
    name does not end in .prom, so the collector skips it), flushed, then renamed over path."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None, run=None, now=None):
    ap = argparse.ArgumentParser(prog="gpu_textfile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the .prom file (in the node exporter's textfile directory)")
    ap.add_argument("--nvidia-smi", default=nvidia_smi.BINARY, help="nvidia-smi to run (a name on PATH or a path)")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    gpus, error = read(args.nvidia_smi, run=run, timeout=args.timeout)
    write_atomic(args.out, render(gpus, time.time() if now is None else now, error))
    print("%s: %d GPU(s)%s" % (args.out, len(gpus), "" if error is None else ", not read: " + error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
