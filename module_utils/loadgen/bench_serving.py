# -*- coding: utf-8 -*-
"""The sglang.bench_serving route of a cell (stdlib only): `python -m sglang.bench_serving` from the target venv,
used for random-ids and dataset workloads when the venv can run it (prompt sets always use the built-in client).

bench_serving_available() says whether the venv can import it; bench_serving_argv() is one cell's argv (never a
download: random-ids sends exact token ids with --tokenize-prompt, a dataset is read offline from --dataset-path,
HF_HUB_OFFLINE=1);
run_bench_serving_cell() runs it bounded by cell_timeout_s and reads its --output-file into bench_serving's metric
names (metrics.METRIC_KEYS), with status ok|timeout|error and the reason. run_sized_cell() sizes the cell by time:
bench_serving takes a request count, so a run shorter than min_cell_seconds is run again with the count scaled up
by the rate it measured (the short run was a warmup), within the cell's bound.
"""
from __future__ import annotations

import json
import math
import os
import resource
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
    at bench time; a dataset is given by --dataset-path (offline).

    random-ids with the `sglang` backend adds --tokenize-prompt: without it real 0.5.11 decodes the drawn ids to text
    (sglang/benchmark/datasets/random.py: return_text = not tokenize_prompt; the length cut by the tokenizer's special
    tokens) and the server tokenises that text again, so the prefill is neither input_len tokens nor free of the
    server's tokenisation: not the cell the built-in client measures. 0.5.11 allows --tokenize-prompt with the
    `sglang` backend only (bench_serving.py asserts it); the OpenAI backends get text, and the row says so
    (prompt_sent)."""
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
        if spec.get("backend", "sglang") == "sglang":
            argv += ["--tokenize-prompt"]
    if spec.get("seed") is not None:
        argv += ["--seed", str(spec["seed"])]   # its random ids (and dataset shuffle); 0.5.11's default is 1
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
        # The client's own CPU (its user + system time, as the built-in client's row has client_cpu_s), its start
        # included (importing sglang: ~20 s of the 31-35 s per cell on the H200): one bench_serving process at a
        # time, so the children's usage grows by this one's alone.
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = {key: raw.get(key) for key in METRIC_KEYS if key in raw}
    row["client_cpu_s"] = round((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), 3)
    row["prompt_sent"] = "input_ids" if "--tokenize-prompt" in argv else "text"
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
    seed = int(spec.get("seed") or 1)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            row = {"status": "timeout", "error": "sglang.bench_serving could not run %gs within the %ss cell bound"
                   % (min_seconds, spec["cell_timeout_s"])}
            break
        # A rerun draws other ids: with the same seed its first prompts would be the short run's, in the radix cache.
        row = run_bench_serving_cell(dict(spec, cell_timeout_s=left, seed=seed + 104729 * runs), workload, conc,
                                     count)
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
