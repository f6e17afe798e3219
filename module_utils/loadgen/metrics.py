# -*- coding: utf-8 -*-
"""Benchmark metrics with sglang.bench_serving's names and definitions (stdlib only; runs on the target).

One request gives a RequestResult (success, prompt_len, output_len, ttft, latency, itl list in seconds).
compute_metrics() turns a cell's results into the dict bench_serving writes to its --output-file:
output_throughput (tok/s), mean/median/std/p99 TTFT, TPOT, ITL (ms), E2E latency, concurrency,
accept_length. Percentiles use linear interpolation like numpy.percentile; an empty list gives 0 like
bench_serving's `np.mean(x or 0)`.

Speculative acceptance is per cell, from the requests' own figures (real SGLang's final /generate meta_info):
accept_length = sum(completion_tokens) / sum(spec_verify_ct) (each request's spec_accept_length is its
completion_tokens / spec_verify_ct, so this weights requests by their steps, never a mean of means) and
accept_rate = sum(spec_accepted_drafts) / sum(spec_proposed_drafts). A server's /server_info figure is a running
average since it started (warmup, smoke and every earlier cell included): used only when no request carried figures,
and labelled so (accept_length_source).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# The metric keys every row carries, in bench_serving's order, then the acceptance figures (None when unknown).
METRIC_KEYS = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "input_throughput", "output_throughput", "total_throughput",
    "mean_e2e_latency_ms", "median_e2e_latency_ms", "std_e2e_latency_ms", "p90_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p95_itl_ms", "p99_itl_ms", "max_itl_ms",
    "concurrency", "accept_length", "accept_rate", "accept_length_source",
)


@dataclass
class RequestResult:
    """What one request measured. Times in seconds (time.perf_counter based)."""

    success: bool = False
    prompt_len: int = 0
    output_len: int = 0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list = field(default_factory=list)
    start_time: float = 0.0
    error: str = ""
    text: str = ""
    spec_verify_ct: int = 0
    spec_accepted_drafts: int = 0
    spec_proposed_drafts: int = 0
    server_accept_length: float = None  # the server's own spec_accept_length for this request (a cross-check)
    index: int = -1                     # position of the request's prompt in the cell's prompt list


def request_record(r):
    """The compact per-request record a row keeps, so a report can recompute the cell's figures (goodput under other
    bounds too: ttft_ms, and tpot_ms as bench_serving.calculate_metrics defines it; None when undefined)."""
    tpot = (r.latency - r.ttft) / (r.output_len - 1) * 1000.0 if r.success and r.output_len > 1 else None
    return {"index": r.index, "success": r.success, "prompt_tokens": r.prompt_len, "completion_tokens": r.output_len,
            "ttft_ms": round(r.ttft * 1000.0, 3) if r.success else None,
            "tpot_ms": round(tpot, 4) if tpot is not None else None,
            "spec_verify_ct": r.spec_verify_ct, "spec_accepted_drafts": r.spec_accepted_drafts,
            "spec_proposed_drafts": r.spec_proposed_drafts, "spec_accept_length": r.server_accept_length}


def spec_totals(results):
    """Sums of the speculative figures over the successful requests that carried them."""
    with_spec = [r for r in results if r.success and r.spec_verify_ct > 0]
    return {"requests": len(with_spec), "completion_tokens": sum(r.output_len for r in with_spec),
            "verify_ct": sum(r.spec_verify_ct for r in with_spec),
            "accepted_drafts": sum(r.spec_accepted_drafts for r in with_spec),
            "proposed_drafts": sum(r.spec_proposed_drafts for r in with_spec)}


def acceptance(results, server_running_average=None):
    """(accept_length, accept_rate, source): per-request weighted figures, else the server's running average."""
    totals = spec_totals(results)
    if totals["verify_ct"] > 0:
        rate = totals["accepted_drafts"] / totals["proposed_drafts"] if totals["proposed_drafts"] else None
        return totals["completion_tokens"] / totals["verify_ct"], rate, "per_request"
    if server_running_average is not None:
        return float(server_running_average), None, "server_running_average"
    return None, None, None


def percentile(values, q):
    """numpy.percentile(values, q) with the default 'linear' method; 0.0 for an empty sequence."""
    if not values:
        return 0.0
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    rank = (len(data) - 1) * (q / 100.0)
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(data[int(rank)])
    return float(data[low] + (data[high] - data[low]) * (rank - low))


def mean(values):
    return float(sum(values) / len(values)) if values else 0.0


def std(values):
    """Population standard deviation (numpy.std default, ddof=0)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def _ms(values):
    return {"mean": mean(values) * 1000.0, "median": percentile(values, 50) * 1000.0,
            "std": std(values) * 1000.0}


def compute_metrics(results, duration, server_accept_length=None):
    """Aggregate one cell (bench_serving.calculate_metrics semantics).

    results: list of RequestResult; duration: wall seconds of the measured phase (> 0).
    Failed requests count in `failed` and add nothing else, exactly as in bench_serving.
    server_accept_length: /server_info's running average, used only when no request carried spec figures.
    """
    if duration <= 0:
        raise ValueError("duration must be > 0, got %r" % (duration,))
    ok = [r for r in results if r.success]
    ttfts = [r.ttft for r in ok]
    latencies = [r.latency for r in ok]
    tpots = [(r.latency - r.ttft) / (r.output_len - 1) for r in ok if r.output_len > 1]
    itls = [gap for r in ok for gap in r.itl]
    total_in = sum(r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    ttft = _ms(ttfts)
    tpot = _ms(tpots)
    itl = _ms(itls)
    e2e = _ms(latencies)
    accept_length, accept_rate, source = acceptance(results, server_accept_length)
    return {
        "duration": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "input_throughput": total_in / duration,
        "output_throughput": total_out / duration,
        "total_throughput": (total_in + total_out) / duration,
        "mean_e2e_latency_ms": e2e["mean"],
        "median_e2e_latency_ms": e2e["median"],
        "std_e2e_latency_ms": e2e["std"],
        "p90_e2e_latency_ms": percentile(latencies, 90) * 1000.0,
        "p99_e2e_latency_ms": percentile(latencies, 99) * 1000.0,
        "mean_ttft_ms": ttft["mean"],
        "median_ttft_ms": ttft["median"],
        "std_ttft_ms": ttft["std"],
        "p99_ttft_ms": percentile(ttfts, 99) * 1000.0,
        "mean_tpot_ms": tpot["mean"],
        "median_tpot_ms": tpot["median"],
        "std_tpot_ms": tpot["std"],
        "p99_tpot_ms": percentile(tpots, 99) * 1000.0,
        "mean_itl_ms": itl["mean"],
        "median_itl_ms": itl["median"],
        "std_itl_ms": itl["std"],
        "p95_itl_ms": percentile(itls, 95) * 1000.0,
        "p99_itl_ms": percentile(itls, 99) * 1000.0,
        "max_itl_ms": (max(itls) * 1000.0) if itls else 0.0,
        "concurrency": sum(latencies) / duration,
        "accept_length": accept_length,
        "accept_rate": accept_rate,
        "accept_length_source": source,
    }


def first_errors(results, limit=3):
    """Distinct error strings of failed requests (evidence for a failed cell), at most `limit`."""
    seen = []
    for r in results:
        if not r.success and r.error and r.error not in seen:
            seen.append(r.error)
            if len(seen) >= limit:
                break
    return seen
