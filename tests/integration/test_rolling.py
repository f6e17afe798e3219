"""Rolling reconfigure through SGLang's router (lab "rolling": router1 runs the real router, smg from PyPI, in front of
serve1 and serve2, which run the SGLang stand-in): a steady client stream through the router sees no failed request
while both workers change their speculative config; a bad config on the second host is put back, the roll stops and
the router keeps serving; rolls that would break the minimum of healthy workers, and a router without workers, are
refused before any host changes. With the monitoring role on router1 (its scenario, hosted here): a worker killed with
kill -9 under the client stream fires its alert, delivered to a webhook receiver on the controller with host and
group, and resolved once systemd has the worker back; the stand-in's acceptance lowered on one worker at run time
(its SGLANG_STANDIN_ACCEPT_FILE knob) fires the accept-length drift alert for that worker alone, against the floor of
the lab's applied proposal, delivered with host and group, and resolved once the knob is put back."""
from __future__ import annotations

import json
import shlex
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.monitoring.rules import proposal_floor

from lab.host_sets import ROUTER_LAB_HOSTS
from lab.lab import Lab
from tests.helpers.alert_receiver import Receiver
from tests.helpers.molecule import run_scenario
from tests.helpers.playbook import run_playbook
from tests.helpers.router_load import Load

ROOT = Path(__file__).resolve().parents[2]
LAB_NAME = "rolling"
INVENTORY = "inventory/router-lab"
ROUTER, WORKERS = ROUTER_LAB_HOSTS[0], ROUTER_LAB_HOSTS[1:]
FAST = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5"}
KEY = "lab-only-standin-key"  # group_vars/lab/sglang_service.yml: the lab's placeholder key (router and workers)
ROLLING = "playbooks/rolling.yml"


@pytest.fixture(scope="module")
def lab(_lab_registry) -> Lab:
    if LAB_NAME not in _lab_registry:
        _lab_registry[LAB_NAME] = Lab(LAB_NAME, hosts=ROUTER_LAB_HOSTS)
    lab = _lab_registry[LAB_NAME]
    lab.up(log=lambda *_: None)
    return lab


def play(lab, playbook: str, **kw):
    return run_playbook(lab, playbook, inventory=INVENTORY, **kw)


def address(lab, host: str) -> str:
    return lab.state()["hosts"][host]["address"]


def unit(lab, host: str) -> str:
    return lab.ssh(host, "cat /etc/systemd/system/sglang.service").stdout


def digests(lab) -> dict:
    return {h: lab.ssh(h, "sha256sum /etc/systemd/system/sglang.service; systemctl show -p MainPID --value sglang")
            .stdout for h in WORKERS}


def worker_url(lab, host: str) -> str:
    return f"http://{address(lab, host)}:30001"


def router_workers(lab) -> dict:
    """{url: status} as the router lists them (asked on the router host itself)."""
    out = lab.ssh(ROUTER, f"curl -sf -H 'Authorization: Bearer {KEY}' http://127.0.0.1:{ROUTER_PORT}/workers").stdout
    return {w["url"].rstrip("/"): w["status"] for w in json.loads(out)["workers"]}


def speculative_env() -> dict:
    return {"sglang_service_env_overrides": FAST}


ROUTER_PORT = 30000  # roles/sglang_router defaults: sglang_router_port


# The lab boot (its hosts' nspawn pids) on which the router scenario converged the fleet: `fleet` below converges it
# only on a boot where the scenario did not (e.g. under -k), and otherwise checks what the scenario left.
_scenario_converged: dict = {}


def test_molecule_scenario_of_the_router_role_on_this_lab(lab, tmp_path):
    """The router role's molecule scenario first, on this lab (same hosts, same inventory): its converged workers and
    router are where the roll tests start, so that convergence is paid once (tests/helpers/molecule.py HOSTED). Its
    prepare is the fleet's venv, drafter config and service (the fast stand-in timings); its converge the router."""
    run_scenario("sglang_router", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)
    _scenario_converged["boot"] = lab.boot()


