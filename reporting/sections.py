"""report.md sections of one host: speedup over autoregressive, winner, disqualified, shrinking-batch soak, acceptance,
and the run-level proposal summary."""
from __future__ import annotations

from reporting.markdown import md_table
from reporting.acceptance import PER_REQUEST, RUNNING_AVERAGE, cell_acceptance, workload_acceptance
from reporting.degenerate import counted, model_loops
from reporting.objective import journal_text, no_slo_text, per_cell_winners, soak_outcome
from reporting.goodput import goodput_of
from reporting.overview import MARK_NOTE, wl
from reporting.speedup import (baseline_of, cell_map, config_names, crossover, geomean,
                               is_random_ids, speedups, workload_of)
from reporting.spread_section import tie_lines


def _fmt(value, digits=2):
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")



def _wl(workload):
    """The workload's name, marked when random ids; the note itself is said once under the table (MARK_NOTE)."""
    return wl(workload)


def _note_once(workloads):
    return [MARK_NOTE, ""] if any(is_random_ids(w) for w in workloads) else []


def _crossover_text(value):
    return "–" if value is None else (f"C={value}" if isinstance(value, (int, float)) else str(value))


def _code(text):
    return ["```", str(text).replace("```", "'''").rstrip(), "```"]


def speedup_section(run, host):
    lines = ["## Speedup over autoregressive", ""]
    baseline = baseline_of(run, host)
    if baseline is None:
        return lines + ["No autoregressive baseline was measured on this host (no config row with baseline true and no "
                        "config with algorithm NONE), so no speedup is shown.", ""]
    base_cells = cell_map(run, baseline, host)
    lines += [f"Baseline: `{baseline}`. Speedup = output tok/s of the config / the baseline's at the same host, "
              "workload and concurrency C; crossover = the smallest measured C where the speedup drops below 1.0.", ""]
    if not base_cells:
        return lines + [f"The baseline `{baseline}` has no ok matrix cell: no speedup can be computed.", ""]
    for name in config_names(run, host):
        if name == baseline:
            continue
        table = speedups(run, name, baseline, host)
        lines += [f"### `{name}`", ""]
        if not table:
            lines += ["No ok cell in common with the baseline.", ""]
            continue
        concs = sorted({c for series in table.values() for c in series})
        rows = []
        for workload, series in sorted(table.items()):
            rows.append([_wl(workload)] + [f"{series[c]:.3f}" if c in series else "–" for c in concs]
                        + [_crossover_text(crossover(series))])
        lines += md_table(["workload"] + [f"C={c}" for c in concs] + ["crossover"], rows)
        values = [s for series in table.values() for s in series.values()]
        lines += ["", f"Geometric mean speedup: {geomean(values):.3f}x over {len(values)} (workload, C) cell(s).", ""]
        lines += _note_once(table)
    return lines


def _cell_text(cell):
    return (f"{workload_of(cell)} C={cell.get('max_concurrency')}: {_fmt(cell.get('output_throughput'), 1)} tok/s, "
            f"ttft p99 {_fmt(cell.get('p99_ttft_ms'), 1)} ms, itl p99 {_fmt(cell.get('p99_itl_ms'), 2)} ms")


