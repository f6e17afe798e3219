# -*- coding: utf-8 -*-
"""A benchmark matrix (context length x concurrency) on the target, one JSONL row per cell (stdlib only).

validate_spec() refuses bad input with every problem named (empty matrix, non-positive lengths, unknown
client/backend, bounds that cannot hold). check_serving() proves the server answers before anything is
measured. run_matrix() measures each cell with the built-in harness (bench_client) or with
`python -m sglang.bench_serving` from the target venv, each cell bounded by cell_timeout_s, and appends a
row per cell as soon as it is measured, so an interrupted run keeps what it measured.

Every row: bench_serving's metric names (output_throughput, mean/median/p99 TTFT/TPOT/ITL ms,
accept_length, ...), the cell's coordinates, status ok|timeout|error with the reason, labels (run, config,
host) and provenance (host group, driver, CUDA, venv hash, sglang version, patch hash, model revision,
the running server's full argv).
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import tempfile
import time

try:
    from ansible.module_utils.bench_client import BACKENDS, CellError, run_cell
    from ansible.module_utils.bench_http import get_json
    from ansible.module_utils.bench_metrics import METRIC_KEYS
except ImportError:
    from module_utils.bench_client import BACKENDS, CellError, run_cell
    from module_utils.bench_http import get_json
    from module_utils.bench_metrics import METRIC_KEYS

CLIENTS = ("builtin", "sglang.bench_serving", "auto")
SCHEMA = 1


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
    _positive_int_list("context_lengths", spec.get("context_lengths"), errors)
    _positive_int_list("concurrencies", spec.get("concurrencies"), errors)
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


def cells(spec):
    """The cells in run order: context length outer, concurrency inner."""
    return [(ctx, conc) for ctx in spec["context_lengths"] for conc in spec["concurrencies"]]


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
    """True when `sglang.bench_serving` is importable by venv_python (found without importing torch)."""
    if not venv_python or not os.path.exists(venv_python):
        return False
    code = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('sglang.bench_serving') else 1)"
    try:
        return subprocess.run([venv_python, "-c", code], capture_output=True, timeout=60,
                              check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def bench_serving_argv(spec, ctx, conc, num_prompts, output_file):
    argv = [spec["venv_python"], "-m", "sglang.bench_serving", "--backend", spec.get("backend", "sglang"),
            "--base-url", spec["base_url"], "--dataset-name", "random",
            "--random-input-len", str(ctx), "--random-output-len", str(spec["output_len"]),
            "--random-range-ratio", "1.0", "--num-prompts", str(num_prompts),
            "--max-concurrency", str(conc), "--warmup-requests", str(spec.get("warmup_requests", 1)),
            "--output-file", output_file, "--disable-tqdm"]
    if spec.get("tokenizer"):
        argv += ["--tokenizer", spec["tokenizer"]]
    if spec.get("model") and spec.get("model") != "default":
        argv += ["--model", spec["model"]]
    return argv


def run_bench_serving_cell(spec, ctx, conc, num_prompts):
    """One cell through sglang.bench_serving in the target venv, bounded by cell_timeout_s."""
    with tempfile.TemporaryDirectory(prefix="sglang-bench-") as tmp:
        out_file = os.path.join(tmp, "cell.jsonl")
        argv = bench_serving_argv(spec, ctx, conc, num_prompts, out_file)
        env = dict(os.environ)
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
    row.setdefault("failed", max(num_prompts - int(raw.get("completed") or 0), 0))
    row["status"] = "ok" if not row["failed"] else "error"
    row["error"] = "" if not row["failed"] else "%d of %d requests failed" % (row["failed"], num_prompts)
    return row


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_matrix(spec, labels=None, provenance=None, output_path=None, log=None):
    """Measure every cell; append rows to output_path (JSONL). Returns a small summary dict."""
    errors = validate_spec(spec)
    if errors:
        raise ValueError("invalid bench matrix: " + "; ".join(errors))
    labels = dict(labels or {})
    provenance = dict(provenance or {})
    if spec.get("service_unit"):
        provenance.setdefault("flags", service_argv(spec["service_unit"]))
    client = spec.get("client", "auto")
    if client != "builtin":
        available = bench_serving_available(spec.get("venv_python"))
        if client == "sglang.bench_serving" and not available:
            raise ValueError("client sglang.bench_serving requested but not importable by %s"
                             % spec.get("venv_python"))
        client = "sglang.bench_serving" if available else "builtin"
    model = spec.get("model") or served_model(spec["base_url"], spec.get("api_key"))
    if output_path:
        os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    summary = {"rows": 0, "ok_cells": 0, "failed_cells": 0, "client": client, "best_output_throughput": 0.0,
               "failures": [], "output_path": output_path}
    if output_path:
        open(output_path, "w").close()  # a rerun of the same run/config replaces its rows
    started = time.monotonic()
    for ctx, conc in cells(spec):
        num_prompts = max(conc * spec["prompts_per_concurrency"], spec["min_prompts"])
        row = {"schema": SCHEMA, "kind": "cell", "started_at": _now()}
        row.update(labels)
        row.update({"cell": "ctx%d_c%d" % (ctx, conc), "context_length": ctx, "bench_client": client,
                    "backend": spec.get("backend", "sglang"), "dataset_name": "random",
                    "random_input_len": ctx, "random_output_len": spec["output_len"],
                    "random_range_ratio": 1.0, "request_rate": "inf", "max_concurrency": conc,
                    "num_prompts": num_prompts})
        try:
            if client == "builtin":
                measured = run_cell(base_url=spec["base_url"], backend=spec.get("backend", "sglang"),
                                    model=model, input_len=ctx, output_len=spec["output_len"],
                                    concurrency=conc, num_prompts=num_prompts,
                                    warmup_requests=spec.get("warmup_requests", 1),
                                    request_timeout=float(spec["request_timeout_s"]),
                                    cell_timeout=float(spec["cell_timeout_s"]), api_key=spec.get("api_key"),
                                    seed=ctx * 1000 + conc)
            else:
                measured = run_bench_serving_cell(spec, ctx, conc, num_prompts)
        except CellError as exc:
            measured = {"status": "error", "error": str(exc)}
        row.update(measured)
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
        if output_path:
            with open(output_path, "a") as handle:
                handle.write(json.dumps(row, sort_keys=True) + "\n")
        if log:
            log("%s %s %.1f tok/s" % (row["cell"], row["status"], row.get("output_throughput") or 0.0))
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    return summary
