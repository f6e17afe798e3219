"""Accept length per cell and per (config, workload), recomputed from the per-request figures when the row has them.

accept length = sum of completion tokens / sum of verify steps over the successful requests that were verified
(spec_verify_ct > 0); accept rate = accepted drafts / proposed drafts over the same requests. A stored
accept_length that disagrees with the recomputation by more than MISMATCH_TOLERANCE (relative) is flagged.
"""
from __future__ import annotations

from reporting.speedup import is_ok, workload_of

MISMATCH_TOLERANCE = 0.01
PER_REQUEST = "per_request"
RUNNING_AVERAGE = "server_running_average"


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def request_totals(cell):
    """(completion_tokens, verify_ct, accepted_drafts, proposed_drafts, requests) summed over the cell's successful
    verified requests; None when the row carries no per-request figures (or none was verified)."""
    reqs = cell.get("requests")
    if not isinstance(reqs, list):
        return None
    ct = verify = accepted = proposed = n = 0
    for r in reqs:
        if not isinstance(r, dict) or r.get("success") is False:
            continue
        v = _num(r.get("spec_verify_ct"))
        if not v or v <= 0:
            continue
        ct += _num(r.get("completion_tokens")) or 0
        verify += v
        accepted += _num(r.get("spec_accepted_drafts")) or 0
        proposed += _num(r.get("spec_proposed_drafts")) or 0
        n += 1
    if not n:
        return None
    return {"completion_tokens": ct, "verify_ct": verify, "accepted_drafts": accepted,
            "proposed_drafts": proposed, "requests": n}


def _totals(cell):
    """Per-request totals, else the row's spec_totals when they hold a verify count."""
    totals = request_totals(cell)
    if totals is not None:
        return totals, "requests"
    st = cell.get("spec_totals")
    if isinstance(st, dict) and (_num(st.get("verify_ct")) or 0) > 0:
        return {k: _num(st.get(k)) or 0 for k in ("completion_tokens", "verify_ct", "accepted_drafts",
                                                   "proposed_drafts", "requests")}, "spec_totals"
    return None, None


def cell_acceptance(cell):
    """{accept_length, accept_rate, source, stored, mismatch, recomputed} of one cell.

    accept_length is the recomputation from `requests` when present (recomputed True), else the stored figure;
    source is the row's accept_length_source ("per_request" when recomputed); mismatch is True when the stored
    figure differs from the recomputation by more than 1%."""
    stored = _num(cell.get("accept_length"))
    source = cell.get("accept_length_source")
    totals = request_totals(cell)
    if totals is not None:
        length = totals["completion_tokens"] / totals["verify_ct"]
        rate = totals["accepted_drafts"] / totals["proposed_drafts"] if totals["proposed_drafts"] else \
            _num(cell.get("accept_rate"))
        mismatch = stored is not None and abs(stored - length) > MISMATCH_TOLERANCE * length
        return {"accept_length": length, "accept_rate": rate, "source": PER_REQUEST, "stored": stored,
                "stored_source": source, "mismatch": mismatch, "recomputed": True}
    length, rate = stored, _num(cell.get("accept_rate"))
    totals, _ = _totals(cell)
    if length is None and totals is not None:        # no stored figure: the row's spec_totals
        length = totals["completion_tokens"] / totals["verify_ct"]
        rate = rate if rate is not None or not totals["proposed_drafts"] else \
            totals["accepted_drafts"] / totals["proposed_drafts"]
        source = source or "spec_totals"
    return {"accept_length": length, "accept_rate": rate, "source": source,
            "stored": stored, "stored_source": cell.get("accept_length_source"), "mismatch": False,
            "recomputed": False}


def combined_acceptance(cells, per=None):
    """(accept_length, accept_rate) over several cells: total tokens over total verify steps when every cell carries
    totals (never a mean of means), else the mean of the cells' own figures (old rows)."""
    per = per if per is not None else [cell_acceptance(c) for c in cells]
    weighted = [_totals(c)[0] for c in cells]
    if weighted and all(w is not None for w in weighted):
        verify = sum(w["verify_ct"] for w in weighted)
        proposed = sum(w["proposed_drafts"] for w in weighted)
        return (sum(w["completion_tokens"] for w in weighted) / verify,
                sum(w["accepted_drafts"] for w in weighted) / proposed if proposed else None)
    lengths = [p["accept_length"] for p in per if p["accept_length"] is not None]
    rates = [p["accept_rate"] for p in per if p["accept_rate"] is not None]
    return (sum(lengths) / len(lengths) if lengths else None, sum(rates) / len(rates) if rates else None)


def workload_acceptance(cells):
    """{workload: {accept_length, accept_rate, source, cells, mismatches}} over ok cells: weighted by verify steps
    where cells carry per-request figures or spec_totals, else the mean of the cells' figures."""
    groups = {}
    for c in cells:
        if is_ok(c):
            groups.setdefault(workload_of(c), []).append(c)
    out = {}
    for workload, group in sorted(groups.items()):
        per = [cell_acceptance(c) for c in group]
        sources = sorted({p["source"] or "unknown" for p in per if p["accept_length"] is not None})
        length, rate = combined_acceptance(group, per)
        out[workload] = {"accept_length": length, "accept_rate": rate, "sources": sources, "cells": len(group),
                         "running_average": RUNNING_AVERAGE in sources,
                         "mismatches": [(c, p) for c, p in zip(group, per) if p["mismatch"]]}
    return out
