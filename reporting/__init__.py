"""Controller-side report of bench and sweep results: results/<run>/report.md and PNG plots.

`python -m reporting results/<run>` reads every *.jsonl under the run directory: rows with kind "cell"
(one benchmark cell, written on the target by module_utils/bench_matrix.py and fetched) and rows with kind
"config" (one sweep config's outcome: ok, or failed with the step, reason and journal excerpt).
"""
from reporting.load import load_run
from reporting.render import render_report, write_report

__all__ = ["load_run", "render_report", "write_report"]
