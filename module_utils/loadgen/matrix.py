# -*- coding: utf-8 -*-
"""A benchmark matrix (workload x concurrency) on the target, one JSONL row per cell (stdlib only).

Workloads: `random-ids/ctx<N>` per context length (exact input length, fixed output: throughput only, acceptance
on random ids says nothing about real traffic), `prompts/<name>` per shipped prompt set and `dataset/<name>` for an
operator ShareGPT file on the target (real text through the model's chat template, see bench_prompts).

validate_spec() refuses bad input with every problem named (no workload, an empty prompt set, non-positive
lengths, unknown client/backend, bounds that cannot hold); check_workloads() refuses a dataset path that does not
exist on the target. check_serving() proves the server answers before anything is measured. run_matrix()
measures each cell with the built-in harness (bench_client) or with `python -m sglang.bench_serving` from the
target venv (random-ids and datasets; prompt sets always use the harness), each cell bounded by cell_timeout_s,
and appends a row per cell as soon as it is measured, so an interrupted run keeps what it measured. An optional
shrinking-batch soak follows, with the service unit watched (its MainPID and restart count must not change).

Every row: bench_serving's metric names (output_throughput, mean/median/p99 TTFT/TPOT/ITL ms, ...), the per-cell
acceptance from the requests' own figures (accept_length, accept_rate, accept_length_source, spec_totals and the
per-request counts), the degenerate-output check of sampled outputs, the cell's coordinates, status
ok|timeout|error with the reason, labels (run, config, host) and provenance (host group, driver, CUDA, venv hash,
sglang version, patch hash, model revision, the running server's full argv).
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import tempfile
import time

from ansible.module_utils.loadgen import prompts as bench_prompts
from ansible.module_utils.loadgen.client import BACKENDS, CellError, run_cell, run_soak
from ansible.module_utils.loadgen.transport import get_json
from ansible.module_utils.loadgen.metrics import METRIC_KEYS
from ansible.module_utils.sglang.degenerate import degenerate

CLIENTS = ("builtin", "sglang.bench_serving", "auto")
SCHEMA = 2


def _positive_int_list(name, value, errors):
    if not isinstance(value, (list, tuple)) or not value:
        errors.append("%s is empty: the bench matrix needs at least one value" % name)
        return
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        errors.append("%s must hold integers >= 1, got %r" % (name, bad))
    if len(set(v for v in value if not isinstance(v, (list, dict)))) != len(value):
        errors.append("%s has duplicates: %r" % (name, list(value)))


def validate_spec(spec):
    """List of human-readable problems with a matrix spec (empty list = valid)."""
    errors = []
    prompt_sets = spec.get("prompt_sets") or {}
    if not isinstance(prompt_sets, dict):
        errors.append("prompt_sets must be a mapping of set name to conversations, got %r" % (prompt_sets,))
        prompt_sets = {}
    if spec.get("context_lengths") or not (prompt_sets or spec.get("dataset_path")):
        _positive_int_list("context_lengths", spec.get("context_lengths"), errors)
    for name, items in prompt_sets.items():
        errors += bench_prompts.check_conversations(name, items)
    _positive_int_list("concurrencies", spec.get("concurrencies"), errors)
    if spec.get("prompt_format", "auto") not in bench_prompts.FORMATS:
        errors.append("prompt_format must be one of %s, got %r" % (", ".join(bench_prompts.FORMATS),
                                                                   spec.get("prompt_format")))
    for key in ("sample_outputs", "soak_concurrency"):
        value = spec.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors.append("%s must be an integer >= 0, got %r" % (key, value))
    if spec.get("soak_concurrency"):
        rounds = spec.get("soak_rounds", 1)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            errors.append("soak_rounds must be an integer >= 1, got %r" % (rounds,))
    for key in ("output_len", "prompts_per_concurrency", "min_prompts"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append("%s must be an integer >= 1, got %r" % (key, value))
    warm = spec.get("warmup_requests", 1)
    if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
        errors.append("warmup_requests must be an integer >= 0, got %r" % (warm,))
    for key in ("cell_timeout_s", "request_timeout_s"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            errors.append("%s must be a number > 0, got %r" % (key, value))
    if spec.get("client", "auto") not in CLIENTS:
        errors.append("client must be one of %s, got %r" % (", ".join(CLIENTS), spec.get("client")))
    if spec.get("backend", "sglang") not in BACKENDS:
        errors.append("backend must be one of %s, got %r" % (", ".join(BACKENDS), spec.get("backend")))
    base_url = spec.get("base_url") or ""
    if not base_url.startswith("http://"):
        errors.append("base_url must be http://host:port, got %r" % (base_url,))
    return errors


def check_workloads(spec):
    """Problems only the target can see (a dataset path that is not there), before anything is measured."""
    path = spec.get("dataset_path")
    if path and not os.path.isfile(path):
        return ["dataset_path %s does not exist on this host (fetch it with the models role as a dataset repo)"
                % path]
    return []


def _slug(text):
    return "".join(c if c.isalnum() or c in "-." else "-" for c in str(text))


def workloads(spec):
    """The workloads in run order: random ids per context length, the prompt sets, the dataset."""
    out = [{"id": "random-ids/ctx%d" % ctx, "kind": "random-ids", "slug": "ctx%d" % ctx, "context_length": ctx}
           for ctx in spec.get("context_lengths") or []]
    for name in sorted(spec.get("prompt_sets") or {}):
        out.append({"id": "prompts/%s" % name, "kind": "prompts", "slug": _slug(name), "name": name})
    if spec.get("dataset_path"):
        name = spec.get("dataset_name") or os.path.splitext(os.path.basename(spec["dataset_path"]))[0]
        out.append({"id": "dataset/%s" % name, "kind": "dataset", "slug": "ds-" + _slug(name), "name": name,
                    "path": spec["dataset_path"]})
    return out


def cells(spec):
    """The cells in run order: workload outer, concurrency inner."""
    return [(w, conc) for w in workloads(spec) for conc in spec["concurrencies"]]


def worst_case_seconds(spec):
    """Upper bound of one matrix run: every cell at its bound (the caller adds its own margin)."""
    return len(cells(spec)) * float(spec["cell_timeout_s"])


def check_serving(base_url, api_key=None, timeout=5.0):
    """None when the server answers /health_generate (or /health) 200 and lists a model, else the reason."""
    import urllib.error
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last = "no answer"
    for path in ("/health_generate", "/health"):
        try:
            with opener.open(base_url.rstrip("/") + path, timeout=timeout) as response:
                if response.status == 200:
                    break
        except urllib.error.HTTPError as exc:
            last = "%s answered HTTP %d (not ready)" % (path, exc.code)
            if exc.code == 404:
                continue
            return "server at %s is not ready: %s" % (base_url, last)
        except (OSError, ValueError) as exc:
            return "server at %s is not serving: %s: %s" % (base_url, path, getattr(exc, "reason", exc))
    else:
        return "server at %s is not ready: %s" % (base_url, last)
    models = get_json(base_url, "/v1/models", timeout=timeout, api_key=api_key)
    if not isinstance(models, dict) or not models.get("data"):
        return "server at %s is up but /v1/models lists no model (%r)" % (base_url, models)
    return None


def served_model(base_url, api_key=None):
    models = get_json(base_url, "/v1/models", api_key=api_key) or {}
    data = models.get("data") or [{}]
    return data[0].get("id") or "default"


def service_argv(unit):
    """The running unit's full argv from /proc/<MainPID>/cmdline ([] when unknown)."""
    if not unit:
        return []
    try:
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True,
                             text=True, timeout=10, check=False).stdout.strip()
        pid = int(out or 0)
        if pid <= 0:
            return []
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            raw = handle.read()
    except (OSError, ValueError, subprocess.SubprocessError):
        return []
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    return redact_argv(argv)


