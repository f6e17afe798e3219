# -*- coding: utf-8 -*-
"""The benchmark matrix's driver (stdlib only): one pass over the stages, one JSONL row per cell (workload x
concurrency), then an optional soak.

run_matrix(): the spec checked and the workloads prepared (workloads.py), the server's argv, model and the client
chosen (server.py, bench_serving.py), then each cell measured with the built-in client (client.py) or with
`python -m sglang.bench_serving` from the target venv (bench_serving.py: random-ids and datasets; prompt sets always
use the built-in client): at least k x C requests and at least min_cell_seconds, cell_repeats times, each repeat
bounded by cell_timeout_s, with the GPUs' power sampled while it runs (power.py) and its goodput under the bench's
bounds (goodput.py); the repeats combined (repeats.py: medians, spread, spread_flag), the row made and appended
as soon as the cell is measured (rows.py), so an interrupted run keeps what it measured. Then the lossless gate's
greedy outputs per workload (lossless.py: kind "gate" rows, compared with the baseline's on the controller).
run_soak_phase(): the shrinking-batch soak, with the service unit watched (its MainPID and restart count must not
change). Returns the run's summary.
"""
from __future__ import annotations

import time

from ansible.module_utils.loadgen import (bench_serving, client, goodput, lossless, power, repeats, rows, server,
                                          workloads)
from ansible.module_utils.loadgen.prompts import PromptError


def _client(spec):
    """The client that measures: builtin, or sglang.bench_serving when asked (or auto) and the venv can run it."""
    chosen = spec.get("client", "auto")
    if chosen == "builtin":
        return chosen
    available, why = bench_serving.bench_serving_available(spec.get("venv_python"))
    if chosen == "sglang.bench_serving" and not available:
        raise ValueError("client sglang.bench_serving requested but not importable by %s: %s"
                         % (spec.get("venv_python"), why))
    return "sglang.bench_serving" if available else "builtin"


def cell_seed(workload, conc, repeat=0):
    """The random ids' seed of one repeat of a cell: the same for every config (they are compared on the same
    prompts), another for each repeat and concurrency. A repeat that sent the ids of the one before would find them
    in the server's radix cache (on by default) and time a prefill it skipped."""
    return (workload.get("context_length") or 0) * 1000 + conc + 7919 * repeat


def _measure(spec, workload, conc, num_prompts, chosen, model, gpu_count=None, repeat=0):
    """One cell measured by the chosen client (prompt sets always by the built-in one) with the GPUs' power sampled
    around it (power.py), its goodput under the bench's bounds (goodput.py), judged for its row."""
    measured = power.measure(lambda: _measure_cell(spec, workload, conc, num_prompts, chosen, model, repeat),
                             spec.get("power_interval", 1.0), gpu_count=gpu_count)
    measured.update(goodput.row_goodput(measured, spec.get("goodput_ttft_ms"), spec.get("goodput_tpot_ms")))
    return rows.judged(workload, measured)


def _measure_cell(spec, workload, conc, num_prompts, chosen, model, repeat=0):
    """The cell's measurement by the chosen client."""
    text = workload["kind"] != "random-ids"
    seed = cell_seed(workload, conc, repeat)
    if chosen == "builtin" or workload["kind"] == "prompts":
        measured = client.run_cell(base_url=spec["base_url"], backend=spec.get("backend", "sglang"), model=model,
                                   input_len=workload.get("context_length") or 1, output_len=spec["output_len"],
                                   concurrency=conc, num_prompts=num_prompts,
                                   warmup_requests=spec.get("warmup_requests", 1),
                                   request_timeout=float(spec["request_timeout_s"]),
                                   cell_timeout=float(spec["cell_timeout_s"]), api_key=spec.get("api_key"),
                                   seed=seed,
                                   prompts=workload.get("items"), ignore_eos=not text,
                                   sample_outputs=spec.get("sample_outputs", 4) if text else 0,
                                   connection=spec.get("connection", "keep-alive"),
                                   min_seconds=float(spec.get("min_cell_seconds") or 0))
        measured["bench_client"] = "builtin"
    else:
        measured = bench_serving.run_sized_cell(dict(spec, seed=seed), workload, conc, num_prompts)
    return measured


def _measure_repeated(spec, workload, conc, num_prompts, chosen, model, gpu_count=None):
    """The cell measured cell_repeats times (a failed repeat ends it), combined into one row's fields: the median
    figures, each repeat's key figures, their spread and the spread flag (repeats.py)."""
    measured = []
    for repeat in range(int(spec.get("cell_repeats") or 1)):
        try:
            one = _measure(spec, workload, conc, num_prompts, chosen, model, gpu_count, repeat)
        except client.CellError as exc:
            one = {"status": "error", "error": str(exc)}
        measured.append(one)
        if one.get("status") != "ok":
            break
    return repeats.combine(measured, float(spec.get("max_spread", repeats.DEFAULT_MAX_SPREAD)))


