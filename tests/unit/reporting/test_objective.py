"""The objective: per-cell winners, the geomean winner, SLO mode, "no config meets the SLO", disqualification with its
evidence in the report, and the rule that a speculative config must beat the baseline."""
import pytest

from reporting import load_run, render_report
from reporting.objective import KEEP, Objective, decide, disqualifications, per_cell_winners
from tests.helpers.reporting_rows import CODE, RANDOM, cell, config_row, sweep_rows, write_run


@pytest.fixture
def run(tmp_path):
    cells, configs = sweep_rows()
    return load_run(write_run(tmp_path / "sweep-x", cells, configs))


def small_run(tmp_path, table, configs=None, **cell_extra):
    """table: {config: {C: tps}} on RANDOM; "ar" is the baseline."""
    rows = [cell(n, RANDOM, c, t, **cell_extra) for n, series in table.items() for c, t in series.items()]
    configs = configs or [config_row(n, baseline=(n == "ar"), spec={"algorithm": "NONE" if n == "ar" else "DDTREE"})
                          for n in table]
    return load_run(write_run(tmp_path / "r", rows, configs))


def test_per_cell_winners_skip_disqualified(run):
    winners = per_cell_winners(run, "h1")
    assert winners[(CODE, 1)] == ("dd16", 300.0)
    assert winners[(CODE, 8)] == ("dd8", 900.0)
    assert winners[(CODE, 64)] == ("ar", 2000.0)
    assert winners[(RANDOM, 64)] == ("dd8", 2200.0)
    # eagle (5000 tok/s, degenerate) and soakfail (9000 tok/s, soak failed) never win a cell
    assert {name for name, _ in winners.values()} == {"ar", "dd8", "dd16"}


def test_geomean_winner(run):
    d = decide(run, ["h1"])
    assert d.winner == "dd8" and not d.keep
    assert d.baseline == "ar"
    assert d.scores["dd8"] == pytest.approx((2.5 * 1.5 * 0.9) ** (1 / 3))      # real text only (code)
    assert d.scores["ar"] == pytest.approx(1.0)
    assert d.scores["dd16"] == pytest.approx((3.0 * 0.8 * 0.5) ** (1 / 3))
    assert set(d.scores) == {"ar", "dd8", "dd16"}
    assert sorted(d.disqualified) == ["broken", "eagle", "soakfail"]
    assert "1.500x over the baseline ar" in d.reason


def test_ties_by_name(tmp_path):
    r = small_run(tmp_path, {"ar": {1: 100.0, 8: 400.0}, "zeta": {1: 200.0, 8: 800.0}, "alpha": {1: 200.0, 8: 800.0}})
    d = decide(r, ["h1"])
    assert d.scores["alpha"] == pytest.approx(2.0) and d.scores["zeta"] == pytest.approx(2.0)
    assert d.winner == "alpha"


def test_speculative_must_beat_the_baseline(tmp_path):
    # geomean of dd exactly 1.0 (2.0 at C=1, 0.5 at C=8): not a win; the baseline is kept.
    r = small_run(tmp_path, {"ar": {1: 100.0, 8: 400.0}, "dd": {1: 200.0, 8: 200.0}})
    d = decide(r, ["h1"])
    assert d.scores["dd"] == pytest.approx(1.0)
    assert d.winner == "ar" and d.keep
    assert d.reason.startswith(KEEP) and "best speculative: dd at 1.000x" in d.reason
    text = render_report(r)
    assert "**Overall winner: `ar`** (keep autoregressive / keep current)." in text


def test_config_missing_a_baseline_cell_is_not_ranked(tmp_path):
    r = small_run(tmp_path, {"ar": {1: 100.0, 8: 400.0}, "dd": {1: 300.0}})
    d = decide(r, ["h1"])
    assert d.winner == "ar"
    assert "dd" not in d.scores
    assert d.not_ranked["dd"] == "no ok cell at 1 (workload, C) the baseline measured: random-ids/ctx1024 C=8"


