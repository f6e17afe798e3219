# -*- coding: utf-8 -*-
"""A cell measured several times (stdlib only): its repeats combined into one row's figures, with the spread.

A cell's repeats differ (on the H200, two repeats of one C=32 cell of 128 requests lasting ~1 s differed by 25%),
so a row keeps: every repeat's key figures (REPEAT_KEYS) under `repeats`, the median of every numeric metric as the
row's figure (everything downstream reads `output_throughput`, `p99_ttft_ms`, ... unchanged, now the median), the
spread (max - min) / median of each key figure under `spread`, and `spread_flag` when the throughput's or the TPOT's
spread exceeds the bound (max_spread): then the row names the figures and their values.

Acceptance stays the project's weighted figure (metrics.acceptance: completion tokens / verify steps, never a mean of
means): the row's accept_length and accept_rate are over every repeat's requests (its `requests` and `spec_totals`
are all the repeats', so reporting/acceptance.py recomputes the same figure); each repeat's own accept length is kept
in `repeats` with its spread. A failed repeat ends the cell: its row is that repeat's (status, reason, partial
figures) with the repeats measured so far.
"""
from __future__ import annotations

import statistics

from ansible.module_utils.loadgen.metrics import METRIC_KEYS

# The spread bound when a spec gives none (the role's sglang_bench_max_spread documents the choice).
DEFAULT_MAX_SPREAD = 0.10
# Each repeat's figures kept in the row; the spread is given for each of these.
REPEAT_KEYS = ("output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "median_itl_ms",
               "p99_itl_ms", "accept_length")
# A spread above the bound on one of these flags the cell (throughput and per-user speed decide a sweep).
FLAG_KEYS = ("output_throughput", "median_tpot_ms")
POOLED = ("accept_length", "accept_rate", "accept_length_source")
SPEC_TOTAL_KEYS = ("requests", "completion_tokens", "verify_ct", "accepted_drafts", "proposed_drafts")


def _num(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def spread(values):
    """(max - min) / median of the numbers given (None with fewer than two, or a median of 0)."""
    values = [float(v) for v in values if _num(v)]
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else None


def brief(measured, number):
    """One repeat's key figures, as the row keeps them."""
    out = {"repeat": number, "status": measured.get("status"), "duration": measured.get("duration"),
           "completed": measured.get("completed")}
    out.update({key: measured.get(key) for key in REPEAT_KEYS})
    return out


def _pooled_acceptance(measured):
    """accept_length/accept_rate over every repeat's verified requests (the per-request weighting)."""
    totals = {key: sum((m.get("spec_totals") or {}).get(key) or 0 for m in measured) for key in SPEC_TOTAL_KEYS}
    if totals["verify_ct"] > 0:
        rate = totals["accepted_drafts"] / totals["proposed_drafts"] if totals["proposed_drafts"] else None
        return totals, {"accept_length": totals["completion_tokens"] / totals["verify_ct"], "accept_rate": rate,
                        "accept_length_source": "per_request"}
    lengths = [m.get("accept_length") for m in measured if _num(m.get("accept_length"))]
    rates = [m.get("accept_rate") for m in measured if _num(m.get("accept_rate"))]
    return totals, {"accept_length": statistics.median(lengths) if lengths else None,
                    "accept_rate": statistics.median(rates) if rates else None,
                    "accept_length_source": next((m.get("accept_length_source") for m in measured
                                                  if m.get("accept_length_source")), None)}


def _degenerate(measured):
    """The repeats' degenerate checks summed (evidence: the first three; flagged_prompts: all of them)."""
    checks = [m.get("degenerate") for m in measured if isinstance(m.get("degenerate"), dict)]
    if not checks:
        return None
    out = {"checked": sum(c.get("checked") or 0 for c in checks), "flagged": sum(c.get("flagged") or 0 for c in checks),
           "evidence": [e for c in checks for e in c.get("evidence") or []][:3]}
    if all("flagged_prompts" in c for c in checks):
        out["flagged_prompts"] = [p for c in checks for p in c["flagged_prompts"]]
    return out


def combine(measured, max_spread):
    """One row's measured fields from the repeats of a cell (measured: the repeats' dicts, in order)."""
    if not measured:
        raise ValueError("a cell needs at least one repeat")
    briefs = [brief(m, i + 1) for i, m in enumerate(measured)]
    last = measured[-1]
    if last.get("status") != "ok" or len(measured) == 1:
        row = dict(last)
    else:
        row = dict(min(measured, key=lambda m: abs((m.get("output_throughput") or 0.0)
                                                    - statistics.median(x.get("output_throughput") or 0.0
                                                                        for x in measured))))
        for key in METRIC_KEYS:
            values = [m.get(key) for m in measured]
            if key not in POOLED and values and all(_num(v) for v in values):
                row[key] = statistics.median(values)
        totals, pooled = _pooled_acceptance(measured)
        row.update(pooled)
        row["spec_totals"] = totals
        row["requests"] = [dict(r, repeat=i + 1) for i, m in enumerate(measured) for r in m.get("requests") or []]
        row["errors"] = [e for m in measured for e in m.get("errors") or []][:3]
        row["degenerate"] = _degenerate(measured)
        row["figures_of"] = "median of %d repeats (accept length over all their requests)" % len(measured)
    ok = [b for b in briefs if b["status"] == "ok"]
    row["repeats"] = briefs
    row["cell_repeats"] = len(measured)
    row["spread"] = {key: spread(b[key] for b in ok) for key in REPEAT_KEYS}
    row["max_spread"] = max_spread
    over = {key: {"spread": row["spread"][key], "values": [b[key] for b in ok]} for key in FLAG_KEYS
            if row["spread"][key] is not None and row["spread"][key] > max_spread}
    row["spread_flag"] = {"bound": max_spread, "figures": over} if over else None
    return row
