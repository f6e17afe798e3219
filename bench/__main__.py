"""`make bench`: run every benchmark module in bench/ (bench_*.py), each printing ratios against a baseline measured
in the same run and recording its goals (bench/goals.py). `python -m bench NAME...` runs only the named ones (e.g.
models). Ends with one table of every goal (figure, measured, goal, verdict) and the load average at the start and at
the end; exits 1 when any goal is missed, a benchmark could not run (a MISS with the reason, never a silent skip) or
a module raised or returned non-zero."""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time
from pathlib import Path

from bench import goals


def run(names: list[str], book: goals.Book = goals.BOOK, importer=importlib.import_module) -> list[goals.Result]:
    """Run the named modules (bench_x) one after the other; returns every goal result, in order."""
    results: list[goals.Result] = []
    for name in names:
        print(f"\n===== {name} =====", flush=True)
        started = time.monotonic()
        try:
            module = importer(f"bench.{name}")
        except Exception as err:  # noqa: BLE001 - a module that cannot be imported is a MISS with the reason
            results.append(book.add(goals.Result(goals.ran(name), None, goals.MISS,
                                                 f"import failed: {type(err).__name__}: {str(err)[:300]}")))
            print(f"===== {name}: import failed: {err}", flush=True)
            continue
        mine = goals.run_module(name, module.main, list(getattr(module, "GOALS", [])), book)
        results += mine
        missed = sum(r.verdict != goals.PASS for r in mine)
        print(f"===== {name}: {len(mine) - missed} of {len(mine)} goals met in {time.monotonic() - started:.1f}s",
              flush=True)
    return results


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
    load0 = os.getloadavg()
    print(f"load average at the start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs",
          flush=True)
    started = time.monotonic()
    results = run(names)
    print(f"\n===== goals ({', '.join(names)}; {time.monotonic() - started:.0f}s) =====")
    print(goals.table(results, load0, os.getloadavg()), flush=True)
    return goals.exit_code(results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