def winner_section(run, host, decision):
    objective = decision.objective
    lines = ["## Winner", "", f"Objective: {objective.describe()}.", ""]
    winners = per_cell_winners(run, host, decision.disqualified)
    baseline = decision.baseline
    base = cell_map(run, baseline, host) if baseline else {}
    if winners:
        # One row per workload, one column per C (not one row per cell): "config tok/s (speedup x)".
        concs = sorted({c for _, c in winners})
        rows = []
        for workload in sorted({w for w, _ in winners}):
            row = [_wl(workload)]
            for conc in concs:
                if (workload, conc) not in winners:
                    row.append("–")
                    continue
                name, tps = winners[(workload, conc)]
                speed = f" ({tps / base[(workload, conc)]['output_throughput']:.2f}x)" if (workload, conc) in base else ""
                row.append(f"`{name}` {tps:.1f}{speed}")
            rows.append(row)
        lines += ["Per (workload, C): the ok, non-disqualified config with the highest output tok/s (its speedup over "
                  "the baseline in brackets).", ""]
        lines += md_table(["workload"] + [f"C={c}" for c in concs], rows) + [""] + _note_once(w for w, _ in winners)
    if objective.mode == "slo":
        lines += [f"Goodput under the SLO ({objective.bounds_text()}): per config and workload its cell with the most "
                  "good requests per second (requests whose TTFT and TPOT are within the bounds).", ""]
        facts = decision.facts[0]
        rows = []
        for name in facts.names:
            best = facts.slo.get(name, {})
            for workload in facts.workloads or sorted(best):
                c = best.get(workload)
                g = goodput_of(c, objective) if c else {}
                share = g.get("goodput_share")
                rows.append([f"`{name}`", _wl(workload), str(c.get("max_concurrency")) if c else "–",
                             _fmt(g.get("goodput_rps"), 3) if c else "no request within the SLO",
                             _fmt(share * 100.0, 0) + "%" if isinstance(share, float) else "–",
                             _fmt(c.get("output_throughput"), 1) if c else "–",
                             _fmt(c.get("p99_ttft_ms"), 1) if c else "–", _fmt(c.get("p99_tpot_ms"), 2) if c else "–",
                             _fmt(c.get("p99_itl_ms"), 2) if c else "–"])
        if rows:
            lines += md_table(["config", "workload", "C", "good req/s", "good %", "out tok/s", "ttft p99 ms",
                             "tpot p99 ms", "itl p99 ms"], rows) + [""] + _note_once(facts.workloads)
        if decision.no_slo:
            lines += [f"**{no_slo_text(objective)}.** Closest cell per config:", ""]
            for name in facts.names:
                c = facts.closest.get(name)
                lines.append(f"- `{name}`: {_cell_text(c) if c else 'no ok cell'}")
            lines.append("")
    if decision.scores:
        what = "geomean speedup" if objective.mode == "throughput" else "goodput under the SLO vs baseline"
        rows = [[f"`{n}`", _fmt(s, 3) + ("x" if s is not None else "")]
                for n, s in sorted(decision.scores.items(), key=lambda kv: (-(kv[1] or 0), kv[0]))]
        lines += md_table(["config", what], rows) + [""]
    if decision.not_ranked:
        lines += ["Not ranked:", ""] + [f"- `{n}`: {_fmt(w)}" for n, w in decision.not_ranked.items()] + [""]
    lines += tie_lines(decision)
    if decision.winner:
        keep = " (keep autoregressive / keep current)" if decision.keep else ""
        lines += [f"**Overall winner: `{decision.winner}`**{keep}. {decision.reason}.", ""]
    elif decision.tie:
        lines += [f"**Tie, no overall winner**: {decision.reason}.", ""]
    else:
        lines += [f"**No overall winner**: {decision.reason}.", ""]
    return lines


def model_loop_lines(run, host):
    """The prompts the baseline's own output loops on (reporting/degenerate.py): not counted against any config."""
    loops = model_loops(run, host)
    if not loops[0]:
        return []
    also = {}
    for name in config_names(run, host):
        for item in counted(run, name, host, loops):
            for key in item["excused"]:
                also.setdefault(key, set()).add(name)
    rows = [[w, f"`{pid}`", ", ".join(f"`{n}`" for n in sorted(also.get((h, w, pid), ()))) or "–"]
            for h, w, pid in sorted(loops[0], key=lambda k: (str(k[0]), k[1], str(k[2])))]
    return (["The model's own loops (the autoregressive baseline's greedy output of these prompts is flagged too; "
             "not counted against any config):", ""] + md_table(["workload", "prompt", "also flagged under"], rows)
            + [""])


def disqualified_section(decision, run=None, host=None):
    lines = ["## Disqualified", ""]
    loops = model_loop_lines(run, host) if run is not None else []
    if not decision.disqualified:
        return lines + ["None: no config failed its sweep or soak, no sampled output was flagged degenerate and no "
                        "judged config failed the lossless gate.", ""] + loops
    for name, items in decision.disqualified.items():
        lines.append(f"### `{name}`")
        lines.append("")
        for item in items:
            lines += [f"- {item['kind']}: {item['why']}", ""]
            if item.get("journal"):
                lines += ["Journal excerpt:", ""] + _code(item["journal"]) + [""]
            for ev in item.get("evidence") or []:
                prompt = f" prompt `{ev['prompt_id']}`" if ev.get("prompt_id") else ""
                lines += [f"Flagged ({ev['reason']}) at {ev['workload']} C={ev['max_concurrency']}{prompt}:", ""]
                lines += _code(ev["text"]) + [""]
    return lines + loops


