"""Which config wins: disqualification, per-cell winners, and the overall winner of a host or a host group.

Throughput mode (default): the overall winner is the config with the highest geometric-mean speedup over the
(workload, C) cells the baseline measured (ties by name). SLO mode (a p99 TTFT, ITL and/or TPOT bound) ranks by
goodput: per config and workload its highest good requests per second (reporting/goodput.py: requests whose own TTFT
and TPOT are within the TTFT and TPOT bounds, recomputed from the rows' per-request records) among ok cells (with an
ITL bound, only cells whose p99 ITL meets it: ITL is per token, not per request); the config's score is the geometric
mean over the baseline's workloads of that figure relative to the baseline's; a config with no good request in some
workload is out. Hosts of one group are aggregated by the geometric mean over hosts; a config must be valid on all of them.

Disqualified: sweep status failed, soak failed, any cell (matrix or soak) with degenerate.flagged > 0, or not lossless
(greedy outputs unlike the baseline's beyond the tolerance: reporting/lossless.py).
A speculative config wins only if it beats the baseline (score > 1); otherwise the baseline wins ("keep
autoregressive / keep current"). Without a baseline there is no speedup and no winner. A winner whose margin lies
inside the spread of its cells' repeats is a tie (ties.py): the baseline is kept when tied, else no winner.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from reporting.degenerate import counted, model_loops
from reporting.goodput import good_rps
from reporting.lossless import disqualification as lossless_disqualification, verdicts as lossless_verdicts
from reporting.speedup import (ranked_workloads, baseline_of, cell_map, config_names, coverage, geomean, geomean_speedup, is_ok,
                               workload_of)
from reporting.ties import resolve as resolve_ties

KEEP = "keep autoregressive / keep current"
EPS = 1e-12


@dataclass(frozen=True)
class Objective:
    mode: str = "throughput"                 # throughput | slo
    slo_ttft_p99_ms: float | None = None
    slo_itl_p99_ms: float | None = None
    slo_tpot_p99_ms: float | None = None

    @classmethod
    def from_bounds(cls, ttft_p99_ms=None, itl_p99_ms=None, tpot_p99_ms=None):
        """Throughput mode without bounds, SLO mode with any; a negative or non-finite bound is a ValueError."""
        for name, value in (("ttft p99", ttft_p99_ms), ("itl p99", itl_p99_ms), ("tpot p99", tpot_p99_ms)):
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value) or value <= 0):
                raise ValueError(f"SLO bound {name} must be a positive number of ms, got {value!r}")
        mode = "slo" if any(v is not None for v in (ttft_p99_ms, itl_p99_ms, tpot_p99_ms)) else "throughput"
        return cls(mode, ttft_p99_ms, itl_p99_ms, tpot_p99_ms)

    def _bounds(self):
        return (("p99_ttft_ms", self.slo_ttft_p99_ms), ("p99_itl_ms", self.slo_itl_p99_ms),
                ("p99_tpot_ms", self.slo_tpot_p99_ms))

    def bounds_text(self):
        parts = []
        if self.slo_ttft_p99_ms is not None:
            parts.append(f"ttft p99 <= {self.slo_ttft_p99_ms:g} ms")
        if self.slo_itl_p99_ms is not None:
            parts.append(f"itl p99 <= {self.slo_itl_p99_ms:g} ms")
        if self.slo_tpot_p99_ms is not None:
            parts.append(f"tpot p99 <= {self.slo_tpot_p99_ms:g} ms")
        return ", ".join(parts)

    def describe(self):
        if self.mode == "slo":
            return (f"SLO ({self.bounds_text()}): goodput, the highest good requests per second (requests whose TTFT "
                    "and TPOT are within the bounds) per workload, geometric mean over workloads (real-text workloads "
                    "when measured; random ids rank only when nothing else was)")
        return ("throughput: highest geometric-mean speedup over the baseline's (workload, C) cells (real-text "
                "workloads when measured; random ids rank only when nothing else was)")

    def meets(self, cell):
        """True when the cell is ok and within every given bound (a missing figure does not meet a bound)."""
        if not is_ok(cell):
            return False
        for key, bound in self._bounds():
            value = cell.get(key)
            if bound is not None and (not isinstance(value, (int, float)) or value > bound):
                return False
        return True

    def counts(self, cell):
        """SLO mode: whether the cell's goodput counts: ok, with a positive goodput, and within the ITL bound."""
        bound, value = self.slo_itl_p99_ms, cell.get("p99_itl_ms")
        if not is_ok(cell) or (bound is not None and (not isinstance(value, (int, float)) or value > bound)):
            return False
        return (good_rps(cell, self) or 0) > 0

    def excess(self, cell):
        """How far the cell is from the SLO: the largest value/bound ratio over the given bounds (<= 1 meets)."""
        worst = 0.0
        for key, bound in self._bounds():
            if bound is None:
                continue
            value = cell.get(key)
            worst = max(worst, value / bound if isinstance(value, (int, float)) else math.inf)
        return worst

    def as_dict(self):
        return {"mode": self.mode, "slo_ttft_p99_ms": self.slo_ttft_p99_ms, "slo_itl_p99_ms": self.slo_itl_p99_ms,
                "slo_tpot_p99_ms": self.slo_tpot_p99_ms}


