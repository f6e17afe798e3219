# -*- coding: utf-8 -*-
"""Goodput of a benchmark cell (stdlib only): how many requests met the service's latency bounds, and how many such
requests the server finished per second.

A request is good when it succeeded, its TTFT is within the TTFT bound and its TPOT within the TPOT bound (each bound
optional; TPOT = (latency - TTFT) / (output tokens - 1), bench_serving.calculate_metrics' per-request definition in
real SGLang 0.5.11 sglang/bench_serving.py; a one-token output has no TPOT and meets any TPOT bound). Real 0.5.11's
bench_serving has no goodput of its own (no "goodput" in sglang/bench_serving.py): this is the usual serving
definition (good requests per second under per-request SLOs), computed from the per-request records a row keeps
(metrics.request_record: ttft_ms, tpot_ms), so the report can recompute it under other bounds.

cell_goodput(requests, duration, ttft_ms, tpot_ms) gives the row's fields:
  goodput_ttft_ms, goodput_tpot_ms   the bounds used (None = no bound)
  good_requests                      requests within every bound
  goodput_share                      good_requests / requests sent (failed ones count as not good)
  goodput_rps                        good_requests / duration (s)
  goodput_reason                     "" when computed, else why the figures are None
"""
from __future__ import annotations

import math

FIELDS = ("goodput_ttft_ms", "goodput_tpot_ms", "good_requests", "goodput_share", "goodput_rps", "goodput_reason")


def check_bound(name, value):
    """None when value is None or a positive finite number of ms, else the problem."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return "%s must be a positive number of ms or null, got %r" % (name, value)
    return None


def spec_problems(spec):
    """Problems with a bench spec's goodput bounds (goodput_ttft_ms, goodput_tpot_ms)."""
    found = [check_bound(key, spec.get(key)) for key in ("goodput_ttft_ms", "goodput_tpot_ms")]
    return [p for p in found if p]


def is_good(record, ttft_ms=None, tpot_ms=None):
    """Whether one request record (metrics.request_record) met the bounds; None when it lacks a needed figure."""
    if not record.get("success"):
        return False
    if ttft_ms is not None:
        ttft = record.get("ttft_ms")
        if ttft is None:
            return None
        if ttft > ttft_ms:
            return False
    if tpot_ms is not None:
        tpot = record.get("tpot_ms")
        if tpot is None:
            return None if (record.get("completion_tokens") or 0) > 1 else True
        if tpot > tpot_ms:
            return False
    return True


def cell_goodput(requests, duration, ttft_ms=None, tpot_ms=None):
    """The goodput fields of a cell from its per-request records (see the module doc)."""
    out = {"goodput_ttft_ms": ttft_ms, "goodput_tpot_ms": tpot_ms, "good_requests": None, "goodput_share": None,
           "goodput_rps": None, "goodput_reason": ""}
    if not requests:
        out["goodput_reason"] = "no per-request records in the row"
        return out
    verdicts = [is_good(r, ttft_ms, tpot_ms) for r in requests]
    if any(v is None for v in verdicts):
        out["goodput_reason"] = "the per-request records carry no ttft_ms/tpot_ms (rows written before goodput)"
        return out
    good = sum(1 for v in verdicts if v)
    out["good_requests"] = good
    out["goodput_share"] = round(good / len(requests), 4)
    if duration and duration > 0:
        out["goodput_rps"] = round(good / duration, 4)
    else:
        out["goodput_reason"] = "no cell duration: good requests per second unknown"
    return out


def row_goodput(row, ttft_ms=None, tpot_ms=None):
    """cell_goodput over a row's own records and duration (the bench's hook and the report's recomputation)."""
    return cell_goodput(row.get("requests") or [], row.get("duration"), ttft_ms, tpot_ms)
