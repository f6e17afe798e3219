"""reporting: report.md (summary, best highlighted, failures with reasons) and PNG plots from JSONL rows."""
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from reporting import load_run, render_report
from reporting.status import best_config, config_status

ROOT = Path(__file__).resolve().parents[3]


def cell(config, ctx, conc, tps, status="ok", accept=None, host="b300-lab", error=""):
    return {"kind": "cell", "run": "r", "config": config, "host": host, "cell": f"ctx{ctx}_c{conc}",
            "context_length": ctx, "max_concurrency": conc, "status": status, "error": error,
            "output_throughput": tps if status == "ok" else None, "mean_ttft_ms": 40.0, "p99_ttft_ms": 41.0,
            "median_itl_ms": 8.0, "p99_itl_ms": 9.0, "mean_tpot_ms": 8.1, "accept_length": accept,
            "completed": 4, "failed": 0, "provenance": {"host_group": "nvlink", "flags": ["--tp-size", "8"]}}


def outcome(config, status, budget=None, step=None, reason="", journal="", **extra):
    row = {"kind": "config", "run": "r", "config": config, "host": "b300-lab", "status": status,
           "spec": {"algorithm": "DDTREE" if budget else "NONE", "budget": budget, "topk": 4},
           "failed_step": step, "reason": reason, "journal": journal, "time_to_ready_s": 3.2}
    row.update(extra)
    return row


@pytest.fixture
def sweep_dir(tmp_path):
    run = tmp_path / "sweep-1"
    (run / "b300-lab").mkdir(parents=True)
    cells = []
    for name, base, acc in (("budget8", 100.0, 4.48), ("budget4", 80.0, 3.1)):
        for ctx in (60, 1024):
            for conc in (1, 8, 32):
                cells.append(cell(name, ctx, conc, base * conc / (1 + ctx / 1024), accept=acc))
        (run / "b300-lab" / f"{name}.jsonl").write_text("\n".join(json.dumps(c) for c in cells if c["config"] == name))
    outcomes = [
        outcome("budget8", "ok", 8), outcome("budget4", "ok", 4),
        outcome("budget16-graphs", "failed", 16, "ready", "unit failed during init: exit 1",
                ["Nov 29 sglang[12]: Load weight end.", "Nov 29 sglang[12]: RuntimeError: CUDA graph capture failed (sm_103, budget 16)"]),
        outcome("garbage", "failed", 12, "smoke", "degenerate output: replacement characters in 3/3 answers"),
        outcome("baseline", "ok", None, phase="restore", pid=4242),
        {"kind": "config", "config": "_sweep", "phase": "sweep_total", "status": "ok", "elapsed_s": 95.0,
         "bound_s": 1200},
    ]
    (run / "sweep.jsonl").write_text("\n".join(json.dumps(o) for o in outcomes) + "\nnot json\n")
    return run


def test_statuses_and_best(sweep_dir):
    run = load_run(sweep_dir)
    assert len(run.cells) == 12
    assert config_status(run, "budget8") == "ok"
    assert config_status(run, "garbage") == "failed"
    assert best_config(run) == "budget8"
    assert run.problems and "not JSON" in run.problems[0]


def test_report_content(sweep_dir):
    text = render_report(load_run(sweep_dir))
    assert "**2 ok, 2 failed** of 4 config(s). Highest peak throughput: **budget8**" in text
    assert "| **budget8** ★ | ok |" in text
    assert "unit failed during init: exit 1" in text
    assert "CUDA graph capture failed" in text            # journal excerpt shown
    assert "FAILED at step `smoke`" in text
    assert "Baseline `baseline`: restored and ready in 3.2 s (pid 4242)." in text
    assert "Sweep wall time: 95.0 s (bound 1200 s)." in text
    assert "## Config `budget4`" in text and "## Provenance" in text
    # The best cell (budget8, ctx 60, C 32) is bold in the summary and in its config table.
    best = f"**{100.0 * 32 / (1 + 60 / 1024):.1f}**"
    assert text.count(best) == 2


def read_png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_cli_writes_report_and_plots(sweep_dir):
    proc = subprocess.run([sys.executable, "-m", "reporting", str(sweep_dir)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                       "MPLCONFIGDIR": str(sweep_dir / ".mpl")})
    assert proc.returncode == 0, proc.stderr
    report = sweep_dir / "report.md"
    assert proc.stdout.splitlines() == [str(report), str(sweep_dir / "proposal.yml")]
    text = report.read_text()
    assert "![throughput_vs_concurrency](plots/throughput_vs_concurrency.png)" in text
    assert "![accept_throughput_vs_budget](plots/accept_throughput_vs_budget.png)" in text
    w, h = read_png_size(sweep_dir / "plots" / "throughput_vs_concurrency.png")
    assert w >= 600 and h >= 400
    read_png_size(sweep_dir / "plots" / "accept_throughput_vs_budget.png")


def test_cli_errors(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    missing = subprocess.run([sys.executable, "-m", "reporting", str(tmp_path / "nope")], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "no such run directory" in missing.stderr
    empty = subprocess.run([sys.executable, "-m", "reporting", str(tmp_path)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert empty.returncode == 2 and "no result rows" in empty.stderr


def test_plain_bench_run_without_sweep_outcomes(tmp_path):
    (tmp_path / "h.jsonl").write_text("\n".join(json.dumps(cell("default", 60, c, 10.0 * c)) for c in (1, 8))
                                      + "\n" + json.dumps(cell("default", 60, 64, 0, status="timeout",
                                                                error="cell exceeded its 5s bound")))
    run = load_run(tmp_path)
    assert config_status(run, "default") == "partial"
    text = render_report(run)
    assert "timeout: cell exceeded its 5s bound" in text
    assert best_config(run) == "default"


def test_two_hosts_are_reported_separately(tmp_path):
    rows = [cell("cfg", 60, 1, 100.0, host="b300-lab"), cell("cfg", 60, 8, 700.0, host="b300-lab"),
            cell("cfg", 60, 1, 50.0, host="ct200-lab"), cell("cfg", 60, 8, 0, status="error", host="ct200-lab",
                                                              error="warmup failed: HTTP 500")]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    text = render_report(load_run(tmp_path))
    assert "## Host b300-lab" in text and "## Host ct200-lab" in text
    b300, ct200 = text.split("## Host ct200-lab")
    assert "**700.0**" in b300 and "700.0" not in ct200
    assert "PARTIAL" in ct200 or "partial" in ct200
    assert "error: warmup failed: HTTP 500" in ct200
    assert "### Config `cfg`" in ct200


def test_plain_bench_spec_comes_from_the_running_flags(tmp_path):
    row = cell("default", 60, 1, 10.0)
    row["provenance"]["flags"] = ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "DDTREE",
                                  "--speculative-dflash-block-size", "8", "--speculative-ddtree-budget=8",
                                  "--speculative-ddtree-topk-cap", "4"]
    (tmp_path / "r.jsonl").write_text(json.dumps(row))
    text = render_report(load_run(tmp_path))
    assert "| **default** ★ | ok | DDTREE | 8 | 4 | 8 | yes |" in text
