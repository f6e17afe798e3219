"""RUN_DIR/proposal.yml: per host group, the winning config of the sweep, its figures and the group_vars fragment
that would deploy it, with a unified diff of the group's speculative block (current profile -> proposed).

The fragment is the winner's sweep item as given (its `overrides`); the proposed effective speculative block is the
group's current sglang_service_speculative_profile combined with the winner's speculative overrides (a shallow
merge, like Ansible's combine). A group without a winner gets empty overrides and an empty diff: applying it
changes nothing. Each group has a status (winner, keep, tie, none); a tie (reporting/ties.py) lists its candidates
with their margins, spreads and group_vars fragments, and keeps the baseline when it is among them.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import yaml

from reporting.acceptance import workload_acceptance
from reporting.objective import Objective, decide, why_text
from reporting.speedup import crossover, geomean, speedups
from reporting.ties import PICK_VARIABLE

DEFAULT_GROUP_VARS_DIR = Path(__file__).resolve().parent.parent / "group_vars"
SERVICE_FILE = "sglang_service.yml"
PROFILE_KEY = "sglang_service_speculative_profile"
FRAGMENT_KEYS = (("sglang_service_speculative_overrides", "speculative", dict),
                 ("sglang_service_server_overrides", "server", dict),
                 ("sglang_service_env_overrides", "env", dict),
                 ("sglang_service_extra_args", "extra_args", dict),
                 ("sglang_service_validation_overrides", "validation_overrides", list))
PROFILE_OF = {"server": "sglang_service_server_profile", "env": "sglang_service_env_profile"}


def host_group_of(run, host):
    """The host's group: its config rows' host_group, else its cells' provenance.host_group, else the host name."""
    for row in run.configs:
        if row.get("host") == host and row.get("host_group"):
            return str(row["host_group"])
    for row in run.cells + run.soak:
        group = (row.get("provenance") or {}).get("host_group")
        if row.get("host") == host and group:
            return str(group)
    return host or "default"


def host_groups(run):
    """{group: [hosts]} in first-seen order; rows without a host form one host None."""
    groups = {}
    for host in run.hosts() or [None]:
        groups.setdefault(host_group_of(run, host), []).append(host)
    return groups


def overrides_of(run, config, hosts):
    """The config's sweep item overrides (first host that has an outcome row with them), normalised."""
    raw = {}
    for host in hosts:
        outcome = run.outcome_of(config, host) or {}
        if isinstance(outcome.get("overrides"), dict):
            raw = outcome["overrides"]
            break
    out = {}
    for _, key, kind in FRAGMENT_KEYS:
        value = raw.get(key)
        out[key] = (dict(value) if isinstance(value, dict) else {}) if kind is dict else \
            (list(value) if isinstance(value, (list, tuple)) else [])
    return out


def group_vars_fragment(overrides):
    return {var: overrides[key] for var, key, _ in FRAGMENT_KEYS}


def read_group_profile(group_vars_dir, group, key=PROFILE_KEY):
    """(mapping, note): the group's `key` from GROUP_VARS_DIR/<group>/sglang_service.yml; {} with a note when absent.
    Jinja values ("{{ x }}") stay strings."""
    path = Path(group_vars_dir) / str(group) / SERVICE_FILE
    if not path.is_file():
        return {}, f"{path} not found: the current block is taken as empty"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        return {}, f"{path} is not YAML ({exc}): the current block is taken as empty"
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        return {}, f"{path} has no mapping {key}: the current block is taken as empty"
    return value, ""


def _dump_block(mapping):
    return yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False, width=10000).splitlines() if mapping \
        else ["{}"]


def block_diff(current, proposed, fromfile, tofile):
    """Unified diff text between two mappings dumped as YAML ("" when equal)."""
    if current == proposed:
        return ""
    return "\n".join(difflib.unified_diff(_dump_block(current), _dump_block(proposed), fromfile=fromfile,
                                          tofile=tofile, lineterm="")) + "\n"


