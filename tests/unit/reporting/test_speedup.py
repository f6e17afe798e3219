"""Speedup over the autoregressive baseline: arithmetic, crossover, baseline choice, soak cells left out, old rows."""
import json
import math

import pytest

from reporting import load_run, render_report
from reporting.speedup import (BELOW_EVERYWHERE, NEVER, baseline_of, crossover, geomean, geomean_speedup,
                               speedups)
from tests.helpers.reporting_rows import CODE, RANDOM, cell, config_row, sweep_rows, write_run


@pytest.fixture
def run(tmp_path):
    cells, configs = sweep_rows()
    return load_run(write_run(tmp_path / "sweep-x", cells, configs))


def test_speedup_table_arithmetic(run):
    table = speedups(run, "dd8", "ar", "h1")
    assert table == {CODE: {1: pytest.approx(2.5), 8: pytest.approx(1.5), 64: pytest.approx(0.9)},
                     RANDOM: {1: pytest.approx(1.5), 8: pytest.approx(1.1), 64: pytest.approx(1.1)}}
    assert speedups(run, "dd16", "ar", "h1")[CODE] == {1: pytest.approx(3.0), 8: pytest.approx(0.8),
                                                      64: pytest.approx(0.5)}
    assert speedups(run, "broken", "ar", "h1") == {}
    assert speedups(run, "dd8", None, "h1") == {}


def test_geomean_speedup(run):
    # on the real-text workload only (code): random ids are throughput-only and do not rank configs
    expected = (2.5 * 1.5 * 0.9) ** (1 / 3)
    assert geomean_speedup(run, "dd8", "ar", "h1") == pytest.approx(expected)
    assert round(expected, 4) == 1.5
    assert geomean_speedup(run, "dd16", "ar", "h1") == pytest.approx((3.0 * 0.8 * 0.5) ** (1 / 3))
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_crossover():
    assert crossover({1: 2.5, 8: 1.5, 64: 0.9}) == 64
    assert crossover({64: 0.5, 1: 3.0, 8: 0.8}) == 8           # order of the mapping does not matter
    assert crossover({1: 1.5, 8: 1.0, 64: 1.1}) == NEVER == "never"   # exactly 1.0 is not below 1
    assert crossover({1: 0.9, 8: 0.9, 64: 0.5}) == BELOW_EVERYWHERE == "below 1 at every C"
    assert crossover({}) is None


def test_speedup_section_in_report(run):
    text = render_report(run)
    section = text.split("## Speedup over autoregressive")[1].split("## Winner")[0]
    assert "Baseline: `ar`." in section
    assert "| prompts/code | 2.500 | 1.500 | 0.900 | C=64 |" in section
    assert "| never |" in section and "| below 1 at every C |" in section
    assert "| prompts/code | 3.000 | 0.800 | 0.500 | C=8 |" in section
    assert "Geometric mean speedup: 1.353x over 6 (workload, C) cell(s)." in section
    assert "| random-ids/ctx1024 † |" in section
    assert "† random token ids: throughput only: acceptance on random ids says nothing about real traffic." in section
    assert "### `ar`" not in section


def test_baseline_flag_wins_over_first_none(tmp_path):
    rows = [cell("ar-old", RANDOM, 1, 100.0), cell("ar", RANDOM, 1, 50.0), cell("dd", RANDOM, 1, 100.0)]
    configs = [config_row("ar-old", spec={"algorithm": "NONE"}), config_row("ar", baseline=True),
               config_row("dd", spec={"algorithm": "DDTREE"})]
    run = load_run(write_run(tmp_path / "r", rows, configs))
    assert baseline_of(run, "h1") == "ar"
    assert speedups(run, "dd", "ar", "h1") == {RANDOM: {1: pytest.approx(2.0)}}
    configs[1]["baseline"] = False
    run = load_run(write_run(tmp_path / "r2", rows, configs))
    assert baseline_of(run, "h1") == "ar-old"        # no baseline flag: the first config with algorithm NONE
    assert speedups(run, "dd", "ar-old", "h1") == {RANDOM: {1: pytest.approx(1.0)}}


