"""`python -m reporting RUN_DIR [--slo-ttft-p99-ms X] [--slo-itl-p99-ms Y] [--slo-tpot-p99-ms Z]
[--interactivity-targets 20,50,100] [--group-vars-dir DIR] [--no-plots] [--lossless-min-agreement R]`:
write RUN_DIR/report.md, RUN_DIR/plots/*.png, RUN_DIR/proposal.yml and RUN_DIR/lossless.json (the lossless gate's
verdicts and the baseline's self-match rate); print the report's path, then the proposal's.
Exit 0 when written (a sweep without a winner is still a report), 2 for bad input."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reporting.frontier import DEFAULT_TARGETS
from reporting.load import load_run
from reporting.lossless import document as lossless_document
from reporting.objective import Objective
from reporting.proposal import DEFAULT_GROUP_VARS_DIR, build_proposal, write_proposal
from reporting.render import write_report


def _bound(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of milliseconds, got {text}")
    return value


def _targets(text):
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text!r}") from None
    if not values or any(not v > 0 or v == float("inf") for v in values):
        raise argparse.ArgumentTypeError(f"targets must be positive tok/s per user, got {text}")
    return sorted(set(values))


def _share(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, got {text}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reporting", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--slo-ttft-p99-ms", type=_bound, metavar="X",
                        help="SLO mode: p99 time to first token bound (ms)")
    parser.add_argument("--slo-itl-p99-ms", type=_bound, metavar="Y",
                        help="SLO mode: p99 inter-token latency bound (ms)")
    parser.add_argument("--slo-tpot-p99-ms", type=_bound, metavar="Z",
                        help="SLO mode: p99 time per output token bound (ms); the SLO winner ranks by goodput")
    parser.add_argument("--interactivity-targets", type=_targets, default=list(DEFAULT_TARGETS), metavar="T,T",
                        help="output tok/s per user targets of the throughput/interactivity table (default "
                             f"{','.join(f'{t:g}' for t in DEFAULT_TARGETS)})")
    parser.add_argument("--group-vars-dir", type=Path, default=None,
                        help=f"group_vars to diff the proposal against (default {DEFAULT_GROUP_VARS_DIR})")
    parser.add_argument("--no-plots", action="store_true", help="skip the matplotlib PNGs")
    parser.add_argument("--lossless-min-agreement", type=_share, metavar="R",
                        help="lossless gate tolerance (0..1) instead of the one the sweep recorded")
    args = parser.parse_args(argv)          # bad options: argparse's message on stderr, exit 2
    if not args.run_dir.is_dir():
        print(f"no such run directory: {args.run_dir}", file=sys.stderr)
        return 2
    if args.group_vars_dir is not None and not args.group_vars_dir.is_dir():
        print(f"no such group_vars directory: {args.group_vars_dir}", file=sys.stderr)
        return 2
    run = load_run(args.run_dir)
    run.lossless_min_agreement = args.lossless_min_agreement
    if not run.cells and not run.configs and not run.soak:
        print(f"{args.run_dir}: no result rows (*.jsonl with kind cell/config) found", file=sys.stderr)
        return 2
    objective = Objective.from_bounds(args.slo_ttft_p99_ms, args.slo_itl_p99_ms, args.slo_tpot_p99_ms)
    proposal, _ = build_proposal(run, objective, args.group_vars_dir or DEFAULT_GROUP_VARS_DIR)
    proposal_path = write_proposal(proposal, args.run_dir)
    path = write_report(run, args.run_dir, plots=not args.no_plots, objective=objective, proposal=proposal,
                        proposal_path=str(proposal_path), targets=args.interactivity_targets)
    (args.run_dir / "lossless.json").write_text(json.dumps(lossless_document(run), indent=1, sort_keys=True) + "\n",
                                                encoding="utf-8")
    print(path)
    print(proposal_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
