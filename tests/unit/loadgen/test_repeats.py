"""A cell's repeats combined into one row (repeats.combine): medians, each repeat's key figures, the spread, the
flag, acceptance pooled over every repeat's requests."""
import pytest

from ansible.module_utils.loadgen import repeats


def measured(tps, tpot=10.0, status="ok", verify=10, tokens=30, **extra):
    out = {"status": status, "output_throughput": tps, "median_tpot_ms": tpot, "p99_ttft_ms": tps / 10,
           "median_ttft_ms": 1.0, "median_itl_ms": 2.0, "p99_itl_ms": 3.0, "duration": 1.0, "completed": 3,
           "accept_length": tokens / verify, "accept_rate": 0.5, "accept_length_source": "per_request",
           "spec_totals": {"requests": 1, "completion_tokens": tokens, "verify_ct": verify, "accepted_drafts": 5,
                           "proposed_drafts": 10},
           "requests": [{"index": 0, "success": True, "completion_tokens": tokens, "spec_verify_ct": verify}],
           "degenerate": {"checked": 2, "flagged": 0, "evidence": []}}
    out.update(extra)
    return out


def test_spread_is_range_over_median():
    assert repeats.spread([90, 100, 120]) == pytest.approx(0.3)
    assert repeats.spread([100]) is None and repeats.spread([]) is None and repeats.spread([0, 0]) is None


def test_one_repeat_is_the_row_unchanged_with_an_unknown_spread():
    row = repeats.combine([measured(100.0)], 0.1)
    assert row["output_throughput"] == 100.0 and row["cell_repeats"] == 1
    assert row["spread"]["output_throughput"] is None and row["spread_flag"] is None
    assert "figures_of" not in row


def test_three_repeats_medians_spread_and_pooled_acceptance():
    row = repeats.combine([measured(100.0, tpot=10.0, verify=10, tokens=30), measured(104.0, tpot=10.5, verify=10,
                                                                                      tokens=20),
                           measured(98.0, tpot=9.8, verify=20, tokens=40)], 0.1)
    assert row["output_throughput"] == 100.0 and row["median_tpot_ms"] == 10.0 and row["p99_ttft_ms"] == 10.0
    assert row["spread"]["output_throughput"] == pytest.approx(0.06)
    assert row["spread"]["median_tpot_ms"] == pytest.approx(0.07)
    assert row["spread_flag"] is None
    assert row["accept_length"] == pytest.approx(90 / 40)          # over all requests, not a median of 3, 2, 2
    assert [r["accept_length"] for r in row["repeats"]] == [3.0, 2.0, 2.0]
    assert row["spec_totals"]["verify_ct"] == 40 and len(row["requests"]) == 3
    assert row["degenerate"]["checked"] == 6
    assert row["figures_of"] == "median of 3 repeats (accept length over all their requests)"


def test_tpot_spread_past_the_bound_flags_the_cell():
    row = repeats.combine([measured(100.0, tpot=10.0), measured(101.0, tpot=12.0), measured(100.5, tpot=10.2)], 0.1)
    assert list(row["spread_flag"]["figures"]) == ["median_tpot_ms"]
    assert row["spread_flag"]["figures"]["median_tpot_ms"]["values"] == [10.0, 12.0, 10.2]


def test_a_failed_last_repeat_is_the_row():
    row = repeats.combine([measured(100.0), {"status": "timeout", "error": "cell exceeded its bound"}], 0.1)
    assert row["status"] == "timeout" and row["error"] == "cell exceeded its bound"
    assert [r["status"] for r in row["repeats"]] == ["ok", "timeout"] and row["spread"]["output_throughput"] is None


def test_every_flagged_prompt_of_every_repeat_is_kept():
    """The report excuses a loop per prompt (reporting/degenerate.py): the repeats' flagged prompt ids all reach the
    row, not only the three pieces of evidence kept."""
    def deg(*pids):
        return {"checked": 5, "flagged": len(pids), "flagged_prompts": list(pids),
                "evidence": [{"prompt_id": p, "reason": "loop", "text": "x"} for p in pids]}
    row = repeats.combine([measured(100.0, degenerate=deg("a", "b")), measured(101.0, degenerate=deg("c", "a")),
                           measured(99.0, degenerate=deg())], 0.1)
    assert row["degenerate"]["flagged"] == 4 and row["degenerate"]["checked"] == 15
    assert row["degenerate"]["flagged_prompts"] == ["a", "b", "c", "a"]
    assert len(row["degenerate"]["evidence"]) == 3
    old = repeats.combine([measured(100.0), measured(101.0, degenerate=deg("a"))], 0.1)
    assert "flagged_prompts" not in old["degenerate"]            # a repeat without ids: the report's cell rule
