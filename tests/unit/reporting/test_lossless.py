"""The lossless gate's verdicts (reporting/lossless.py): first difference by token and character, match rates per
config and workload, the tolerance (given, recorded, exact), the baseline's self-check, and a config below the
tolerance disqualified whatever its speed (the winner and the proposal never pick it)."""
import pytest

from reporting import lossless
from reporting.load import Run
from reporting.objective import Objective, decide, disqualifications
from reporting.status import config_status
from tests.helpers.reporting_rows import CODE, sweep_rows

TEXTS = ["the keeper counted waves", "ships passed through fog", "gulls circled the piers", "nets dried at dawn"]


def gate(config, texts, which="primary", conc=1, workload=CODE, host="h1", ids=True, errors=()):
    outputs = []
    for i, text in enumerate(texts):
        outputs.append({"index": i, "prompt_id": f"p{i}", "prompt": f"prompt {i}", "text": text,
                        "output_ids": [len(w) for w in text.split()] if ids else None,
                        "finish_reason": {"type": "length"}, "error": "boom" if i in errors else ""})
    return {"kind": "gate", "phase": "lossless", "gate": which, "config": config, "host": host,
            "workload": workload, "max_concurrency": conc, "status": "ok", "outputs": outputs}


def run_with(gates, tolerance=None, recorded=0.75):
    cells, configs = sweep_rows()
    for row in configs:
        if not row.get("phase"):
            row["lossless_min_match"] = recorded
    return Run(name="x", cells=cells, configs=configs, gate=gates, lossless_min_match=tolerance)


WRONG = ["the keeper counted lanterns", "ships passed orchards", "gulls circled the piers", "nets dried at dawn"]


def base_gates():
    return [gate("ar", TEXTS), gate("ar", TEXTS, "self_check", 16)]


def test_first_difference():
    assert lossless.first_difference("abc", "abc") is None
    assert lossless.first_difference("abc", "abd") == 2
    assert lossless.first_difference("ab", "abc") == 2
    assert lossless.first_difference([1, 2, 3], [1, 5, 3]) == 1


def test_excerpt_is_bounded_around_the_difference():
    text = "x" * 500 + "DIFF" + "y" * 500
    cut = lossless.excerpt(text, 500, width=10)
    assert cut == "..." + "x" * 10 + "DIFF" + "y" * 6 + "..."


def test_compare_gives_token_and_character_positions_and_both_texts():
    base = gate("ar", TEXTS)["outputs"][0]
    other = gate("dd8", WRONG)["outputs"][0]
    d = lossless.compare(base, other)
    assert not d["equal"] and d["token"] == 3 and d["char"] == len("the keeper counted ")
    assert d["baseline"].endswith("waves") and d["config"].endswith("lanterns")
    assert lossless.compare(base, base)["equal"]


def test_compare_without_token_ids_uses_the_text():
    base = gate("ar", TEXTS, ids=False)["outputs"][1]
    d = lossless.compare(base, gate("dd8", WRONG, ids=False)["outputs"][1])
    assert d["token"] is None and d["char"] == len("ships passed ")


def test_a_failed_prompt_is_not_a_match_and_says_why():
    d = lossless.compare(gate("ar", TEXTS)["outputs"][0], gate("dd8", TEXTS, errors=(0,))["outputs"][0])
    assert not d["equal"] and "no output: boom" in d["error"]


def test_baseline_failures_are_skipped_not_counted():
    summary = lossless.compare_rows(gate("ar", TEXTS, errors=(3,)), gate("dd8", TEXTS))
    assert (summary["prompts"], summary["matched"], summary["skipped"]) == (3, 3, 1)


