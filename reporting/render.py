"""report.md from a loaded Run, read top to bottom: the summary (baseline and speculative configs, the verdict with its
evidence, every config's status and peak), the proposal, throughput against interactivity (frontier plot, targets),
goodput and power; then the details: speedup over autoregressive, the winner under the objective, disqualified configs
with their evidence, the shrinking-batch soak, acceptance, a table per config, failures with their reasons and journal
excerpts, the other plots and provenance."""
from __future__ import annotations

import datetime
from pathlib import Path

from reporting.markdown import md_table
from reporting.frontier import DEFAULT_TARGETS
from reporting.load import Run
from reporting.lossless import not_lossless
from reporting.lossless_section import lossless_section
from reporting.objective import Objective, decide
from reporting.overview import MARK_NOTE, frontier_section, goodput_power_section, verdict_lines, wl
from reporting.plots import make_plots
from reporting.sections import (acceptance_section, disqualified_section, proposal_section, soak_section,
                                speedup_section, winner_section)
from reporting.speedup import config_spec, is_random_ids, workload_of
from reporting.spread_section import spread_cell_text, spread_section
from reporting.status import accept_length_of, best_config, config_status, peak

# Cell columns: (header, row key, decimals)
CELL_COLUMNS = (
    ("workload", "workload", 0),
    ("ctx", "context_length", 0),
    ("C", "max_concurrency", 0),
    ("out tok/s", "output_throughput", 1),
    ("TTFT mean ms", "mean_ttft_ms", 1),
    ("TTFT p99 ms", "p99_ttft_ms", 1),
    ("ITL median ms", "median_itl_ms", 2),
    ("ITL p99 ms", "p99_itl_ms", 2),
    ("TPOT mean ms", "mean_tpot_ms", 2),
    ("accept len", "accept_length", 2),
    ("repeats: spread tps / TPOT", "spread", 0),
    ("good %", "goodput_share", 0),
    ("good req/s", "goodput_rps", 2),
    ("W mean", "power_mean_w", 0),
    ("tok/J", "output_tokens_per_joule", 3),
    ("done/failed", None, 0),
    ("status", "status", 0),
)
FRONTIER_PLOT = "throughput_vs_interactivity"
TPS_COLUMN = [key for _, key, _ in CELL_COLUMNS].index("output_throughput")
SPEC_KEYS = ("algorithm", "budget", "topk", "block_size", "cuda_graph")


def fmt(value, digits=1):
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}f}" if digits else f"{value:.0f}" if isinstance(value, float) else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_report(run: Run, plots=(), objective=None, proposal=None, proposal_path=None,
                  targets=DEFAULT_TARGETS) -> str:
    """report.md text; objective (reporting.objective.Objective) picks the winner, default throughput; proposal
    (reporting.proposal.build_proposal()[0]) adds its summary."""
    hosts = run.hosts()
    if len(hosts) > 1:
        # Hosts differ in hardware (nvlink vs pcie): every host gets its own summary, best config and tables.
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
        lines = [f"# Benchmark report: {run.name}", "",
                 f"Generated {now} from {len(run.cells)} cell rows and {len(run.configs)} sweep outcomes on "
                 f"{len(hosts)} hosts: {', '.join(hosts)}.", ""]
        if proposal:
            lines += proposal_section(proposal, proposal_path)
        if plots:
            lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
        for host in hosts:
            body = _render_one(run.for_host(host), (), objective, targets=targets).splitlines()
            body = [("#" + line) if line.startswith("#") else line for line in body[1:]]
            lines += [f"## Host {host}"] + body + [""]
        return "\n".join(lines)
    return _render_one(run, plots, objective, proposal, proposal_path, targets)


