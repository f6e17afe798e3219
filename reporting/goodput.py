"""Goodput and power of a cell as the report shows them.

Goodput (module_utils/loadgen/goodput.py): the share of a cell's requests that succeeded within the TTFT and TPOT
bounds, and those good requests per second. The row carries it under the bench's bounds (sglang_bench_goodput_*).
An SLO objective with a TTFT or TPOT bound recomputes it from the row's per-request records under the objective's
bounds (each request's TTFT against the TTFT bound, its TPOT against the TPOT bound), so the SLO winner is ranked by
good requests per second under the SLO the operator asked for; a row without per-request figures counts only when
its own bounds are the objective's.

Power (module_utils/loadgen/power.py): mean and max W summed over the GPUs the server used, the power limit, the
GPU count and output tokens per joule; None with the row's power_reason where nothing was measured.
"""
from __future__ import annotations

from ansible.module_utils.loadgen.goodput import cell_goodput


def bounds_of(objective):
    """(ttft_ms, tpot_ms) the report's goodput uses: an SLO objective's TTFT/TPOT bounds (both None with an ITL bound
    only: every successful request is good), else None (the rows' own bounds)."""
    if objective is None or objective.mode != "slo":
        return None
    return objective.slo_ttft_p99_ms, getattr(objective, "slo_tpot_p99_ms", None)


def goodput_of(cell, objective=None):
    """{goodput_share, goodput_rps, good_requests, goodput_ttft_ms, goodput_tpot_ms, goodput_reason} of a cell under
    the objective's bounds (bounds_of) or, without them, the row's own fields."""
    bounds = bounds_of(objective)
    if bounds is None:
        return {k: cell.get(k) for k in ("goodput_share", "goodput_rps", "good_requests", "goodput_ttft_ms",
                                         "goodput_tpot_ms", "goodput_reason")}
    ttft, tpot = bounds
    out = cell_goodput(cell.get("requests") or [], cell.get("duration"), ttft, tpot)
    if out["goodput_rps"] is None and cell.get("goodput_rps") is not None and \
            (cell.get("goodput_ttft_ms"), cell.get("goodput_tpot_ms")) == (ttft, tpot):
        return goodput_of(cell)        # the row was measured under these very bounds
    return out


def good_rps(cell, objective=None):
    """Good requests per second of the cell (goodput_of), or None."""
    return goodput_of(cell, objective).get("goodput_rps")


def bounds_text(cells, objective=None):
    """'TTFT <= x ms, TPOT <= y ms' of the goodput shown (the objective's, else the rows' distinct bounds)."""
    bounds = bounds_of(objective)
    found = [bounds] if bounds else sorted({(c.get("goodput_ttft_ms"), c.get("goodput_tpot_ms")) for c in cells
                                            if c.get("goodput_share") is not None}, key=str)
    texts = []
    for ttft, tpot in found:
        parts = [f"TTFT <= {ttft:g} ms" if ttft is not None else "", f"TPOT <= {tpot:g} ms" if tpot is not None else ""]
        texts.append(", ".join(p for p in parts if p) or "no bound")
    return "; ".join(texts) or "none recorded"


def power_of(cell):
    """{power_mean_w, power_max_w, power_limit_w, power_gpus, output_tokens_per_joule, power_reason} of a cell."""
    return {k: cell.get(k) for k in ("power_mean_w", "power_max_w", "power_limit_w", "power_gpus",
                                     "output_tokens_per_joule", "power_reason")}


def power_reasons(cells):
    """Distinct reasons why cells have no power figures (said once in the report, not per row)."""
    out = []
    for c in cells:
        why = c.get("power_reason")
        if c.get("power_mean_w") is None and why and why not in out:
            out.append(why)
    return out
