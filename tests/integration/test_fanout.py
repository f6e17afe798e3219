"""The Hub once per fleet (roles/models, models_source: peers) on six lab hosts: real playbook runs, real SSH, peer
servers as transient systemd units, bytes over the lab bridge, every link shaped with tc and the test Hub under a
total rate limit. The Hub's own counters say how many copies it served.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.host_sets import FLEET_HOSTS
from lab.lab import Lab
from lab.testhub import HubProcess
from tests.helpers.playbook import run_playbook

LAB_NAME = "fleet"
INVENTORY = "inventory/fleet-lab"
PLAYBOOK = "playbooks/models.yml"
ROOT = Path(__file__).resolve().parents[2]
MODELS_ROOT = "/srv/fleet-models"
REPOS = ["fleet/Kimi-K2.6:shards=6,shard_size=4MiB", "fleet/Kimi-K2.6-DFlash:shards=1,shard_size=3MiB"]
MODELS = [("Kimi-K2.6", "fleet/Kimi-K2.6"), ("Kimi-K2.6-DFlash", "fleet/Kimi-K2.6-DFlash")]  # dir = repo's name part
SEEDER = FLEET_HOSTS[0]
RECEIVERS = FLEET_HOSTS[1:]
PLAN = "Show the fan-out plan (who feeds whom)"
CHECK_FETCH = "Fetch each model (check mode - what a real run would fetch)"


@pytest.fixture(scope="module")
def lab(_lab_registry) -> Lab:
    if LAB_NAME not in _lab_registry:
        _lab_registry[LAB_NAME] = Lab(LAB_NAME, hosts=FLEET_HOSTS)
    lab = _lab_registry[LAB_NAME]
    lab.up(log=lambda *_: None)
    return lab


@pytest.fixture(scope="module")
def hub(lab):
    with HubProcess(bind=lab.state()["gateway"], seed=16, repos=REPOS) as h:
        yield h


@pytest.fixture(autouse=True)
def _unshaped(lab, hub):
    yield
    hub.set_link(0)
    state = lab.state()
    for host in FLEET_HOSTS:
        if host in state["hosts"]:
            try:
                lab.set_link(host, 0, state=state)
            except Exception:  # noqa: BLE001 - a host killed by the test has no link left to reset
                pass


def sh(lab, host, cmd, check=True):
    return lab.ssh(host, cmd, check=check).stdout.strip()


def fleet_vars(hub, **extra):
    return {"target_hosts": "fleet", "models_source": "peers", "models_root": MODELS_ROOT,
            "models_hf_endpoint": hub.endpoint,
            "models_list": [{"name": n, "repo_id": r, "revision": "main"} for n, r in MODELS], **extra}


def play(lab, hub, check=False, timeout=900, **extra):
    return run_playbook(lab, PLAYBOOK, inventory=INVENTORY, extravars=fleet_vars(hub, **extra), check=check,
                        timeout=timeout)


def truth(hub) -> dict:
    """{model name: {path: sha256}} of the Hub's LFS files (the Hub's own tree, read here with urllib)."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    out = {}
    for name, repo in MODELS:
        with opener.open(f"{hub.endpoint}/api/models/{repo}/tree/main?recursive=true", timeout=10) as r:
            entries = json.loads(r.read())
        out[name] = {e["path"]: e["lfs"]["oid"] for e in entries if e.get("type") == "file" and e.get("lfs")}
    return out


def one_copy(hub) -> int:
    with_sizes = 0
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for _name, repo in MODELS:
        with opener.open(f"{hub.endpoint}/api/models/{repo}/tree/main?recursive=true", timeout=10) as r:
            with_sizes += sum(e["size"] for e in json.loads(r.read()) if e.get("type") == "file")
    return with_sizes


def on_disk(lab, host) -> dict:
    out = {}
    for name, _repo in MODELS:
        listing = sh(lab, host, f"cd {MODELS_ROOT}/{name} 2>/dev/null && find . -path ./.hf_model -prune -o -type f "
                                "-print0 | sort -z | xargs -0 -r sha256sum || true")
        out[name] = {p[2:]: h for h, p in (line.split(None, 1) for line in listing.splitlines())}
    return out


