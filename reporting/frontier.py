"""Throughput against interactivity: per config and workload, output tok/s per GPU against output tok/s per user over
the measured concurrencies, the Pareto frontier over all configs, and per interactivity target the config that serves
it with the most throughput per GPU.

tok/s per user = 1000 / the cell's median TPOT (ms): the decode speed one user sees. tok/s per GPU = the cell's output
tok/s / the GPUs the server used: the row's power_gpus (what the power sampler summed: the server's tp x dp), else the
count in the row's provenance.gpu ("8x NVIDIA B300", the host's nvidia-smi facts); when neither is known (the lab has
no GPU) the figure is per host and the report says so. Raising concurrency trades the first for the second; a point is
on the frontier when no other point of the workload has both more tok/s per user and more tok/s per GPU.

A target is served by the best *measured* cell at or above it (no interpolation between concurrencies): the cell with
the most tok/s per GPU among all configs' cells whose tok/s per user >= the target.
"""
from __future__ import annotations

import re

from reporting.objective import disqualifications
from reporting.speedup import config_names, is_ok, ranked_workloads, workload_of

DEFAULT_TARGETS = (20.0, 50.0, 100.0)
_COUNT = re.compile(r"^\s*(\d+)\s*x\s")


def gpus_of(cell):
    """(count, source) of the GPUs behind a cell's throughput; (None, why) when unknown."""
    count = cell.get("power_gpus")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count, "GPUs the server used (power sampler)"
    gpu = str((cell.get("provenance") or {}).get("gpu") or "")
    match = _COUNT.match(gpu)
    if match and int(match.group(1)) > 0:
        return int(match.group(1)), "GPUs of the host (provenance.gpu)"
    return None, "GPU count unknown (no nvidia-smi on the host): per host"


def point_of(cell):
    """{C, per_user, per_gpu, gpus, cell} of an ok cell with a median TPOT, else None."""
    tpot = cell.get("median_tpot_ms")
    if not is_ok(cell) or not isinstance(tpot, (int, float)) or tpot <= 0:
        return None
    gpus, _ = gpus_of(cell)
    return {"C": cell.get("max_concurrency"), "per_user": 1000.0 / tpot,
            "per_gpu": cell["output_throughput"] / (gpus or 1), "gpus": gpus, "cell": cell}


def series(run, host=None):
    """{workload: {label: [points sorted by C]}} of every non-disqualified config (label = config, or config@host
    when the run has several hosts), and the disqualified configs left out."""
    hosts = [host] if host is not None else (run.hosts() or [None])
    out, left_out = {}, []
    for h in hosts:
        disq = disqualifications(run, h)
        for name in config_names(run, h):
            label = f"{name}@{h}" if len(hosts) > 1 else name
            if name in disq:
                if label not in left_out and run.cells_of(name, h):
                    left_out.append(label)
                continue
            for c in run.cells_of(name, h):
                p = point_of(c)
                if p is not None:
                    out.setdefault(workload_of(c), {}).setdefault(label, []).append(dict(p, config=label))
    for lines in out.values():
        for pts in lines.values():
            pts.sort(key=lambda p: p["C"])
    return out, left_out


def pareto(points):
    """The points no other point beats on both axes, sorted by tok/s per user."""
    best, front = float("-inf"), []
    for p in sorted(points, key=lambda p: (-p["per_user"], -p["per_gpu"])):
        if p["per_gpu"] > best:
            front.append(p)
            best = p["per_gpu"]
    return sorted(front, key=lambda p: p["per_user"])


def serving(points, target):
    """The measured point with the most tok/s per GPU at or above `target` tok/s per user (None when none reaches)."""
    ok = [p for p in points if p["per_user"] >= target]
    return max(ok, key=lambda p: (p["per_gpu"], -p["C"], p["config"])) if ok else None


def target_table(run, host=None, targets=DEFAULT_TARGETS):
    """[(workload, target, point or None, fastest point)] over the ranked workloads (real text when measured)."""
    table, _ = series(run, host)
    rows = []
    for workload in ranked_workloads(table):
        points = [p for pts in table[workload].values() for p in pts]
        fastest = max(points, key=lambda p: p["per_user"]) if points else None
        rows += [(workload, t, serving(points, t), fastest) for t in targets]
    return rows


def per_gpu_label(run, host=None):
    """The y axis' unit: 'output tok/s per GPU', or per host when some cell's GPU count is unknown."""
    cells = [c for c in run.cells if (host is None or c.get("host") == host) and point_of(c)]
    unknown = [c for c in cells if gpus_of(c)[0] is None]
    if cells and len(unknown) == len(cells):
        return "output tok/s per host (GPU count unknown)"
    if unknown:
        return "output tok/s per GPU (per host where the GPU count is unknown)"
    return "output tok/s per GPU"
