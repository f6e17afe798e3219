# -*- coding: utf-8 -*-
"""A benchmark's JSONL rows (stdlib only): a cell's row from its coordinates and what was measured, the
degenerate-output check of its sampled outputs, and writing rows as they are made.

Every row: bench_serving's metric names (metrics.METRIC_KEYS: output_throughput, mean/median/p99 TTFT/TPOT/ITL ms,
...), the per-cell acceptance from the requests' own figures (accept_length, accept_rate, accept_length_source,
spec_totals and the per-request counts), the degenerate-output check of sampled outputs (sglang/degenerate.py, the
smoke's own detector), the cell's coordinates, status ok|timeout|error with the reason, labels (run, config, host)
and provenance (host group, driver, CUDA, venv hash, sglang version, patch hash, model revision, the running
server's full argv). reporting/ reads these rows: their fields are its input format (SCHEMA).
"""
from __future__ import annotations

import datetime
import json
import os

from ansible.module_utils.loadgen.metrics import METRIC_KEYS
from ansible.module_utils.sglang.degenerate import degenerate

SCHEMA = 2
DATASET_NAMES = {"random-ids": "random-ids", "prompts": "prompt-set", "dataset": "sharegpt"}


def now():
    """The current UTC time as rows write it (started_at, finished_at)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cell_row(spec, workload, conc, client, labels):
    """(row, num_prompts): a matrix cell's row before it is measured (its coordinates, labels, started_at)."""
    num_prompts = max(conc * spec["prompts_per_concurrency"], spec["min_prompts"])
    random_ids = workload["kind"] == "random-ids"
    row = {"schema": SCHEMA, "kind": "cell", "phase": "matrix", "started_at": now()}
    row.update(labels)
    row.update({"cell": "%s_c%d" % (workload["slug"], conc), "workload": workload["id"],
                "context_length": workload.get("context_length"), "bench_client": client,
                "backend": spec.get("backend", "sglang"), "dataset_name": DATASET_NAMES[workload["kind"]],
                "prompt_set": workload.get("name") if workload["kind"] == "prompts" else None,
                "prompt_format": workload.get("prompt_format"), "ignore_eos": random_ids,
                "random_input_len": workload.get("context_length"), "random_output_len": spec["output_len"],
                "random_range_ratio": 1.0 if random_ids else None, "request_rate": "inf",
                "max_concurrency": conc, "num_prompts": num_prompts})
    if random_ids:
        row["note"] = "throughput only: acceptance on random token ids says nothing about real traffic"
    return row, num_prompts


def degenerate_check(samples):
    """The smoke test's degenerate-output detector over a cell's sampled outputs: counts, the first three flagged
    (with their prompt ids) and the prompt id of every flagged output (flagged_prompts, None for random ids), so the
    report can tell a loop of the model on a prompt (the baseline's output loops too) from a config's."""
    evidence = []
    for sample in samples:
        why = degenerate(sample.get("text") or "")
        if why:
            evidence.append({"index": sample.get("index"), "prompt_id": sample.get("prompt_id"), "reason": why,
                             "text": (sample.get("text") or "")[:300]})
    return {"checked": len(samples), "flagged": len(evidence), "evidence": evidence[:3],
            "flagged_prompts": [e["prompt_id"] for e in evidence]}


def judged(workload, measured):
    """A measurement's row fields: a text workload's mean prompt length as the server counted it (context_length),
    and the sampled outputs replaced by their degenerate check."""
    if workload["kind"] != "random-ids" and workload.get("items"):
        lens = [r["prompt_tokens"] for r in measured.get("requests", []) if r.get("success")]
        measured["context_length"] = round(sum(lens) / len(lens)) if lens else None
    measured["degenerate"] = degenerate_check(measured.pop("samples", []))
    return measured


def finish_cell_row(row, measured, provenance):
    """The cell's row completed by what was measured: every metric key (None when unknown), provenance,
    finished_at. A measured None never hides a coordinate the row already has."""
    row.update({k: v for k, v in measured.items() if v is not None or k not in row})
    for key in METRIC_KEYS:
        row.setdefault(key, None)
    row["provenance"] = provenance
    row["finished_at"] = now()
    return row


def soak_row(spec, workload, labels):
    """The soak's row before it runs (kind cell, phase soak)."""
    conc = spec["soak_concurrency"]
    row = {"schema": SCHEMA, "kind": "cell", "phase": "soak", "started_at": now(), "cell": "soak_c%d" % conc,
           "workload": workload["id"], "max_concurrency": conc, "soak_rounds": spec.get("soak_rounds", 1)}
    row.update(labels)
    return row


def start_rows(output_path):
    """Create output_path's directory and empty the file: a rerun of the same run/config replaces its rows."""
    if output_path:
        os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
        open(output_path, "w").close()


def write_row(output_path, row):
    """Append one row to output_path (JSONL, keys sorted), as soon as it is made."""
    if output_path:
        with open(output_path, "a") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")