def test_slo_winner(run):
    objective = Objective.from_bounds(ttft_p99_ms=100.0)
    assert objective.mode == "slo"
    d = decide(run, ["h1"], objective)
    # goodput: every request of a cell has the cell's TTFT, so C=1 (10 ms) and C=8 (80 ms) are all good, C=64 none.
    # Best on the real-text workload (code; random ids do not rank), in good req/s (100 tokens a request):
    # ar 600 tok/s = 6 req/s, dd8 9, dd16 4.8
    assert d.absolute["ar"] == pytest.approx(6.0)
    assert d.absolute["dd8"] == pytest.approx(9.0)
    assert d.scores["dd8"] == pytest.approx(900.0 / 600.0)
    assert d.scores["dd16"] == pytest.approx(480.0 / 600.0)
    assert d.winner == "dd8" and not d.no_slo


def test_slo_itl_bound_changes_the_winner(tmp_path):
    # dd is faster but its itl p99 is 30 ms; with itl p99 <= 20 ms only ar qualifies -> the baseline is kept.
    rows = [cell("ar", RANDOM, c, 100.0 * c, itl=10.0) for c in (1, 8)] + \
           [cell("dd", RANDOM, c, 300.0 * c, itl=30.0) for c in (1, 8)]
    r = load_run(write_run(tmp_path / "r", rows, [config_row("ar", baseline=True), config_row("dd")]))
    assert decide(r, ["h1"]).winner == "dd"
    d = decide(r, ["h1"], Objective.from_bounds(itl_p99_ms=20.0))
    assert d.winner == "ar" and d.keep
    assert "no good request under the SLO (itl p99 <= 20 ms) in random-ids/ctx1024" == d.not_ranked["dd"]


def test_slo_baseline_misses_it_speculative_meets_it(tmp_path):
    rows = [cell("ar", RANDOM, c, 100.0 * c, itl=50.0) for c in (1, 8)] + \
           [cell("dd", RANDOM, c, 80.0 * c, itl=15.0) for c in (1, 8)]
    r = load_run(write_run(tmp_path / "r", rows, [config_row("ar", baseline=True), config_row("dd")]))
    d = decide(r, ["h1"], Objective.from_bounds(itl_p99_ms=20.0))
    assert d.winner == "dd"
    assert d.absolute["dd"] == pytest.approx(6.4)   # 640 tok/s at C=8, 100 tokens a request
    assert "does not meet the SLO" in d.reason


def test_no_config_meets_the_slo(run):
    objective = Objective.from_bounds(ttft_p99_ms=5.0, itl_p99_ms=7.0)
    d = decide(run, ["h1"], objective)
    assert d.winner is None and d.no_slo
    assert d.reason == "no config meets the SLO (ttft p99 <= 5 ms, itl p99 <= 7 ms)"
    text = render_report(run, objective=objective)
    assert "**no config meets the SLO (ttft p99 <= 5 ms, itl p99 <= 7 ms).** Closest cell per config:" in text
    assert "- `dd8`: prompts/code C=1: 250.0 tok/s, ttft p99 10.0 ms, itl p99 6.00 ms" in text
    assert "- `dd16`: prompts/code C=1: 300.0 tok/s, ttft p99 10.0 ms, itl p99 6.00 ms" in text
    assert "**No overall winner**: no config meets the SLO" in text


def test_bounds_are_checked():
    with pytest.raises(ValueError):
        Objective.from_bounds(ttft_p99_ms=-1.0)
    with pytest.raises(ValueError):
        Objective.from_bounds(itl_p99_ms=float("nan"))
    assert Objective.from_bounds().mode == "throughput"
    assert Objective.from_bounds(itl_p99_ms=20).bounds_text() == "itl p99 <= 20 ms"


