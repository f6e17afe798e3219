"""report.md's lossless gate section (reporting/lossless_section.py): the factor and its source, the baseline's
self-agreement, per config and workload the agreement against its floor and the verdict, and the diverging prompt
with both texts; the whole report and the CLI's lossless.json carry it."""
import json
import subprocess
import sys
from pathlib import Path

from reporting.lossless_section import lossless_section
from reporting.render import render_report
from tests.helpers.reporting_rows import write_run
from tests.unit.reporting.test_lossless import TEXTS, WRONG, base_gates, gate, run_with

ROOT = Path(__file__).resolve().parents[3]


def test_section_names_the_diverging_prompt_position_and_texts():
    text = "\n".join(lossless_section(run_with(base_gates() + [gate("dd8", WRONG), gate("dd16", TEXTS)]), "h1"))
    assert "## Lossless gate" in text
    assert "below **0.75** x the baseline's agreement with itself there (recorded by the sweep: " \
           "sglang_bench_lossless_min_agreement)" in text
    assert "Baseline against itself (C=1 vs C=16, batch-dependent numerics): agreement **1.00**" in text
    assert "| dd8 | prompts/code | 2/4 | 0.50 | 0.56 / 0.75 | **NOT LOSSLESS** | prompt #0 (p0): first difference " \
           "at token 1, char 4 |" in text
    assert "| dd16 | prompts/code | 4/4 | 1.00 | 1.00 / 0.75 | lossless |  |" in text
    assert "`dd8` on prompts/code, prompt #0 (p0): first difference at token 1, char 4. Prompt: prompt 0" in text
    assert "baseline: the keeper counted waves\nconfig:   the lamp burned all night" in text


def test_the_floor_follows_the_baselines_own_agreement():
    """The baseline disagrees with itself from token 1 on half its prompts: the floor drops with it (0.75 x 0.56)."""
    run = run_with([gate("ar", TEXTS), gate("ar", WRONG, "self_check", 16), gate("dd8", WRONG)])
    text = "\n".join(lossless_section(run, "h1"))
    assert "agreement **0.56**, equal outputs 0.50" in text and "| 0.56 / 0.42 | lossless |" in text


def test_without_self_check_the_section_says_the_tolerance_is_unbacked():
    text = "\n".join(lossless_section(run_with([gate("ar", TEXTS), gate("dd16", TEXTS)]), "h1"))
    assert "Baseline against itself: not measured" in text


def test_report_summary_and_disqualified_sections_show_the_verdict():
    report = render_report(run_with(base_gates() + [gate("dd8", WRONG), gate("dd16", TEXTS)]))
    assert "| dd8 | DISQUALIFIED |" in report and "not lossless (see Lossless gate)" in report
    assert "- not_lossless: not lossless: prompts/code: agreement 0.56 < floor 0.75 (2 of 4 greedy outputs equal" \
        in report


def test_cli_writes_lossless_json_and_takes_a_tolerance(tmp_path):
    run = run_with(base_gates() + [gate("dd8", WRONG)])
    run_dir = write_run(tmp_path / "sweep-x", run.cells + run.gate, run.configs)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLCONFIGDIR": str(tmp_path / ".mpl")}
    cmd = [sys.executable, "-m", "reporting", str(run_dir), "--no-plots"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads((run_dir / "lossless.json").read_text())
    assert doc["hosts"]["h1"]["configs"]["dd8"]["lossless"] is False and doc["hosts"]["h1"]["tolerance"] == 0.75
    done = subprocess.run(cmd + ["--lossless-min-agreement", "0.5"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert json.loads((run_dir / "lossless.json").read_text())["hosts"]["h1"]["configs"]["dd8"]["lossless"] is True
    bad = subprocess.run(cmd + ["--lossless-min-agreement", "1.5"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env=env)
    assert bad.returncode == 2 and "between 0 and 1" in bad.stderr