def test_lossy_config_is_disqualified_with_prompt_and_position_fast_or_not():
    run = run_with(base_gates() + [gate("dd8", WRONG), gate("dd16", TEXTS), gate("eagle", TEXTS),
                                   gate("soakfail", TEXTS)])
    judged = lossless.verdicts(run, "h1")
    assert judged["configs"]["dd16"]["lossless"] is True and judged["configs"]["dd16"]["match_rate"] == 1.0
    dd8 = judged["configs"]["dd8"]
    assert dd8["lossless"] is False and dd8["match_rate"] == 0.5
    assert "2 of 4 greedy outputs equal" in dd8["why"] and "prompt #0 (p0): first difference at token 3" in dd8["why"]
    disq = disqualifications(run, "h1")
    item = next(i for i in disq["dd8"] if i["kind"] == "not_lossless")
    assert "not lossless" in item["why"] and item["evidence"][0]["workload"] == CODE
    assert "lanterns" in item["evidence"][0]["text"] and "waves" in item["evidence"][0]["text"]
    # dd8 was the throughput winner: not any more
    decision = decide(run, ["h1"], Objective())
    assert "dd8" in decision.disqualified and decision.winner != "dd8"
    assert config_status(run, "dd8") == "disqualified" and config_status(run, "dd16") == "ok"


def test_tolerance_given_recorded_or_exact():
    gates = base_gates() + [gate("dd8", WRONG)]
    assert lossless.tolerance(run_with(gates)) == (0.75, "recorded by the sweep: sglang_bench_lossless_min_match")
    loose = run_with(gates, tolerance=0.5)
    assert lossless.tolerance(loose)[0] == 0.5 and lossless.verdicts(loose, "h1")["configs"]["dd8"]["lossless"]
    assert lossless.tolerance(run_with(gates, recorded=None)) == (1.0, "none recorded: exact match required")


def test_self_check_is_the_baselines_agreement_with_itself():
    run = run_with([gate("ar", TEXTS), gate("ar", TEXTS[:3] + ["nets dried at noon"], "self_check", 16)])
    own = lossless.verdicts(run, "h1")["self_check"]
    assert own["baseline"] == "ar" and own["match_rate"] == 0.75 and own["concurrencies"] == [1, 16]
    assert own["workloads"][CODE]["diverged"][0]["prompt_id"] == "p3"
    assert lossless.self_check(run_with([gate("ar", TEXTS)]), "h1") is None


def test_missing_gate_is_not_lossless_unless_the_config_failed_anyway():
    run = run_with(base_gates() + [gate("dd16", TEXTS)])
    judged = lossless.verdicts(run, "h1")["configs"]
    assert judged["dd8"]["lossless"] is False and "not measured on prompts/code" in judged["dd8"]["why"]
    assert judged["broken"]["lossless"] is None and "failed its sweep" in judged["broken"]["why"]


def test_no_baseline_gate_judges_nothing():
    run = run_with([gate("dd8", WRONG)])
    assert all(e["lossless"] is None for e in lossless.verdicts(run, "h1")["configs"].values())
    assert "dd8" not in disqualifications(run, "h1") or all(
        i["kind"] != "not_lossless" for i in disqualifications(run, "h1")["dd8"])


def test_document_holds_every_hosts_verdicts():
    doc = lossless.document(run_with(base_gates() + [gate("dd8", WRONG)]))
    assert doc["hosts"]["h1"]["configs"]["dd8"]["lossless"] is False
    assert doc["hosts"]["h1"]["self_check"]["match_rate"] == 1.0


@pytest.mark.parametrize("prompt_id", ["p9"])
def test_a_different_prompt_at_an_index_is_no_match(prompt_id):
    other = gate("dd8", TEXTS)
    other["outputs"][0]["prompt_id"] = prompt_id
    summary = lossless.compare_rows(gate("ar", TEXTS), other)
    assert summary["matched"] == 3 and "a different prompt (p9)" in summary["diverged"][0]["error"]


def test_a_baseline_gate_without_outputs_judges_nothing_rather_than_passing_everyone():
    run = run_with([gate("ar", TEXTS, errors=(0, 1, 2, 3)), gate("dd8", WRONG)])
    entry = lossless.verdicts(run, "h1")["configs"]["dd8"]
    assert entry["lossless"] is None and "no output to compare with" in entry["why"]