def test_molecule_scenario_of_the_monitoring_role_on_this_lab(lab, tmp_path):
    """The monitoring role's scenario right after the router's, on its converged workers and router (so its prepare is
    the nvidia-smi fixture alone): Prometheus and Alertmanager on router1, every target up, rules loaded and
    evaluated, nothing firing or pending, GPU series from the textfile timer, every dashboard query returning series
    (roles/monitoring/molecule/default/verify.yml)."""
    run_scenario("monitoring", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True,
                 env={"MONITORING_PREPARE": "fixture.yml"})


@pytest.fixture(scope="module")
def fleet(lab):
    """Workers on the stand-in (venv, then the service), then the router in front of them: converged here unless the
    router scenario converged them on this boot; either way both workers serve and the router lists both."""
    if _scenario_converged.get("boot") != lab.boot():
        for playbook, extra in (("roles/sglang_service/molecule/default/prepare.yml", {"target_hosts": "nvlink"}),
                                ("playbooks/service.yml", speculative_env()),
                                ("playbooks/router.yml", {})):
            run = play(lab, playbook, extravars=extra)
            assert run.rc == 0, f"{playbook}\n{run.failures()}\n{run.stdout[-3000:]}"
    for host in WORKERS:
        lab.ssh(host, "systemctl is-active sglang.service && curl -sf -o /dev/null http://127.0.0.1:30001/health")
    lab.ssh(ROUTER, "systemctl is-active sglang-router.service")
    assert set(router_workers(lab)) == {worker_url(lab, h) for h in WORKERS}
    return lab


def roll(lab, apply: dict, **extra):
    return play(lab, ROLLING, extravars={"rolling_apply": apply, **extra}, timeout=1200)


# Prose answers of 24 tokens (the stand-in's pseudo-text): 8 verify steps of the lab's DDTREE b8 k4, accept length
# 2.875 as the lab proposal measured for chat (a one-token capital answer is a step of 1.0, under any floor).
PROMPT = "tell me about the harbour town"


def load(lab) -> Load:
    return Load(f"http://{address(lab, ROUTER)}:{ROUTER_PORT}", KEY, concurrency=4, max_seconds=600,
                prompt=PROMPT).start()


MONITORING = "roles/monitoring/molecule/default"
WEBHOOK_PORT = 19093  # group_vars/lab/monitoring.yml monitoring_alertmanager_webhook_url: the lab gateway, this port


@pytest.fixture(scope="module")
def monitored(fleet, lab):
    """Prometheus and Alertmanager on router1 as the monitoring scenario leaves them (its fixture and converge run
    here only where the scenario did not, e.g. under -k)."""
    if lab.ssh(ROUTER, "systemctl is-active prometheus prometheus-alertmanager", check=False).returncode != 0:
        for playbook in (f"{MONITORING}/fixture.yml", f"{MONITORING}/converge.yml"):
            run = play(lab, playbook)
            assert run.rc == 0, f"{playbook}\n{run.failures()}\n{run.stdout[-3000:]}"
    return lab