def _render_one(run: Run, plots=(), objective=None, proposal=None, proposal_path=None,
                targets=DEFAULT_TARGETS) -> str:
    lines = [f"# Benchmark report: {run.name}", ""]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    hosts = run.hosts()
    lines.append(f"Generated {now} from {len(run.cells)} cell rows and {len(run.configs)} sweep outcomes"
                 f"{' on ' + ', '.join(hosts) if hosts else ''}.")
    lines.append("")
    names = [n for n in run.config_names() if not n.startswith("_")]
    best = best_config(run)
    counted = [config_status(run, n) for n in names]
    lines.append(f"**{counted.count('ok')} ok, {counted.count('failed')} failed"
                 f"{', %d partial' % counted.count('partial') if counted.count('partial') else ''}"
                 f"{', %d disqualified' % counted.count('disqualified') if counted.count('disqualified') else ''}"
                 f"** of {len(names)} config(s). Highest peak throughput: {('**' + best + '**') if best else 'none'} "
                 "(the verdict below ranks the configs; this is one cell's figure).")
    lines.append("")

    host = hosts[0] if hosts else None
    decision = decide(run, [host], objective or Objective())
    frontier_png = next((p for p in plots if Path(p).stem == FRONTIER_PLOT), None)
    plots = [p for p in plots if p != frontier_png]

    # Summary
    lines += ["## Summary", ""] + verdict_lines(run, host, decision)
    headers = ["config", "status", *SPEC_KEYS, "peak out tok/s", "at ctx/C", "accept len", "ready s", "reason"]
    rows = []
    for name in names:
        spec = config_spec(run, name)
        status = config_status(run, name)
        cell = peak(run.cells_of(name))
        outcome = run.outcome_of(name) or {}
        reason = outcome.get("reason") or ""
        soak = outcome.get("soak") if isinstance(outcome.get("soak"), dict) else {}
        if not reason and soak.get("status") == "failed":
            reason = f"soak failed: {soak.get('reason') or '?'}"
        if not reason and status == "disqualified":
            reason = ("not lossless (see Lossless gate)" if not_lossless(run, name)
                      else "degenerate output flagged (see Disqualified)")
        if not reason and status != "ok":
            bad = [c for c in run.cells_of(name) if c.get("status") != "ok"]
            reason = "; ".join(f"{c.get('cell')}: {c.get('error')}" for c in bad[:3])
        mark = " ★" if name == best else ""
        row = [f"**{name}**{mark}" if name == best else name, status.upper() if status != "ok" else "ok"]
        row += [fmt(spec.get(k), 0) for k in SPEC_KEYS]
        row += [f"**{fmt(cell['output_throughput'])}**" if (cell and name == best) else
                fmt(cell["output_throughput"]) if cell else "–",
                f"{cell['context_length']}/{cell['max_concurrency']}" if cell else "–",
                fmt(accept_length_of(run, name), 2), fmt(outcome.get("time_to_ready_s"), 1),
                fmt(reason[:200])]
        rows.append(row)
    lines += md_table(headers, rows)
    lines.append("")

    restore = [r for r in run.configs if r.get("phase") == "restore"]
    if restore:
        r = restore[-1]
        verdict = "restored and ready" if r.get("status") == "ok" else f"NOT restored: {r.get('reason')}"
        lines += [f"Baseline `{r.get('config')}`: {verdict}"
                  f"{' in %.1f s' % r['time_to_ready_s'] if r.get('time_to_ready_s') is not None else ''}"
                  f"{' (pid %s)' % r['pid'] if r.get('pid') else ''}.", ""]
    sweep = [r for r in run.configs if r.get("phase") == "sweep_total"]
    if sweep:
        lines += [f"Sweep wall time: {fmt(sweep[-1].get('elapsed_s'), 1)} s "
                  f"(bound {fmt(sweep[-1].get('bound_s'), 0)} s).", ""]

    if proposal:
        lines += proposal_section(proposal, proposal_path)
    lines += frontier_section(run, host, targets, frontier_png)
    lines += goodput_power_section(run, host, objective)
    lines += ["# Details", ""]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in plots]
        lines.append("")
    lines += speedup_section(run, host)
    lines += winner_section(run, host, decision)
    lines += disqualified_section(decision, run, host)
    lines += spread_section(run, host)
    lines += lossless_section(run, host)
    lines += soak_section(run, host)
    lines += acceptance_section(run, host)

    # Per config
    for name in names:
        cells = sorted(run.cells_of(name), key=lambda c: (c.get("host") or "", c.get("context_length") or 0,
                                                           c.get("max_concurrency") or 0))
        lines += [f"## Config `{name}`{' ★ highest peak throughput' if name == best else ''}", ""]
        spec = config_spec(run, name)
        if spec:
            lines.append("Spec: " + ", ".join(f"{k}={v}" for k, v in spec.items()))
            lines.append("")
        outcome = run.outcome_of(name)
        if outcome and outcome.get("status") != "ok":
            reason = str(outcome.get("reason", "")).split("Last journal lines")[0].strip()
            lines.append(f"**FAILED at step `{outcome.get('failed_step', '?')}`**: {reason}")
            lines.append("")
            journal = outcome.get("journal")
            if isinstance(journal, list):
                journal = "\n".join(str(j) for j in journal)
            if journal:
                lines += ["Journal excerpt:", "", "```", journal.rstrip()[-3000:], "```", ""]
        if not cells:
            lines += ["No benchmark cells.", ""]
            continue
        top = peak(cells)
        rows = []
        for c in cells:
            row = []
            for header, key, digits in CELL_COLUMNS:
                if key is None:
                    row.append(f"{fmt(c.get('completed'), 0)}/{fmt(c.get('failed'), 0)}")
                elif key == "workload":
                    row.append(fmt(wl(workload_of(c))))
                elif key == "spread":
                    row.append(spread_cell_text(c))
                elif key == "goodput_share":
                    share = c.get(key)
                    row.append(fmt(share * 100.0, 0) + "%" if isinstance(share, (int, float)) else "–")
                else:
                    row.append(fmt(c.get(key), digits))
            if c is top:
                row[TPS_COLUMN] = f"**{row[TPS_COLUMN]}**"
            if c.get("status") != "ok":
                row[-1] = f"{c.get('status')}: {fmt((c.get('error') or '')[:120])}"
            rows.append(row)
        clients = sorted({f"{c.get('bench_client')} ({c.get('backend')})" for c in cells if c.get("bench_client")})
        if clients:
            lines.append("Client: " + ", ".join(clients) + f"; output {cells[0].get('random_output_len')} tokens per"
                         " request, fixed input length = ctx.")
            lines.append("")
        hosts_here = sorted({c.get("host") for c in cells if c.get("host")})
        if len(hosts_here) > 1:
            lines.append("Hosts: " + ", ".join(hosts_here))
            lines.append("")
        lines += md_table([h for h, _, _ in CELL_COLUMNS], rows)
        lines.append("")
    if any(is_random_ids(workload_of(c)) for c in run.cells):
        lines += [MARK_NOTE, ""]

    # Provenance
    prov = next((c.get("provenance") for c in run.cells if c.get("provenance")), None)
    if prov:
        lines += ["## Provenance", ""]
        for key in sorted(prov):
            value = prov[key]
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            lines.append(f"- {key}: `{value}`")
        lines.append("")
    if run.problems:
        lines += ["## Unreadable rows", ""] + [f"- {p}" for p in run.problems] + [""]
    return "\n".join(lines)


def write_report(run: Run, run_dir, plots=True, objective=None, proposal=None, proposal_path=None,
                 targets=DEFAULT_TARGETS) -> Path:
    """Write RUN_DIR/report.md (and RUN_DIR/plots/*.png unless plots is False); returns the report's path."""
    run_dir = Path(run_dir)
    made = []
    if plots:
        made = make_plots(run, run_dir / "plots")
    rel = [str(Path(p).relative_to(run_dir)) for p in made]
    path = run_dir / "report.md"
    path.write_text(render_report(run, rel, objective, proposal, proposal_path, targets), encoding="utf-8")
    return path
