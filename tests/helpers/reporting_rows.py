"""Synthetic bench and sweep rows, in the format module_utils/loadgen writes and reporting/ reads, for the reporting
tests: cells, config outcomes, per-request acceptance, a whole sweep of one host, and a run directory written out."""
import json
from pathlib import Path


CODE = "prompts/code"
RANDOM = "random-ids/ctx1024"
CS = (1, 8, 64)

# output tok/s per config, workload, C (host h1). Speedups over "ar":
#   dd8  code 2.5 1.5 0.9 (crossover C=64)   random 1.5 1.1 1.1 (never)
#   dd16 code 3.0 0.8 0.5 (crossover C=8)    random 0.9 0.9 0.5 (below 1 at every C)
TPS = {
    "ar": {CODE: {1: 100.0, 8: 600.0, 64: 2000.0}, RANDOM: {1: 100.0, 8: 600.0, 64: 2000.0}},
    "dd8": {CODE: {1: 250.0, 8: 900.0, 64: 1800.0}, RANDOM: {1: 150.0, 8: 660.0, 64: 2200.0}},
    "dd16": {CODE: {1: 300.0, 8: 480.0, 64: 1000.0}, RANDOM: {1: 90.0, 8: 540.0, 64: 1000.0}},
    "eagle": {CODE: {1: 5000.0, 8: 5000.0, 64: 5000.0}, RANDOM: {1: 5000.0, 8: 5000.0, 64: 5000.0}},
    "soakfail": {CODE: {1: 900.0, 8: 900.0, 64: 9000.0}, RANDOM: {1: 900.0, 8: 900.0, 64: 9000.0}},
}
SPEC = {"ar": {"algorithm": "NONE"},
        "dd8": {"algorithm": "DDTREE", "budget": 8, "topk": 4, "block_size": 8, "cuda_graph": True},
        "dd16": {"algorithm": "DDTREE", "budget": 16, "topk": 4, "block_size": 8, "cuda_graph": True},
        "eagle": {"algorithm": "EAGLE3", "topk": 1, "block_size": 4, "cuda_graph": True},
        "soakfail": {"algorithm": "DDTREE", "budget": 32, "topk": 8, "block_size": 16, "cuda_graph": True},
        "broken": {"algorithm": "DDTREE", "budget": 16, "topk": 4, "block_size": 8, "cuda_graph": True}}
DD8_OVERRIDES = {"speculative": {"algorithm": "DDTREE", "budget": 8, "block_size": 8},
                 "server": {"max_running_requests": 64}, "env": {}, "extra_args": {"--enable-foo": True},
                 "validation_overrides": ["sm103_budget_cuda_graphs"]}


def cell(config, workload, conc, tps, host="h1", group="nvlink", status="ok", ttft=None, itl=None, **extra):
    row = {"kind": "cell", "run": "sweep-x", "config": config, "host": host, "workload": workload,
           "cell": f"{workload}_c{conc}", "context_length": 1024 if workload == RANDOM else 700,
           "max_concurrency": conc, "status": status, "error": "" if status == "ok" else "boom",
           "output_throughput": tps if status == "ok" else None, "mean_ttft_ms": 9.0,
           "p99_ttft_ms": 10.0 * conc if ttft is None else ttft, "median_itl_ms": 5.0,
           "p99_itl_ms": 6.0 if itl is None else itl, "mean_tpot_ms": 5.5, "accept_length": None,
           "completed": 8, "failed": 0, "provenance": {"host_group": group}}
    row.update(extra)
    return with_request_latencies(row)


OUT_TOKENS = 100  # output tokens per synthetic request: a cell's good req/s is its tok/s / 100 when all are good


def with_request_latencies(row):
    """Every request gets the cell's p99 TTFT and p99 TPOT (mean TPOT when none) as its own ttft_ms/tpot_ms, and the
    cell a duration that makes its successful requests x OUT_TOKENS its output tok/s: goodput under an SLO is then
    the cell's tok/s / OUT_TOKENS when the cell meets the TTFT and TPOT bounds, else 0."""
    if row.get("status") != "ok" or not row.get("output_throughput"):
        return row
    reqs = row.get("requests") or [{"success": True, "completion_tokens": OUT_TOKENS}
                                   for _ in range(row.get("completed") or 1)]
    tpot = row.get("p99_tpot_ms") if row.get("p99_tpot_ms") is not None else row.get("mean_tpot_ms")
    row["requests"] = [dict(r, ttft_ms=row.get("p99_ttft_ms"), tpot_ms=tpot) for r in reqs]
    row.setdefault("duration", sum(1 for r in reqs if r.get("success")) * OUT_TOKENS / row["output_throughput"])
    return row