def assert_correct(lab, hub, hosts):
    want = truth(hub)
    for host in hosts:
        got = on_disk(lab, host)
        for name, files in want.items():
            assert {p: got[name].get(p) for p in files} == files, f"{host} {name}: {got[name]}"


def wipe(lab, hosts, what=""):
    for host in hosts:
        sh(lab, host, f"rm -rf {MODELS_ROOT}/{what}" if what else f"rm -rf {MODELS_ROOT}")


def test_six_hosts_from_one_hub_copy_then_a_rerun_moves_nothing(lab, hub):
    wipe(lab, FLEET_HOSTS)
    check = play(lab, hub, check=True)
    assert check.rc == 0, check.failures()
    plan = {h: check.result(PLAN, h)["msg"] for h in FLEET_HOSTS}
    assert "seeder, from the Hub" in plan[SEEDER]
    assert "from peer fleet1" in plan["fleet2"] and "from peer fleet1" in plan["fleet3"]  # fan-out 2
    assert "from peer fleet2" in plan["fleet4"] and "from peer fleet3" in plan["fleet6"]
    for host in RECEIVERS:
        for r in check.result(CHECK_FETCH, host)["results"]:
            assert r["changed"] and "from peer" in r["msg"], r["msg"]
    assert hub.stats()["bytes"] == 0  # check mode moved nothing
    assert sh(lab, "fleet2", f"test -e {MODELS_ROOT} && echo yes || echo no") == "no"

    hub.reset()
    hub.set_link(rate_mbps=4)  # the Hub: 4 MB/s in all, however many ask
    for host in FLEET_HOSTS:
        lab.set_link(host, 200)  # each host: 200 Mbit/s each way
    run = play(lab, hub)
    assert run.rc == 0, run.failures()
    stats = hub.stats()  # before this test reads the trees itself
    assert_correct(lab, hub, FLEET_HOSTS)
    # the controller read each tree once for the fleet; no host asked the Hub for a revision or a tree
    assert stats["api"] == {"revision": len(MODELS), "tree": len(MODELS)}, stats["api"]
    served = stats["bytes"]
    copy = one_copy(hub)
    assert copy <= served < copy + (1 << 20), f"the Hub served {served} bytes for a {copy}-byte copy"
    sources = {}
    for host in RECEIVERS:
        result = run.result("Result of Kimi-K2.6", host)
        assert result["files_fetched"] == result["files_total"] and \
            result["fanout_position"] == FLEET_HOSTS.index(host), result
        sources[host] = result["bytes_by_source"]
        assert "hub" not in sources[host], (host, sources[host])
    print("bytes by source per receiver:", json.dumps(sources))
    assert sh(lab, "fleet3", "systemctl is-active sglang-model-peer || true") in ("inactive", "unknown", "failed")

    hub.reset()
    again = play(lab, hub)
    assert again.rc == 0, again.failures()
    assert all(again.changed_count(h) == 0 for h in FLEET_HOSTS), again.stdout[-3000:]
    assert hub.stats()["bytes"] == 0
    assert "Start this host's peer server" not in {t for t in again.task_names() if t} or \
        all(r["_event"] == "runner_on_skipped" for r in again.results("Start this host's peer server"))


