"""The fleet's Grafana dashboard (importable JSON: Dashboards > Import), generated from one place: PANELS below holds
every panel's title, unit and queries as data. Variables: datasource (any Prometheus), group and instance (from the
workers' series). The accept-length panel draws each group's floor (the applied proposal's, rules.py proposal_floor)
as a constant line beside the workers' gauges.

    build(floors=None, settings=None)   -> the dashboard dict (json.dumps it)
    queries(dashboard, rate="1m")       -> [(panel title, PromQL with the Grafana variables filled in), ...]
    check_rules_text(dashboard)         -> a rules file with one recording rule per query: `promtool check rules`
                                           parses every expression with Prometheus' own parser (promtool has no
                                           query parser of its own); the lab's verify evaluates each against the
                                           live Prometheus.

Real SGLang 0.5.11's series (tests/fixtures/real_sglang/metrics-0.5.11.source.json): there is no verify-step counter
and no time-per-output-token histogram, so "verify steps/s" is output tokens/s divided by the accept length (one
verify step emits accept-length tokens) and TPOT is the inter-token latency histogram.
"""
from __future__ import annotations

import json

from ansible.module_utils.monitoring.rules import DEFAULTS

UID = "sglang-speculative"
TITLE = "SGLang speculative decoding"
# Grafana variables in the queries and what a check fills in for them.
VARIABLES = {"$__rate_interval": None, "$group": ".+", "$instance": ".+"}

_W = '{job="%(job_sglang)s",group=~"$group",instance=~"$instance"}'
_N = '{job="%(job_node)s",group=~"$group"}'
_RATE = "[$__rate_interval]"


def _quantiles(metric):
    return [("histogram_quantile(%s, sum by (le, instance) (rate(%s_bucket%s%s)))" % (q, metric, _W, _RATE),
             "{{instance}} p%s" % int(float(q) * 100)) for q in ("0.5", "0.99")]


# (title, unit, [(query, legend), ...]); queries are %-formatted with the rule settings' job names.
PANELS = (
    ("Speculative accept length per worker (against the group's floor)", "none",
     [("sglang:spec_accept_length" + _W, "{{instance}}")]),
    ("Speculative accept rate", "percentunit", [("sglang:spec_accept_rate" + _W, "{{instance}}")]),
    ("Verify steps/s (output tok/s / accept length; 0.5.11 has no verify-step counter)", "ops",
     [("sum by (instance) (rate(sglang:generation_tokens_total%s%s)) / on (instance) "
       "avg by (instance) (sglang:spec_accept_length%s)" % (_W, _RATE, _W), "{{instance}}")]),
    ("Output tokens/s", "short",
     [("sum by (instance) (rate(sglang:generation_tokens_total%s%s))" % (_W, _RATE), "{{instance}}")]),
    ("TTFT p50 / p99", "s", _quantiles("sglang:time_to_first_token_seconds")),
    ("TPOT = ITL p50 / p99 (inter-token latency)", "s", _quantiles("sglang:inter_token_latency_seconds")),
    ("End-to-end request latency p50 / p99", "s", _quantiles("sglang:e2e_request_latency_seconds")),
    ("Running requests", "short", [("sglang:num_running_reqs" + _W, "{{instance}}")]),
    ("Waiting requests", "short", [("sglang:num_queue_reqs" + _W, "{{instance}}")]),
    ("KV cache use", "percentunit", [("sglang:token_usage" + _W, "{{instance}}")]),
    ("GPU power", "watt", [("gpu_power_draw_watts" + _N, "{{host}} GPU {{gpu}}")]),
    ("GPU memory used", "bytes", [("gpu_memory_used_bytes" + _N, "{{host}} GPU {{gpu}}")]),
)
FLOOR_PANEL = PANELS[0][0]


def _variable(name, query):
    return {"name": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2, "includeAll": True,
            "multi": True, "allValue": ".+", "current": {"text": "All", "value": "$__all"}, "sort": 1}


def build(floors=None, settings=None):
    """The dashboard. floors: {group: floor dict or None} as rules.render returns them."""
    cfg = dict(DEFAULTS, **{k: v for k, v in (settings or {}).items() if k in DEFAULTS})
    panels = []
    for n, (title, unit, targets) in enumerate(PANELS):
        exprs = [(q % cfg, legend) for q, legend in targets]
        if title == FLOOR_PANEL:
            exprs += [("vector(%s)" % f["accept_floor"], "floor %s (%s)" % (g, f["winner"]))
                      for g, f in sorted((floors or {}).items()) if f]
        panels.append({
            "id": n + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (n % 2), "y": 8 * (n // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": e, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for i, (e, legend) in enumerate(exprs)],
        })
    workers = 'sglang:num_running_reqs{job="%s"}' % cfg["job_sglang"]
    return {
        "uid": UID, "title": TITLE, "tags": ["sglang", "speculative"], "timezone": "browser", "editable": True,
        "schemaVersion": 39, "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus",
             "current": {}, "hide": 0},
            _variable("group", "label_values(%s, group)" % workers),
            _variable("instance", 'label_values(%s{job="%s",group=~"$group"}, instance)'
                      % (workers.split("{")[0], cfg["job_sglang"])),
        ]},
        "panels": panels,
    }


def queries(dashboard, rate="1m"):
    """Every panel query with the Grafana variables filled in (all groups, all instances, `rate` for the rate
    interval), in panel order."""
    fill = dict(VARIABLES, **{"$__rate_interval": rate})
    out = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name in sorted(fill, key=len, reverse=True):
                expr = expr.replace(name, fill[name])
            out.append((panel["title"], expr))
    return out


def check_rules_text(dashboard):
    """A Prometheus rules file recording every panel query (for `promtool check rules`, which parses each expr)."""
    lines = ["groups:", "  - name: dashboard-queries", "    rules:"]
    for n, (title, expr) in enumerate(queries(dashboard)):
        lines += ["      - record: dashboard:panel_%d" % n, "        expr: %s" % json.dumps(expr)]
    return "\n".join(lines) + "\n"
