"""The Prometheus alert rules of the monitoring role: the inventory's groups, their SLOs and the applied proposal's
measured accept length -> one rules file, rendered from the role's Jinja template (roles/monitoring/templates/
rules.yml.j2, passed in as text) with no Ansible, so tests render and `promtool test rules` the same file the hosts get.

    render(template_text, groups, workers=(), proposal=None, settings=None)
        -> {"text": rules YAML, "notes": ["<group>: why a rule is absent", ...], "floors": {group: floor|None}}

groups: {name: {"speculative": bool, "nvswitch": bool, "slo_ttft_p99_ms": num|None, "slo_tpot_p99_ms": num|None,
         "accept_floor": num (only where the proposal has a measured accept length for the group)}}
workers: [{"host", "group", "url"}]: the router's workers (filter_plugins/router.py router_workers), one
         "out of the router's healthy set" rule each (smg_worker_health carries only the URL).
proposal: the applied proposal (reporting/proposal.py: groups.<group>.{winner, figures.accept_length{workload: x},
         figures.slo_ttft_p99_ms, figures.slo_itl_p99_ms}, run) or None.

Every scraped series is expected to carry the target labels `host` and `group` (the scrape config sets them from the
inventory); the rules select by `job` and `group` and name both in every alert.

The floor: the lowest per-workload accept length the proposal's winner measured for the group, times floor_margin.
A group with no proposal (or whose winner has no accept length, e.g. a non-speculative winner) gets no floor rule,
only the collapse rule, and a note says so; an `accept_floor` given without a proposal behind it is refused.

Real SGLang 0.5.11 (tests/fixtures/real_sglang/metrics-0.5.11.source.json): `sglang:spec_accept_length` is a gauge
holding the last decode-log window and kept while idle (srt/observability/scheduler_metrics_mixin.py
SchedulerMetricsMixin.report_decode_stats), so every acceptance rule averages it over a window and only counts a
worker that generated tokens in that window (rate(sglang:generation_tokens_total[w]) > 0; the counter grows when a
request finishes: metrics_collector.py TokenizerMetricsCollector.observe_one_finished_request). TPOT is
`sglang:inter_token_latency_seconds` (0.5.11 has no time_per_output_token metric).
"""
from __future__ import annotations

import math
import re

import jinja2

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.monitoring import gpu_textfile

# The series the GPU metrics timer writes for the node exporter's textfile collector (the ECC and row-remapping rules
# read two of them): their one home is monitoring/gpu_textfile.py. Per GPU, labels gpu (index) and uuid.
GPU_TEXTFILE_METRICS = gpu_textfile.GPU_TEXTFILE_METRICS

