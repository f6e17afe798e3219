"""The report's markdown table writer (reporting/markdown.py)."""
from reporting.markdown import md_table


def test_header_separator_and_one_line_per_row():
    assert md_table(["a", "b"], [["1", "2"], ["3", "4"]]) == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
    assert md_table(["only"], []) == ["| only |", "|---|"]