def proposal_diff(group_vars_dir, group, overrides):
    """The speculative block's diff (current profile -> profile combined with the speculative overrides), then the
    server and environment blocks' when the winner overrides them."""
    texts = []
    for key, profile_key in (("speculative", PROFILE_KEY),) + tuple(PROFILE_OF.items()):
        if key != "speculative" and not overrides.get(key):
            continue
        current, _ = read_group_profile(group_vars_dir, group, profile_key)
        proposed = {**current, **(overrides.get(key) or {})}
        rel = f"group_vars/{group}/{SERVICE_FILE}"
        texts.append(block_diff(current, proposed, f"{rel} {profile_key} (current)",
                                f"{rel} {profile_key} + {key} overrides (proposed)"))
    return "".join(texts)


def _r(value, digits=4):
    return round(float(value), digits) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _series(table):
    return {w: {int(c) if float(c).is_integer() else c: _r(s) for c, s in sorted(cs.items())}
            for w, cs in sorted(table.items())}


def _cell_brief(cell):
    if not cell:
        return None
    return {"host": cell.get("host"), "workload": cell.get("workload") or None,
            "max_concurrency": cell.get("max_concurrency"), "output_throughput": _r(cell.get("output_throughput"), 2),
            "p99_ttft_ms": _r(cell.get("p99_ttft_ms"), 2), "p99_itl_ms": _r(cell.get("p99_itl_ms"), 2)}


def winner_figures(run, decision, config):
    """Figures of one config over the decision's hosts: speedups (geometric mean over hosts at each (workload, C)
    measured on all of them), crossover per workload, accept length per workload, geomean speedup."""
    per_host, tables = {}, []
    for f in decision.facts:
        table = speedups(run, config, f.baseline, f.host)
        tables.append(table)
        per_host[f.host] = {"baseline": f.baseline, "geomean_speedup": _r(f.scores.get(config))
                            if decision.objective.mode == "throughput" else None,
                            "speedup": _series(table),
                            "crossover_c": {w: crossover(s) for w, s in sorted(table.items())}}
    merged = {}
    if tables:
        for workload in sorted(set.intersection(*[set(t) for t in tables])):
            cs = set.intersection(*[set(t[workload]) for t in tables])
            merged[workload] = {c: geomean(t[workload][c] for t in tables) for c in sorted(cs)}
    cells = [c for f in decision.facts for c in run.cells_of(config, f.host)]
    accept = {w: _r(a["accept_length"]) for w, a in workload_acceptance(cells).items()
              if a["accept_length"] is not None}
    figures = {"geomean_speedup": _r(geomean([s for t in merged.values() for s in t.values()]))
               if merged else None,
               "speedup": _series(merged), "crossover_c": {w: crossover(s) for w, s in sorted(merged.items())},
               "accept_length": accept}
    if len(decision.facts) > 1:
        figures["per_host"] = per_host
    return figures


