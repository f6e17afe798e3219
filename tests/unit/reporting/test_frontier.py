"""Throughput against interactivity (reporting/frontier.py), its plot and the report's top sections
(reporting/overview.py): a synthetic sweep shaped like a real one (speculation wins at low C, loses at high C)."""
import json

import pytest

from reporting import load_run, render_report
from reporting.__main__ import main
from reporting.frontier import gpus_of, pareto, per_gpu_label, point_of, serving, series, target_table
from tests.helpers.reporting_rows import config_row, write_run

CHAT, CODE = "prompts/chat", "prompts/code"
# median TPOT (ms) per config and C: speculation shortens TPOT at C=1, costs more per step at high C
TPOT = {"autoregressive": {1: 10.0, 4: 11.0, 16: 14.0, 64: 25.0},
        "dflash": {1: 4.0, 4: 5.0, 16: 9.0, 64: 30.0},
        "ddtree-b4": {1: 5.0, 4: 5.5, 16: 8.0, 64: 22.0}}
SPEC = {"autoregressive": {"algorithm": "NONE"}, "dflash": {"algorithm": "DFLASH", "block_size": 8},
        "ddtree-b4": {"algorithm": "DDTREE", "budget": 4, "topk": 4}}


def synthetic_cells(gpus="8x NVIDIA B300", power_gpus=8, tie_ttft=False):
    cells = []
    for name, series_ in TPOT.items():
        for workload in (CHAT, CODE):
            for conc, tpot in series_.items():
                tps = conc * 1000.0 / tpot * (1.0 if workload == CHAT else 0.9)
                good = 1.0 if tpot <= 20 else 0.25
                cells.append({"kind": "cell", "run": "demo", "config": name, "host": "b300-lab", "workload": workload,
                              "cell": f"{workload}_c{conc}", "max_concurrency": conc, "context_length": 700, "status": "ok",
                              "output_throughput": tps, "median_tpot_ms": tpot, "p99_tpot_ms": tpot * 1.2,
                              "mean_ttft_ms": 40.0, "p99_ttft_ms": 60.0, "median_itl_ms": tpot, "p99_itl_ms": tpot * 2,
                              "mean_tpot_ms": tpot, "completed": 4 * conc, "failed": 0,
                              "goodput_ttft_ms": 2000.0, "goodput_tpot_ms": 20.0, "goodput_share": good,
                              "goodput_rps": good * tps / 160.0, "good_requests": int(good * 4 * conc),
                              "power_mean_w": 3600.0 + 10 * conc, "power_max_w": 3700.0 + 10 * conc,
                              "power_limit_w": 8800.0, "power_gpus": power_gpus, "power_samples": 12,
                              "output_tokens_per_joule": tps / (3600.0 + 10 * conc), "power_reason": "",
                              "provenance": {"host_group": "nvlink", "gpu": gpus}})
    return cells


def synthetic_run(tmp_path, **kw):
    configs = [config_row(n, host="b300-lab", baseline=(n == "autoregressive"), spec=SPEC[n]) for n in TPOT]
    return load_run(write_run(tmp_path / "demo", synthetic_cells(**kw), configs))


def test_points_per_gpu_and_per_user():
    cell = synthetic_cells()[0]
    p = point_of(cell)
    assert p["per_user"] == pytest.approx(100.0) and p["per_gpu"] == pytest.approx(100.0 / 8)
    assert gpus_of(cell) == (8, "GPUs the server used (power sampler)")
    assert gpus_of(dict(cell, power_gpus=None)) == (8, "GPUs of the host (provenance.gpu)")
    assert gpus_of({"provenance": {"gpu": "none"}})[0] is None
    assert point_of(dict(cell, median_tpot_ms=0.0)) is None and point_of(dict(cell, status="error")) is None


def test_pareto_keeps_only_undominated_points():
    pts = [{"per_user": 100, "per_gpu": 10, "C": 1, "config": "a"}, {"per_user": 90, "per_gpu": 5, "C": 1, "config": "b"},
           {"per_user": 50, "per_gpu": 40, "C": 4, "config": "a"}, {"per_user": 20, "per_gpu": 30, "C": 16, "config": "b"}]
    assert [(p["config"], p["C"]) for p in pareto(pts)] == [("a", 4), ("a", 1)]
    assert serving(pts, 60)["per_gpu"] == 10 and serving(pts, 150) is None and serving(pts, 10)["per_gpu"] == 40


