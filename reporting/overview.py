"""The top of report.md, what a reader sees first: the verdict (the winner, a tie or no winner, with its evidence and
the baseline it is measured against), the throughput-against-interactivity section (frontier plot and the table of
interactivity targets) and the goodput and power of every config. Notes that hold for many rows are said once."""
from __future__ import annotations

from pathlib import Path

from reporting.markdown import md_table
from reporting.frontier import DEFAULT_TARGETS, per_gpu_label, target_table
from reporting.goodput import bounds_text, goodput_of, power_reasons
from reporting.speedup import RANDOM_IDS_NOTE, baseline_of, config_names, is_random_ids, workload_of
from reporting.status import ok_cells, peak

MARK = "†"
MARK_NOTE = f"{MARK} random token ids: {RANDOM_IDS_NOTE}."


def _f(value, digits=1, suffix=""):
    if value is None or isinstance(value, bool):
        return "–"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}{suffix}"
    return str(value).replace("|", "\\|").replace("\n", " ")



def wl(workload):
    """A workload's name, marked when it is random ids (the note is said once, under the table: MARK_NOTE)."""
    return f"{workload} {MARK}" if is_random_ids(workload) else str(workload)


def verdict_lines(run, host, decision):
    """The report's first lines: what was compared, and the verdict with its evidence."""
    baseline = baseline_of(run, host)
    names = config_names(run, host)
    spec = [n for n in names if n != baseline]
    lines = []
    if baseline:
        lines.append(f"Autoregressive baseline: `{baseline}`. Speculative configs: "
                     f"{', '.join(f'`{n}`' for n in spec) or 'none'}.")
    else:
        lines.append(f"Configs: {', '.join(f'`{n}`' for n in names) or 'none'}. No autoregressive baseline was "
                     "measured (a sweep measures one first: `playbooks/sweep.yml`), so there is no speedup.")
    lines.append("")
    if decision.winner:
        keep = " (keep autoregressive / keep current)" if decision.keep else ""
        lines.append(f"**Verdict: `{decision.winner}`**{keep}. {decision.reason}.")
    else:
        lines.append(f"**Verdict: no overall winner.** {decision.reason}.")
    scored = {n: s for n, s in decision.scores.items() if s is not None and n != baseline}
    if scored and decision.objective.mode == "throughput":
        lines += ["", "Geometric-mean speedup over the baseline: " + ", ".join(
            f"`{n}` {s:.3f}x" for n, s in sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))) + "."]
    if decision.disqualified:
        lines += ["", "Disqualified: " + "; ".join(f"`{n}` ({items[0]['kind']})"
                                                   for n, items in decision.disqualified.items())
                  + " (evidence under Disqualified)."]
    return lines + [""]


def frontier_section(run, host, targets=DEFAULT_TARGETS, plot=None):
    """Throughput against interactivity: the plot and, per interactivity target, the config serving it best."""
    lines = ["## Throughput against interactivity", ""]
    rows = target_table(run, host, targets)
    if not rows:
        return lines + ["No ok cell with a median TPOT: nothing to plot.", ""]
    unit = per_gpu_label(run, host)
    lines += ["Each config is a line through its concurrencies: output tok/s per user (1000 / median TPOT ms) "
              f"against {unit}; the Pareto frontier is the dashed line. Per interactivity target, the config with the "
              "most throughput per GPU among the *measured* cells at or above the target (no interpolation).", ""]
    if plot:
        lines += [f"![{Path(plot).stem}]({plot})", ""]
    table, marked = [], False
    for workload, target, point, fastest in rows:
        marked |= is_random_ids(workload)
        if point:
            table.append([wl(workload), f"{target:g}", f"`{point['config']}`", str(point["C"]),
                          _f(point["per_gpu"]), _f(point["per_user"])])
        else:
            best = (f"none reaches it (fastest: `{fastest['config']}` C={fastest['C']} at "
                    f"{fastest['per_user']:.1f} tok/s/user)") if fastest else "none"
            table.append([wl(workload), f"{target:g}", best, "–", "–", "–"])
    lines += md_table(["workload", "target tok/s/user", "config", "C", unit.replace("output ", ""),
                     "tok/s/user"], table) + [""]
    return lines + ([MARK_NOTE, ""] if marked else [])


def goodput_power_section(run, host, objective=None):
    """Per config: its peak cell's goodput and power, its best goodput, and its best output tokens per joule."""
    lines = ["## Goodput and power", ""]
    cells = [c for n in config_names(run, host) for c in ok_cells(run.cells_of(n, host))]
    if not cells:
        return lines + ["No ok cell.", ""]
    lines += [f"Goodput: requests that succeeded with TTFT and TPOT within the bounds ({bounds_text(cells, objective)})"
              " and those good requests per second. Power: the GPUs' power.draw summed over the GPUs the server used, "
              "sampled on the host while the cell ran; tok/J = output tokens / (mean W x cell seconds).", ""]
    rows = []
    for name in config_names(run, host):
        mine = ok_cells(run.cells_of(name, host))
        top = peak(mine)
        if not top:
            continue
        g = goodput_of(top, objective)
        by_good = [c for c in mine if goodput_of(c, objective).get("goodput_rps") is not None]
        best_good = max(by_good, key=lambda c: goodput_of(c, objective)["goodput_rps"]) if by_good else None
        by_joule = [c for c in mine if c.get("output_tokens_per_joule") is not None]
        best_joule = max(by_joule, key=lambda c: c["output_tokens_per_joule"]) if by_joule else None
        share = g.get("goodput_share")
        rows.append([f"`{name}`", f"{wl(workload_of(top))} C={top.get('max_concurrency')}",
                     _f(top.get("output_throughput")), _f(share * 100 if share is not None else None, 0, "%"),
                     _f(goodput_of(best_good, objective)["goodput_rps"] if best_good else None, 2) + (
                         f" ({wl(workload_of(best_good))} C={best_good.get('max_concurrency')})" if best_good else ""),
                     _f(top.get("power_mean_w"), 0), _f(top.get("power_max_w"), 0), _f(top.get("power_limit_w"), 0),
                     _f(top.get("power_gpus"), 0),
                     _f(best_joule.get("output_tokens_per_joule") if best_joule else None, 3) + (
                         f" ({wl(workload_of(best_joule))} C={best_joule.get('max_concurrency')})"
                         if best_joule else "")])
    lines += md_table(["config", "peak cell", "out tok/s", "good % (peak)", "best good req/s", "W mean (peak)",
                     "W max", "W limit", "GPUs", "best tok/J"], rows) + [""]
    reasons = power_reasons(cells)
    if reasons:
        lines += ["Power not measured: " + "; ".join(reasons) + ".", ""]
    missing = sorted({goodput_of(c, objective).get("goodput_reason") for c in cells
                      if goodput_of(c, objective).get("goodput_rps") is None} - {None, ""})
    if missing:
        lines += ["Goodput not computed for some cells: " + "; ".join(missing) + ".", ""]
    if any(is_random_ids(workload_of(c)) for c in cells):
        lines += [MARK_NOTE, ""]
    return lines