DEFAULTS = {
    "job_sglang": "sglang",            # scrape job of the workers' /metrics (rank 0 of a multi-node group)
    "job_router": "smg",               # scrape job of the router's metrics listener
    "job_node": "node",                # scrape job of every host's node exporter
    "floor_margin": 0.9,               # floor = lowest measured accept length x this
    "drift_window": "10m",             # averaging window of the accept length and of the busy check
    "drift_for": "10m",                # how long below the floor before the alert fires
    "collapse_threshold": 1.1,         # accept length below this on a speculative config = speculation collapsed
    "collapse_window": "5m",
    "collapse_for": "5m",
    "latency_window": "5m",            # rate window of the TTFT/TPOT histograms
    "latency_for": "10m",
    "queue_window": "10m",             # deriv window of the waiting queue
    "queue_min": 1,                    # the queue must hold more than this many requests to count as growing
    "queue_for": "10m",
    "down_for": "1m",                  # worker / router down, worker out of the router's healthy set
    "gpu_for": "1m",                   # ECC, remapping failure, fabric manager
    "fabric_manager_unit": "nvidia-fabricmanager.service",
    "models_mountpoint": "/",          # node_filesystem mountpoint holding the models root
    "disk_free_ratio": 0.1,            # alert below this fraction free
    "disk_for": "15m",
}
GROUP_KEYS = {"speculative", "nvswitch", "slo_ttft_p99_ms", "slo_tpot_p99_ms", "accept_floor"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_DURATION = re.compile(r"^([0-9]+(ms|[smhdwy]))+$")
_LABEL_SAFE = re.compile(r'^[^"\\\n{}]+$')


class MonitoringError(EvidenceError):
    """Bad monitoring input, refused before anything is rendered or written."""

    default_kind = "monitoring_input"


def _num(value, what, positive=True):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (positive and value <= 0):
        raise MonitoringError(f"{what} must be a {'positive ' if positive else ''}number, got {value!r}",
                              evidence={"field": what, "value": repr(value)})
    return float(value)


def _settings(settings):
    out = dict(DEFAULTS)
    unknown = sorted(set(settings or {}) - set(DEFAULTS))
    if unknown:
        raise MonitoringError(f"unknown monitoring rule settings: {unknown}", evidence={"known": sorted(DEFAULTS)})
    out.update(settings or {})
    for key, value in out.items():
        if key.endswith(("_window", "_for")):
            if not isinstance(value, str) or not _DURATION.match(value):
                raise MonitoringError(f"{key} must be a Prometheus duration like 10m, got {value!r}",
                                      evidence={"field": key, "value": repr(value)})
        elif isinstance(DEFAULTS[key], str):
            if not isinstance(value, str) or not _LABEL_SAFE.match(value):
                raise MonitoringError(f"{key} must be a plain label value, got {value!r}", evidence={"field": key})
        else:
            _num(value, key, positive=key != "queue_min")
    if not 0 < out["floor_margin"] <= 1:
        raise MonitoringError(f"floor_margin must be in (0, 1], got {out['floor_margin']}", evidence={})
    if not 0 < out["disk_free_ratio"] < 1:
        raise MonitoringError(f"disk_free_ratio must be in (0, 1), got {out['disk_free_ratio']}", evidence={})
    return out


def proposal_floor(proposal, group, margin):
    """(floor dict or None, note or None) for one group from the applied proposal."""
    if not proposal:
        return None, f"{group}: no applied proposal: no accept-length floor rule, the collapse rule only"
    if not isinstance(proposal, dict) or not isinstance(proposal.get("groups"), dict):
        raise MonitoringError("the proposal is not a sweep proposal (no groups mapping)",
                              evidence={"keys": sorted(proposal) if isinstance(proposal, dict) else repr(proposal)})
    entry = proposal["groups"].get(group) or {}
    run = proposal.get("run")
    if not entry.get("winner"):
        return None, (f"{group}: the proposal of run {run} has no winner for it: no accept-length floor rule, "
                      "the collapse rule only")
    measured = (entry.get("figures") or {}).get("accept_length") or {}
    values = {w: v for w, v in measured.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}
    if not values:
        return None, (f"{group}: the proposal's winner {entry['winner']} (run {run}) measured no accept length: "
                      "no floor rule, the collapse rule only")
    workload = min(values, key=values.get)
    return {"accept_floor": round(values[workload] * margin, 3), "measured": values[workload], "workload": workload,
            "winner": entry["winner"], "run": run, "margin": margin, "given": False}, None


def _group(name, raw, proposal, cfg, notes):
    if not isinstance(name, str) or not _NAME.match(name):
        raise MonitoringError(f"group name {name!r} is not a plain inventory group name", evidence={"group": name})
    raw = dict(raw or {})
    unknown = sorted(set(raw) - GROUP_KEYS)
    if unknown:
        raise MonitoringError(f"{name}: unknown keys {unknown}", evidence={"group": name, "known": sorted(GROUP_KEYS)})
    speculative = bool(raw.get("speculative", False))
    floor, note = proposal_floor(proposal, name, cfg["floor_margin"]) if speculative else (None, None)
    if "accept_floor" in raw and raw["accept_floor"] is not None:
        given = _num(raw["accept_floor"], f"{name}: accept_floor")
        if floor is None:
            raise MonitoringError(
                f"{name}: accept_floor {given} has no applied proposal behind it (a floor comes from what the sweep "
                "measured for the group: apply a proposal whose winner measured an accept length, or drop the floor)",
                evidence={"group": name, "accept_floor": given, "speculative": speculative,
                          "why_no_floor": note or "the group is not speculative"})
        floor = dict(floor, accept_floor=given, given=True)
    if not speculative:
        notes.append(f"{name}: not a speculative config: no acceptance rules")
    elif note:
        notes.append(note)
    slo = {}
    for key, fig in (("slo_ttft_p99_ms", "slo_ttft_p99_ms"), ("slo_tpot_p99_ms", "slo_itl_p99_ms")):
        value = raw.get(key)
        if value is None and proposal and isinstance(proposal.get("groups"), dict):
            value = ((proposal["groups"].get(name) or {}).get("figures") or {}).get(fig)
        if value is None:
            notes.append(f"{name}: no {key} (group setting or proposal objective): no {key[4:8].upper()} p99 rule")
            slo[key[:8]] = None
        else:
            slo[key[:8]] = _num(value, f"{name}: {key}") / 1000.0
    return {"name": name, "speculative": speculative, "nvswitch": bool(raw.get("nvswitch", False)),
            "floor": floor, "slo_ttft_s": slo["slo_ttft"], "slo_tpot_s": slo["slo_tpot"]}


def _workers(workers, group_names):
    out = []
    for w in workers or ():
        host, group, url = (w or {}).get("host"), (w or {}).get("group"), (w or {}).get("url")
        if not (isinstance(host, str) and isinstance(url, str) and _LABEL_SAFE.match(host) and _LABEL_SAFE.match(url)):
            raise MonitoringError(f"router worker {w!r}: needs plain host and url strings", evidence={"worker": w})
        if group not in group_names:
            raise MonitoringError(f"router worker {host}: group {group!r} is not a monitored group",
                                  evidence={"worker": w, "groups": sorted(group_names)})
        out.append({"host": host, "group": group, "url": url})
    return out


def render(template_text, groups, workers=(), proposal=None, settings=None):
    """The rules file text, the notes on rules left out, and each group's floor."""
    if not isinstance(groups, dict) or not groups:
        raise MonitoringError("no monitored groups: the rules need at least one serving group with targets",
                              evidence={"groups": repr(groups)})
    cfg, notes = _settings(settings), []
    rendered = [_group(name, raw, proposal, cfg, notes) for name, raw in groups.items()]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, autoescape=False)
    text = env.from_string(template_text).render(groups=rendered, workers=_workers(workers, set(groups)), cfg=cfg,
                                                 notes=notes)
    return {"text": text, "notes": notes, "floors": {g["name"]: g["floor"] for g in rendered}}
