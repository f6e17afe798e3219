"""`python -m reporting results/<run> [--no-plots]`: write report.md (and plots/*.png) into the run directory."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reporting.load import load_run
from reporting.render import write_report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reporting", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--no-plots", action="store_true", help="skip the matplotlib PNGs")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"no such run directory: {args.run_dir}", file=sys.stderr)
        return 2
    run = load_run(args.run_dir)
    if not run.cells and not run.configs:
        print(f"{args.run_dir}: no result rows (*.jsonl with kind cell/config) found", file=sys.stderr)
        return 1
    path = write_report(run, args.run_dir, plots=not args.no_plots)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
