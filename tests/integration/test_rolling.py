"""Rolling reconfigure through SGLang's router (lab "rolling": router1 runs the real router, smg from PyPI, in front of
serve1 and serve2, which run the SGLang stand-in): a steady client stream through the router sees no failed request
while both workers change their speculative config; a bad config on the second host is put back, the roll stops and
the router keeps serving; rolls that would break the minimum of healthy workers, and a router without workers, are
refused before any host changes. With the monitoring role on router1 (its scenario, hosted here): a worker killed with
kill -9 under the client stream fires its alert, delivered to a webhook receiver on the controller with host and
group, and resolved once systemd has the worker back."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

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


def test_molecule_scenario_of_the_router_role_on_this_lab(lab, tmp_path):
    """The router role's molecule scenario first, on this lab (same hosts, same inventory): its converged workers and
    router are where the roll tests start, so that convergence is paid once (tests/helpers/molecule.py HOSTED)."""
    run_scenario("sglang_router", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)


def test_molecule_scenario_of_the_monitoring_role_on_this_lab(lab, tmp_path):
    """The monitoring role's scenario right after the router's, on its converged workers and router (so its prepare is
    the nvidia-smi fixture alone): Prometheus and Alertmanager on router1, every target up, rules loaded and
    evaluated, nothing firing or pending, GPU series from the textfile timer, every dashboard query returning series
    (roles/monitoring/molecule/default/verify.yml)."""
    run_scenario("monitoring", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True,
                 env={"MONITORING_PREPARE": "fixture.yml"})


@pytest.fixture(scope="module")
def fleet(lab):
    """Workers on the stand-in (venv, then the service), then the router in front of them."""
    for playbook, extra in (("roles/sglang_service/molecule/default/prepare.yml", {"target_hosts": "nvlink"}),
                            ("playbooks/service.yml", speculative_env()),
                            ("playbooks/router.yml", {})):
        run = play(lab, playbook, extravars=extra)
        assert run.rc == 0, f"{playbook}\n{run.failures()}\n{run.stdout[-3000:]}"
    assert set(router_workers(lab)) == {worker_url(lab, h) for h in WORKERS}
    return lab


def roll(lab, apply: dict, **extra):
    return play(lab, ROLLING, extravars={"rolling_apply": apply, **extra}, timeout=1200)


def load(lab) -> Load:
    return Load(f"http://{address(lab, ROUTER)}:{ROUTER_PORT}", KEY, concurrency=4, max_seconds=600).start()


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