def no_slo_text(objective):
    return f"no config meets the SLO ({objective.bounds_text()})"


def journal_text(journal, lines=30, chars=3000):
    if isinstance(journal, list):
        journal = "\n".join(str(j) for j in journal)
    if not journal:
        return ""
    return "\n".join(str(journal).rstrip().splitlines()[-lines:])[-chars:]


def _reason(text):
    return str(text or "").split("Last journal lines")[0].strip()


def disqualifications(run, host=None):
    """{config: [evidence]} of the host's disqualified configs, sweep order. Evidence items: {kind: failed|soak|
    degenerate, why: one line, journal: excerpt or "", evidence: [{text, reason, workload, max_concurrency, prompt_id}]}.

    Degenerate output counts against a config only where it is not the model's own (reporting/degenerate.py: the
    baseline's output of the same prompt loops too)."""
    out = {}
    gate = lossless_verdicts(run, host)
    loops = model_loops(run, host)
    for name in config_names(run, host):
        items = []
        outcome = run.outcome_of(name, host) or {}
        soak = soak_outcome(run, name, host)
        soak_failed = soak.get("status") == "failed"
        if outcome.get("status") == "failed" and not (soak_failed and outcome.get("failed_step") == "soak"):
            items.append({"kind": "failed", "why": f"sweep failed at step {outcome.get('failed_step') or '?'}: "
                                                   f"{_reason(outcome.get('reason')) or 'no reason recorded'}",
                          "journal": journal_text(outcome.get("journal")), "evidence": []})
        if soak_failed:
            items.append({"kind": "soak", "why": f"shrinking-batch soak failed (steps C={soak['steps']}): "
                                                 f"{_reason(soak['reason']) or 'no reason recorded'}",
                          "journal": journal_text(soak["journal"]), "evidence": []})
        flagged, checked, evidence, where = 0, 0, [], []
        for item in counted(run, name, host, loops):
            c = item["cell"]
            if not item["flagged"]:
                continue
            flagged += item["flagged"]
            checked += item["checked"]
            tag = f"{workload_of(c)} C={c.get('max_concurrency')}{' (soak)' if c.get('phase') == 'soak' else ''}"
            where.append(tag)
            for ev in item["evidence"]:
                if isinstance(ev, dict):
                    evidence.append({"text": str(ev.get("text", ""))[:300], "reason": str(ev.get("reason", "")),
                                     "workload": workload_of(c), "max_concurrency": c.get("max_concurrency"),
                                     "prompt_id": ev.get("prompt_id")})
        if flagged:
            first = f"; first: {evidence[0]['reason']}" if evidence else ""
            items.append({"kind": "degenerate", "why": f"degenerate output: {flagged} of {checked} sampled outputs "
                                                       f"flagged in {', '.join(where)}{first}",
                          "journal": "", "evidence": evidence})
        lossy = lossless_disqualification(run, name, host, gate)
        if lossy:
            items.append(lossy)
        if items:
            out[name] = items
    return out


def soak_outcome(run, config, host=None):
    """{status, steps, reason, journal} of the config's shrinking-batch soak ({} when none was recorded): the config
    row's `soak` (reason from `reason` or `error`, steps from `steps` or `concurrency` down to 1, journal from the
    soak or, when the sweep failed at the soak step, the config row's), else the soak cells (a cell not ok = failed)."""
    outcome = run.outcome_of(config, host) or {}
    soak = outcome.get("soak") if isinstance(outcome.get("soak"), dict) else None
    cells = run.soak_of(config, host)
    if soak is None:
        if not cells:
            return {}
        bad = [c for c in cells if c.get("status") != "ok"]
        return {"status": "failed" if bad else "ok", "steps": [c.get("max_concurrency") for c in cells],
                "reason": "; ".join(str(c.get("error") or c.get("status")) for c in bad), "journal": ""}
    steps = soak.get("steps")
    if not steps:
        conc = soak.get("concurrency") or next((c.get("max_concurrency") for c in cells), None)
        steps = [conc, 1] if isinstance(conc, int) and conc > 1 else ([conc] if conc else [])
    journal = soak.get("journal") or (outcome.get("journal") if outcome.get("failed_step") == "soak" else "")
    reason = soak.get("reason") or soak.get("error") or \
        (outcome.get("reason") if outcome.get("failed_step") == "soak" else "") or ""
    return {"status": soak.get("status"), "steps": list(steps), "reason": str(reason), "journal": journal}