def config_row(config, status="ok", host="h1", group="nvlink", baseline=False, overrides=None, soak=None, **extra):
    row = {"kind": "config", "run": "sweep-x", "config": config, "host": host, "status": status,
           "failed_step": None, "reason": "", "journal": "", "spec": SPEC.get(config, {"algorithm": "DDTREE"}),
           "baseline": baseline, "overrides": overrides or {}, "host_group": group,
           "soak": soak or {"status": "ok", "steps": [64, 8, 1], "reason": "", "journal": ""}}
    row.update(extra)
    return row


def requests(pairs, fail_extra=True):
    """Per-request dicts from (completion_tokens, verify_ct) pairs, plus an unverified and a failed request that
    must not count."""
    out = [{"prompt_tokens": 700, "completion_tokens": ct, "spec_verify_ct": v, "spec_accepted_drafts": ct - v,
            "spec_proposed_drafts": 4 * v, "success": True} for ct, v in pairs]
    if fail_extra:
        out += [{"prompt_tokens": 700, "completion_tokens": 50, "spec_verify_ct": 0, "spec_accepted_drafts": 0,
                 "spec_proposed_drafts": 0, "success": True},
                {"prompt_tokens": 700, "completion_tokens": 999, "spec_verify_ct": 10, "spec_accepted_drafts": 500,
                 "spec_proposed_drafts": 40, "success": False}]
    return out


def sweep_rows(host="h1", group="nvlink"):
    """The h1 sweep: ar (baseline), dd8 (winner), dd16 (slower), eagle (degenerate), soakfail (soak failed),
    broken (failed at ready); dd8 also has soak cells with absurd throughput that must be ignored."""
    cells = []
    for config, table in TPS.items():
        for workload, series in table.items():
            for conc, tps in series.items():
                extra = {}
                if config == "dd8" and workload == CODE:
                    # per request: (100+60)/(25+20) = 3.5556; stored 3.9 at C=1 is a mismatch, 3.55 elsewhere is not
                    extra = {"accept_length": 3.9 if conc == 1 else 3.55, "accept_length_source": "per_request",
                             "requests": requests([(100, 25), (60, 20)])}
                elif config == "dd8":
                    extra = {"accept_length": 1.2, "accept_rate": 0.05, "accept_length_source": "per_request"}
                elif config == "dd16":
                    extra = {"accept_length": 2.1, "accept_rate": 0.3, "accept_length_source": "server_running_average"}
                if config == "eagle" and workload == CODE and conc == 8:
                    extra["degenerate"] = {"checked": 4, "flagged": 2, "evidence": [
                        {"text": "!!!!!!!!!!!!!!!!!!!!", "reason": "repeated character run"},
                        {"text": "\ufffd\ufffd\ufffd", "reason": "replacement characters"}]}
                else:
                    extra.setdefault("degenerate", {"checked": 4, "flagged": 0, "evidence": []})
                cells.append(cell(config, workload, conc, tps, host=host, group=group, **extra))
    for conc in (64, 8, 1):
        cells.append(cell("dd8", CODE, conc, 99999.0, host=host, group=group, phase="soak"))
    configs = [
        config_row("ar", host=host, group=group, baseline=True),
        config_row("dd8", host=host, group=group, overrides=DD8_OVERRIDES),
        config_row("dd16", host=host, group=group, overrides={"speculative": {"budget": 16}}),
        config_row("eagle", host=host, group=group, overrides={"speculative": {"algorithm": "EAGLE3"}}),
        config_row("soakfail", host=host, group=group, overrides={"speculative": {"budget": 32}},
                   soak={"status": "failed", "steps": [64, 8], "reason": "server died at C=8",
                         "journal": ["Nov 30 sglang[7]: step C=8",
                                     "Nov 30 sglang[7]: CUDA error: an illegal memory access"]}),
        config_row("broken", "failed", host=host, group=group, failed_step="ready",
                   reason="unit failed during init: exit 1",
                   journal="Nov 30 sglang[9]: RuntimeError: graph capture failed",
                   soak={"status": "skipped", "steps": [], "reason": "config failed", "journal": ""}),
        {"kind": "config", "config": "ar", "host": host, "phase": "restore", "status": "ok", "time_to_ready_s": 2.0},
        {"kind": "config", "config": "_sweep", "host": host, "phase": "sweep_total", "status": "ok",
         "elapsed_s": 50.0, "bound_s": 900},
    ]
    return cells, configs


def write_run(run_dir, cells, configs=()):
    run_dir = Path(run_dir)
    by_file = {}
    for c in cells:
        by_file.setdefault((c.get("host") or "nohost", c.get("config") or "default"), []).append(c)
    for (host, config), rows in by_file.items():
        (run_dir / host).mkdir(parents=True, exist_ok=True)
        (run_dir / host / f"{config}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for host in sorted({c.get("host") or "nohost" for c in configs}):
        rows = [c for c in configs if (c.get("host") or "nohost") == host]
        (run_dir / host).mkdir(parents=True, exist_ok=True)
        (run_dir / host / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return run_dir
