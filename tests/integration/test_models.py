"""roles/models against the lab: real playbook runs on nspawn hosts, bytes from test Hubs on the lab gateway.

The lab's own test Hub (lab/services.py LAB_SERVICES) serves the demo repos of group_vars/lab/models.yml; tests that
need faults, a token or hostile trees start their own Hub on the gateway (hosts reach it without the proxy).
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from lab.testhub import HubProcess
from tests.helpers.molecule import run_scenario
from tests.helpers.playbook import run_playbook, start_playbook

LAB_NAME = "models"
PLAYBOOK = "playbooks/models.yml"
ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def sh(lab, host, cmd, check=True):
    return lab.ssh(host, cmd, check=check).stdout.strip()


def remote_sha256(lab, host, root):
    out = sh(lab, host, f"cd {root} && find . -path ./.hf_model -prune -o -type f -print0 | sort -z | "
                        "xargs -0 -r sha256sum")
    return dict(reversed(line.split(None, 1)) for line in out.splitlines())


@pytest.fixture(scope="module")
def gateway(lab):
    return lab.state()["gateway"]


def own_hub(gateway, **kw):
    return HubProcess(bind=gateway, **kw)


def models_vars(hub, repos, **extra):
    return {"models_hf_endpoint": hub.endpoint, "models_root": "/srv/itest-models",
            "models_list": [{"name": n, "repo_id": r, "revision": "main"} for n, r in repos], **extra}


def test_check_mode_then_converge_then_noop_on_both_hosts(lab, playbook):
    sh(lab, "b300-lab", "rm -rf /srv/models /opt/sglang/hf-tools")
    check = playbook(PLAYBOOK, check=True)
    assert check.rc == 0, check.stdout[-4000:]
    plan = check.result("Plan each model against the Hub (read-only; refuses hostile trees)", "b300-lab")
    assert [r["files_to_fetch"] for r in plan["results"]] == [r["files_total"] for r in plan["results"]]
    assert all(r["bytes_to_fetch"] > 0 for r in plan["results"])
    assert sh(lab, "b300-lab", "test -e /srv/models || test -e /opt/sglang/hf-tools && echo changed || echo clean") \
        == "clean"

    run = playbook(PLAYBOOK)
    assert run.rc == 0, run.stdout[-4000:]
    # progress lines (percent, rate, ETA) reached the play output
    assert "100.0%" in run.stdout and "ETA" in run.stdout and "MiB/s" in run.stdout
    for host in ("b300-lab", "ct200-lab"):
        for model in ("Kimi-K2.6", "Kimi-K2.6-DFlash"):
            manifest = json.loads(sh(lab, host, f"cat /srv/models/{model}/.hf_model/manifest.json"))
            on_disk = remote_sha256(lab, host, f"/srv/models/{model}")
            assert {f"./{p}": r["sha256"] for p, r in manifest["files"].items()} == on_disk
            assert len(manifest["revision"]) == 40
    again = playbook(PLAYBOOK)
    assert again.rc == 0 and again.changed_count("b300-lab") == 0 and again.changed_count("ct200-lab") == 0, \
        again.stdout[-3000:]


def test_molecule_scenario_of_the_models_role_on_this_lab(lab, tmp_path):
    """The models role's molecule scenario here, where the test above left both hosts converged on the lab's models:
    its converge and idempotence are no-ops, its verify (hash everything, flip a byte, find it, repair) runs on these
    hosts; the convergence is paid once (tests/helpers/molecule.py HOSTED)."""
    run_scenario("models", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)


CHECK_FETCH = "Fetch each model (check mode - what a real run would fetch)"
CHECK_MSG = re.compile(r"^check mode: would fetch (\d+) files?, [0-9.]+ (?:bytes|KiB|MiB|GiB|TiB) of (\S+) from (\S+)$")
# what a write under the models root or the tool venv would change (path, size, mtime, mode of every entry)
HOST_STATE = ("find /srv /opt/sglang/hf-tools -xdev -printf '%p %s %T@ %m\\n' 2>/dev/null | sort | sha256sum")


def test_check_mode_on_a_fresh_host_reports_bytes_to_fetch_then_nothing_after_a_run(lab, playbook):
    host = "ct200-lab"
    sh(lab, host, "rm -rf /srv/models")
    before = sh(lab, host, HOST_STATE)
    check = playbook(PLAYBOOK, limit=host, check=True)
    assert check.rc == 0, check.failures()
    fetch = check.result(CHECK_FETCH, host)
    assert fetch["_event"] == "runner_on_ok" and fetch["changed"], fetch
    names = set()
    for r in fetch["results"]:
        name = r["models_check_item"]["models_item"]["name"]
        names.add(name)
        assert r["changed"] and r["would_change"], r
        assert r["files_to_fetch"] == r["files_total"] > 0 and r["bytes_to_fetch"] == r["bytes_total"] > 0, r
        m = CHECK_MSG.match(r["msg"])
        assert m and int(m.group(1)) == r["files_to_fetch"] and m.group(2) == name and m.group(3) == r["endpoint"], \
            r["msg"]
    assert names == {"Kimi-K2.6", "Kimi-K2.6-DFlash"}
    assert check.result("Create the models root", host)["changed"]
    assert check.changed_count(host) >= 2  # the models root + the fetch (the tool venv was left in place)
    # nothing was written on the host
    assert sh(lab, host, HOST_STATE) == before
    assert sh(lab, host, "test -e /srv/models && echo yes || echo no") == "no"

    run = playbook(PLAYBOOK, limit=host)
    assert run.rc == 0, run.failures()
    again = playbook(PLAYBOOK, limit=host, check=True)
    assert again.rc == 0, again.failures()
    assert again.changed_count(host) == 0, again.stdout[-3000:]
    assert all(not r["changed"] and r["files_to_fetch"] == 0 and r["msg"].startswith("check mode: nothing to fetch")
               for r in again.result(CHECK_FETCH, host)["results"])


def test_corrupted_weight_is_found_by_full_verify_and_refetched(lab, playbook):
    path = "/srv/models/Kimi-K2.6/model-00002-of-00004.safetensors"
    good = sh(lab, "b300-lab", f"sha256sum {path}").split()[0]
    sh(lab, "b300-lab", f"t=$(stat -c %y {path}); printf 'X' | dd of={path} bs=1 seek=1000 conv=notrunc status=none; "
                        f"touch -d \"$t\" {path}")
    run = playbook(PLAYBOOK, limit="b300-lab", extravars={"models_verify": "full"})
    assert run.rc == 0, run.stdout[-4000:]
    assert sh(lab, "b300-lab", f"sha256sum {path}").split()[0] == good
    result = run.result("Result of Kimi-K2.6", "b300-lab")
    assert result["files_rehashed_bad"] == ["model-00002-of-00004.safetensors"] and result["files_fetched"] == 1


@pytest.mark.parametrize("repo,needle", [("h/dotdot", "hostile tree entry"), ("h/abs", "hostile tree entry"),
                                         ("h/lie", "size lie")])
def test_hostile_hub_is_refused(lab, playbook, gateway, repo, needle):
    repos = ["h/dotdot:shards=1,hostile=dotdot", "h/abs:shards=1,hostile=absolute", "h/lie:shards=1,hostile=size_lie"]
    with own_hub(gateway, seed=3, repos=repos) as hub:
        sh(lab, "b300-lab", "rm -rf /srv/itest-models")
        run = playbook(PLAYBOOK, limit="b300-lab", extravars=models_vars(hub, [(repo.split("/")[1], repo)]))
        assert run.rc != 0 and needle in run.stdout, run.stdout[-3000:]
    # nothing escaped the model directory, nothing unverified was put in place
    assert sh(lab, "b300-lab", "test -e /etc/evil.json && echo yes || echo no") == "no"
    listing = sh(lab, "b300-lab", "find /srv/itest-models -path '*/.hf_model' -prune -o -type f -print 2>/dev/null",
                 check=False)
    assert "nested.bin" not in listing


def test_preflight_refuses_a_too_small_disk_before_any_change(lab, playbook):
    sh(lab, "ct200-lab", "rm -rf /srv/models /opt/sglang/hf-tools")
    run = playbook(PLAYBOOK, limit="ct200-lab", extravars={"models_free_space_margin_mb": 1 << 30})
    assert run.rc != 0 and "not enough space" in run.stdout, run.stdout[-3000:]
    assert sh(lab, "ct200-lab", "test -e /srv/models || test -e /opt/sglang/hf-tools && echo changed || echo clean") \
        == "clean"


def test_token_reaches_the_hub_but_no_file_other_users_can_read(lab, playbook, gateway):
    token = "hf_itest_" + os.urandom(8).hex()
    with own_hub(gateway, seed=4, repos=["p/private:shards=1,shard_size=3MiB"], token=token) as hub:
        sh(lab, "b300-lab", "rm -rf /srv/itest-models")
        denied = playbook(PLAYBOOK, limit="b300-lab", extravars=models_vars(hub, [("private", "p/private")]))
        assert denied.rc != 0 and "RepoNotFound" in denied.stdout
        run = playbook(PLAYBOOK, limit="b300-lab", envvars={"HF_TOKEN": token},
                       extravars=models_vars(hub, [("private", "p/private")]))
        assert run.rc == 0, run.stdout[-3000:]
        assert hub.stats()["file_auth_headers"] == 0  # the LFS file server never saw the token
    assert token not in run.stdout
    leaks = sh(lab, "b300-lab", f"grep -rIl --exclude-dir=proc --exclude-dir=sys {token} / 2>/dev/null | "
                                "xargs -r stat -c '%a %U %n'", check=False)
    for line in filter(None, leaks.splitlines()):
        mode = int(line.split()[0], 8)
        assert not mode & 0o044, f"token readable by others: {line}"


def test_sigkill_of_the_controller_mid_download_then_rerun(lab, gateway):
    size = 96 * MiB
    with own_hub(gateway, seed=5, repos=["big/one:shards=1,shard_size=96MiB,small=false"],
                 faults=[{"kind": "stall", "offset": 70 * MiB, "stall_s": 600}]) as hub:
        sh(lab, "b300-lab", "rm -rf /srv/itest-models")
        extra = models_vars(hub, [("one", "big/one")], models_chunk_size_mb=4, models_connections=4,
                            models_stall_timeout=300, models_poll_interval=1)
        proc = start_playbook(lab, PLAYBOOK, extra, "b300-lab")
        try:
            deadline = time.monotonic() + 240
            done = 0
            while time.monotonic() < deadline and proc.poll() is None:
                out = sh(lab, "b300-lab", "cat /srv/itest-models/one/.hf_model/progress.json 2>/dev/null || echo {}",
                         check=False)
                done = json.loads(out or "{}").get("bytes_done", 0)
                if done >= 50 * MiB:
                    break
                time.sleep(0.5)
            assert proc.poll() is None and done >= 50 * MiB, f"download not caught midway ({done})"
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        served_before = hub.stats()["bytes"]
        hub.set_faults([])
        hub.reset()
        run = run_playbook(lab, PLAYBOOK, limit="b300-lab", extravars=extra)
        assert run.rc == 0, run.stdout[-4000:]
        result = run.result("Result of one", "b300-lab")
        assert result["took_over_pid"], "the rerun should have stopped the orphaned worker"
        refetched = hub.stats()["bytes"] - (size - result["bytes_resumed"])
        assert refetched <= (4 + 4) * 4 * MiB + 2, (refetched, served_before, result)  # in flight + queued writes
    digest = sh(lab, "b300-lab", "sha256sum /srv/itest-models/one/model-00001-of-00001.safetensors").split()[0]
    assert digest == json.loads(sh(lab, "b300-lab", "cat /srv/itest-models/one/.hf_model/manifest.json"))[
        "files"]["model-00001-of-00001.safetensors"]["sha256"]
