"""Ties (reporting/ties.py): a winner whose margin over a runner-up lies inside the spread of the cells they rest on
is no winner; the baseline is kept when tied; a single repeat leaves the margin untested; the proposal records a tie
with its candidates and the report calls it a tie."""
import pytest
import yaml

from reporting import load_run
from reporting.objective import KEEP, Objective, decide
from reporting.proposal import build_proposal, proposal_text
from reporting.render import render_report
from reporting.ties import comparison_spread
from tests.helpers.reporting_rows import CODE, cell, config_row, write_run

CS = (1, 8)
MATH = "prompts/math"


def rows(factors, spread=0.05, repeats=3, flag=None):
    """Baseline ar at 100 tok/s x C on two text workloads; each config at factor x that; every cell with `spread`."""
    cells, configs = [], [config_row("ar", baseline=True, overrides={"speculative": {"algorithm": "NONE"}})]
    for name, factor in {"ar": 1.0, **factors}.items():
        for workload in (CODE, MATH):
            for c in CS:
                extra = {"cell_repeats": repeats, "min_cell_seconds": 30, "max_spread": 0.1,
                         "spread": {"output_throughput": spread if repeats > 1 else None,
                                    "median_tpot_ms": 0.01 if repeats > 1 else None},
                         "spread_flag": flag}
                cells.append(cell(name, workload, c, 100.0 * c * factor, **extra))
        if name != "ar":
            configs.append(config_row(name, overrides={"speculative": {"algorithm": "DDTREE", "budget": len(name)}}))
    return cells, configs


def run_of(tmp_path, factors, **kw):
    cells, configs = rows(factors, **kw)
    return load_run(write_run(tmp_path / "sweep-tie", cells, configs))


def test_two_configs_within_the_spread_tie_and_no_winner_is_picked(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.52, "dd8": 1.50}, spread=0.05)
    d = decide(run, ["h1"])
    assert d.winner is None and d.tie["candidates"] == ["dd4", "dd8"] and d.tie["kept"] is None
    first = d.margins[0]
    assert first["config"] == "dd8" and first["margin"] == pytest.approx(1.52 / 1.50 - 1)
    assert first["spread"] == pytest.approx(0.05) and first["cells"] == 4 and first["tied"]
    assert [m["tied"] for m in d.margins] == [True, False]          # over the baseline: 52% > 5%
    assert d.reason.startswith("tie between dd4, dd8 (dd4 over dd8: margin 1.3% <= spread 5.0% of the 4 cells")
    assert "-e proposal_pick=<config>" in d.reason


def test_a_margin_past_the_spread_is_a_winner(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.52, "dd8": 1.30}, spread=0.05)
    d = decide(run, ["h1"])
    assert d.winner == "dd4" and d.tie is None and not d.margins[0]["tied"]


def test_a_speculative_config_within_the_spread_of_the_baseline_keeps_the_baseline(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.03}, spread=0.05)
    d = decide(run, ["h1"])
    assert d.winner == "ar" and d.keep and d.tie == {"candidates": ["dd4", "ar"], "kept": "ar",
                                                     "margins": d.tie["margins"]}
    assert d.reason.startswith(KEEP + ": tie between dd4, ar")


def test_a_single_repeat_leaves_the_margin_untested_and_says_so(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.52, "dd8": 1.50}, repeats=1)
    d = decide(run, ["h1"])
    assert d.winner == "dd4" and d.tie is None
    assert "measured once (sglang_bench_cell_repeats 1)" in d.tie_note


def test_slo_mode_ties_on_the_slo_meeting_cells(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.52, "dd8": 1.50}, spread=0.05)
    d = decide(run, ["h1"], Objective.from_bounds(ttft_p99_ms=1000))
    assert d.winner is None and d.tie["candidates"] == ["dd4", "dd8"]
    assert d.margins[0]["cells"] == 2                                # one best SLO cell per workload


def test_comparison_spread_is_the_median_of_the_larger_spread_per_cell():
    pairs = [({"spread": {"output_throughput": a}}, {"spread": {"output_throughput": b}})
             for a, b in ((0.01, 0.02), (0.30, 0.01), (0.03, 0.04))]
    assert comparison_spread(pairs) == pytest.approx(0.04)          # one noisy cell does not decide
    assert comparison_spread(pairs + [({}, {"spread": {"output_throughput": 0.1}})]) is None
    assert comparison_spread([]) is None


def test_the_proposal_records_the_tie_with_every_candidates_fragment(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.52, "dd8": 1.50}, spread=0.05)
    proposal, _ = build_proposal(run, Objective(), tmp_path / "no-group-vars")
    entry = proposal["groups"]["nvlink"]
    assert entry["status"] == "tie" and entry["winner"] is None and entry["diff"] == ""
    assert entry["group_vars"]["sglang_service_speculative_overrides"] == {}       # nothing applies unpicked
    tie = entry["tie"]
    assert tie["candidates"] == ["dd4", "dd8"] and tie["kept"] is None
    assert tie["margins"] == [{"winner": "dd4", "over": "dd8", "margin": 0.0133, "spread": 0.05, "cells": 4}]
    assert tie["pick_with"] == "-e proposal_pick=<one of dd4, dd8>"
    assert tie["group_vars"]["dd8"]["sglang_service_speculative_overrides"] == {"algorithm": "DDTREE", "budget": 3}
    assert yaml.safe_load(proposal_text(proposal).split("---", 1)[1]) == proposal


def test_a_kept_baseline_tie_is_status_tie_with_the_baseline_as_winner(tmp_path):
    run = run_of(tmp_path, {"dd4": 1.03}, spread=0.05)
    entry = build_proposal(run, Objective(), tmp_path / "none")[0]["groups"]["nvlink"]
    assert entry["status"] == "tie" and entry["winner"] == "ar" and entry["tie"]["kept"] == "ar"


def test_the_report_on_a_tied_run_calls_it_a_tie(tmp_path):
    flag = {"bound": 0.1, "figures": {"output_throughput": {"spread": 0.25, "values": [80.0, 100.0, 105.0]}}}
    cells, configs = rows({"dd4": 1.52, "dd8": 1.50}, spread=0.05)
    cells[-1]["spread_flag"] = flag                                  # dd8 math C=8 is noisy
    run = load_run(write_run(tmp_path / "sweep-tie", cells, configs))
    proposal, _ = build_proposal(run, Objective(), tmp_path / "none")
    text = render_report(run, proposal=proposal)
    assert "**Tie, no overall winner**: tie between dd4, dd8" in text
    assert "**Tie between `dd4`, `dd8`**: the proposal names them and applies none until one is picked" in text
    assert "| `dd8` | 1.3% | 5.0% | 4 | **tie** |" in text
    assert "| `ar` | 52.0% | 5.0% | 4 | clear |" in text
    assert "## Repeats and spread" in text and "12 of 12 cells measured 3 times (each at least 30 s)" in text
    assert "| `dd8` | prompts/math | 8 | out tok/s | 25.0% | 80.0, 100.0, 105.0 | 10.0% |" in text
    assert "3× 5.0% / 1.0% ⚠" in text and "3× 5.0% / 1.0% |" in text
    assert "Overall winner" not in text