def redact_argv(argv):
    """Replace the value of --api-key (and any *token*/*key* flag) so rows never carry a secret."""
    out = []
    hide = False
    for arg in argv:
        if hide:
            out.append("<redacted>")
            hide = False
            continue
        name = arg.split("=", 1)[0]
        secret = name.startswith("--") and ("api-key" in name or "token" in name)
        if secret and "=" in arg:
            out.append(name + "=<redacted>")
        else:
            out.append(arg)
            hide = secret
    return out


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
    row["status"] = "ok" if not row["failed"] else "error"
    row["error"] = "" if not row["failed"] else "%d of %d requests failed" % (row["failed"], num_prompts)
    return row


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def server_tokenizer(base_url, api_key=None):
    """The served model's tokenizer directory from /server_info (tokenizer_path, else model_path)."""
    info = get_json(base_url, "/server_info", api_key=api_key) or {}
    return info.get("tokenizer_path") or info.get("model_path") or ""


def prepare_workload(spec, workload):
    """Fill a text workload's items ({"text", "messages"}) and how they were rendered; random ids need nothing."""
    if workload["kind"] == "random-ids":
        return workload
    if workload["kind"] == "prompts":
        convs = spec["prompt_sets"][workload["name"]]
    else:
        convs = bench_prompts.load_sharegpt(workload["path"], limit=spec.get("dataset_limit") or None)
    tokenizer = spec.get("tokenizer") or server_tokenizer(spec["base_url"], spec.get("api_key"))
    texts, how = bench_prompts.render(convs, spec.get("prompt_format", "auto"), spec.get("venv_python"), tokenizer)
    workload = dict(workload, prompt_format=how, conversations=len(convs))
    workload["items"] = [{"text": t, "messages": c["messages"]} for t, c in zip(texts, convs)]
    return workload


