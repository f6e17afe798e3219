"""module_utils/monitoring/rules.py: the alert rules rendered from the role's template with no Ansible: the floor
from the applied proposal, the notes on rules left out, and bad input refused before anything is rendered.
Every metric the template names is one real SGLang 0.5.11 defines (tests/fixtures/real_sglang/
metrics-0.5.11.source.json) or the router recorded (tests/fixtures/router/smg-1.13.0-real-sglang/steps.json)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.monitoring import rules

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = (ROOT / "roles" / "monitoring" / "templates" / "rules.yml.j2").read_text()
FIX = ROOT / "tests" / "fixtures" / "monitoring"
INVENTORY = yaml.safe_load((FIX / "inventory.yml").read_text())
PROPOSAL = yaml.safe_load((FIX / "proposal.yml").read_text())
SOURCE = json.loads((ROOT / "tests" / "fixtures" / "real_sglang" / "metrics-0.5.11.source.json").read_text())


def render(groups=None, workers=None, proposal=PROPOSAL, settings=None):
    return rules.render(TEMPLATE, INVENTORY["groups"] if groups is None else groups,
                        INVENTORY["workers"] if workers is None else workers, proposal, settings)


def alerts(text):
    doc = yaml.safe_load(text)
    return {(g["name"], r["alert"]): r for g in doc["groups"] for r in g["rules"]}


def test_sample_inventory_renders_every_alert_and_the_floor_from_the_proposal():
    out = render()
    got = alerts(out["text"])
    assert out["floors"]["nvlink"] == {"accept_floor": 2.34, "measured": 2.6, "workload": "code", "winner": "dflash-k8",
                                       "run": "sample-run", "margin": 0.9, "given": False}
    assert out["floors"]["pcie"] is None
    assert ("sglang-nvlink", "SpeculativeAcceptanceBelowFloor") in got
    assert ("sglang-pcie", "SpeculativeAcceptanceBelowFloor") not in got      # no proposal winner: no floor rule
    assert ("sglang-pcie", "SpeculativeAcceptanceCollapsed") in got           # ... the collapse rule only
    assert ("sglang-pcie", "FabricManagerDown") not in got                    # no NVSwitch
    assert "< 2.34" in got[("sglang-nvlink", "SpeculativeAcceptanceBelowFloor")]["expr"]
    assert "> 2.0" in got[("sglang-nvlink", "SGLangTTFTP99AboveSLO")]["expr"]  # from the proposal's objective
    assert "> 0.06" in got[("sglang-nvlink", "SGLangTPOTP99AboveSLO")]["expr"]  # the group's own setting
    names = {a for _, a in got}
    assert names == {"SpeculativeAcceptanceBelowFloor", "SpeculativeAcceptanceCollapsed", "SGLangWorkerDown",
                     "SGLangTTFTP99AboveSLO", "SGLangTPOTP99AboveSLO", "SGLangWaitingQueueGrowing",
                     "GPUUncorrectableECCErrors", "GPURowRemappingFailure", "FabricManagerDown", "ModelsDiskNearlyFull",
                     "RouterDown", "WorkerOutOfRouterHealthySet"}
    assert any("pcie: the proposal of run sample-run has no winner" in n for n in out["notes"])
    assert all(f"# note: {n}" in out["text"] for n in out["notes"])


def test_every_alert_names_host_group_and_a_runbook_line():
    for (_, name), rule in alerts(render()["text"]).items():
        summary = rule["annotations"]["summary"]
        assert rule["labels"].get("group") or "$labels.group" in summary, name  # RouterDown: the router's target label
        assert rule["annotations"].get("runbook"), name
        assert "$labels.host" in summary or rule["labels"].get("host"), name
        assert "(" in summary, name  # "<host> (<group>): ..."


def test_acceptance_rules_count_only_a_worker_that_generated_tokens_in_the_window():
    got = alerts(render()["text"])
    for key in (("sglang-nvlink", "SpeculativeAcceptanceBelowFloor"), ("sglang-nvlink", "SpeculativeAcceptanceCollapsed")):
        expr = got[key]["expr"]
        assert "avg_over_time(sglang:spec_accept_length{" in expr
        assert re.search(r"and on \(instance\) \(sum by \(instance\) \(rate\(sglang:generation_tokens_total\{[^}]*\}"
                         r"\[\d+m\]\)\) > 0\)", expr), expr


def test_the_template_names_only_metrics_real_sglang_and_the_router_define():
    known = {m["name"] for m in SOURCE["metrics"]}
    used = set(re.findall(r"\b(sglang:[a-z_]+?)(?:_bucket)?\{", TEMPLATE))
    assert used and used <= known, sorted(used - known)
    steps = (ROOT / "tests" / "fixtures" / "router" / "smg-1.13.0-real-sglang" / "steps.json").read_text()
    router = set(re.findall(r"\b(smg_[a-z_]+)\{", TEMPLATE))
    assert router and all(name + "{" in steps for name in router), router
    assert set(re.findall(r"\b(gpu_[a-z_]+)\{", TEMPLATE)) <= set(rules.GPU_TEXTFILE_METRICS)


def test_a_non_speculative_group_has_no_acceptance_rules_and_says_so():
    out = render(groups={"pcie": {"speculative": False}}, workers=[], proposal=None)
    assert not [a for _, a in alerts(out["text"]) if a.startswith("Speculative")]
    assert "pcie: not a speculative config: no acceptance rules" in out["notes"]


def test_no_proposal_gives_the_collapse_rule_only_and_the_render_says_so():
    out = render(proposal=None)
    got = alerts(out["text"])
    assert ("sglang-nvlink", "SpeculativeAcceptanceCollapsed") in got
    assert ("sglang-nvlink", "SpeculativeAcceptanceBelowFloor") not in got
    assert "nvlink: no applied proposal: no accept-length floor rule, the collapse rule only" in out["notes"]
    assert ("sglang-nvlink", "SGLangTTFTP99AboveSLO") not in got  # its TTFT SLO came from the proposal


def test_a_given_floor_overrides_the_computed_one_where_a_proposal_backs_it():
    groups = dict(INVENTORY["groups"], nvlink=dict(INVENTORY["groups"]["nvlink"], accept_floor=2.5))
    out = render(groups=groups)
    assert out["floors"]["nvlink"]["accept_floor"] == 2.5 and out["floors"]["nvlink"]["given"]
    assert "(floor given by the operator)" in out["text"]


@pytest.mark.parametrize("groups, proposal", [
    ({"nvlink": {"speculative": True, "accept_floor": 2.0}}, None),
    ({"pcie": {"speculative": True, "accept_floor": 2.0}}, PROPOSAL),           # proposal without a winner for pcie
    ({"nvlink": {"speculative": False, "accept_floor": 2.0}}, PROPOSAL),
])
def test_a_floor_with_no_applied_proposal_behind_it_is_refused(groups, proposal):
    with pytest.raises(rules.MonitoringError, match="has no applied proposal behind it") as err:
        render(groups=groups, workers=[], proposal=proposal)
    assert err.value.evidence["accept_floor"] == 2.0


@pytest.mark.parametrize("kwargs, match", [
    ({"groups": {}}, "no monitored groups"),
    ({"groups": {"bad\"name": {}}}, "not a plain inventory group name"),
    ({"groups": {"nvlink": {"speculativ": True}}}, "unknown keys"),
    ({"settings": {"drift_window": "ten minutes"}}, "Prometheus duration"),
    ({"settings": {"floor_margin": 1.5}}, "floor_margin"),
    ({"settings": {"collapse_threshold": "1.1"}}, "collapse_threshold must be a positive number"),
    ({"settings": {"no_such": 1}}, "unknown monitoring rule settings"),
    ({"settings": {"models_mountpoint": '/srv"x'}}, "plain label value"),
    ({"workers": [{"host": "x9", "group": "elsewhere", "url": "http://10.0.0.9:1"}]}, "not a monitored group"),
    ({"proposal": {"run": "r"}}, "not a sweep proposal"),
    ({"groups": {"nvlink": {"speculative": True, "slo_ttft_p99_ms": -5}}, "workers": []}, "positive number"),
])
def test_bad_input_is_refused_before_rendering(kwargs, match):
    with pytest.raises(rules.MonitoringError, match=match):
        render(**kwargs)
