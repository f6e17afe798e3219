"""The bench client's rows recorded against real SGLang 0.5.11 on the H200 (tests/fixtures/real_sglang/0.5.11/bench,
made by bench_real.py: NONE, DFLASH with a random 1-layer drafter, NGRAM; SmolLM2-135M-Instruct, triton attention,
the shipped prompt sets through the model's own chat template, random ids, C 1 and 4, then the soak).

What the real server taught, kept as tests: each request's own spec_accept_length is completion_tokens /
spec_verify_ct exactly (so the cell's figure is the requests' totals, weighted); acceptance differs by workload and
the mean of the requests' figures is not the cell's; /server_info's running average is neither; and real NGRAM counts
accepted drafts past max_new_tokens, so `completion = 1 + verify + accepted` (the stand-in's identity) does not hold
for a request cut by its length limit, which is why the bench's accept length never uses spec_accepted_drafts.
"""
import json
from pathlib import Path

import pytest

from reporting import load_run
from reporting.objective import decide, disqualifications

BENCH = Path(__file__).resolve().parents[2] / "fixtures/real_sglang/0.5.11/bench"


def rows(name):
    return [json.loads(line) for line in (BENCH / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def matrix(name):
    return [r for r in rows(name) if r.get("phase") != "soak"]


@pytest.mark.parametrize("name", ["dflash", "ngram"])
def test_each_request_figure_is_completion_over_verify_steps(name):
    checked = 0
    for row in matrix(name):
        for req in row["requests"]:
            if req["success"] and req["spec_verify_ct"]:
                checked += 1
                assert req["completion_tokens"] / req["spec_verify_ct"] == pytest.approx(req["spec_accept_length"],
                                                                                        abs=1e-12)
    assert checked == 80


@pytest.mark.parametrize("name", ["dflash", "ngram"])
def test_cell_figure_is_the_requests_totals(name):
    for row in matrix(name):
        reqs = [q for q in row["requests"] if q["success"] and q["spec_verify_ct"]]
        assert row["accept_length_source"] == "per_request"
        assert row["accept_length"] == pytest.approx(sum(q["completion_tokens"] for q in reqs)
                                                     / sum(q["spec_verify_ct"] for q in reqs))


def test_real_acceptance_differs_by_workload_and_is_not_the_running_average():
    cells = {r["cell"]: r for r in matrix("ngram")}
    figures = [r["accept_length"] for r in cells.values()]
    assert max(figures) / min(figures) > 3            # 1.35 (chat, C=1) to 5.63 (random ids, C=1)
    chat = cells["chat_c4"]
    mean_of_means = sum(q["spec_accept_length"] for q in chat["requests"]) / len(chat["requests"])
    assert abs(mean_of_means - chat["accept_length"]) / chat["accept_length"] > 0.5   # 6.62 vs 3.71
    report = json.loads((BENCH / "ngram.json").read_text())
    assert all(abs(report["avg_after"] - f) / f > 0.02 for f in figures)              # 2.74: no cell's figure


def test_real_ngram_counts_accepted_drafts_past_the_length_limit():
    over = [q for r in matrix("ngram") for q in r["requests"]
            if q["spec_verify_ct"] and q["completion_tokens"] != 1 + q["spec_verify_ct"] + q["spec_accepted_drafts"]]
    assert over, "the recording shows the overshoot"
    assert {q["completion_tokens"] for q in over} == {64}       # only requests stopped by max_new_tokens (64)
    assert all(q["spec_accepted_drafts"] > q["completion_tokens"] - 1 - q["spec_verify_ct"] for q in over)


def test_rows_say_how_prompts_were_made_and_the_soak_held():
    for name in ("none", "dflash", "ngram"):
        all_rows = rows(name)
        text = [r for r in all_rows if r["workload"].startswith("prompts/") and r.get("phase") != "soak"]
        assert text and all("chat template of" in r["prompt_format"] and "(transformers)" in r["prompt_format"]
                            for r in text)
        soak = [r for r in all_rows if r.get("phase") == "soak"]
        assert len(soak) == 1 and soak[0]["status"] == "ok" and soak[0]["requests"] == 16


def test_the_models_own_loop_disqualifies_no_config(tmp_path):
    # the 135M model loops on one chat prompt under NONE, DFLASH and NGRAM alike: the model's, not a config's
    run_dir = tmp_path / "h200"
    (run_dir / "h200").mkdir(parents=True)
    configs = []
    for i, (name, algo) in enumerate((("none", "NONE"), ("dflash", "DFLASH"), ("ngram", "NGRAM"))):
        data = rows(name)
        assert any((r.get("degenerate") or {}).get("flagged") for r in data if r["workload"] == "prompts/chat")
        (run_dir / "h200" / f"{name}.jsonl").write_text("".join(json.dumps(dict(r, config=name)) + "\n" for r in data))
        configs.append({"kind": "config", "config": name, "host": "h200", "status": "ok", "baseline": i == 0,
                        "spec": {"algorithm": algo}, "host_group": "h200", "overrides": {}})
    (run_dir / "h200" / "sweep.jsonl").write_text("".join(json.dumps(c) + "\n" for c in configs))
    run = load_run(run_dir)
    assert disqualifications(run, "h200") == {}
    decision = decide(run, ["h200"])
    # the random drafter makes DFLASH ~0.3x; NGRAM's geomean over the cells decides against or for it, never DFLASH
    assert decision.winner in ("none", "ngram")


def test_bench_serving_ran_offline_on_a_dataset_path():
    # third device call: the kit plus `datasets` (which 0.5.11's bench_serving imports), HF_HUB_OFFLINE=1, no network
    got = rows("dflash-bench_serving")
    assert [r["cell"] for r in got] == ["ds-sharegpt-mini_c1", "ds-sharegpt-mini_c4"]
    for r in got:
        assert r["status"] == "ok" and r["bench_client"] == "sglang.bench_serving" and r["dataset_name"] == "sharegpt"
        assert r["completed"] == 8 and r["failed"] == 0 and r["total_output_tokens"] == 8 * 64
        # bench_serving can only read /server_info's running average: the row says so
        assert r["accept_length_source"] == "server_running_average"
