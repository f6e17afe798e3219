"""`make bench`: run every benchmark module in bench/ (bench_*.py), each printing ratios against a
baseline measured in the same run. `python -m bench NAME...` runs only the named ones (e.g. models)."""
from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    wanted = [f"bench_{a.removeprefix('bench_')}" for a in argv]
    if wanted:
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            print(f"unknown benchmark(s) {unknown}; have {names}", file=sys.stderr)
            return 2
        names = wanted
    failed = []
    for name in names:
        print(f"\n===== {name} =====", flush=True)
        started = time.monotonic()
        module = importlib.import_module(f"bench.{name}")
        rc = module.main() or 0
        print(f"===== {name}: rc={rc} in {time.monotonic() - started:.1f}s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"benchmarks that did not run or missed a goal (see their output): {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
