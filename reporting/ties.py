"""Ties: a winner whose margin over a runner-up lies inside the spread of the cells the two scores rest on is no
winner. Cells measured several times carry their spread (module_utils/loadgen/repeats.py: (max - min) / median of
the repeats' output throughput); a margin smaller than that is noise.

margin of W over R = W's score / R's score - 1 (throughput mode: the geometric-mean speedups, whose ratio is W's
geometric-mean throughput over R's on the same cells, the baseline cancels; SLO mode: the SLO-meeting throughputs).
spread of the comparison = the median, over the cells both scores rest on (per host: the baseline's ranked
(workload, C) cells in throughput mode, each workload's best SLO-meeting cell in SLO mode), of the larger of the two
cells' throughput spreads: the typical noise of one cell of either config, robust to one noisy cell. W and R tie when
margin <= spread. Unknown when a cell has no spread (a single repeat): the margin is then not tested, and said so.

The rule applied to a decision (resolve): every ranked config tied with the winner is a candidate. When the baseline
is among them it is kept (no speculative config is shown to beat it); otherwise there is no winner and the decision
names the candidates: the proposal records them and apply_proposal.yml refuses it until one is picked.
"""
from __future__ import annotations

import statistics

from reporting.speedup import cell_map, ranked_workloads

PICK_VARIABLE = "proposal_pick"


def cell_spread(cell, key="output_throughput"):
    """The cell's spread of `key` over its repeats, or None (one repeat, or an old row)."""
    value = (cell.get("spread") or {}).get(key) if isinstance(cell.get("spread"), dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def pair_cells(run, decision, a, b):
    """[(cell of a, cell of b)]: the cells the two configs' scores rest on, over the decision's hosts."""
    pairs = []
    for f in decision.facts:
        if decision.objective.mode == "slo":
            sa, sb = f.slo.get(a, {}), f.slo.get(b, {})
            pairs += [(sa[w], sb[w]) for w in f.workloads if w in sa and w in sb]
            continue
        base = cell_map(run, f.baseline, f.host) if f.baseline else {}
        keep = set(ranked_workloads({w for w, _ in base}))
        ma, mb = cell_map(run, a, f.host), cell_map(run, b, f.host)
        pairs += [(ma[k], mb[k]) for k in sorted(base) if k[0] in keep and k in ma and k in mb]
    return pairs


def comparison_spread(pairs):
    """Median over the pairs of the larger throughput spread of the two cells; None when any cell has none."""
    values = []
    for a, b in pairs:
        sa, sb = cell_spread(a), cell_spread(b)
        if sa is None or sb is None:
            return None
        values.append(max(sa, sb))
    return statistics.median(values) if values else None


def margins(run, decision, scores):
    """[{config, margin, spread, tied, cells}] of the winner over every other scored config, best first."""
    winner = decision.winner
    others = sorted((n for n, s in scores.items() if n != winner and s), key=lambda n: (-scores[n], n))
    out = []
    for name in others:
        pairs = pair_cells(run, decision, winner, name)
        spread = comparison_spread(pairs)
        margin = scores[winner] / scores[name] - 1.0
        out.append({"config": name, "margin": margin, "spread": spread, "cells": len(pairs),
                    "tied": spread is not None and margin <= spread})
    return out


def _pct(value):
    return f"{100 * value:.1f}%"


def resolve(run, decision, keep_text):
    """The decision with ties applied (see the module's docstring); keep_text: the keep-the-baseline phrase."""
    if not decision.winner or decision.keep:
        return decision
    scores = decision.absolute if decision.objective.mode == "slo" else decision.scores
    if not scores or scores.get(decision.winner) is None:
        return decision
    decision.margins = margins(run, decision, scores)
    tied = [m for m in decision.margins if m["tied"]]
    if not tied:
        unknown = [m["config"] for m in decision.margins if m["spread"] is None]
        if unknown:
            decision.tie_note = (f"the margin of {decision.winner} over {', '.join(unknown)} is not tested against "
                                 "the spread: a cell it rests on was measured once (sglang_bench_cell_repeats 1)")
        return decision
    winner = decision.winner
    candidates = [winner] + [m["config"] for m in tied]
    why = "; ".join(f"{winner} over {m['config']}: margin {_pct(m['margin'])} <= spread {_pct(m['spread'])} of the "
                    f"{m['cells']} cells it rests on" for m in tied)
    baselines = {b for b in decision.baselines.values() if b}
    kept = next((c for c in candidates if c in baselines), None)
    decision.tie = {"candidates": candidates, "kept": kept, "margins": tied}
    if kept:
        decision.winner, decision.keep = kept, True
        decision.reason = (f"{keep_text}: tie between {', '.join(candidates)} ({why}); the baseline {kept} is among "
                           "them, so no speculative config is shown to beat it")
    else:
        decision.winner = None
        decision.reason = (f"tie between {', '.join(candidates)} ({why}): no winner is picked; choose one and apply "
                           f"it with -e {PICK_VARIABLE}=<config>")
    return decision