def test_a_killed_worker_fires_its_alert_delivered_with_host_and_group_and_resolved(monitored, lab):
    """kill -9 of serve2's SGLang under a steady client stream through the router: SGLangWorkerDown fires (the lab's
    down_for 5s, scrape and evaluation 5s: group_vars/lab/monitoring.yml), Alertmanager delivers it to the webhook on
    the controller with host and group, and the resolution follows once systemd restarts the worker (the service
    role's RestartSec 30: a worker back within the rule's 5 s plus a scrape is never alerted, which a RestartSec of
    5 showed). The clients' failed requests during the kill are counted and reported."""
    victim = WORKERS[1]
    is_victim = (lambda a: a["labels"].get("alertname") == "SGLangWorkerDown"
                 and a["labels"].get("host") == victim)
    with Receiver(lab.state()["gateway"], WEBHOOK_PORT) as receiver:
        stream = load(lab)
        try:
            stream.wait_for(20)
            pid = lab.ssh(victim, "systemctl show -p MainPID --value sglang").stdout.strip()
            killed = time.monotonic()
            lab.ssh(victim, f"kill -9 {pid}")
            fired_at, fired = receiver.wait_for(lambda a: is_victim(a) and a["status"] == "firing", timeout=90)
            resolved_at, resolved = receiver.wait_for(lambda a: is_victim(a) and a["status"] == "resolved",
                                                      timeout=120)
            stream.wait_for(sum(1 for r in stream.snapshot() if r.ok) + 10)
        finally:
            summary = stream.stop()
        others = sorted({(a["labels"].get("alertname"), a["labels"].get("host"), a["status"])
                         for _, a in receiver.alerts() if not is_victim(a)})
    report = {"kill_to_firing_delivered_s": round(fired_at - killed, 1),
              "kill_to_resolved_delivered_s": round(resolved_at - killed, 1),
              "fired_labels": fired["labels"], "other_alerts": others,
              "requests": {k: summary[k] for k in ("sent", "failed")}, "failures": summary["failures"][:5]}
    print("\nkilled worker alert:", json.dumps(report))
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "rolling-killed-worker-alert.json").write_text(json.dumps(report, indent=2))
    assert fired["labels"]["group"] == "nvlink" and fired["labels"]["severity"] == "critical", fired
    assert victim in fired["annotations"]["summary"] and fired["annotations"]["runbook"], fired
    assert resolved["labels"] == fired["labels"]
    assert summary["failed"] == 0, summary["failures"]  # the router retried what the killed worker dropped
    assert all(host == victim for _, host, _ in others), others  # nothing fired for a healthy host
    deadline = time.monotonic() + 60  # the router's own health checks bring the worker back (the roll tests follow)
    while router_workers(lab) != {worker_url(lab, h): "ready" for h in WORKERS} and time.monotonic() < deadline:
        time.sleep(1)
    assert router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}


LAB_PROPOSAL = ROOT / "tests/fixtures/monitoring/lab-proposal.yml"  # group_vars/lab/monitoring.yml monitoring_proposal
ACCEPT_FILE = "/var/lib/sglang-standin/accept.json"  # group_vars/lab/sglang_service.yml sglang_service_env_lab
# Every class's per-draft-token acceptance on the victim: the lab's DDTREE b8 k4 then accepts 1.94 tokens a step
# (lab/sglang_standin engine.expected_accept_length), below the floor (2.591) and above the collapse threshold (1.1).
DRIFT_P = 0.2
DRIFT = "SpeculativeAcceptanceBelowFloor"


def set_acceptance(lab, host: str, knob: dict) -> None:
    """The stand-in's run-time acceptance knob on `host`, written atomically (a temporary file, then a rename): the
    stand-in reads it on every request; {} is the start-up model."""
    tmp = f"{ACCEPT_FILE}.tmp"
    lab.ssh(host, f"install -d -m 0755 {Path(ACCEPT_FILE).parent} && printf %s {shlex.quote(json.dumps(knob))} > {tmp}"
                  f" && chmod 0644 {tmp} && mv -f {tmp} {ACCEPT_FILE}")


def prometheus(lab, path: str, **params) -> dict:
    """Prometheus' HTTP API on router1 (it listens on the lab bridge too: roles/monitoring etc/default/prometheus)."""
    url = f"http://{address(lab, ROUTER)}:9090{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body.get("status") == "success", body
    return body["data"]


def accept_now(lab) -> dict:
    """{host: the accept length averaged over the drift window}, as the rule computes it (evidence)."""
    window = yaml.safe_load((ROOT / "group_vars/lab/monitoring.yml").read_text())["monitoring_rule_settings"][
        "drift_window"]
    query = f'avg by (host) (avg_over_time(sglang:spec_accept_length{{job="sglang"}}[{window}]))'
    return {r["metric"].get("host"): round(float(r["value"][1]), 3)
            for r in prometheus(lab, "/api/v1/query", query=query)["result"]}


