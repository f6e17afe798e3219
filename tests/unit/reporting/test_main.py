"""`python -m reporting RUN_DIR [--slo-ttft-p99-ms X] [--slo-itl-p99-ms Y] [--group-vars-dir DIR] [--no-plots]`:
report and proposal paths on stdout, exit 0 when written (no winner included), 2 for bad input; the speedup PNG."""
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from reporting import load_run
from reporting.plots import speedup_vs_concurrency
from tests.helpers.reporting_rows import RANDOM, cell, config_row, sweep_rows, write_run

ROOT = Path(__file__).resolve().parents[3]


def cli(*args, tmp):
    return subprocess.run([sys.executable, "-m", "reporting", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                       "MPLCONFIGDIR": str(tmp / ".mpl")})


@pytest.fixture
def sweep(tmp_path):
    cells, configs = sweep_rows()
    gv = tmp_path / "gv" / "nvlink"
    gv.mkdir(parents=True)
    (gv / "sglang_service.yml").write_text("sglang_service_speculative_profile:\n  algorithm: NONE\n")
    return write_run(tmp_path / "sweep-x", cells, configs), tmp_path / "gv"


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_cli_writes_report_proposal_and_speedup_plot(sweep, tmp_path):
    run_dir, gv = sweep
    proc = cli(run_dir, "--group-vars-dir", gv, tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(run_dir / "report.md"), str(run_dir / "proposal.yml")]
    text = (run_dir / "report.md").read_text()
    for section in ("## Speedup over autoregressive", "## Winner", "## Disqualified", "## Shrinking-batch soak",
                    "## Acceptance", "## Summary", "## Provenance", "## Proposal"):
        assert section in text
    assert "![speedup_vs_concurrency](plots/speedup_vs_concurrency.png)" in text
    w, h = png_size(run_dir / "plots" / "speedup_vs_concurrency.png")
    assert w >= 1000 and h >= 350                         # two workload panels side by side
    png_size(run_dir / "plots" / "throughput_vs_concurrency.png")
    proposal = yaml.safe_load((run_dir / "proposal.yml").read_text())
    assert proposal["groups"]["nvlink"]["winner"] == "dd8"
    assert "-algorithm: NONE\n+algorithm: DDTREE\n+budget: 8\n+block_size: 8" in proposal["groups"]["nvlink"]["diff"]


def test_cli_slo_without_winner_still_exits_0(sweep, tmp_path):
    run_dir, gv = sweep
    proc = cli(run_dir, "--slo-ttft-p99-ms", "5", "--slo-itl-p99-ms", "7", "--group-vars-dir", gv, "--no-plots",
               tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (run_dir / "plots").exists()
    text = (run_dir / "report.md").read_text()
    assert "no config meets the SLO (ttft p99 <= 5 ms, itl p99 <= 7 ms)" in text
    proposal = yaml.safe_load((run_dir / "proposal.yml").read_text())
    assert proposal["objective"] == {"mode": "slo", "slo_ttft_p99_ms": 5.0, "slo_itl_p99_ms": 7.0,
                                     "slo_tpot_p99_ms": None}
    assert proposal["groups"]["nvlink"]["winner"] is None


@pytest.mark.parametrize("args, message", [
    (("--slo-ttft-p99-ms", "-5"), "must be a positive number"),
    (("--slo-itl-p99-ms", "fast"), "not a number"),
    (("--group-vars-dir", "/nonexistent/gv"), "no such group_vars directory"),
])
def test_cli_bad_input(sweep, tmp_path, args, message):
    run_dir, _ = sweep
    proc = cli(run_dir, *args, "--no-plots", tmp=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (run_dir / "report.md").exists() and not (run_dir / "proposal.yml").exists()


def test_cli_missing_dir_and_no_rows(tmp_path):
    missing = cli(tmp_path / "nope", tmp=tmp_path)
    assert missing.returncode == 2 and "no such run directory" in missing.stderr
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.jsonl").write_text(json.dumps({"kind": "other"}) + "\n")
    empty = cli(tmp_path / "empty", tmp=tmp_path)
    assert empty.returncode == 2 and "no result rows" in empty.stderr


def test_speedup_plot_needs_a_baseline(tmp_path):
    rows = [cell("dd", RANDOM, c, 10.0 * c) for c in (1, 8)]
    run = load_run(write_run(tmp_path / "r", rows, [config_row("dd")]))
    assert speedup_vs_concurrency(run, tmp_path / "s.png") is None and not (tmp_path / "s.png").exists()
    rows += [cell("ar", RANDOM, c, 5.0 * c) for c in (1, 8)]
    run = load_run(write_run(tmp_path / "r2", rows, [config_row("ar", baseline=True), config_row("dd")]))
    out = speedup_vs_concurrency(run, tmp_path / "s.png")
    assert out == tmp_path / "s.png"
    w, h = png_size(out)
    assert (w, h) == (600, 400)                           # one panel: 6 x 4 inches at 100 dpi