def degenerate_check(samples):
    """The smoke test's degenerate-output detector over a cell's sampled outputs."""
    evidence = []
    for sample in samples:
        why = degenerate(sample.get("text") or "")
        if why:
            evidence.append({"index": sample.get("index"), "reason": why, "text": (sample.get("text") or "")[:300]})
    return {"checked": len(samples), "flagged": len(evidence), "evidence": evidence[:3]}


def unit_state(unit):
    """{"main_pid", "n_restarts", "active"} of a systemd unit, or None when unknown (no unit, no systemd)."""
    if not unit:
        return None
    try:
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "-p", "NRestarts", "-p", "ActiveState", unit],
                             capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if "MainPID" not in props:
        return None
    return {"main_pid": int(props.get("MainPID") or 0), "n_restarts": int(props.get("NRestarts") or 0),
            "active": props.get("ActiveState", "")}


def _cell_row(spec, workload, conc, client, model, labels):
    num_prompts = max(conc * spec["prompts_per_concurrency"], spec["min_prompts"])
    random_ids = workload["kind"] == "random-ids"
    row = {"schema": SCHEMA, "kind": "cell", "phase": "matrix", "started_at": _now()}
    row.update(labels)
    row.update({"cell": "%s_c%d" % (workload["slug"], conc), "workload": workload["id"],
                "context_length": workload.get("context_length"), "bench_client": client,
                "backend": spec.get("backend", "sglang"),
                "dataset_name": {"random-ids": "random-ids", "prompts": "prompt-set", "dataset": "sharegpt"}[
                    workload["kind"]],
                "prompt_set": workload.get("name") if workload["kind"] == "prompts" else None,
                "prompt_format": workload.get("prompt_format"), "ignore_eos": random_ids,
                "random_input_len": workload.get("context_length"), "random_output_len": spec["output_len"],
                "random_range_ratio": 1.0 if random_ids else None, "request_rate": "inf",
                "max_concurrency": conc, "num_prompts": num_prompts})
    if random_ids:
        row["note"] = "throughput only: acceptance on random token ids says nothing about real traffic"
    return row, num_prompts


def _measure(spec, workload, conc, num_prompts, client, model):
    text = workload["kind"] != "random-ids"
    if client == "builtin" or workload["kind"] == "prompts":
        measured = run_cell(base_url=spec["base_url"], backend=spec.get("backend", "sglang"), model=model,
                            input_len=workload.get("context_length") or 1, output_len=spec["output_len"],
                            concurrency=conc, num_prompts=num_prompts,
                            warmup_requests=spec.get("warmup_requests", 1),
                            request_timeout=float(spec["request_timeout_s"]),
                            cell_timeout=float(spec["cell_timeout_s"]), api_key=spec.get("api_key"),
                            seed=(workload.get("context_length") or 0) * 1000 + conc,
                            prompts=workload.get("items"), ignore_eos=not text,
                            sample_outputs=spec.get("sample_outputs", 4) if text else 0)
        measured["bench_client"] = "builtin"
    else:
        measured = run_bench_serving_cell(spec, workload, conc, num_prompts)
    if text and workload.get("items"):
        lens = [r["prompt_tokens"] for r in measured.get("requests", []) if r.get("success")]
        measured["context_length"] = round(sum(lens) / len(lens)) if lens else None
    measured["degenerate"] = degenerate_check(measured.pop("samples", []))
    return measured