def test_no_baseline_says_so_and_shows_no_speedup(tmp_path):
    rows = [cell("dd8", RANDOM, c, 100.0 * c) for c in (1, 8)] + [cell("dd16", RANDOM, c, 90.0 * c) for c in (1, 8)]
    configs = [config_row("dd8"), config_row("dd16")]
    run = load_run(write_run(tmp_path / "r", rows, configs))
    assert baseline_of(run, "h1") is None
    text = render_report(run)
    section = text.split("## Speedup over autoregressive")[1].split("## Winner")[0]
    assert "No autoregressive baseline was measured on this host" in section
    assert "no speedup is shown" in section
    assert "C=1" not in section and "Geometric mean" not in section
    assert "**No overall winner**: no autoregressive baseline measured on h1" in text


def test_soak_cells_never_enter_speedup_or_winner(run):
    # dd8's soak cells claim 99999 tok/s at C=64/8/1 on prompts/code: the matrix speedup stays 0.9 at C=64.
    assert speedups(run, "dd8", "ar", "h1")[CODE][64] == pytest.approx(0.9)
    text = render_report(run)
    winner = text.split("## Winner")[1].split("## Disqualified")[0]
    assert "99999" not in winner
    assert "| prompts/code | `dd16` 300.0 (3.00x) | `dd8` 900.0 (1.50x) | `ar` 2000.0 (1.00x) |" in winner
    soak = text.split("## Shrinking-batch soak")[1].split("## Acceptance")[0]
    assert "C=64: 99999.0 tok/s, ok; C=8: 99999.0 tok/s, ok; C=1: 99999.0 tok/s, ok" in soak
    assert "99999" not in text.split("## Shrinking-batch soak")[0]


def test_old_rows_without_workload_are_reported(tmp_path):
    """Rows of the previous bench (no workload, no requests, no baseline flag, no soak) still make a report."""
    def old(config, conc, tps):
        return {"kind": "cell", "run": "old", "config": config, "host": "b300", "context_length": 60,
                "max_concurrency": conc, "status": "ok", "output_throughput": tps, "p99_ttft_ms": 40.0,
                "p99_itl_ms": 9.0, "accept_length": 4.4 if config == "budget8" else None,
                "provenance": {"host_group": "nvlink"}}
    (tmp_path / "b300").mkdir()
    (tmp_path / "b300" / "a.jsonl").write_text("\n".join(json.dumps(old(n, c, t)) for n, c, t in (
        ("none", 1, 100.0), ("none", 8, 700.0), ("budget8", 1, 180.0), ("budget8", 8, 630.0))))
    (tmp_path / "sweep.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"kind": "config", "config": "none", "host": "b300", "status": "ok", "spec": {"algorithm": "NONE"}},
        {"kind": "config", "config": "budget8", "host": "b300", "status": "ok",
         "spec": {"algorithm": "DDTREE", "budget": 8}})))
    run = load_run(tmp_path)
    assert baseline_of(run, "b300") == "none"
    assert speedups(run, "budget8", "none", "b300") == {"random-ids/ctx60": {1: pytest.approx(1.8),
                                                                              8: pytest.approx(0.9)}}
    text = render_report(run)
    assert "| random-ids/ctx60 † | 1.800 | 0.900 | C=8 |" in text
    assert f"Geometric mean speedup: {math.sqrt(1.8 * 0.9):.3f}x over 2" in text
    # acceptance of an old row: stored figure, source unknown
    assert "| `budget8` | random-ids/ctx60 † | 4.40 | – | unknown (row names no source) | 2 |" in text
    assert "**Overall winner: `budget8`**" in text


def test_random_ids_rank_only_when_nothing_else_was_measured():
    from reporting.speedup import ranked_workloads
    assert ranked_workloads(["random-ids/ctx60", "prompts/code", "dataset/x"]) == ["dataset/x", "prompts/code"]
    assert ranked_workloads(["random-ids/ctx60", "random-ids/ctx1024"]) == ["random-ids/ctx1024", "random-ids/ctx60"]