def why_text(items):
    return "; ".join(i["why"] for i in items)


def per_cell_winners(run, host, disqualified=None):
    """{(workload, C): (config, output_throughput)}: the ok, non-disqualified config with the highest throughput."""
    disqualified = disqualifications(run, host) if disqualified is None else disqualified
    best = {}
    for name in config_names(run, host):
        if name in disqualified:
            continue
        for key, c in cell_map(run, name, host).items():
            tps = c["output_throughput"]
            if key not in best or tps > best[key][1] + EPS or (abs(tps - best[key][1]) <= EPS and name < best[key][0]):
                best[key] = (name, tps)
    return dict(sorted(best.items()))


def slo_best(run, config, host, objective):
    """{workload: cell}: the config's ok cell with the highest goodput (good req/s) under the SLO, per workload."""
    out = {}
    for (workload, _), c in sorted(cell_map(run, config, host).items()):
        if objective.counts(c) and (workload not in out or good_rps(c, objective) > good_rps(out[workload], objective)):
            out[workload] = c
    return out


def closest_cell(run, config, host, objective):
    """The config's ok cell nearest to the SLO (smallest worst value/bound ratio; then highest throughput)."""
    cells = list(cell_map(run, config, host).values())
    if not cells:
        return None
    return min(cells, key=lambda c: (objective.excess(c), -c["output_throughput"]))


@dataclass
class HostFacts:
    """What one host contributes to a decision."""
    host: str
    baseline: str | None
    names: list
    disqualified: dict
    scores: dict            # config -> score (throughput: geomean speedup; slo: absolute geomean good req/s)
    not_ranked: dict        # config -> why it has no score
    workloads: list         # the baseline's workloads (slo) / the workloads measured
    slo: dict               # config -> {workload: best SLO cell}
    closest: dict           # config -> closest cell (slo mode)


def host_facts(run, host, objective):
    baseline = baseline_of(run, host)
    names = config_names(run, host)
    disq = disqualifications(run, host)
    scores, not_ranked, slo, closest = {}, {}, {}, {}
    base_cells = cell_map(run, baseline, host) if baseline else {}
    workloads = ranked_workloads({w for w, _ in base_cells} if baseline else
                                 {workload_of(c) for c in run.cells if c.get("host") == host and is_ok(c)})
    for name in names:
        mine = cell_map(run, name, host)
        if objective.mode == "slo":
            slo[name] = slo_best(run, name, host, objective)
            closest[name] = closest_cell(run, name, host, objective)
        if name in disq:
            not_ranked[name] = "disqualified: " + why_text(disq[name])
            continue
        if not mine:
            not_ranked[name] = "no ok matrix cell"
            continue
        if baseline is None:
            not_ranked[name] = "no autoregressive baseline on this host: no speedup"
            continue
        if not base_cells:
            not_ranked[name] = f"the baseline {baseline} has no ok matrix cell: no speedup"
            continue
        if objective.mode == "throughput":
            missing = coverage(run, name, baseline, host)
            if missing:
                shown = ", ".join(f"{w} C={c}" for w, c in missing[:4]) + (" ..." if len(missing) > 4 else "")
                not_ranked[name] = f"no ok cell at {len(missing)} (workload, C) the baseline measured: {shown}"
                continue
            scores[name] = geomean_speedup(run, name, baseline, host)
        else:
            lacking = [w for w in workloads if w not in slo[name]]
            if lacking:
                not_ranked[name] = f"no good request under the SLO ({objective.bounds_text()}) in {', '.join(lacking)}"
                continue
            scores[name] = geomean(good_rps(slo[name][w], objective) for w in workloads)
    return HostFacts(host, baseline, names, disq, scores, not_ranked, workloads, slo, closest)


@dataclass
class Decision:
    hosts: list
    objective: Objective
    baseline: str | None               # the baseline's name (the first host's when hosts differ)
    baselines: dict                    # host -> baseline name or None
    winner: str | None
    reason: str
    keep: bool                         # the winner is the baseline
    scores: dict                       # config -> group score relative to the baseline (None when undefined)
    absolute: dict                     # slo mode: config -> geomean over hosts of absolute goodput (good req/s)
    disqualified: dict                 # config -> [evidence], merged over hosts (host named in each why)
    not_ranked: dict                   # config -> why
    facts: list                        # [HostFacts]
    no_slo: bool = False               # slo mode: no config meets the SLO
    margins: list = field(default_factory=list)   # the winner's margin over each other config vs the spread (ties)
    tie: dict | None = None            # {candidates, kept, margins} when the winner's margin lies inside the spread
    tie_note: str = ""                 # why a margin could not be tested (a single repeat)


