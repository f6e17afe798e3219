"""The sweep the playbooks ran on the H200 (tests/fixtures/real_sglang/rehearsal/h200-2026-12-04d/sweep-results:
playbooks/sweep.yml, real SGLang 0.5.11, SmolLM2-135M-Instruct; NONE, NGRAM, DFLASH with the kit's random drafter):
what its rows say, re-read by today's reporting."""
import json
from pathlib import Path

import pytest

from reporting import load_run
from reporting.lossless import verdicts
from reporting.objective import decide, disqualifications

SWEEP = Path(__file__).resolve().parents[2] / "fixtures/real_sglang/rehearsal/h200-2026-12-04d/sweep-results"


@pytest.fixture(scope="module")
def run():
    return load_run(SWEEP)


def matrix(run, name):
    return {c["max_concurrency"]: c for c in run.cells_of(name, "h200") if c.get("phase") == "matrix"}


def test_acceptance_per_cell_is_the_real_servers_per_request_count(run):
    for name, expect in (("ngram", {1: 5.23, 8: 10.58}), ("dflash", {1: 1.01, 8: 1.01})):
        for conc, cell in matrix(run, name).items():
            assert cell["accept_length_source"] == "per_request"
            reqs = [r for r in cell["requests"] if r.get("success") and r.get("spec_verify_ct")]
            assert reqs and sum(r["completion_tokens"] for r in reqs) / sum(r["spec_verify_ct"] for r in reqs) == \
                pytest.approx(cell["accept_length"], rel=1e-9)
            assert round(cell["accept_length"], 2) == expect[conc]
    assert all(c.get("accept_length") is None for c in matrix(run, "autoregressive").values())


def test_every_matrix_cell_ran_two_repeats_and_sampled_power(run):
    for name in ("autoregressive", "ngram", "dflash"):
        for cell in matrix(run, name).values():
            assert cell["status"] == "ok" and cell["cell_repeats"] == 2 and cell["power_mean_w"] > 100
            assert cell["provenance"]["sglang_version"] == "0.5.11"


def test_the_lossless_floor_follows_the_baselines_own_agreement(run):
    gate = verdicts(run, "h200")["configs"]
    recorded = json.loads((SWEEP / "lossless.json").read_text())["hosts"]["h200"]["configs"]
    for name in ("ngram", "dflash"):
        assert gate[name]["lossless"] is True and gate[name]["lossless"] == recorded[name]["lossless"]
        assert gate[name]["agreement"] == pytest.approx(recorded[name]["agreement"])
    assert recorded["dflash"]["workloads"]["prompts/chat"]["floor"] == pytest.approx(0.2295, abs=1e-4)


def test_rows_without_prompt_ids_keep_the_cell_rule_and_stay_disqualified(run):
    # recorded before flags named their prompt: the baseline's cells were clean where ngram's and dflash's looped
    dq = disqualifications(run, "h200")
    assert sorted(dq) == ["dflash", "ngram"] and all(i[0]["kind"] == "degenerate" for i in dq.values())
    assert all("Monday, Monday" in i[0]["evidence"][0]["text"] for i in dq.values())
    assert decide(run, ["h200"]).winner == "autoregressive"
