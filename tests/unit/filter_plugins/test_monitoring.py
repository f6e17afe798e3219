"""filter_plugins/monitoring.py: the role's rules template rendered through the filter (Ansible's lazy containers
made plain), bad input as AnsibleFilterError, and promtool's check as a filter."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from filter_plugins.monitoring import (FilterModule, monitoring_dashboard, monitoring_dashboard_check,
                                       monitoring_dashboard_queries, monitoring_rules, monitoring_rules_check,
                                       monitoring_targets)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "monitoring"
INVENTORY = yaml.safe_load((FIX / "inventory.yml").read_text())
PROPOSAL = yaml.safe_load((FIX / "proposal.yml").read_text())


def test_filters_are_exported():
    assert set(FilterModule().filters()) == {
        "monitoring_rules", "monitoring_rules_check", "monitoring_targets", "monitoring_inventory_groups",
        "monitoring_dashboard", "monitoring_dashboard_queries", "monitoring_dashboard_check"}


def test_no_targets_fails_the_filter_before_any_change():
    with pytest.raises(AnsibleFilterError, match="monitoring_targets: a monitoring group with no targets"):
        monitoring_targets({"nvlink": []}, [], [], {}, "mon1", 9100)


def test_targets_read_addresses_and_the_router_listener_from_hostvars_else_the_router_defaults():
    hostvars = {"b1": {"ansible_host": "10.0.0.11"}, "p1": {"sglang_service_advertise_address": "10.9.0.21",
                                                           "ansible_host": "10.0.0.21"},
                "r1": {"ansible_host": "10.0.0.2", "sglang_router_prometheus_host": "0.0.0.0"}, "r2": {}}
    out = monitoring_targets({"nvlink": ["b1"], "pcie": ["p1"]}, [], ["r1", "r2"], hostvars, "r2", 9100,
                             {"sglang_router_prometheus_host": "127.0.0.1", "sglang_router_prometheus_port": 29000})
    assert [t["targets"][0] for t in out["jobs"]["node"]] == ["10.0.0.11:9100", "10.9.0.21:9100", "10.0.0.2:9100",
                                                              "r2:9100"]
    assert [t["targets"][0] for t in out["jobs"]["smg"]] == ["10.0.0.2:29000", "127.0.0.1:29000"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool absent: install Debian's prometheus package")
def test_the_dashboard_filters_build_fill_and_check_every_query():
    board = monitoring_dashboard({"nvlink": {"accept_floor": 2.0, "winner": "w"}})
    assert all("$" not in q["expr"] for q in monitoring_dashboard_queries(board))
    assert "SUCCESS" in monitoring_dashboard_check(board)
    board["panels"][1]["targets"][0]["expr"] = "rate(x[1m]"
    with pytest.raises(AnsibleFilterError, match="monitoring_dashboard_check"):
        monitoring_dashboard_check(board)


def test_the_filter_renders_the_roles_template():
    out = monitoring_rules(INVENTORY["groups"], INVENTORY["workers"], PROPOSAL, {"drift_for": "15m"})
    assert out["floors"]["nvlink"]["accept_floor"] == 2.34
    assert "for: 15m" in out["text"] and "SpeculativeAcceptanceBelowFloor" in out["text"]


def test_a_floor_without_a_proposal_fails_the_filter_with_the_evidence():
    with pytest.raises(AnsibleFilterError, match="no applied proposal behind it"):
        monitoring_rules({"nvlink": {"speculative": True, "accept_floor": 2.0}}, [], None)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool absent: install Debian's prometheus package")
def test_the_check_filter_passes_a_good_file_and_fails_a_bad_one():
    text = monitoring_rules(INVENTORY["groups"], INVENTORY["workers"], PROPOSAL)["text"]
    assert "SUCCESS" in monitoring_rules_check(text)
    with pytest.raises(AnsibleFilterError, match="promtool refused it"):
        monitoring_rules_check(text.replace("== 0", "== = 0", 1))