def decide(run, hosts, objective=Objective()):
    """The winner over the given hosts (one host: that host's overall winner; a group: valid on every host); a winner
    whose margin over a runner-up lies inside the spread of the cells they rest on is a tie (reporting/ties.py)."""
    return resolve_ties(run, _decide(run, hosts, objective), KEEP)


def _decide(run, hosts, objective):
    hosts = list(hosts)
    facts = [host_facts(run, h, objective) for h in hosts]
    multi = len(hosts) > 1
    baselines = {f.host: f.baseline for f in facts}
    baseline = next((b for b in baselines.values() if b), None)
    disq, not_ranked = {}, {}
    for f in facts:
        for name, items in f.disqualified.items():
            for item in items:
                item = dict(item, why=(f"{f.host}: " if multi else "") + item["why"])
                disq.setdefault(name, []).append(item)
    names = []
    for f in facts:
        names += [n for n in f.names if n not in names]
    for name in names:
        if name in disq:
            continue
        why = [(f"{f.host}: " if multi else "") + (f.not_ranked.get(name) or "not measured")
               for f in facts if name not in f.scores]
        if why:
            not_ranked[name] = "; ".join(why)
    ranked = [n for n in names if n not in disq and n not in not_ranked]

    def result(winner, reason, keep=False, scores=None, absolute=None, no_slo=False):
        return Decision(hosts, objective, baseline, baselines, winner, reason, keep, scores or {}, absolute or {},
                        disq, not_ranked, facts, no_slo)

    lacking = [h for h, b in baselines.items() if not b]
    if lacking:
        return result(None, f"no autoregressive baseline measured on {', '.join(lacking)}: no speedup can be "
                            "computed, so no config can be shown to beat it")
    where = f" (geometric mean over hosts {', '.join(hosts)})" if multi else ""
    if objective.mode == "throughput":
        scores = {n: geomean(f.scores[n] for f in facts) for n in ranked}
        return _pick(result, scores, baselines, baseline, ranked, where, "geometric-mean speedup", disq)
    absolute = {n: geomean(f.scores[n] for f in facts) for n in ranked}
    if not ranked:
        return result(None, no_slo_text(objective), no_slo=True)
    base_in = all(f.baseline in f.scores for f in facts)
    if base_in:
        base_abs = absolute[baseline] if baseline in absolute else geomean(f.scores[f.baseline] for f in facts)
        scores = {n: absolute[n] / base_abs for n in ranked}
        return _pick(result, scores, baselines, baseline, ranked, where,
                     f"goodput under the SLO ({objective.bounds_text()}) relative to the baseline", disq,
                     absolute=absolute)
    # The baseline misses the SLO (or is disqualified) somewhere: every config that meets it beats the baseline.
    order = sorted(ranked, key=lambda n: (-round(absolute[n], 9), n))
    winner = order[0]
    return result(winner, f"{winner} has the highest goodput under the SLO ({objective.bounds_text()}): "
                          f"{absolute[winner]:.3f} good req/s geometric mean over workloads{where}; the baseline "
                          f"{baseline} does not meet the SLO or is disqualified",
                  scores={n: None for n in ranked}, absolute=absolute)


def _pick(result, scores, baselines, baseline, ranked, where, what, disq, absolute=None):
    base_names = set(baselines.values())
    spec = [n for n in ranked if n not in base_names]
    order = sorted(spec, key=lambda n: (-round(scores[n], 9), n))
    if order and scores[order[0]] > 1.0 + EPS:
        winner = order[0]
        return result(winner, f"{winner} has the highest {what}: {scores[winner]:.3f}x over the baseline "
                              f"{baseline}{where}", scores=scores, absolute=absolute)
    best = f" (best speculative: {order[0]} at {scores[order[0]]:.3f}x)" if order else \
        " (no speculative config was ranked)"
    if baseline in ranked:
        return result(baseline, f"{KEEP}: no speculative config beats the baseline {baseline} on {what}{best}",
                      keep=True, scores=scores, absolute=absolute)
    why = "disqualified" if baseline in disq else "not ranked"
    return result(None, f"the baseline {baseline} is {why} and no speculative config beats it{best}",
                  scores=scores, absolute=absolute)