def test_disqualification_evidence(run):
    disq = disqualifications(run, "h1")
    assert list(disq) == ["eagle", "soakfail", "broken"]
    assert disq["eagle"][0]["kind"] == "degenerate"
    assert [e["reason"] for e in disq["eagle"][0]["evidence"]] == ["repeated character run", "replacement characters"]
    assert disq["eagle"][0]["why"] == ("degenerate output: 2 of 4 sampled outputs flagged in prompts/code C=8; "
                                       "first: repeated character run")
    assert disq["soakfail"][0]["kind"] == "soak"
    assert "CUDA error: an illegal memory access" in disq["soakfail"][0]["journal"]
    assert disq["broken"][0]["why"] == "sweep failed at step ready: unit failed during init: exit 1"


def test_disqualified_section_in_report(run):
    text = render_report(run)
    section = text.split("## Disqualified")[1].split("## Shrinking-batch soak")[0]
    assert "### `eagle`" in section and "### `soakfail`" in section and "### `broken`" in section
    assert "Flagged (repeated character run) at prompts/code C=8:" in section
    assert "!!!!!!!!!!!!!!!!!!!!" in section
    assert "- soak: shrinking-batch soak failed (steps C=[64, 8]): server died at C=8" in section
    assert "Nov 30 sglang[9]: RuntimeError: graph capture failed" in section
    assert "### `dd8`" not in section
    # the summary no longer crowns a disqualified config by its peak, and a failed soak counts as failed
    assert "**3 ok, 2 failed, 1 disqualified** of 6 config(s). Highest peak throughput: **dd8**" in text
    assert "| soakfail | FAILED |" in text and "soak failed: server died at C=8" in text
    assert "| eagle | DISQUALIFIED |" in text


def test_degenerate_soak_cell_disqualifies(tmp_path):
    rows = [cell("ar", RANDOM, 1, 100.0), cell("dd", RANDOM, 1, 300.0),
            cell("dd", RANDOM, 1, 300.0, phase="soak",
                 degenerate={"checked": 2, "flagged": 1, "evidence": [{"text": "aaaa", "reason": "loop"}]})]
    r = load_run(write_run(tmp_path / "r", rows, [config_row("ar", baseline=True), config_row("dd")]))
    d = decide(r, ["h1"])
    assert list(d.disqualified) == ["dd"]
    assert "random-ids/ctx1024 C=1 (soak)" in d.disqualified["dd"][0]["why"]
    assert d.winner == "ar" and d.keep


def test_soak_failure_as_the_bench_records_it(tmp_path):
    """The sweep's own shape: the config row failed at step soak, its soak {status, error, concurrency, ...}, the
    journal on the config row; the soak cell has status error and a request count (not a list)."""
    rows = [cell("ar", RANDOM, 1, 100.0), cell("dd", RANDOM, 1, 300.0),
            {"kind": "cell", "phase": "soak", "config": "dd", "host": "h1", "workload": RANDOM, "cell": "soak_c32",
             "max_concurrency": 32, "status": "error", "error": "the service did not survive the shrinking batch",
             "requests": 32, "failed": 5}]
    configs = [config_row("ar", baseline=True),
               config_row("dd", "failed", failed_step="soak", reason="shrinking-batch soak (32 requests) failed",
                          journal=["x sglang[1]: batch 3", "x sglang[1]: Segmentation fault"],
                          soak={"status": "failed", "error": "the service did not survive the shrinking batch",
                                "concurrency": 32, "rounds": 1, "requests": 32, "failed": 5})]
    r = load_run(write_run(tmp_path / "r", rows, configs))
    d = decide(r, ["h1"])
    assert [i["kind"] for i in d.disqualified["dd"]] == ["soak"]
    item = d.disqualified["dd"][0]
    assert item["why"] == ("shrinking-batch soak failed (steps C=[32, 1]): the service did not survive the "
                           "shrinking batch")
    assert item["journal"].endswith("x sglang[1]: Segmentation fault")
    assert d.winner == "ar" and d.keep
    text = render_report(r)
    soak = text.split("## Shrinking-batch soak")[1].split("## Acceptance")[0]
    assert "| `dd` | 32 → 1 | failed | C=32: error: the service did not survive the shrinking batch | 0 |" in soak
    assert "Soak of `dd` FAILED: the service did not survive the shrinking batch" in soak
    assert "x sglang[1]: Segmentation fault" in soak