def test_lowered_acceptance_on_one_worker_fires_the_drift_alert_for_it_alone_delivered_and_resolved(monitored, lab):
    """The floor comes from the lab's applied proposal (tests/fixtures/monitoring/lab-proposal.yml through
    monitoring_proposal: 0.9 x the lowest accept length its winner measured), the drift window and `for:` are the lab's
    (group_vars/lab/monitoring.yml: 20s and 25s). Under a steady client stream through the router (the rule counts a
    worker only while it generates), serve1's acceptance is lowered with the stand-in's run-time knob: the drift alert
    fires for serve1 alone, Alertmanager delivers it to the webhook with host, group and the runbook; the knob put
    back, its resolution is delivered. From a quiet fleet on (waited for: an earlier test may leave a restarted worker),
    Prometheus' ALERTS show nothing else firing and serve2's drift rule not even pending (a collapse rule pending on a
    worker idle since its start is tolerated: it cannot fire on that). The times from the knob's writes to the
    deliveries are recorded."""
    victim, healthy = WORKERS
    floor, _ = proposal_floor(yaml.safe_load(LAB_PROPOSAL.read_text()), "nvlink", 0.9)  # rules.py DEFAULTS floor_margin
    rules = [r for g in prometheus(lab, "/api/v1/rules")["groups"] for r in g["rules"] if r["name"] == DRIFT]
    assert len(rules) == 1 and f"< {floor['accept_floor']}" in rules[0]["query"], (floor, rules)
    is_victim = lambda a: a["labels"].get("alertname") == DRIFT and a["labels"].get("host") == victim  # noqa: E731

    def evidence(what):
        return (f"{what}\nprometheus alerts: {json.dumps(prometheus(lab, '/api/v1/alerts')['alerts'])[:3000]}"
                f"\naccept length over the drift window: {accept_now(lab)} (floor {floor['accept_floor']})")

    with Receiver(lab.state()["gateway"], WEBHOOK_PORT) as receiver:
        stream = load(lab)
        try:
            stream.wait_for(20)
            # A quiet fleet first (an earlier test may have left a restarted worker): both workers in the router's
            # ready set, both generating above the floor, no alert active but a pending collapse (see below).
            deadline = time.monotonic() + 120
            while True:
                now, active = accept_now(lab), [
                    (a["labels"].get("alertname"), a["labels"].get("host"), a["state"])
                    for a in prometheus(lab, "/api/v1/alerts")["alerts"]
                    if (a["labels"].get("alertname"), a["state"]) != ("SpeculativeAcceptanceCollapsed", "pending")]
                if len(now) == 2 and min(now.values()) > floor["accept_floor"] and not active \
                        and router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}:
                    break
                assert time.monotonic() < deadline, evidence(f"the fleet never got quiet: active {active}")
                time.sleep(1)
            before, started = now, time.monotonic()
            set_acceptance(lab, victim, {"*": DRIFT_P})
            lowered = time.monotonic()
            try:
                fired_at, fired = receiver.wait_for(lambda a: is_victim(a) and a["status"] == "firing", timeout=90)
            except AssertionError as exc:
                raise AssertionError(evidence(exc)) from None
            during = accept_now(lab)
            set_acceptance(lab, victim, {})
            restored = time.monotonic()
            try:
                resolved_at, resolved = receiver.wait_for(lambda a: is_victim(a) and a["status"] == "resolved",
                                                          timeout=90)
            except AssertionError as exc:
                raise AssertionError(evidence(exc)) from None
        finally:
            set_acceptance(lab, victim, {})
            summary = stream.stop()
        span = int(time.monotonic() - started)  # ALERTS since the fleet was quiet (nothing but a pending collapse)
        alerts = prometheus(lab, "/api/v1/query", query=f"max_over_time(ALERTS[{span}s])")["result"]
        seen = sorted({(a["metric"].get("alertname"), a["metric"].get("host"), a["metric"].get("alertstate"))
                       for a in alerts})
        # what came to the webhook since then (a resolution of an earlier test's alert may still arrive: not counted)
        delivered = sorted({(a["labels"].get("alertname"), a["labels"].get("host"), a["status"])
                            for t, a in receiver.alerts() if t >= started and (a["status"] == "firing" or is_victim(a))})
    report = {"floor": floor["accept_floor"], "knob": {"*": DRIFT_P},
              "accept_length": {"before": before, "firing": during},
              "knob_to_firing_delivered_s": round(fired_at - lowered, 1),
              "restore_to_resolved_delivered_s": round(resolved_at - restored, 1),
              "fired_labels": fired["labels"], "alerts_seen": seen, "delivered": delivered,
              "requests": {k: summary[k] for k in ("sent", "failed", "by_worker")}, "quiet_to_resolved_s": span}
    print("\ndrift alert:", json.dumps(report))
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "rolling-drift-alert.json").write_text(json.dumps(report, indent=2))
    assert fired["labels"]["group"] == "nvlink" and fired["labels"]["severity"] == "warning", fired
    assert victim in fired["annotations"]["summary"] and str(floor["accept_floor"]) in fired["annotations"]["summary"]
    assert fired["annotations"]["runbook"], fired
    assert resolved["labels"] == fired["labels"]
    assert during[victim] < floor["accept_floor"] < during[healthy], during
    assert summary["failed"] == 0, summary["failures"]
    assert all(summary["by_worker"].get(worker_url(lab, h), 0) > 0 for h in WORKERS), summary  # both generated
    # Nothing else fired; the healthy worker's drift rule was not even pending. Pending is allowed to the collapse rule
    # alone: a worker started and left idle holds spec_accept_length 0 (no decode window logged yet), so its 5m
    # average under the new load sits below 1.1 for a while; its `for:` equals its window, so it cannot fire on that.
    assert {(name, host) for name, host, state in seen if state == "firing"} == {(DRIFT, victim)}, seen
    assert {(name, host) for name, host, _ in seen} <= {(DRIFT, victim), ("SpeculativeAcceptanceCollapsed", healthy),
                                                         ("SpeculativeAcceptanceCollapsed", victim)}, seen
    assert {(name, host) for name, host, _ in delivered} == {(DRIFT, victim)}, delivered


