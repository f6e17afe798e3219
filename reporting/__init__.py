"""Controller-side report of bench and sweep results: results/<run>/report.md, PNG plots and proposal.yml.

`python -m reporting RUN_DIR [--slo-ttft-p99-ms X] [--slo-itl-p99-ms Y] [--group-vars-dir DIR] [--no-plots]` reads
every *.jsonl under the run directory: rows with kind "cell" (one benchmark cell, written on the target by
module_utils/loadgen/rows.py and fetched; phase "soak" = a shrinking-batch soak cell, reported apart) and rows with
kind "config" (one sweep config's outcome: ok, or failed with the step, reason and journal excerpt). It writes the
report (speedup over the autoregressive baseline, the winner under the objective, disqualified configs, soak,
acceptance) and proposal.yml (per host group: the winner and the group_vars fragment that deploys it).

Modules: load (rows), speedup (baseline, speedup, crossover), acceptance (accept length from the requests),
objective (disqualification, winners), ties (a margin inside the repeats' spread is a tie), proposal (proposal.yml),
render/sections/spread_section (report.md), plots (PNGs).
"""
import local_module_utils

local_module_utils.install()  # reporting reads SGLang's speculative flags through module_utils/sglang/speculative.py

from reporting.load import load_run  # noqa: E402
from reporting.objective import Objective, decide  # noqa: E402
from reporting.proposal import build_proposal, write_proposal  # noqa: E402
from reporting.render import render_report, write_report  # noqa: E402

__all__ = ["Objective", "build_proposal", "decide", "load_run", "render_report", "write_proposal", "write_report"]
