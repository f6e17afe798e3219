"""The sglang.bench_serving route sized by time (run_sized_cell): a run shorter than min_cell_seconds is run again
with its request count scaled by the rate it measured, within the cell's bound."""
from ansible.module_utils.loadgen import bench_serving

SPEC = {"cell_timeout_s": 60, "min_cell_seconds": 10}


def fake_runs(monkeypatch, seconds_per_request):
    counts = []

    def run(spec, workload, conc, count):
        counts.append(count)
        return {"status": "ok", "duration": count * seconds_per_request, "completed": count,
                "bound": spec["cell_timeout_s"]}

    monkeypatch.setattr(bench_serving, "run_bench_serving_cell", run)
    return counts


def test_a_short_run_is_rerun_scaled_to_the_time_asked(monkeypatch):
    counts = fake_runs(monkeypatch, 0.25)                    # 8 requests = 2 s < 10 s
    row = bench_serving.run_sized_cell(SPEC, {"kind": "random-ids", "context_length": 60}, 4, 8)
    assert counts == [8, 48]                                 # 8 x 10 / 2 x 1.2
    assert row["duration"] == 12.0 and row["num_prompts"] == 48 and row["min_requests"] == 8
    assert row["sized_runs"] == 2 and row["min_cell_seconds"] == 10.0 and "sized_note" not in row


def test_a_run_long_enough_is_kept_and_without_min_seconds_one_run(monkeypatch):
    counts = fake_runs(monkeypatch, 2.0)
    row = bench_serving.run_sized_cell(SPEC, {"kind": "random-ids", "context_length": 60}, 4, 8)
    assert counts == [8] and row["sized_runs"] == 1
    counts = fake_runs(monkeypatch, 0.001)
    bench_serving.run_sized_cell(dict(SPEC, min_cell_seconds=0), {"kind": "random-ids", "context_length": 60}, 4, 8)
    assert counts == [8]


def test_attempts_are_bounded_and_the_row_says_it_stayed_short(monkeypatch):
    calls = []

    def run(spec, workload, conc, count):
        calls.append(count)
        return {"status": "ok", "duration": 1.0}             # never longer, whatever the count

    monkeypatch.setattr(bench_serving, "run_bench_serving_cell", run)
    row = bench_serving.run_sized_cell(SPEC, {"kind": "random-ids", "context_length": 60}, 1, 2)
    assert len(calls) == bench_serving.SIZE_ATTEMPTS
    assert row["sized_note"] == "3 runs stayed under 10s: the last lasted 1.0s"
