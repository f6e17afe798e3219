"""A two-host SGLang serving group (sglang_service_node_group) on the multi-node lab (lab "multinode": mn0 = rank 0,
mn1 = rank 1, inventory/multinode-lab): real playbook runs, real SSH and systemd, the SGLang stand-in forming the
group as real 0.5.11 does (rank 0 waits at the dist-init port for every rank; ranks >= 1 serve only a dummy
/health). Shown here: the group is ready only when both ranks are up; killing rank 1 fails the group's readiness
within 3 s with rank 1's journal; tp x pp not divisible by the nodes and a partial group are refused before any host
changes; a second run changes and restarts nothing.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from lab.host_sets import MULTINODE_HOSTS
from lab.lab import Lab
from tests.helpers.playbook import run_playbook

LAB_NAME = "multinode"
INVENTORY = "inventory/multinode-lab"
RANK0, RANK1 = MULTINODE_HOSTS
PREPARE = "roles/sglang_service/molecule/default/prepare.yml"
SERVICE = "playbooks/service.yml"
FAST = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5"}
GROUP_READY = "Start rank 0 and wait for the whole group (readiness from rank 0, every rank watched, fail-fast)"
NOT_READY = "The group is not ready"
PLANNED = "The group can be planned (tp x pp divisible by the number of nodes, one address per rank, a free port)"
PARTIAL = "Every rank of the serving group is in this play (a group is checked, changed and restarted together)"
RESTART_TASKS = ("Stop every rank of the group (it restarts together; rank 0 drains first)",
                 "Start the ranks >= 1 without waiting (they join rank 0's dist-init port; rank 0's readiness watches "
                 "them)", GROUP_READY, "Restart sglang service")
# a runtime drop-in the role does not manage: rank 1's unit can never start (held down)
HOLD = "/run/systemd/system/sglang.service.d/hold.conf"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def lab(_lab_registry) -> Lab:
    if LAB_NAME not in _lab_registry:
        _lab_registry[LAB_NAME] = Lab(LAB_NAME, hosts=MULTINODE_HOSTS)
    lab = _lab_registry[LAB_NAME]
    lab.up(log=lambda *_: None)
    return lab


def sh(lab, host, cmd) -> str:
    return lab.ssh(host, cmd).stdout.strip()


def main_pid(lab, host) -> int:
    return int(sh(lab, host, "systemctl show -p MainPID --value sglang.service"))


def unit_digest(lab, host) -> str:
    return sh(lab, host, "sha256sum /etc/systemd/system/sglang.service /etc/sglang/sglang.env")


def address(lab, host) -> str:
    return lab.state()["hosts"][host]["address"]


def http(lab, host, path, key="", body=None, timeout=10.0):
    """(status, parsed body) of one request to a lab host's server port, straight over the lab bridge."""
    req = urllib.request.Request(f"http://{address(lab, host)}:30001{path}",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with OPENER.open(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw.strip() else None)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None


def service(lab, env: dict | None = None, limit: str | None = None, full: bool = False, **extra):
    extravars = {"sglang_service_env_overrides": {**FAST, **(env or {})}, "sglang_service_group_settle": 2, **extra}
    return run_playbook(lab, SERVICE, inventory=INVENTORY, limit=limit, extravars=extravars,
                        skip_tags=None if full else "sglang_service_install")


def restarted(run) -> list[str]:
    return [f"{h}: {t}" for t in RESTART_TASKS for r in run.results(t) if r.get("changed")
            for h in [r["_host"]]]


@pytest.fixture(scope="module")
def held_then_ready(lab):
    """The first deployment with rank 1's unit held down (its start fails), then released and deployed again."""
    prep = run_playbook(lab, PREPARE, inventory=INVENTORY)
    assert prep.rc == 0, prep.failures()
    sh(lab, RANK1, f"mkdir -p {HOLD.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > {HOLD} "
                   "&& systemctl daemon-reload")
    began = time.monotonic()
    held = service(lab, full=True, sglang_service_ready_timeout=8)
    held_s = time.monotonic() - began
    sh(lab, RANK1, f"rm -f {HOLD} && systemctl daemon-reload && systemctl reset-failed sglang.service || true")
    ready = service(lab)
    return held, held_s, ready


def test_the_group_is_ready_only_when_both_ranks_are_up(held_then_ready, lab):
    held, held_s, ready = held_then_ready
    # rank 1 held down: rank 0 never becomes ready (it waits for rank 1 at the dist-init port) and the play fails,
    # bounded by the readiness timeout, naming rank 1 with its unit state and journal
    assert held.rc != 0
    wait = held.result(GROUP_READY, RANK0)
    assert wait["_event"] == "runner_on_failed" and wait["kind"] == "timeout", wait.get("msg")
    assert wait["phase"] == "not listening" and "ranks not answering yet: ['mn1']" in wait["msg"]
    assert wait["waited_s"] <= 8 + 2, wait["waited_s"]
    msg = held.result(NOT_READY, RANK0)["msg"]
    assert msg.startswith("serving group b300_pair not ready: rank 1 (mn1) (its unit is not running)"), msg[:300]
    assert "units: rank 1 (mn1):" in msg and "Result=exit-code" in msg
    assert "journal of rank 1 (mn1)" in msg and "mn1 systemd[1]: sglang.service: Control process exited" in msg
    assert "rank 0 (mn0) failed" in held.result("Rank 0 of the group is ready (the group's readiness is rank 0's)",
                                                RANK1)["msg"]
    print(f"\nheld rank 1: the play failed after {held_s:.1f}s (rank 0's wait {wait['waited_s']}s)")

    # released: the group forms, rank 0 answers the API and generates; rank 1 runs only the dummy health server
    assert ready.rc == 0, ready.failures()
    ok = ready.result(GROUP_READY, RANK0)
    assert ok["changed"] and [r["name"] for r in ok["ranks"]] == [RANK0, RANK1] and all(r["oks"] for r in ok["ranks"])
    key = sh(lab, RANK0, "sed -n 's/^SGLANG_SERVICE_API_KEY=//p' /etc/sglang/sglang.env")
    status, models = http(lab, RANK0, "/v1/models", key)
    assert status == 200 and models["data"][0]["id"] == "/srv/models/Kimi-K2.6"
    status, out = http(lab, RANK0, "/generate", key, {"text": "The capital of France is",
                                                      "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    assert status == 200 and out["text"] and out["meta_info"]["completion_tokens"] > 0
    assert http(lab, RANK1, "/health")[0] == 200 and http(lab, RANK1, "/v1/models", key)[0] == 404
    assert ready.result("Known-answer prompts, degenerate-output check, tool call, tok/s and accept length", RANK1)[
        "_event"] == "runner_on_skipped"
    dist = f"--dist-init-addr {address(lab, RANK0)}:5000"
    for host, rank in ((RANK0, 0), (RANK1, 1)):
        unit = sh(lab, host, "cat /etc/systemd/system/sglang.service")
        assert f"--nnodes 2 --node-rank {rank}" in unit and dist in unit, unit
        assert '"NCCL_SOCKET_IFNAME==host0"' in unit and '"GLOO_SOCKET_IFNAME=host0"' in unit
        ev = ready.result("Record the service evidence", host)["ansible_facts"]["sglang_service_evidence"]
        assert int(ev["pid"]) == main_pid(lab, host) and ev["restarted"]


def test_a_second_run_changes_nothing_and_restarts_nothing(held_then_ready, lab):
    pids = {h: main_pid(lab, h) for h in MULTINODE_HOSTS}
    run = service(lab, full=True)
    assert run.rc == 0, run.failures()
    assert run.changed_count(RANK0) == 0 and run.changed_count(RANK1) == 0
    assert restarted(run) == []
    assert run.result(GROUP_READY, RANK0)["ranks"][1]["oks"] > 0  # rank 1 was still watched
    assert {h: main_pid(lab, h) for h in MULTINODE_HOSTS} == pids


def test_tp_times_pp_not_divisible_by_the_nodes_is_refused_before_any_host_changes(held_then_ready, lab):
    before = {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS}
    run = service(lab, sglang_service_server_overrides={"tp_size": 3})
    assert run.rc != 0
    for host in MULTINODE_HOSTS:
        failure = run.result(PLANNED, host)
        assert failure["_event"] == "runner_on_failed"
        assert "tp=3 x pp=1 = 3 GPUs is not divisible by nnodes=2 (hosts ['mn0', 'mn1'])" in failure["msg"]
    assert run.stats().get("changed", {}) == {}
    assert {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS} == before


def test_a_partial_group_is_refused(held_then_ready, lab):
    before = {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS}
    run = service(lab, limit=RANK1, sglang_service_server_overrides={"context_length": 16384})
    assert run.rc != 0
    failure = run.result(PARTIAL, RANK1)
    assert failure["_event"] == "runner_on_failed" and "rank 0 (mn0) not in it" in failure["msg"]
    assert run.stats().get("changed", {}) == {}
    assert {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS} == before


def test_a_rolling_change_of_a_multi_node_group_is_refused_before_any_change(held_then_ready, lab):
    """playbooks/rolling.yml changes hosts one batch at a time behind the router; a group's ranks restart together,
    so the roll refuses it at its start, naming the hosts."""
    before = {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS}
    run = run_playbook(lab, "playbooks/rolling.yml", inventory=INVENTORY, extravars={
        "rolling_apply": {"sglang_service_server_overrides": {"context_length": 16384}}})
    assert run.rc != 0
    failure = run.result("Multi-node serving groups are not rolled here (their ranks restart together; "
                         "playbooks/service.yml does it)")
    assert failure["_event"] == "runner_on_failed" and "['mn0', 'mn1'] belong to multi-node" in failure["msg"]
    assert run.stats().get("changed", {}) == {}
    assert {h: (main_pid(lab, h), unit_digest(lab, h)) for h in MULTINODE_HOSTS} == before


def test_killing_rank1_fails_the_groups_readiness_within_3s_with_rank1s_journal(held_then_ready, lab):
    old = {h: main_pid(lab, h) for h in MULTINODE_HOSTS}
    box: dict = {}
    # a changed environment restarts the group; a long settle keeps sglang_group_ready watching it
    worker = threading.Thread(target=lambda: box.update(run=service(
        lab, env={"SGLANG_STANDIN_TTFT_MS": "39"}, sglang_service_group_settle=30)), daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while True:  # both ranks run new processes and rank 0 answers /health: the group is formed and being watched
        assert time.monotonic() < deadline and worker.is_alive(), "the group did not come up"
        pids = {h: main_pid(lab, h) for h in MULTINODE_HOSTS}
        if all(pids[h] not in (0, old[h]) for h in MULTINODE_HOSTS) and http(lab, RANK0, "/health")[0] == 200:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    killed_at = float(sh(lab, RANK1, f"date +%s.%N; kill -9 {pids[RANK1]}").split()[0])
    worker.join(timeout=300)
    run = box["run"]
    assert run.rc != 0
    wait = run.result(GROUP_READY, RANK0)
    assert wait["_event"] == "runner_on_failed" and wait["failed_rank"] == RANK1 and wait["node_rank"] == 1
    assert wait["kind"] == "rank_dead", wait["msg"]
    kill_to_verdict = wait["failed_at"] - killed_at  # one kernel clock: the lab's hosts are containers
    print(f"\nkill -9 of rank 1 -> group readiness failed in {kill_to_verdict:.2f}s (phase {wait['phase']!r}, "
          f"{wait['msg'].splitlines()[0][:160]})")
    assert 0 < kill_to_verdict < 3.0
    msg = run.result(NOT_READY, RANK0)["msg"]
    assert msg.startswith("serving group b300_pair not ready: rank 1 (mn1) (named by the wait on rank 0)"), msg[:300]
    assert "journal of rank 1 (mn1)" in msg and f"mn1 sglang[{pids[RANK1]}]:" in msg
    assert "Dummy health check server started" in msg and "status=9/KILL" in msg