def test_a_roll_under_load_changes_both_workers_with_no_failed_request(fleet, lab):
    before = {h: unit(lab, h) for h in WORKERS}
    assert all("--speculative-ddtree-budget 8" in u for u in before.values()), before
    stream = load(lab)
    # A long generation on the first host (~70 s on the stand-in): still running when the router has dropped the
    # host (it drains a removed worker for a fixed 5 s only), so the roll must wait for it before the restart.
    long_one = Load(worker_url(lab, WORKERS[0]), KEY, concurrency=1, max_new_tokens=16000, request_timeout=300,
                    ignore_eos=True, prompt="tell a long story")
    try:
        stream.wait_for(20)
        long_req = threading.Thread(target=lambda: long_one.requests.append(long_one._one(0)), daemon=True)
        long_req.start()
        run = roll(lab, {"sglang_service_speculative_overrides": {"budget": 6, "topk_cap": 2},
                         "sglang_service_env_overrides": FAST})
        stream.wait_for(sum(1 for r in stream.snapshot() if r.ok) + 20)
        long_req.join(300)
    finally:
        summary = stream.stop()
    assert run.rc == 0, f"{run.failures()}\n{run.stdout[-4000:]}"
    assert [r.ok for r in long_one.requests] == [True], long_one.summary()  # it finished, on the old config
    evidence = {h: run.result("Time out of rotation", h)["ansible_facts"]["rolling_evidence"] for h in WORKERS}
    report = {"requests": summary, "out_of_rotation_s": {h: float(e["out_of_rotation_s"]) for h, e in evidence.items()},
              "drain_s": {h: float(e["drain_s"]) for h, e in evidence.items()},
              "in_flight_at_removal": {h: int(e["in_flight_at_removal"]) for h, e in evidence.items()},
              "long_request_s": round(long_one.requests[0].end - long_one.requests[0].start, 1),
              "client_gap_s": {h: stream.gaps(worker_url(lab, h)) for h in WORKERS}}
    print("\nrolling under load:", json.dumps(report))
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "rolling-under-load.json").write_text(json.dumps(report, indent=2))
    assert summary["failed"] == 0, summary["failures"]
    assert summary["sent"] >= 60, summary
    # the drain waited for the long generation: in flight when the router had let go of the host
    assert int(evidence[WORKERS[0]]["in_flight_at_removal"]) >= 1 and float(evidence[WORKERS[0]]["drain_s"]) > 5
    for host in WORKERS:
        text = unit(lab, host)
        assert "--speculative-ddtree-budget 6" in text and "--speculative-ddtree-topk-cap 2" in text
        # the host served requests through the router after its change (it was routed to again)
        assert summary["by_worker"].get(worker_url(lab, host), 0) > 0, summary
        assert float(evidence[host]["out_of_rotation_s"]) > 0
    # one host out at a time: while one was out, the other carried the stream
    assert router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}


