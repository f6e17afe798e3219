"""module_utils/monitoring/dashboard.py: the Grafana dashboard from one place: the panels the issue lists, the
instance/group variables, each group's floor on the accept-length panel, and every query parsed by Prometheus' own
parser (promtool check rules on a recording rule per query; evaluating them against a live Prometheus is the lab's
verify: roles/monitoring/molecule/default/verify.yml)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.monitoring import dashboard, promtool, rules
from ansible.module_utils.monitoring.rules import MonitoringError

ROOT = Path(__file__).resolve().parents[3]
SOURCE = json.loads((ROOT / "tests" / "fixtures" / "real_sglang" / "metrics-0.5.11.source.json").read_text())
FLOORS = {"nvlink": {"accept_floor": 2.34, "winner": "dflash-k8"}, "pcie": None}


def test_the_panels_the_issue_lists_and_the_variables():
    board = json.loads(json.dumps(dashboard.build(FLOORS)))  # importable: plain JSON
    titles = " | ".join(p["title"] for p in board["panels"])
    for word in ("accept length", "accept rate", "Verify steps", "Output tokens/s", "TTFT", "TPOT", "ITL",
                 "Running", "Waiting", "KV cache", "GPU power", "GPU memory"):
        assert word in titles, word
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "group", "instance"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"]) and board["uid"] == dashboard.UID
    floor = [t for t in board["panels"][0]["targets"] if t["expr"].startswith("vector(")]
    assert [(t["expr"], t["legendFormat"]) for t in floor] == [("vector(2.34)", "floor nvlink (dflash-k8)")]
    for panel in board["panels"][1:]:
        assert all("$group" in t["expr"] for t in panel["targets"]), panel["title"]


def test_every_query_names_only_series_real_sglang_or_the_gpu_textfile_defines():
    known = {m["name"] for m in SOURCE["metrics"]} | set(rules.GPU_TEXTFILE_METRICS)
    for title, expr in dashboard.queries(dashboard.build(FLOORS)):
        if expr.startswith("vector("):
            continue  # the floor line
        names = {n.removesuffix("_bucket") for n in re.findall(r"\b((?:sglang:|gpu_)[a-z0-9_]+)\{", expr)}
        assert names and names <= known, (title, names - known)


def test_queries_fill_the_grafana_variables():
    for _, expr in dashboard.queries(dashboard.build(FLOORS), rate="2m"):
        assert "$" not in expr
    assert 'instance=~".+"' in dashboard.queries(dashboard.build())[0][1]


def test_job_names_follow_the_rule_settings():
    board = dashboard.build(settings={"job_sglang": "workers", "job_node": "nodes"})
    exprs = [e for _, e in dashboard.queries(board)]
    assert all('job="workers"' in e or 'job="nodes"' in e for e in exprs)


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus package: make deps)")
def test_every_query_parses_with_prometheus_own_parser():
    text = dashboard.check_rules_text(dashboard.build(FLOORS))
    assert len(yaml.safe_load(text)["groups"][0]["rules"]) == len(dashboard.queries(dashboard.build(FLOORS)))
    assert "SUCCESS" in promtool.check_rules(text)
    bad = dashboard.build(FLOORS)
    bad["panels"][3]["targets"][0]["expr"] = "sum by (instance (rate(x[1m]))"
    with pytest.raises(MonitoringError, match="promtool refused"):
        promtool.check_rules(dashboard.check_rules_text(bad))