def soak_section(run, host):
    lines = ["## Shrinking-batch soak", ""]
    rows, failures = [], []
    for name in config_names(run, host):
        soak = soak_outcome(run, name, host)
        cells = sorted(run.soak_of(name, host), key=lambda c: -(c.get("max_concurrency") or 0))
        if not soak and not cells:
            continue
        measured = []
        for c in cells:
            tps = c.get("output_throughput")
            what = f"{_fmt(tps, 1)} tok/s, " if isinstance(tps, (int, float)) else ""
            err = f": {_fmt(str(c.get('error'))[:120])}" if c.get("status") != "ok" and c.get("error") else ""
            measured.append(f"C={c.get('max_concurrency')}: {what}{c.get('status')}{err}")
        flagged = sum((c.get("degenerate") or {}).get("flagged") or 0 for c in cells
                      if isinstance(c.get("degenerate"), dict))
        rows.append([f"`{name}`", _fmt(" → ".join(str(s) for s in soak.get("steps") or [])),
                     str(soak.get("status") or "–"), "; ".join(measured) or "–", str(flagged),
                     _fmt((soak.get("reason") or "")[:200])])
        if soak.get("status") == "failed":
            failures.append((name, soak))
    if not rows:
        return lines + ["No soak recorded.", ""]
    lines += ["Soak cells are reported here only: they never enter a speedup or a winner.", ""]
    lines += md_table(["config", "steps (C)", "status", "measured", "degenerate flagged", "reason"], rows) + [""]
    for name, soak in failures:
        lines += [f"Soak of `{name}` FAILED: {_fmt(soak.get('reason'))}", ""]
        journal = journal_text(soak.get("journal"))
        if journal:
            lines += ["Journal excerpt:", ""] + _code(journal) + [""]
    return lines


def _source_text(sources, recomputed):
    out = []
    for s in sources:
        if s == RUNNING_AVERAGE:
            out.append("server running average (not a per-cell figure)")
        elif s == PER_REQUEST:
            out.append("per request" + (" (recomputed from requests)" if recomputed else ""))
        elif s == "unknown":
            out.append("unknown (row names no source)")
        else:
            out.append(str(s))
    return "; ".join(out) or "–"


def acceptance_section(run, host):
    lines = ["## Acceptance", ""]
    rows, mismatches = [], []
    for name in config_names(run, host):
        cells = run.cells_of(name, host)
        for workload, acc in workload_acceptance(cells).items():
            if acc["accept_length"] is None and acc["accept_rate"] is None:
                continue
            recomputed = any(cell_acceptance(c)["recomputed"] for c in cells if workload_of(c) == workload)
            notes = []
            if acc["running_average"]:
                notes.append("running average of the server, not a per-cell figure")
            if acc["mismatches"]:
                notes.append(f"MISMATCH in {len(acc['mismatches'])} cell(s)")
            rows.append([f"`{name}`", _wl(workload), _fmt(acc["accept_length"], 2), _fmt(acc["accept_rate"], 3),
                         _source_text(acc["sources"], recomputed), str(acc["cells"]), "; ".join(notes) or ""])
            mismatches += [(name, c, p) for c, p in acc["mismatches"]]
    if not rows:
        return lines + ["No accept-length figures (no speculative cell reported one).", ""]
    lines += ["Accept length = completion tokens / verify steps (recomputed from the per-request figures when the "
              "rows carry them); accept rate = accepted / proposed drafts.", ""]
    lines += md_table(["config", "workload", "accept len", "accept rate", "source", "cells", "note"], rows) + [""]
    lines += _note_once(set(workload_of(c) for n in config_names(run, host) for c in run.cells_of(n, host)))
    for name, c, p in mismatches:
        lines.append(f"- **MISMATCH** `{name}` {workload_of(c)} C={c.get('max_concurrency')}: stored accept_length "
                     f"{p['stored']:.3f} vs {p['accept_length']:.3f} recomputed from the requests "
                     f"(differs by more than 1%).")
    if mismatches:
        lines.append("")
    return lines


def proposal_section(proposal, path=None):
    lines = ["## Proposal", ""]
    if path:
        lines += [f"Written to `{path}` (apply: `ansible-playbook playbooks/apply_proposal.yml -e proposal={path}`; "
                  "a group with no winner applies nothing).", ""]
    rows = []
    for group, entry in proposal.get("groups", {}).items():
        figures = entry.get("figures") or {}
        g = figures.get("geomean_speedup")
        rows.append([group, ", ".join(str(h) for h in entry.get("hosts") or []) or "–",
                     f"`{entry['winner']}`" if entry.get("winner") else "none", _fmt(entry.get("baseline")),
                     _fmt(g, 3) + ("x" if g is not None else ""), _fmt(entry.get("reason"))])
    lines += md_table(["group", "hosts", "winner", "baseline", "geomean speedup", "reason"], rows) + [""]
    return lines
