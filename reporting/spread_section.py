"""report.md lines on repeats: the spread of every cell measured several times (flagged cells named with their
values), a cell's spread column, and the winner's margins against the spread (a tie called a tie)."""
from __future__ import annotations

from reporting.markdown import md_table
from reporting.speedup import config_names, workload_of
from reporting.ties import PICK_VARIABLE, cell_spread

FIGURE_NAMES = {"output_throughput": "out tok/s", "median_tpot_ms": "TPOT median ms"}


def _pct(value):
    return "–" if value is None else f"{100 * value:.1f}%"



def spread_cell_text(cell):
    """A cell's repeats and spread for its table: 'R× tps% / TPOT%' (⚠ when flagged), '1×' for a single repeat."""
    repeats = cell.get("cell_repeats")
    if not isinstance(repeats, int):
        return "–"
    if repeats < 2:
        return "1×"
    text = f"{repeats}× {_pct(cell_spread(cell))} / {_pct(cell_spread(cell, 'median_tpot_ms'))}"
    return text + (" ⚠" if cell.get("spread_flag") else "")


def spread_section(run, host):
    lines = ["## Repeats and spread", ""]
    cells = [c for name in config_names(run, host) for c in run.cells_of(name, host)]
    repeated = [c for c in cells if isinstance(c.get("cell_repeats"), int) and c["cell_repeats"] > 1]
    if not repeated:
        return lines + ["Every cell was measured once (sglang_bench_cell_repeats 1, or rows from before repeats): "
                        "no spread is known, so no winner's margin is tested against the noise.", ""]
    seconds = sorted({c.get("min_cell_seconds") for c in repeated if c.get("min_cell_seconds") is not None})
    counts = sorted({c["cell_repeats"] for c in repeated})
    bound = next((c.get("max_spread") for c in repeated if c.get("max_spread") is not None), None)
    lines += [f"{len(repeated)} of {len(cells)} cells measured {'/'.join(str(n) for n in counts)} times"
              f"{' (each at least ' + '/'.join(f'{s:g}' for s in seconds) + ' s)' if seconds else ''}; a row's "
              "figures are the medians of its repeats; spread = (max - min) / median"
              f"{'; flagged above ' + _pct(bound) if bound is not None else ''}.", ""]
    rows = []
    for c in repeated:
        flag = c.get("spread_flag")
        if not isinstance(flag, dict):
            continue
        for key, item in sorted((flag.get("figures") or {}).items()):
            values = ", ".join(f"{v:.1f}" for v in item.get("values") or [] if isinstance(v, (int, float)))
            rows.append([f"`{c.get('config')}`", workload_of(c), str(c.get("max_concurrency")),
                         FIGURE_NAMES.get(key, key), _pct(item.get("spread")), values, _pct(flag.get("bound"))])
    if rows:
        lines += ["**Flagged cells** (their spread exceeds the bound: their figures are noisy):", ""]
        lines += md_table(["config", "workload", "C", "figure", "spread", "repeats", "bound"], rows) + [""]
    else:
        lines += ["No cell's throughput or TPOT spread exceeds the bound.", ""]
    return lines


def tie_lines(decision):
    """The winner's margin over each other ranked config against the spread of the cells the two rest on."""
    if not decision.margins:
        return [f"Margins not tested: {decision.tie_note}.", ""] if decision.tie_note else []
    first = decision.tie["candidates"][0] if decision.tie else decision.winner
    rows = []
    for m in decision.margins:
        verdict = "spread unknown" if m["spread"] is None else ("**tie**" if m["tied"] else "clear")
        rows.append([f"`{m['config']}`", _pct(m["margin"]), _pct(m["spread"]), str(m["cells"]), verdict])
    lines = [f"Margin of `{first}` over each other ranked config against the spread of the cells the two rest on "
             "(median of the larger throughput spread per cell; a margin within it is a tie):", ""]
    lines += md_table(["config", "margin", "spread", "cells", "verdict"], rows) + [""]
    if decision.tie and not decision.tie["kept"]:
        lines += [f"**Tie between {', '.join(f'`{c}`' for c in decision.tie['candidates'])}**: the proposal names "
                  f"them and applies none until one is picked (`-e {PICK_VARIABLE}=<config>`).", ""]
    elif decision.tie:
        lines += [f"**Tie between {', '.join(f'`{c}`' for c in decision.tie['candidates'])}**: the baseline "
                  f"`{decision.tie['kept']}` is among them and is kept.", ""]
    if decision.tie_note:
        lines += [f"Not tested: {decision.tie_note}.", ""]
    return lines
