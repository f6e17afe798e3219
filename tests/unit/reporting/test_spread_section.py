"""report.md lines on repeats (reporting/spread_section.py): a cell's spread column and the section when nothing
was repeated (the untested margin is said, not hidden)."""
from reporting import load_run
from reporting.spread_section import spread_cell_text, spread_section
from tests.helpers.reporting_rows import sweep_rows, write_run


def test_spread_cell_text():
    assert spread_cell_text({}) == "–"
    assert spread_cell_text({"cell_repeats": 1}) == "1×"
    cell = {"cell_repeats": 3, "spread": {"output_throughput": 0.041, "median_tpot_ms": None}}
    assert spread_cell_text(cell) == "3× 4.1% / –"
    assert spread_cell_text(dict(cell, spread_flag={"bound": 0.01})) == "3× 4.1% / – ⚠"


def test_rows_without_repeats_say_no_spread_is_known(tmp_path):
    cells, configs = sweep_rows()
    run = load_run(write_run(tmp_path / "old", cells, configs))
    lines = spread_section(run, "h1")
    assert lines[0] == "## Repeats and spread"
    assert "no spread is known, so no winner's margin is tested against the noise" in lines[2]
