# -*- coding: utf-8 -*-
"""The sglang.bench_serving route of a cell (stdlib only): `python -m sglang.bench_serving` from the target venv,
used for random-ids and dataset workloads when the venv can run it (prompt sets always use the built-in client).

bench_serving_available() says whether the venv can import it; bench_serving_argv() is one cell's argv (never a
download: random-ids sends exact token ids, a dataset is read offline from --dataset-path, HF_HUB_OFFLINE=1);
run_bench_serving_cell() runs it bounded by cell_timeout_s and reads its --output-file into bench_serving's metric
names (metrics.METRIC_KEYS), with status ok|timeout|error and the reason. run_sized_cell() sizes the cell by time:
bench_serving takes a request count, so a run shorter than min_cell_seconds is run again with the count scaled up
by the rate it measured (the short run was a warmup), within the cell's bound.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time

from ansible.module_utils.loadgen.metrics import METRIC_KEYS


def bench_serving_available(venv_python):
    """(True, "") when venv_python can import sglang.bench_serving, else (False, why). It is imported, not only
    found: real 0.5.11's bench_serving imports `datasets` (a declared sglang dependency) at import time, and a venv
    without it has the module but cannot run it (seen on the H200)."""
    if not venv_python or not os.path.exists(venv_python):
        return False, "no python at %r" % (venv_python,)
    try:
        proc = subprocess.run([venv_python, "-c", "import sglang.bench_serving"], capture_output=True, text=True,
                              timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, "could not run %s: %s" % (venv_python, exc)
    if proc.returncode == 0:
        return True, ""
    lines = [line for line in (proc.stderr or "").strip().splitlines() if line.strip()]
    return False, (lines[-1] if lines else "exit %d" % proc.returncode)


def bench_serving_argv(spec, workload, conc, num_prompts, output_file):
    """sglang.bench_serving's argv for one cell. Never `--dataset-name random`: it downloads ShareGPT from the Hub
    at bench time; random-ids sends exact token ids, a dataset is given by --dataset-path (offline)."""
    if isinstance(workload, int):
        workload = {"kind": "random-ids", "context_length": workload}
    argv = [spec["venv_python"], "-m", "sglang.bench_serving", "--backend", spec.get("backend", "sglang"),
            "--base-url", spec["base_url"]]
    if workload["kind"] == "dataset":
        argv += ["--dataset-name", "sharegpt", "--dataset-path", workload["path"],
                 "--sharegpt-output-len", str(spec["output_len"])]
    else:
        argv += ["--dataset-name", "random-ids", "--random-input-len", str(workload["context_length"]),
                 "--random-output-len", str(spec["output_len"]), "--random-range-ratio", "1.0"]
    argv += ["--num-prompts", str(num_prompts), "--max-concurrency", str(conc),
             "--warmup-requests", str(spec.get("warmup_requests", 1)), "--output-file", output_file,
             "--disable-tqdm"]
    if spec.get("tokenizer"):
        argv += ["--tokenizer", spec["tokenizer"]]
    if spec.get("model") and spec.get("model") != "default":
        argv += ["--model", spec["model"]]
    return argv


def run_bench_serving_cell(spec, workload, conc, num_prompts):
    """One cell through sglang.bench_serving in the target venv, bounded by cell_timeout_s."""
    with tempfile.TemporaryDirectory(prefix="sglang-bench-") as tmp:
        out_file = os.path.join(tmp, "cell.jsonl")
        argv = bench_serving_argv(spec, workload, conc, num_prompts, out_file)
        env = dict(os.environ, HF_HUB_OFFLINE="1")  # nothing is fetched at bench time
        if spec.get("api_key"):
            env["OPENAI_API_KEY"] = spec["api_key"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                                  timeout=float(spec["cell_timeout_s"]))
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "error": "sglang.bench_serving exceeded the %ss cell bound"
                    % spec["cell_timeout_s"]}
        lines = []
        if os.path.exists(out_file):
            with open(out_file) as handle:
                lines = [line for line in handle.read().splitlines() if line.strip()]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout or "")[-800:]
            return {"status": "error", "error": "sglang.bench_serving rc=%d: %s" % (proc.returncode, tail)}
        raw = json.loads(lines[-1])
    row = {key: raw.get(key) for key in METRIC_KEYS if key in raw}
    # bench_serving reads /server_info's running average (since the server started): say so.
    row["accept_length_source"] = "server_running_average" if row.get("accept_length") is not None else None
    row.setdefault("failed", max(num_prompts - int(raw.get("completed") or 0), 0))
    row["connection"] = "per-request"  # bench_serving opens an aiohttp session per request (0.5.11)
    row["status"] = "ok" if not row["failed"] else "error"
    row["error"] = "" if not row["failed"] else "%d of %d requests failed" % (row["failed"], num_prompts)
    return row


# A rerun's count is scaled past the time asked by this factor, so one rerun normally suffices.
SIZE_MARGIN = 1.2
SIZE_ATTEMPTS = 3


def run_sized_cell(spec, workload, conc, num_prompts):
    """One cell through bench_serving lasting at least spec["min_cell_seconds"] with at least num_prompts requests:
    rerun with num_prompts x min_seconds / duration x SIZE_MARGIN while a run is shorter (at most SIZE_ATTEMPTS
    runs, all within cell_timeout_s). The row says what was asked (min_requests, min_cell_seconds, sized_runs)."""
    min_seconds = float(spec.get("min_cell_seconds") or 0)
    deadline = time.monotonic() + float(spec["cell_timeout_s"])
    count, runs = num_prompts, 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            row = {"status": "timeout", "error": "sglang.bench_serving could not run %gs within the %ss cell bound"
                   % (min_seconds, spec["cell_timeout_s"])}
            break
        row = run_bench_serving_cell(dict(spec, cell_timeout_s=left), workload, conc, count)
        runs += 1
        if row.get("status") == "timeout":
            row["error"] = "sglang.bench_serving exceeded the %ss cell bound" % spec["cell_timeout_s"]
        duration = row.get("duration") or 0.0
        if row.get("status") != "ok" or duration >= min_seconds or runs >= SIZE_ATTEMPTS:
            break
        count = max(count + 1, int(math.ceil(count * min_seconds / max(duration, 1e-3) * SIZE_MARGIN)))
    row.update(num_prompts=count, min_requests=num_prompts, min_cell_seconds=min_seconds, sized_runs=runs)
    if row.get("status") == "ok" and (row.get("duration") or 0.0) < min_seconds:
        row["sized_note"] = "%d runs stayed under %gs: the last lasted %.1fs" % (runs, min_seconds, row["duration"])
    return row
