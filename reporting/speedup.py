"""Speedup over the autoregressive baseline: workload naming, the baseline config of a host, per-cell speedup
(same host, workload and concurrency), crossover concurrency and geometric means.

Only matrix cells count here: load_run() keeps the shrinking-batch soak cells (phase "soak") apart in
Run.soak, so they never enter a speedup or a winner.
"""
from __future__ import annotations

import math

from ansible.module_utils.sglang.speculative import summary_from_argv

RANDOM_IDS_PREFIX = "random-ids/"
RANDOM_IDS_NOTE = "throughput only: acceptance on random ids says nothing about real traffic"
NEVER = "never"
BELOW_EVERYWHERE = "below 1 at every C"


def workload_of(cell) -> str:
    """The cell's workload; old rows (no workload field) sent random token ids of the context length."""
    workload = cell.get("workload")
    if workload:
        return str(workload)
    return f"{RANDOM_IDS_PREFIX}ctx{cell.get('context_length')}"


def is_random_ids(workload) -> bool:
    return str(workload).startswith(RANDOM_IDS_PREFIX)


def concurrency_of(cell):
    value = cell.get("max_concurrency")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_ok(cell) -> bool:
    tps = cell.get("output_throughput")
    return (cell.get("status") == "ok" and isinstance(tps, (int, float)) and not isinstance(tps, bool)
            and tps > 0 and concurrency_of(cell) is not None)


def geomean(values):
    """Geometric mean of positive numbers; None for an empty sequence."""
    values = [float(v) for v in values]
    if not values:
        return None
    if any(v <= 0 for v in values):
        raise ValueError(f"geometric mean of non-positive values: {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def config_spec(run, config, host=None):
    """The config's spec {algorithm, budget, ...}: its sweep outcome's, else read back from the server flags."""
    outcome = run.outcome_of(config, host) or {}
    spec = outcome.get("spec") or {}
    if not spec:
        flags = next((c.get("provenance", {}).get("flags") for c in run.cells_of(config, host)
                      if c.get("provenance", {}).get("flags")), None)
        spec = summary_from_argv(flags)
    return spec


def config_names(run, host=None):
    """Config names of a host in sweep order (outcome rows first, then cells), '_'-prefixed ones left out."""
    names = []
    rows = [r for r in run.configs if not r.get("phase")] + run.cells + list(getattr(run, "soak", []))
    for row in rows:
        if host is not None and row.get("host") != host:
            continue
        name = row.get("config") or "default"
        if not name.startswith("_") and name not in names:
            names.append(name)
    return names


def baseline_of(run, host=None):
    """The host's baseline: the config row with baseline true, else the first config whose algorithm is NONE."""
    for row in run.configs:
        if not row.get("phase") and row.get("baseline") is True and (host is None or row.get("host") == host):
            return row.get("config") or "default"
    for name in config_names(run, host):
        algorithm = config_spec(run, name, host).get("algorithm")
        if isinstance(algorithm, str) and algorithm.upper() == "NONE":
            return name
    return None


def cell_map(run, config, host=None):
    """{(workload, C): cell} of the config's ok matrix cells on the host (a later cell replaces an earlier one)."""
    out = {}
    for c in run.cells_of(config, host):
        if is_ok(c):
            out[(workload_of(c), concurrency_of(c))] = c
    return out


def speedups(run, config, baseline, host=None):
    """{workload: {C: speedup}} of config over baseline at every (workload, C) both measured ok on the host."""
    if baseline is None:
        return {}
    mine, base = cell_map(run, config, host), cell_map(run, baseline, host)
    out = {}
    for key in sorted(set(mine) & set(base), key=lambda k: (k[0], k[1])):
        workload, conc = key
        out.setdefault(workload, {})[conc] = mine[key]["output_throughput"] / base[key]["output_throughput"]
    return out


def crossover(series):
    """Crossover concurrency of {C: speedup}: the smallest measured C with speedup < 1.0; 'never' when >= 1 at every
    C; 'below 1 at every C' when no measured C reaches 1.0; None for an empty series."""
    if not series:
        return None
    points = sorted(series.items())
    below = [c for c, s in points if s < 1.0]
    if not below:
        return NEVER
    if len(below) == len(points):
        return BELOW_EVERYWHERE
    return below[0]


def ranked_workloads(workloads):
    """The workloads a winner is chosen on: the real-text ones when any were measured, random ids only otherwise.
    Acceptance on random ids says nothing about real traffic: on the H200, real NGRAM ran 1.6-1.9x autoregressive on
    random ids (the model's output on them is repetitive) and 0.6-0.85x on every shipped prompt set."""
    workloads = sorted(set(workloads))
    text = [w for w in workloads if not is_random_ids(w)]
    return text or workloads


def geomean_speedup(run, config, baseline, host=None):
    """Geometric mean of the config's speedups over the (workload, C) cells both it and the baseline measured, on the
    ranked workloads (real text when measured)."""
    series = speedups(run, config, baseline, host)
    keep = ranked_workloads(series)
    return geomean([s for w in keep for s in series[w].values()])


def coverage(run, config, baseline, host=None):
    """The (workload, C) cells the baseline measured ok and the config did not (sorted); [] = full coverage."""
    if baseline is None:
        return []
    return sorted(set(cell_map(run, baseline, host)) - set(cell_map(run, config, host)))