def run_soak_phase(spec, workload, model, labels, provenance):
    """The shrinking-batch soak on one workload with the unit watched. Returns its row (kind cell, phase soak)."""
    conc = spec["soak_concurrency"]
    row = {"schema": SCHEMA, "kind": "cell", "phase": "soak", "started_at": _now(), "cell": "soak_c%d" % conc,
           "workload": workload["id"], "max_concurrency": conc, "soak_rounds": spec.get("soak_rounds", 1)}
    row.update(labels)
    before = unit_state(spec.get("service_unit"))
    try:
        soak = run_soak(base_url=spec["base_url"], backend=spec.get("backend", "sglang"), model=model,
                        concurrency=conc, output_len=spec.get("soak_output_len") or spec["output_len"],
                        rounds=spec.get("soak_rounds", 1), request_timeout=float(spec["request_timeout_s"]),
                        timeout=float(spec["cell_timeout_s"]), api_key=spec.get("api_key"),
                        prompts=workload.get("items"), input_len=workload.get("context_length") or 1)
    except (OSError, ValueError) as exc:
        soak = {"status": "error", "error": "soak could not run: %s" % exc}
    after = unit_state(spec.get("service_unit"))
    row.update(soak)
    row["unit_before"], row["unit_after"] = before, after
    if before and after and (before["main_pid"] != after["main_pid"] or before["n_restarts"] != after["n_restarts"]
                             or after["active"] != "active"):
        row["status"] = "error"
        row["error"] = ("the service did not survive the shrinking batch: MainPID %s -> %s, restarts %s -> %s, "
                        "state %s. %s" % (before["main_pid"], after["main_pid"], before["n_restarts"],
                                          after["n_restarts"], after["active"], soak.get("error") or "")).strip()
    row["provenance"] = provenance
    row["finished_at"] = _now()
    return row


def _write(output_path, row):
    if output_path:
        with open(output_path, "a") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")


def run_matrix(spec, labels=None, provenance=None, output_path=None, log=None):
    """Measure every cell (then the soak, if asked); append rows to output_path (JSONL). Returns a summary."""
    errors = validate_spec(spec) + check_workloads(spec)
    if errors:
        raise ValueError("invalid bench matrix: " + "; ".join(errors))
    labels = dict(labels or {})
    provenance = dict(provenance or {})
    if spec.get("service_unit"):
        provenance.setdefault("flags", service_argv(spec["service_unit"]))
    client = spec.get("client", "auto")
    if client != "builtin":
        available, why = bench_serving_available(spec.get("venv_python"))
        if client == "sglang.bench_serving" and not available:
            raise ValueError("client sglang.bench_serving requested but not importable by %s: %s"
                             % (spec.get("venv_python"), why))
        client = "sglang.bench_serving" if available else "builtin"
    model = spec.get("model") or served_model(spec["base_url"], spec.get("api_key"))
    try:
        prepared = [prepare_workload(spec, w) for w in workloads(spec)]
    except bench_prompts.PromptError as exc:
        raise ValueError(str(exc))
    if output_path:
        os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
        open(output_path, "w").close()  # a rerun of the same run/config replaces its rows
    summary = {"rows": 0, "ok_cells": 0, "failed_cells": 0, "client": client, "best_output_throughput": 0.0,
               "failures": [], "output_path": output_path, "degenerate_cells": [], "soak": None,
               "workloads": {w["id"]: w.get("prompt_format") or "token ids" for w in prepared}}
    started = time.monotonic()
    for workload in prepared:
        for conc in spec["concurrencies"]:
            row, num_prompts = _cell_row(spec, workload, conc, client, model, labels)
            try:
                measured = _measure(spec, workload, conc, num_prompts, client, model)
            except CellError as exc:
                measured = {"status": "error", "error": str(exc)}
            row.update({k: v for k, v in measured.items() if v is not None or k not in row})
            for key in METRIC_KEYS:
                row.setdefault(key, None)
            row["provenance"] = provenance
            row["finished_at"] = _now()
            summary["rows"] += 1
            if row["status"] == "ok":
                summary["ok_cells"] += 1
                summary["best_output_throughput"] = max(summary["best_output_throughput"],
                                                        row.get("output_throughput") or 0.0)
            else:
                summary["failed_cells"] += 1
                summary["failures"].append("%s: %s" % (row["cell"], row.get("error")))
            if (row.get("degenerate") or {}).get("flagged"):
                summary["degenerate_cells"].append("%s: %s" % (row["cell"], row["degenerate"]["evidence"][0]["reason"]))
            _write(output_path, row)
            if log:
                log("%s %s %.1f tok/s" % (row["cell"], row["status"], row.get("output_throughput") or 0.0))
    if spec.get("soak_concurrency"):
        text = [w for w in prepared if w.get("items")]
        soak = run_soak_phase(spec, (text or prepared)[0], model, labels, provenance)
        _write(output_path, soak)
        summary["soak"] = {"status": "ok" if soak["status"] == "ok" else "failed", "error": soak.get("error", ""),
                           "concurrency": soak["max_concurrency"], "rounds": soak.get("rounds"),
                           "requests": soak.get("requests"), "failed": soak.get("failed")}
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    return summary
