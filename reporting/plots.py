"""PNG plots (matplotlib, Agg backend, controller only): throughput against interactivity with the Pareto frontier
(one panel per workload, reporting/frontier.py), throughput vs concurrency per config (one panel per workload), speedup over the autoregressive baseline vs concurrency (one panel per workload), and accept length + peak
throughput vs speculative budget."""
from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.ticker import NullFormatter

from reporting.frontier import pareto, per_gpu_label
from reporting.frontier import series as frontier_series
from reporting.load import Run
from reporting.objective import disqualifications
from reporting.speedup import baseline_of, is_random_ids, ranked_workloads, speedups, workload_of
from reporting.status import accept_length_of, config_status, ok_cells, peak

matplotlib.use("Agg")  # no display on a controller: before pyplot is first imported
import matplotlib.pyplot as plt  # noqa: E402


def _log2_axis(ax, concurrencies):
    """x on a log2 scale, ticked and labelled at the measured concurrencies."""
    ax.set_xscale("log", base=2)
    ticks = sorted({c for c in concurrencies if c})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(int(t)) if float(t).is_integer() else str(t) for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())


def _decorate(ax, workload, concurrencies, ylabel):
    """A per-workload panel's axes: log2 concurrency, the workload as title (random ids marked), grid, legend."""
    _log2_axis(ax, concurrencies)
    ax.set_title(workload + (" (throughput only)" if is_random_ids(workload) else ""))
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def throughput_vs_concurrency(run: Run, path: Path):
    """One panel per workload; one line per config (ok matrix cells only). None when nothing to plot."""
    names = [n for n in run.config_names() if not n.startswith("_")]
    contexts = sorted({workload_of(c) for c in ok_cells(run.cells) if c.get("max_concurrency")})
    if not contexts:
        return None
    cols = min(len(contexts), 2)
    rows = (len(contexts) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for i, ctx in enumerate(contexts):
        ax = axes[i // cols][i % cols]
        hosts = run.hosts() or [None]
        for name in names:
            for host in hosts:
                pts = sorted((c["max_concurrency"], c["output_throughput"])
                             for c in ok_cells(run.cells_of(name, host))
                             if c.get("max_concurrency") and workload_of(c) == ctx)
                if pts:
                    label = f"{name}@{host}" if len(hosts) > 1 else name
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        _decorate(ax, ctx, [c.get("max_concurrency") for c in ok_cells(run.cells) if workload_of(c) == ctx],
                  "output tok/s")
    for j in range(len(contexts), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(f"{run.name}: output throughput vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def speedup_vs_concurrency(run: Run, path: Path):
    """One panel per workload; one line per speculative config (per host if several): speedup over the host's
    baseline at each concurrency, dashed line at 1.0. None when no host has a baseline and another config."""
    hosts = run.hosts() or [None]
    lines = {}                      # workload -> [(label, [(C, speedup)])]
    left_out = []                   # disqualified configs: their speedup means nothing (garbage is fast)
    for host in hosts:
        baseline = baseline_of(run, host)
        if baseline is None:
            continue
        disq = disqualifications(run, host)
        for name in [n for n in run.config_names() if not n.startswith("_") and n != baseline]:
            if name in disq:
                tag = f"{name}@{host}" if len(hosts) > 1 else name
                if run.cells_of(name, host) and tag not in left_out:
                    left_out.append(tag)
                continue
            for workload, series in speedups(run, name, baseline, host).items():
                label = f"{name}@{host}" if len(hosts) > 1 else name
                lines.setdefault(workload, []).append((label, sorted(series.items())))
    if not lines:
        return None
    workloads = sorted(lines)
    cols = min(len(workloads), 2)
    rows = (len(workloads) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for i, workload in enumerate(workloads):
        ax = axes[i // cols][i % cols]
        for label, pts in lines[workload]:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(1.0, linestyle="--", color="black", linewidth=1, label="baseline (1.0)")
        _decorate(ax, workload, [p[0] for _, pts in lines[workload] for p in pts], "speedup over autoregressive")
    for j in range(len(workloads), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(f"{run.name}: speedup over autoregressive vs concurrency"
                 + (f"\n(disqualified, not drawn: {', '.join(left_out)})" if left_out else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def budget_plot(run: Run, path: Path):
    """Accept length and peak output tok/s vs budget for ok configs that have a numeric budget."""
    pts = []
    for name in run.config_names():
        outcome = run.outcome_of(name) or {}
        budget = (outcome.get("spec") or {}).get("budget")
        if not isinstance(budget, (int, float)) or isinstance(budget, bool) or config_status(run, name) == "failed":
            continue
        cell = peak(run.cells_of(name))
        pts.append((budget, accept_length_of(run, name), cell["output_throughput"] if cell else None, name))
    if not pts:
        return None
    pts.sort(key=lambda p: (p[0], p[3]))  # by budget, then name (two configs may share a budget)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p[0] for p in pts]
    acc = [p[1] if p[1] is not None else float("nan") for p in pts]
    tps = [p[2] if p[2] is not None else float("nan") for p in pts]
    ax.plot(xs, acc, marker="o", color="tab:blue", label="accept length")
    ax.set_xlabel("speculative budget")
    ax.set_ylabel("accept length", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(xs, tps, marker="s", color="tab:red", label="peak output tok/s")
    ax2.set_ylabel("peak output tok/s", color="tab:red")
    for x, a, _, name in pts:
        if a is not None:
            ax.annotate(name, (x, a), textcoords="offset points", xytext=(4, 4), fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.suptitle(f"{run.name}: accept length and throughput vs budget")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def frontier_plot(run: Run, path: Path):
    """Throughput against interactivity (reporting/frontier.py), one panel per workload: x output tok/s per user,
    y output tok/s per GPU, each config a line through its concurrencies (labelled C=..), the Pareto frontier over
    all configs drawn dashed. None when no cell has a median TPOT."""
    table, left_out = frontier_series(run)
    if not table:
        return None
    workloads = ranked_workloads(table) + [w for w in sorted(table) if w not in ranked_workloads(table)]
    cols = min(len(workloads), 2)
    rows = (len(workloads) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), squeeze=False)
    for i, workload in enumerate(workloads):
        ax = axes[i // cols][i % cols]
        for label, pts in table[workload].items():
            line, = ax.plot([p["per_user"] for p in pts], [p["per_gpu"] for p in pts], marker="o", label=label)
            for p in pts:
                ax.annotate(f"C={p['C']}", (p["per_user"], p["per_gpu"]), textcoords="offset points",
                            xytext=(3, 3), fontsize="x-small", color=line.get_color())
        front = pareto([p for pts in table[workload].values() for p in pts])
        ax.plot([p["per_user"] for p in front], [p["per_gpu"] for p in front], linestyle="--", color="black",
                linewidth=1.2, label="Pareto frontier")
        ax.set_title(workload + (" (throughput only)" if is_random_ids(workload) else ""))
        ax.set_xlabel("output tok/s per user (1000 / median TPOT ms)")
        ax.set_ylabel(per_gpu_label(run))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for j in range(len(workloads), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.suptitle(f"{run.name}: throughput against interactivity"
                 + (f"\n(disqualified, not drawn: {', '.join(left_out)})" if left_out else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_plots(run: Run, out_dir) -> list:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [frontier_plot(run, out_dir / "throughput_vs_interactivity.png"),
            throughput_vs_concurrency(run, out_dir / "throughput_vs_concurrency.png"),
            speedup_vs_concurrency(run, out_dir / "speedup_vs_concurrency.png"),
            budget_plot(run, out_dir / "accept_throughput_vs_budget.png")]
    return [p for p in made if p is not None]