def run_soak_phase(spec, workload, model, labels, provenance):
    """The shrinking-batch soak on one workload with the unit watched. Returns its row (kind cell, phase soak)."""
    row = rows.soak_row(spec, workload, labels)
    before = server.unit_state(spec.get("service_unit"))
    try:
        soak = client.run_soak(base_url=spec["base_url"], backend=spec.get("backend", "sglang"), model=model,
                               concurrency=spec["soak_concurrency"],
                               output_len=spec.get("soak_output_len") or spec["output_len"],
                               rounds=spec.get("soak_rounds", 1), request_timeout=float(spec["request_timeout_s"]),
                               timeout=float(spec["cell_timeout_s"]), api_key=spec.get("api_key"),
                               prompts=workload.get("items"), input_len=workload.get("context_length") or 1)
    except (OSError, ValueError) as exc:
        soak = {"status": "error", "error": "soak could not run: %s" % exc}
    after = server.unit_state(spec.get("service_unit"))
    row.update(soak)
    row["unit_before"], row["unit_after"] = before, after
    if before and after and (before["main_pid"] != after["main_pid"] or before["n_restarts"] != after["n_restarts"]
                             or after["active"] != "active"):
        row["status"] = "error"
        row["error"] = ("the service did not survive the shrinking batch: MainPID %s -> %s, restarts %s -> %s, "
                        "state %s. %s" % (before["main_pid"], after["main_pid"], before["n_restarts"],
                                          after["n_restarts"], after["active"], soak.get("error") or "")).strip()
    row["provenance"] = provenance
    row["finished_at"] = rows.now()
    return row


def _count(summary, row):
    """One finished cell row into the run's summary."""
    summary["rows"] += 1
    if row.get("spread_flag"):
        summary["spread_flagged_cells"].append("%s: %s" % (row["cell"], ", ".join(
            "%s spread %.1f%%" % (k, 100 * v["spread"]) for k, v in sorted(row["spread_flag"]["figures"].items()))))
    if row["status"] == "ok":
        summary["ok_cells"] += 1
        summary["best_output_throughput"] = max(summary["best_output_throughput"], row.get("output_throughput") or 0.0)
    else:
        summary["failed_cells"] += 1
        summary["failures"].append("%s: %s" % (row["cell"], row.get("error")))
    if (row.get("degenerate") or {}).get("flagged"):
        summary["degenerate_cells"].append("%s: %s" % (row["cell"], row["degenerate"]["evidence"][0]["reason"]))


def run_matrix(spec, labels=None, provenance=None, output_path=None, log=None):
    """Measure every cell (then the soak, if asked); append rows to output_path (JSONL). Returns a summary."""
    errors = workloads.validate_spec(spec) + workloads.check_workloads(spec)
    if errors:
        raise ValueError("invalid bench matrix: " + "; ".join(errors))
    labels = dict(labels or {})
    provenance = dict(provenance or {})
    if spec.get("service_unit"):
        provenance.setdefault("flags", server.service_argv(spec["service_unit"]))
    chosen = _client(spec)
    gpu_count = power.server_gpu_count(provenance.get("flags"))
    model = spec.get("model") or server.served_model(spec["base_url"], spec.get("api_key"))
    try:
        prepared = [workloads.prepare_workload(spec, w) for w in workloads.workloads(spec)]
    except PromptError as exc:
        raise ValueError(str(exc))
    rows.start_rows(output_path)
    summary = {"rows": 0, "ok_cells": 0, "failed_cells": 0, "client": chosen, "best_output_throughput": 0.0,
               "failures": [], "output_path": output_path, "degenerate_cells": [], "soak": None,
               "spread_flagged_cells": [],
               "workloads": {w["id"]: w.get("prompt_format") or "token ids" for w in prepared},
               "gate": {"rows": 0, "failed": []}}
    started = time.monotonic()
    for workload in prepared:
        for conc in spec["concurrencies"]:
            row, num_prompts = rows.cell_row(spec, workload, conc, chosen, labels)
            measured = _measure_repeated(spec, workload, conc, num_prompts, chosen, model, gpu_count)
            rows.finish_cell_row(row, measured, provenance)
            _count(summary, row)
            rows.write_row(output_path, row)
            if log:
                log("%s %s %.1f tok/s" % (row["cell"], row["status"], row.get("output_throughput") or 0.0))
    for gate in lossless.run_gate_phase(spec, prepared, labels):
        gate.update(schema=rows.SCHEMA, finished_at=rows.now())
        rows.write_row(output_path, gate)
        summary["gate"]["rows"] += 1
        if gate["status"] != "ok":
            summary["gate"]["failed"].append("%s C=%d: %s" % (gate["workload"], gate["max_concurrency"], gate["error"]))
    if spec.get("soak_concurrency"):
        text = [w for w in prepared if w.get("items")]
        soak = run_soak_phase(spec, (text or prepared)[0], model, labels, provenance)
        rows.write_row(output_path, soak)
        summary["soak"] = {"status": "ok" if soak["status"] == "ok" else "failed", "error": soak.get("error", ""),
                           "concurrency": soak["max_concurrency"], "rounds": soak.get("rounds"),
                           "requests": soak.get("requests"), "failed": soak.get("failed")}
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    return summary