def group_entry(run, group, hosts, objective, group_vars_dir):
    decision = decide(run, hosts, objective)
    figures = {"objective": objective.mode, "slo_ttft_p99_ms": objective.slo_ttft_p99_ms,
               "slo_itl_p99_ms": objective.slo_itl_p99_ms, "slo_tpot_p99_ms": objective.slo_tpot_p99_ms}
    if decision.winner:
        figures.update(winner_figures(run, decision, decision.winner))
    if objective.mode == "throughput":
        figures["ranking"] = {n: _r(s) for n, s in sorted(decision.scores.items(), key=lambda kv: (-kv[1], kv[0]))}
    else:
        figures["ranking"] = {n: {"relative_to_baseline": _r(decision.scores.get(n)),
                                  "slo_goodput_rps_geomean": _r(a, 3)}
                              for n, a in sorted(decision.absolute.items(), key=lambda kv: (-kv[1], kv[0]))}
        if decision.winner:
            figures["slo_relative_to_baseline"] = _r(decision.scores.get(decision.winner))
            figures["slo_goodput_rps_geomean"] = _r(decision.absolute.get(decision.winner), 3)
            figures["slo_best_cells"] = {str(f.host): {w: _cell_brief(c)
                                                       for w, c in f.slo.get(decision.winner, {}).items()}
                                         for f in decision.facts}
        if not decision.winner:
            figures["closest_cells"] = {str(f.host): {n: _cell_brief(f.closest[n]) for n in f.names
                                                      if f.closest.get(n)} for f in decision.facts}
    if decision.not_ranked:
        figures["not_ranked"] = dict(decision.not_ranked)
    overrides = overrides_of(run, decision.winner, hosts) if decision.winner else overrides_of(run, None, [])
    reason = decision.reason
    if decision.winner and not decision.keep and not any(
            isinstance((run.outcome_of(decision.winner, h) or {}).get("overrides"), dict) for h in hosts):
        reason += (f"; no sweep overrides were recorded for {decision.winner}: its group_vars fragment is empty and "
                   "applying it changes nothing")
    entry = {
        "hosts": [h for h in hosts if h is not None],
        "winner": decision.winner,
        "status": status_of(decision),
        "reason": reason,
        "baseline": decision.baseline,
        "figures": figures,
        "disqualified": [{"config": n, "why": why_text(items)} for n, items in decision.disqualified.items()],
        "group_vars": group_vars_fragment(overrides),
        "diff": proposal_diff(group_vars_dir, group, overrides) if decision.winner else "",
    }
    if decision.tie:
        entry["tie"] = tie_entry(run, decision, hosts)
    return entry, decision


def status_of(decision):
    """winner (a speculative config beats the baseline), keep (the baseline), tie (the winner's margin lies inside
    the spread: kept is the baseline when it was among the tied, else winner is null), none (no winner)."""
    if decision.tie:
        return "tie"
    return "keep" if decision.keep else ("winner" if decision.winner else "none")


def tie_entry(run, decision, hosts):
    """The tied candidates, the margins against the spread, and each candidate's group_vars fragment: with no winner,
    playbooks/apply_proposal.yml applies one only when picked (-e proposal_pick=<config>)."""
    tie = decision.tie
    return {"candidates": list(tie["candidates"]), "kept": tie["kept"],
            "margins": [{"winner": tie["candidates"][0], "over": m["config"], "margin": _r(m["margin"]),
                         "spread": _r(m["spread"]), "cells": m["cells"]} for m in tie["margins"]],
            "pick_with": f"-e {PICK_VARIABLE}=<one of {', '.join(tie['candidates'])}>",
            "group_vars": {c: group_vars_fragment(overrides_of(run, c, hosts)) for c in tie["candidates"]}}


def build_proposal(run, objective=Objective(), group_vars_dir=DEFAULT_GROUP_VARS_DIR):
    """(proposal dict, {group: Decision}) for every host group of the run."""
    groups, decisions = {}, {}
    for group, hosts in host_groups(run).items():
        groups[group], decisions[group] = group_entry(run, group, hosts, objective, group_vars_dir)
    return {"run": run.name, "objective": objective.as_dict(), "groups": groups}, decisions


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key (as yamllint's default wants), multi-line strings as literals."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def _str(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def proposal_text(proposal, path_hint="RUN_DIR/proposal.yml"):
    head = [f"# Proposal of sweep run {proposal['run']} (objective: {proposal['objective']['mode']}), "
            "written by `python -m reporting`.",
            f"# Apply: ansible-playbook playbooks/apply_proposal.yml -e proposal={path_hint}",
            "# Each group's group_vars fragment is applied to that group's hosts; a group whose winner is null",
            "# applies nothing (its overrides are empty). `diff` shows the speculative block current -> proposed.",
            f"# A group with status tie and no winner is refused until one candidate is picked: -e {PICK_VARIABLE}=<config>."]
    body = yaml.dump(proposal, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=120)
    return "\n".join(head) + "\n---\n" + body


def write_proposal(proposal, run_dir) -> Path:
    path = Path(run_dir) / "proposal.yml"
    path.write_text(proposal_text(proposal, str(path)), encoding="utf-8")
    return path
