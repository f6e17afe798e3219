"""Goodput of a cell (module_utils/loadgen/goodput.py): requests within the TTFT and TPOT bounds, their share and
good requests per second, from the per-request records metrics.request_record keeps."""
import pytest

from ansible.module_utils.loadgen.goodput import cell_goodput, is_good, row_goodput, spec_problems
from ansible.module_utils.loadgen.metrics import RequestResult, request_record


def rec(ttft, tpot, success=True, tokens=100):
    return {"success": success, "ttft_ms": ttft, "tpot_ms": tpot, "completion_tokens": tokens}


def test_request_record_carries_ttft_and_tpot_as_bench_serving_defines_tpot():
    r = RequestResult(success=True, output_len=11, ttft=0.2, latency=1.2)
    record = request_record(r)
    assert record["ttft_ms"] == pytest.approx(200.0)
    assert record["tpot_ms"] == pytest.approx(100.0)           # (1.2 - 0.2) / (11 - 1) s
    one = request_record(RequestResult(success=True, output_len=1, ttft=0.1, latency=0.1))
    assert one["tpot_ms"] is None
    assert request_record(RequestResult(success=False))["ttft_ms"] is None


def test_share_and_good_requests_per_second():
    requests = [rec(100, 20), rec(300, 20), rec(100, 60), rec(100, 20, success=False), rec(150, 49.9)]
    out = cell_goodput(requests, duration=2.0, ttft_ms=200, tpot_ms=50)
    assert out["good_requests"] == 2 and out["goodput_share"] == 0.4 and out["goodput_rps"] == 1.0
    assert (out["goodput_ttft_ms"], out["goodput_tpot_ms"], out["goodput_reason"]) == (200, 50, "")
    # no bound: every successful request is good
    assert cell_goodput(requests, 2.0)["good_requests"] == 4
    # only a TTFT bound
    assert cell_goodput(requests, 2.0, ttft_ms=200)["good_requests"] == 3


def test_one_token_output_meets_any_tpot_bound_and_missing_figures_are_said():
    assert is_good(rec(10, None, tokens=1), tpot_ms=5) is True
    assert is_good(rec(10, None, tokens=5), tpot_ms=5) is None
    old = [{"success": True, "completion_tokens": 5}]
    out = cell_goodput(old, 1.0, ttft_ms=100)
    assert out["goodput_rps"] is None and "no ttft_ms/tpot_ms" in out["goodput_reason"]
    assert cell_goodput([], 1.0)["goodput_reason"] == "no per-request records in the row"
    assert "no cell duration" in cell_goodput([rec(1, 1)], None)["goodput_reason"]
    assert row_goodput({"requests": [rec(1, 1)], "duration": 0.5})["goodput_rps"] == 2.0


def test_bad_bounds_are_refused():
    assert spec_problems({}) == [] and spec_problems({"goodput_ttft_ms": 2000.0, "goodput_tpot_ms": None}) == []
    problems = spec_problems({"goodput_ttft_ms": -1, "goodput_tpot_ms": True})
    assert len(problems) == 2 and "goodput_ttft_ms must be a positive number" in problems[0]
