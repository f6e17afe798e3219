"""Goals of `make bench`: each benchmark module declares its goals (GOALS, a list of Goal) and records what it
measured against them (record / fail); bench/__main__.py runs the modules, turns every declared goal that was not
recorded into a MISS with the reason (the module raised, exited non-zero or never got that far), prints one closing
table (figure, measured, goal, verdict) and exits non-zero when any goal is missed.

A goal is never skipped silently: a benchmark that could not run is a MISS, with why.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

PASS = "PASS"
MISS = "MISS"
OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}


@dataclass(frozen=True)
class Goal:
    """One goal: `figure` (what is measured, against which baseline) `op` `target` `unit`; bench = its module."""
    bench: str
    figure: str
    op: str
    target: float
    unit: str = "x"

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"goal {self.figure!r}: op must be one of {sorted(OPS)}, not {self.op!r}")

    def text(self) -> str:
        return f"{self.op} {fmt(self.target, self.unit)}"

    def met(self, value: float | None) -> bool:
        if value is None or not isinstance(value, (int, float)) or math.isnan(value):
            return False
        return OPS[self.op](value, self.target)


@dataclass
class Result:
    goal: Goal
    measured: float | None
    verdict: str
    note: str = ""


@dataclass
class Book:
    """The results recorded so far, in order (one per goal; a later record of the same goal replaces it)."""
    results: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> Result:
        self.results = [r for r in self.results if r.goal != result.goal] + [result]
        return result

    def of(self, goals) -> list[Result]:
        wanted = set(goals)
        return [r for r in self.results if r.goal in wanted]


BOOK = Book()


def fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "tok/s":
        return f"{value:,.0f} tok/s"
    if unit == "":
        return f"{value:g}"
    return f"{value:.2f} {unit}"


def record(goal: Goal, measured: float | None, note: str = "", failed: str = "", book: Book = BOOK) -> Result:
    """What was measured for `goal`; PASS when it meets the goal. failed: a reason that makes it a MISS whatever the
    figure (e.g. a cell that errored while the others were in tolerance)."""
    ok = goal.met(measured) and not failed
    why = "; ".join(x for x in (failed, note) if x)
    return book.add(Result(goal, None if measured is None else float(measured), PASS if ok else MISS, why))


def fail(goal: Goal, reason: str, book: Book = BOOK) -> Result:
    """`goal` could not be measured: a MISS with the reason."""
    return book.add(Result(goal, None, MISS, f"not measured: {reason}"))


def settle(goals, reason: str, book: Book = BOOK) -> list[Result]:
    """After a module ran: every goal of it not recorded becomes a MISS with `reason`. Returns its results."""
    done = {r.goal for r in book.of(goals)}
    for g in goals:
        if g not in done:
            fail(g, reason, book)
    return book.of(goals)


def exit_code(results: list[Result]) -> int:
    """0 when every goal passed (and there was at least one), else 1."""
    return 0 if results and all(r.verdict == PASS for r in results) else 1


def table(results: list[Result], load_start: tuple | None = None, load_end: tuple | None = None) -> str:
    """The closing table: figure, measured, goal, verdict (and why, for a MISS or a regime), then the verdict line."""
    rows = [("benchmark", "figure", "measured", "goal", "verdict", "note")]
    rows += [(r.goal.bench, r.goal.figure, fmt(r.measured, r.goal.unit), r.goal.text(), r.verdict, r.note)
             for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + ("  " + row[5] if row[5] else "")
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  ----")
    missed = [r for r in results if r.verdict != PASS]
    if not results:
        lines.append("no goal was recorded: MISS")
    else:
        lines.append(f"{len(results) - len(missed)} of {len(results)} goals met"
                     + (f"; {len(missed)} MISSED ({', '.join(sorted({r.goal.bench for r in missed}))})"
                        if missed else ""))
    if load_start is not None:
        lines.append(f"load average at the start {_load(load_start)}, at the end {_load(load_end or os.getloadavg())}"
                     f" ({os.cpu_count()} CPUs; figures measured on a busy machine are pessimistic)")
    return "\n".join(lines)


def _load(load: tuple) -> str:
    return " / ".join(f"{x:.2f}" for x in load) + " (1/5/15 min)"


def ran(name: str) -> Goal:
    """The pseudo-goal of a module that raised, exited non-zero or could not be imported: it ran to the end."""
    return Goal(name, "ran to the end (exit status)", "<=", 0, "")


def run_module(name: str, main, goals, book: Book = BOOK) -> list[Result]:
    """Run one module's main(); every goal of it it did not record is a MISS with the reason; a module that raised or
    returned non-zero is a MISS of its own (ran()), whatever it recorded. Returns the module's results."""
    reason, rc = "the benchmark did not record it (it returned without measuring it)", 0
    try:
        rc = main() or 0
        if rc:
            reason = f"{name} returned rc={rc} before recording it (see its output above)"
    except Exception as err:  # noqa: BLE001 - any failure is a MISS with its reason, never a silent skip
        import traceback
        traceback.print_exc()
        rc, reason = None, f"{name} raised {type(err).__name__}: {str(err)[:300]}"
    results = settle(goals, reason, book)
    if rc != 0:
        results.append(book.add(Result(ran(name), rc, MISS, reason)))
    return results


def standalone(name: str, main, goals) -> int:
    """`python bench/bench_x.py`: run main, print its goals' table; the exit code of the verdicts."""
    load0 = os.getloadavg()
    results = run_module(name, main, goals)
    print(table(results, load0, os.getloadavg()), flush=True)
    return exit_code(results)