def test_degenerate_output_the_baseline_shares_is_the_models_not_the_configs(tmp_path):
    # Real SGLang on the H200: the 135M model loops ("Monday, Monday, ...") on one chat prompt under NONE, DFLASH and
    # NGRAM alike. Speculative decoding is lossless under greedy decoding: that loop is the model's. A loop only the
    # speculative config shows (C=8) still disqualifies it.
    loop = {"checked": 4, "flagged": 1, "evidence": [{"text": "Monday, " * 12, "reason": "repetition loop"}]}
    clean = {"checked": 4, "flagged": 0, "evidence": []}
    rows = [cell("ar", CODE, 1, 100.0, degenerate=loop), cell("ar", CODE, 8, 500.0, degenerate=clean),
            cell("ng", CODE, 1, 150.0, degenerate=loop), cell("ng", CODE, 8, 600.0, degenerate=clean),
            cell("dd", CODE, 1, 200.0, degenerate=loop), cell("dd", CODE, 8, 900.0, degenerate=loop)]
    configs = [config_row("ar", baseline=True), config_row("ng"), config_row("dd")]
    r = load_run(write_run(tmp_path / "r", rows, configs))
    dq = disqualifications(r, "h1")
    assert list(dq) == ["dd"]
    assert "prompts/code C=8" in dq["dd"][0]["why"] and "C=1" not in dq["dd"][0]["why"]
    assert decide(r, ["h1"]).winner == "ng"


def test_a_loop_on_the_prompt_the_baseline_loops_on_is_excused_at_any_concurrency(tmp_path):
    # The H200 sweep (rehearsal h200-2026-12-04d): NGRAM's and DFLASH's outputs of chat-interview looped ("On Monday,
    # Monday, ...") at C=1 and C=8, and both were disqualified: the baseline's sampled outputs never included that
    # prompt. Every config now checks every prompt, each flag names its prompt: the baseline's loop on chat-interview
    # (here seen at C=8 only) excuses the same prompt under any config at any C; a loop on another prompt does not.
    def loops(*pids):
        return {"checked": 10, "flagged": len(pids), "flagged_prompts": list(pids),
                "evidence": [{"text": "On Monday, " * 12, "reason": "repetition loop", "prompt_id": p} for p in pids]}
    rows = [cell("ar", CODE, 1, 100.0, degenerate=loops()), cell("ar", CODE, 8, 500.0, degenerate=loops("interview")),
            cell("ng", CODE, 1, 150.0, degenerate=loops("interview")), cell("ng", CODE, 8, 700.0, degenerate=loops()),
            cell("dd", CODE, 1, 200.0, degenerate=loops("interview", "plants")),
            cell("dd", CODE, 8, 900.0, degenerate=loops("interview"))]
    configs = [config_row("ar", baseline=True), config_row("ng"), config_row("dd")]
    r = load_run(write_run(tmp_path / "r", rows, configs))
    dq = disqualifications(r, "h1")
    assert list(dq) == ["dd"]                               # under the (workload, C) rule ng was disqualified too
    assert dq["dd"][0]["why"].startswith("degenerate output: 1 of 10 sampled outputs flagged in prompts/code C=1")
    assert [e["prompt_id"] for e in dq["dd"][0]["evidence"]] == ["plants"]
    assert decide(r, ["h1"]).winner == "ng"
    text = render_report(r)
    assert "| **ng** ★ | ok |" in text and "| dd | DISQUALIFIED |" in text
    loops_table = text.split("The model's own loops")[1].split("\n\n##")[0]
    assert "| prompts/code | `interview` | `dd`, `ng` |" in loops_table
    assert "at prompts/code C=1 prompt `plants`:" in text