def test_a_peer_serving_a_bad_copy_is_caught_and_the_file_comes_from_another_peer(lab, hub):
    assert_correct(lab, hub, FLEET_HOSTS)  # from the test above
    victim = "model-00003-of-00006.safetensors"
    path = f"{MODELS_ROOT}/Kimi-K2.6/{victim}"
    # fleet2's copy goes bad behind its manifest's back (same size, same mtime): it still vouches for it
    sh(lab, "fleet2", f"t=$(stat -c %y {path}); printf 'XXXXXXXX' | dd of={path} bs=1 seek=4096 conv=notrunc "
                      f"status=none; touch -d \"$t\" {path}")
    wipe(lab, ["fleet4"], "Kimi-K2.6")  # fleet4's parent is fleet2
    hub.reset()
    run = play(lab, hub)
    assert run.rc == 0, run.failures()
    result = run.result("Result of Kimi-K2.6", "fleet4")
    assert [(m["file"], m["peer"]) for m in result["peer_hash_mismatches"]] == [(victim, "fleet2")], result
    assert "bad copies caught" in result["msg"]
    good = truth(hub)["Kimi-K2.6"][victim]
    assert on_disk(lab, "fleet4")["Kimi-K2.6"][victim] == good
    assert hub.stats()["bytes"] == 0  # fetched again from another peer, not the Hub
    assert set(result["bytes_by_source"]) - {"fleet2"} <= {"fleet1", "fleet3"}, result["bytes_by_source"]
    # put fleet2 right for the next test (a full verify finds it and fetches it again)
    fix = play(lab, hub, models_verify="full")
    assert fix.rc == 0, fix.failures()


def test_the_seeder_killed_mid_fanout_the_others_still_complete(lab, hub):
    wipe(lab, FLEET_HOSTS)
    hub.reset()
    hub.set_link(rate_mbps=1.5)  # the seeder needs ~20 s from the Hub: time to kill it mid-way
    for host in FLEET_HOSTS:
        lab.set_link(host, 100)
    env = {**os.environ, "LAB_NAME": lab.name, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT)}
    log = open(lab.dir / "fanout-kill.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ansible-playbook"), "-i", INVENTORY, PLAYBOOK,
                             "-e", json.dumps(fleet_vars(hub))], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # wait (bounded) until fleet2 holds at least one file that came from the seeder, and the seeder is not done
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, (lab.dir / "fanout-kill.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (lab.dir / "fanout-kill.log").read_text()[-3000:]
            got = sh(lab, "fleet2", f"cat {MODELS_ROOT}/Kimi-K2.6/.hf_model/manifest.json 2>/dev/null || echo {{}}",
                     check=False)
            if len(json.loads(got or "{}").get("files", {})) >= 1:
                break
            time.sleep(0.5)
        seeder_files = len(json.loads(sh(lab, SEEDER, f"cat {MODELS_ROOT}/Kimi-K2.6/.hf_model/manifest.json")
                                      )["files"])
        assert seeder_files < len(truth(hub)["Kimi-K2.6"]), "the seeder finished before it could be killed: slow the Hub down"
        lab.kill_host(SEEDER)
        killed_at = time.monotonic()
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    output = (lab.dir / "fanout-kill.log").read_text()
    assert rc != 0 and "fleet1" in output  # the seeder is unreachable: the play says so
    assert_correct(lab, hub, RECEIVERS)
    print(f"seeder killed holding {seeder_files} files of Kimi-K2.6; the others completed {time.monotonic() - killed_at:.0f}s "
          f"later; Hub bytes {hub.stats()['bytes']} (one copy {one_copy(hub)})")
    lab.up(log=lambda *_: None)  # the seeder boots again, afresh


def test_bad_input_is_refused_before_any_transfer(lab, hub):
    wipe(lab, FLEET_HOSTS)
    hub.reset()
    zero = play(lab, hub, models_fanout=0)
    assert zero.rc != 0 and "models_fanout must be >= 1" in zero.failures(), zero.failures()
    stranger = play(lab, hub, models_seeder="b300-lab")
    assert stranger.rc != 0 and "models_seeder must be '' or a host of this play" in stranger.failures()
    # one host without the space: a 4 MiB tmpfs as its models root
    sh(lab, "fleet3", f"mkdir -p {MODELS_ROOT} && mount -t tmpfs -o size=4m tmpfs {MODELS_ROOT}")
    try:
        short = play(lab, hub)
    finally:
        sh(lab, "fleet3", f"umount {MODELS_ROOT}", check=False)
    assert short.rc != 0 and "not enough space for the fan-out on fleet3" in short.failures(), short.failures()
    assert hub.stats()["bytes"] == 0
    for host in FLEET_HOSTS:
        assert sh(lab, host, f"ls {MODELS_ROOT} 2>/dev/null | wc -l") == "0", host
        assert sh(lab, host, "systemctl is-active sglang-model-peer || true") != "active"