def test_a_bad_config_on_the_second_host_is_put_back_and_the_roll_stops(fleet, lab):
    first, second = WORKERS
    before = digests(lab)
    stream = load(lab)
    try:
        stream.wait_for(20)
        env = "{{ %r if inventory_hostname == %r else %r }}" % (
            {**FAST, "SGLANG_STANDIN_FAULT": "crash_loading"}, second, FAST)
        run = roll(lab, {"sglang_service_speculative_overrides": {"budget": 4, "topk_cap": 2},
                         "sglang_service_env_overrides": env})
        stream.wait_for(sum(1 for r in stream.snapshot() if r.ok) + 20)
    finally:
        summary = stream.stop()
    assert run.rc != 0
    failures = run.failures()
    print("\nbad config on the second host:", failures[:1500], json.dumps(summary))
    assert f"rolling change STOPPED at {second}" in failures and "crash_loading" in failures, failures
    assert "back in the router on its previous config" in failures, failures
    assert "--speculative-ddtree-budget 4" in unit(lab, first)  # the first host keeps its new config
    after = digests(lab)
    assert after[second].split()[0] == before[second].split()[0]  # the second host's unit file is the previous one
    assert router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}
    assert summary["failed"] == 0, summary["failures"]  # the router kept serving throughout


def test_a_roll_below_the_minimum_of_healthy_workers_is_refused_before_any_change(fleet, lab):
    before = digests(lab)
    run = roll(lab, {"sglang_service_speculative_overrides": {"budget": 8, "topk_cap": 4}},
               rolling_min_healthy_workers=2)
    assert run.rc != 0
    assert "refused" in run.failures() and "fewer than rolling_min_healthy_workers=2" in run.failures(), run.failures()
    assert digests(lab) == before
    assert router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}


def test_a_router_with_no_workers_is_refused_before_any_change(fleet, lab):
    before = lab.ssh(ROUTER, "sha256sum /etc/systemd/system/sglang-router.service; "
                             "systemctl show -p MainPID --value sglang-router").stdout
    run = play(lab, "playbooks/router.yml", extravars={"sglang_router_worker_groups": ["pcie"]})
    assert run.rc != 0
    assert "no workers" in run.failures(), run.failures()
    after = lab.ssh(ROUTER, "sha256sum /etc/systemd/system/sglang-router.service; "
                            "systemctl show -p MainPID --value sglang-router").stdout
    assert after == before


def test_check_mode_names_what_the_roll_would_do_and_changes_nothing(fleet, lab):
    before = digests(lab)
    run = play(lab, ROLLING, check=True, extravars={
        "rolling_apply": {"sglang_service_speculative_overrides": {"budget": 8, "topk_cap": 4}}})
    assert run.rc == 0, run.failures()
    assert digests(lab) == before
    assert router_workers(lab) == {worker_url(lab, h): "ready" for h in WORKERS}
