"""reporting/load.py: soak cells kept apart, workloads of old rows derived."""
from reporting import load_run
from reporting.speedup import RANDOM_IDS_NOTE, is_random_ids, workload_of
from tests.helpers.reporting_rows import sweep_rows, write_run


def test_soak_cells_are_kept_apart(tmp_path):
    cells, configs = sweep_rows()
    run = load_run(write_run(tmp_path / "sweep-x", cells, configs))
    assert len(run.soak) == 3 and all(c["output_throughput"] == 99999.0 for c in run.soak)
    assert len(run.cells) == 5 * 2 * 3
    assert all(c.get("phase") != "soak" for c in run.cells)
    assert [c["max_concurrency"] for c in run.soak_of("dd8", "h1")] == [64, 8, 1]
    assert len(run.for_host("h1").soak) == 3 and run.for_host("other").soak == []


def test_workload_of_old_rows_and_labels():
    assert workload_of({"context_length": 60}) == "random-ids/ctx60"
    assert workload_of({"workload": "prompts/chat", "context_length": 60}) == "prompts/chat"
    assert is_random_ids("random-ids/ctx60") and not is_random_ids("prompts/code")
    assert RANDOM_IDS_NOTE == "throughput only: acceptance on random ids says nothing about real traffic"
