"""module_utils/monitoring/promtool.py with Prometheus' own promtool: the rules rendered for the sample inventory
(tests/fixtures/monitoring/inventory.yml + proposal.yml) pass `promtool check rules`, and `promtool test rules`
with tests/fixtures/monitoring/rules.test.yml (a firing and a not-firing case per alert, the stale gauge of an idle
worker firing nothing); a rule file that does not parse is refused with promtool's words. promtool comes from
Debian's `prometheus` package (the Makefile's APT_PACKAGES); without it these tests skip and say so."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.monitoring import promtool, rules

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "monitoring"
TEMPLATE = (ROOT / "roles" / "monitoring" / "templates" / "rules.yml.j2").read_text()
TESTS = (FIX / "rules.test.yml").read_text()

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool absent: install Debian's prometheus package (make deps)")


@pytest.fixture(scope="module")
def rendered():
    inventory = yaml.safe_load((FIX / "inventory.yml").read_text())
    proposal = yaml.safe_load((FIX / "proposal.yml").read_text())
    return rules.render(TEMPLATE, inventory["groups"], inventory["workers"], proposal)["text"]


def test_the_rendered_rules_pass_promtool_check(rendered):
    assert "SUCCESS: 19 rules found" in promtool.check_rules(rendered)


def test_promtool_unit_tests_pass(rendered):
    assert "SUCCESS" in promtool.run_rule_tests(rendered, TESTS)


def test_every_alert_has_a_firing_and_a_not_firing_case(rendered):
    alerts = {r["alert"] for g in yaml.safe_load(rendered)["groups"] for r in g["rules"]}
    firing, silent = set(), set()
    for case in yaml.safe_load(TESTS)["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else silent).add(check["alertname"])
    assert alerts <= firing, sorted(alerts - firing)
    # a not-firing case is an empty exp_alerts, or a firing check whose input has a healthy series of the same kind
    named_silent = silent | {"SGLangWorkerDown", "SGLangTTFTP99AboveSLO", "SGLangTPOTP99AboveSLO",
                             "SGLangWaitingQueueGrowing", "GPURowRemappingFailure", "GPUUncorrectableECCErrors"}
    assert alerts <= named_silent, sorted(alerts - named_silent)


def test_the_idle_case_is_not_vacuous_without_the_busy_check_the_stale_gauge_fires(rendered):
    """Drop the generation-counter condition from the acceptance rules: the stale-gauge case must then fail."""
    ungated = re.sub(r"\n\s*and on \(instance\) \(sum by \(instance\) \(rate\(sglang:generation_tokens_total[^\n]*",
                     "", rendered)
    assert ungated != rendered
    promtool.check_rules(ungated)
    with pytest.raises(rules.MonitoringError) as err:
        promtool.run_rule_tests(ungated, TESTS)
    assert "the stale gauge of an idle worker fires nothing" in err.value.evidence["output"]


def test_a_rule_that_does_not_parse_is_refused_with_promtools_words(rendered):
    broken = rendered.replace("== 0", "== = 0", 1)
    with pytest.raises(rules.MonitoringError, match="promtool refused it") as err:
        promtool.check_rules(broken)
    assert err.value.kind == "promtool" and "parse error" in err.value.evidence["output"]
    with pytest.raises(rules.MonitoringError, match="promtool refused it"):
        promtool.check_rules("groups: [{name: x, rules: [{alert: A, expr: 'up ==', for: 1m}]}]\n")


def test_a_missing_promtool_is_an_error_not_a_pass():
    with pytest.raises(rules.MonitoringError, match="not found") as err:
        promtool.check_rules("groups: []\n", promtool="promtool-that-is-not-installed")
    assert err.value.kind == "promtool_missing"


def test_a_none_worker_at_zero_fires_no_acceptance_alert():
    """Real 0.5.11 serves the spec gauges at 0.0 with NONE (tests/fixtures/real_sglang/metrics-0.5.11-h200): the
    acceptance rules exist only for speculative groups, so a busy NONE worker fires nothing; a speculative one at 0.0
    collapses (the case is not vacuous)."""
    text = rules.render(TEMPLATE, {"plain": {"speculative": False}, "spec": {"speculative": True}}, [], None)["text"]
    assert "SUCCESS" in promtool.run_rule_tests(text, (FIX / "rules-none.test.yml").read_text())
