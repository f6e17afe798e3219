"""filter_plugins/monitoring.py: the role's rules template rendered through the filter (Ansible's lazy containers
made plain), bad input as AnsibleFilterError, and promtool's check as a filter."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from filter_plugins.monitoring import FilterModule, monitoring_rules, monitoring_rules_check

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "monitoring"
INVENTORY = yaml.safe_load((FIX / "inventory.yml").read_text())
PROPOSAL = yaml.safe_load((FIX / "proposal.yml").read_text())


def test_filters_are_exported():
    assert set(FilterModule().filters()) == {"monitoring_rules", "monitoring_rules_check"}


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
