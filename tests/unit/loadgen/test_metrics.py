"""ansible.module_utils.loadgen.metrics against hand-computed values (bench_serving / numpy semantics)."""
import pytest

from ansible.module_utils.loadgen.metrics import METRIC_KEYS, RequestResult, compute_metrics, mean, percentile, std


def test_percentile_matches_numpy_linear():
    data = [1, 2, 3, 4]
    assert percentile(data, 50) == 2.5
    assert percentile(data, 99) == pytest.approx(3.97)
    assert percentile([5], 99) == 5
    assert percentile([], 99) == 0.0
    assert percentile([3, 1, 2], 0) == 1 and percentile([3, 1, 2], 100) == 3


def test_mean_std_population():
    assert mean([1, 2, 3, 4]) == 2.5
    assert std([1, 2, 3, 4]) == pytest.approx(1.118033988)
    assert mean([]) == 0.0 and std([]) == 0.0


def test_compute_metrics_by_hand():
    a = RequestResult(success=True, prompt_len=10, output_len=5, ttft=0.1, latency=0.5, itl=[0.1] * 4)
    b = RequestResult(success=True, prompt_len=10, output_len=3, ttft=0.3, latency=0.7, itl=[0.2, 0.2])
    bad = RequestResult(success=False, prompt_len=10, error="x")
    m = compute_metrics([a, b, bad], duration=2.0, server_accept_length=3.5)
    assert set(METRIC_KEYS) == set(m)
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["total_input_tokens"] == 20 and m["total_output_tokens"] == 8
    assert m["output_throughput"] == 4.0 and m["request_throughput"] == 1.0
    assert m["total_throughput"] == 14.0
    assert m["mean_ttft_ms"] == pytest.approx(200) and m["median_ttft_ms"] == pytest.approx(200)
    # TPOT = (latency - ttft) / (n - 1): a 0.1 s, b 0.2 s
    assert m["mean_tpot_ms"] == pytest.approx(150)
    assert m["mean_itl_ms"] == pytest.approx(1000 * (0.4 + 0.4) / 6)
    assert m["median_itl_ms"] == pytest.approx(100)
    assert m["p99_itl_ms"] == pytest.approx(200)
    assert m["concurrency"] == pytest.approx((0.5 + 0.7) / 2.0)
    assert m["accept_length"] == 3.5


def test_single_token_requests_have_no_tpot_and_empty_cells_are_zero():
    one = RequestResult(success=True, prompt_len=1, output_len=1, ttft=0.05, latency=0.05)
    m = compute_metrics([one], duration=1.0)
    assert m["mean_tpot_ms"] == 0.0 and m["mean_itl_ms"] == 0.0
    empty = compute_metrics([], duration=1.0)
    assert empty["completed"] == 0 and empty["output_throughput"] == 0.0 and empty["accept_length"] is None


def test_duration_must_be_positive():
    with pytest.raises(ValueError):
        compute_metrics([], duration=0)