def test_target_table_picks_the_best_measured_cell_at_or_above_each_target(tmp_path):
    run = synthetic_run(tmp_path)
    rows = {(w, t): (p["config"], p["C"]) if p else None for w, t, p, _ in target_table(run, "b300-lab",
                                                                                        (20.0, 50.0, 100.0, 200.0,
                                                                                         300.0))}
    # chat, tok/s/user (tok/s): ddtree-b4 C=16 125 (2000) is the most throughput at >= 100 and >= 50; at >= 20 the
    # C=64 cells qualify and ddtree-b4's 45.5 (2909) beats ar's 40 (2560); at >= 200 only C=1 cells and dflash C=4
    # (200, 800) do
    assert rows[(CHAT, 100.0)] == ("ddtree-b4", 16)
    assert rows[(CHAT, 50.0)] == ("ddtree-b4", 16)
    assert rows[(CHAT, 20.0)] == ("ddtree-b4", 64)
    assert rows[(CHAT, 200.0)] == ("dflash", 4)
    assert rows[(CHAT, 300.0)] is None                      # nobody reaches 300 (fastest: dflash C=1 at 250)
    table, left_out = series(run, "b300-lab")
    assert set(table) == {CHAT, CODE} and left_out == []
    assert [p["C"] for p in table[CHAT]["dflash"]] == [1, 4, 16, 64]
    assert per_gpu_label(run) == "output tok/s per GPU"


def test_unknown_gpu_count_is_per_host_and_said(tmp_path):
    run = synthetic_run(tmp_path, gpus="none", power_gpus=None)
    assert per_gpu_label(run) == "output tok/s per host (GPU count unknown)"
    text = render_report(run)
    assert "against output tok/s per host (GPU count unknown)" in text


def test_report_reads_top_to_bottom_with_frontier_goodput_and_power(tmp_path):
    run_dir = tmp_path / "demo"
    synthetic_run(tmp_path)
    assert main([str(run_dir), "--group-vars-dir", str(tmp_path), "--interactivity-targets", "20,50,100"]) == 0
    text = (run_dir / "report.md").read_text()
    png = run_dir / "plots" / "throughput_vs_interactivity.png"
    assert png.stat().st_size > 10000
    order = [text.index(h) for h in ("## Summary", "**Verdict:", "## Throughput against interactivity",
                                     "![throughput_vs_interactivity](plots/throughput_vs_interactivity.png)",
                                     "## Goodput and power", "# Details", "## Speedup over autoregressive",
                                     "## Winner", "## Config `autoregressive`")]
    assert order == sorted(order)
    assert "Autoregressive baseline: `autoregressive`. Speculative configs: `dflash`, `ddtree-b4`." in text
    assert "| prompts/chat | 100 | `ddtree-b4` | 16 | 250.0 | 125.0 |" in text
    assert "TTFT <= 2000 ms, TPOT <= 20 ms" in text
    assert "| `dflash` | prompts/chat C=64 | 2133.3 | 25% |" in text
    assert "Power not measured" not in text
    (tmp_path / "report-for-review.md").write_text(text)


def test_no_power_is_said_once_not_per_row(tmp_path):
    cells = synthetic_cells()
    for c in cells:
        c.update(power_mean_w=None, power_max_w=None, power_limit_w=None, power_gpus=None,
                 output_tokens_per_joule=None, power_reason="no nvidia-smi on the host")
    configs = [config_row(n, host="b300-lab", baseline=(n == "autoregressive"), spec=SPEC[n]) for n in TPOT]
    text = render_report(load_run(write_run(tmp_path / "r", cells, configs)))
    assert text.count("no nvidia-smi on the host") == 1
    assert "Power not measured: no nvidia-smi on the host." in text


def test_cli_refuses_bad_targets(tmp_path, capsys):
    synthetic_run(tmp_path)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "demo"), "--interactivity-targets", "20,-5"])
    assert "targets must be positive" in capsys.readouterr().err
    assert json.dumps(1)
