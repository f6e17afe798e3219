"""How each config of a run stands, judged from its cells and its sweep outcome: its ok cells, its peak, its status
(ok, failed, partial, disqualified), its accept length and the best config by peak throughput."""
from __future__ import annotations

from reporting.acceptance import combined_acceptance
from reporting.degenerate import disqualifying
from reporting.load import Run
from reporting.lossless import not_lossless


def ok_cells(cells):
    return [c for c in cells if c.get("status") == "ok" and c.get("output_throughput") is not None]


def peak(cells):
    """The ok cell with the highest output tok/s, or None."""
    good = ok_cells(cells)
    return max(good, key=lambda c: c["output_throughput"]) if good else None


def config_status(run: Run, config):
    """'ok' | 'failed' | 'partial' | 'disqualified' for a config: its sweep outcome when there is one (a failed soak
    counts as failed), else its cells; 'disqualified' when a sampled output of an ok config was flagged degenerate or
    the lossless gate found its greedy outputs unlike the baseline's."""
    outcome = run.outcome_of(config)
    if outcome is not None:
        soak = outcome.get("soak") if isinstance(outcome.get("soak"), dict) else {}
        status = outcome.get("status", "failed")
        if status == "ok" and soak.get("status") == "failed":
            return "failed"
        if status == "ok" and _disqualified(run, config):
            return "disqualified"
        return status
    cells = run.cells_of(config)
    if not cells:
        return "failed"
    good = ok_cells(cells)
    if good and _disqualified(run, config):
        return "disqualified"
    return "ok" if len(good) == len(cells) else ("partial" if good else "failed")


def _disqualified(run: Run, config):
    """Flagged degenerate output that is not the model's own (reporting/degenerate.py), or not lossless
    (reporting/lossless.py): either disqualifies an ok config."""
    if not_lossless(run, config):
        return True
    return disqualifying(run, config)


def accept_length_of(run: Run, config):
    """The config's accept length over its ok cells (weighted by verify steps), else its sweep outcome's."""
    length, _ = combined_acceptance(ok_cells(run.cells_of(config)))
    if length is not None:
        return length
    outcome = run.outcome_of(config) or {}
    return outcome.get("accept_length")


def best_config(run: Run):
    """Name of the config (not failed, not disqualified) with the highest peak output tok/s, or None."""
    best = None
    best_tps = -1.0
    for name in run.config_names():
        if name.startswith("_") or config_status(run, name) in ("failed", "disqualified"):
            continue
        cell = peak(run.cells_of(name))
        if cell and cell["output_throughput"] > best_tps:
            best, best_tps = name, cell["output_throughput"]
    return best
