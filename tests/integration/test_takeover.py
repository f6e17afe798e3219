"""A hand-made deployment already serves on b300-lab: `site.yml -l b300` refuses it before any change, naming unit,
pid and port; handed over (takeover_units), the same run stops and disables it, adopts its weights (0 bytes from the
Hub) and its venv (verified, adopted instead of built: takeover_venv), serves ours, and a rerun changes nothing;
playbooks/takeover_revert.yml gives the host back.

The fixture makes b300-lab look like the operator's hosts: a root unit sglang-k26-ddtree.service serving the SGLang
stand-in on port 30001 from /root/venv (a real lab-flavour venv, moved there), its weights in /root/models/<repo name>
copied from the lab's test Hub.
"""
from __future__ import annotations

import base64
import io
import json
import tarfile
import urllib.request
from pathlib import Path

import pytest

from ansible.module_utils.hf.hub import file_url, hub_tree
from tests.helpers.playbook import run_playbook

LAB_NAME = "takeover"
ROOT = Path(__file__).resolve().parents[2]
HOST = "b300-lab"
OLD = "sglang-k26-ddtree.service"
REPOS = ("demo/Kimi-K2.6", "demo/Kimi-K2.6-DFlash")  # group_vars/lab/models.yml: deploy_model_repo, deploy_draft_model_repo
UNIT = """[Unit]
Description=Kimi K2.6 DDTree (by hand)
After=network-online.target

[Service]
Environment=SGLANG_STANDIN_LOAD_S=0.5 SGLANG_STANDIN_WARMUP_S=0.2 SGLANG_STANDIN_SHUTDOWN_S=1
ExecStart=/root/venv/bin/python -m sglang_standin.launch_server --model-path /root/models/Kimi-K2.6 \
--host 0.0.0.0 --port 30001 --trust-remote-code
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""
# a cheap witness of "nothing changed": what the cuda, venv, models and service plays would create or change first
WITNESS = ("ls -d /opt/sglang/venv /srv/models /etc/systemd/system/sglang.service /usr/local/cuda-13.0 2>/dev/null; "
           "sha256sum /var/lib/dpkg/status")
VENV, OLD_VENV = "/opt/sglang/venv", "/root/venv"
TAKEOVER = {"takeover_units": ["sglang-k26-*.service"], "takeover_venv": OLD_VENV}


def sh(lab, cmd, check=True):
    return lab.ssh(HOST, cmd, check=check, timeout=300).stdout.strip()


def push_tar(lab, files: dict, dest: str):
    """files {relative path: bytes} -> extracted under dest on the host."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, data in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    lab.ssh(HOST, f"mkdir -p {dest} && base64 -d | tar -xz -C {dest}", input=base64.b64encode(buf.getvalue()).decode(),
            timeout=300)


def hub_stats(endpoint):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(endpoint + "/_testhub/stats", timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def handmade(lab):
    """The operator's deployment: its venv is a real lab-flavour venv (built here by the venv play, then moved to
    /root/venv with its shebangs rewritten there and its digest, flag schema and fact removed: what an operator's venv
    has), its weights in /root/models, its root unit serving from both on port 30001."""
    endpoint = lab.state()["services"]["testhub"]["url"]
    built = run_playbook(lab, "playbooks/venv.yml", limit="b300", timeout=900)
    assert built.rc == 0, built.failures()
    sh(lab, f"rm -rf {OLD_VENV} && mv {VENV} {OLD_VENV} && rm -f {OLD_VENV}/.sglang-venv-digest "
            f"{OLD_VENV}/sglang-flag-schema.json /etc/ansible/facts.d/sglang_venv.fact && "
            f"grep -rlI {VENV} {OLD_VENV}/bin | xargs -r sed -i 's#{VENV}#{OLD_VENV}#g'")
    assert sh(lab, f"head -1 {OLD_VENV}/bin/pip").startswith(f"#!{OLD_VENV}/bin/python")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for repo in REPOS:
        sha, files = hub_tree(endpoint, repo, "main")
        blobs = {}
        for f in files:
            with opener.open(file_url(endpoint, repo, sha, f.path), timeout=60) as r:
                blobs[f.path] = r.read()
        push_tar(lab, blobs, f"/root/models/{repo.split('/')[1]}")
    push_tar(lab, {OLD: UNIT.encode()}, "/etc/systemd/system")
    sh(lab, f"chown -R root:root /etc/systemd/system/{OLD} /root/models && systemctl daemon-reload && "
            f"systemctl enable --now {OLD} && for i in $(seq 1 100); do "
            "/root/venv/bin/python -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:30001/health\", "
            "timeout=1)' 2>/dev/null && break; sleep 0.2; done")
    pid = sh(lab, f"systemctl show -p MainPID --value {OLD}")
    assert int(pid) > 0
    return {"endpoint": endpoint, "pid": pid}


def test_site_refuses_a_hand_made_deployment_before_any_change(lab, playbook, handmade):
    before = sh(lab, WITNESS, check=False)
    run = playbook("site.yml", limit="b300", timeout=600)
    assert run.rc != 0
    failed = [ev["event_data"] for ev in run.events if ev.get("event") == "runner_on_failed"]
    assert len(failed) == 1 and failed[0]["task"].startswith("Find other SGLang units"), run.failures()
    msg = failed[0]["res"]["msg"]
    for needle in (f"unit {OLD} (active/running, enabled, user root, pid {handmade['pid']})",
                   f"pid {handmade['pid']} (unit {OLD}, user root): listens on port 30001",
                   "sglang_standin.launch_server", "GPU: no nvidia-smi", "nothing was changed",
                   f'takeover_units": ["{OLD}"]', f"systemctl disable --now {OLD}"):
        assert needle in msg, (needle, msg)
    plays = {ev["event_data"].get("play") for ev in run.events if ev.get("event") == "runner_on_ok"}
    assert plays <= {"Another SGLang deployment on the host (refuse it, or take over what is handed over)"}, plays
    assert sh(lab, WITNESS, check=False) == before
    assert sh(lab, f"systemctl show -p MainPID --value {OLD}") == handmade["pid"]


def test_handed_over_it_converges_adopting_weights_and_venv_then_changes_nothing_then_reverts(lab, playbook, handmade):
    """Handed over with its venv (takeover_units, takeover_venv): the same site.yml run stops and disables the old
    unit, hard-links its weights (0 bytes from the Hub), verifies its venv and adopts it instead of building (fact
    method adopted, shebangs relocated to venv_path), serves ours from it; a rerun changes nothing; takeover_revert.yml
    moves the venv back, shebangs and all, and the old unit serves from it again."""
    served_before = hub_stats(handmade["endpoint"])["bytes"]
    run = playbook("site.yml", limit="b300", extravars=TAKEOVER, timeout=1500)
    assert run.rc == 0, run.failures() + "\n" + run.stdout[-3000:]
    assert hub_stats(handmade["endpoint"])["bytes"] == served_before  # 0 bytes of weights from the Hub
    adopted = run.results("Result of adopting Kimi-K2.6") + run.results("Result of adopting Kimi-K2.6-DFlash")
    assert [r["method"] for r in adopted] == ["hardlink", "hardlink"] and all(r["files_adopted"] > 0 for r in adopted)
    assert sh(lab, f"systemctl is-active {OLD}; systemctl is-enabled {OLD}", check=False).split() == \
        ["inactive", "disabled"]
    assert sh(lab, "systemctl is-active sglang.service") == "active"
    record = json.loads(sh(lab, "cat /var/lib/sglang-takeover/record.json"))
    assert [u["unit"] for u in record[-1]["units"]] == [OLD] and record[-1]["units"][0]["unit_file"] == UNIT
    assert record[-1]["units"][0]["main_pid"] == int(handmade["pid"])
    assert sh(lab, "stat -c %i /srv/models/Kimi-K2.6/config.json /root/models/Kimi-K2.6/config.json "
                   "| uniq | wc -l") == "1"
    # the venv: verified, adopted (renamed: same filesystem), not built
    checked = run.results("The old venv is the flavour's (python, SGLang pin, patch series, own flag schema) - verified")
    assert checked and checked[0]["verified"]["sglang_version"] == "0.5.11.post0+standin", checked
    build = run.results("Build the venv (skipped when the live venv matches the recipe and its recorded content)")
    assert build and not build[0]["built"] and build[0]["reason"].startswith("adopted venv"), build
    fact = json.loads(sh(lab, "cat /etc/ansible/facts.d/sglang_venv.fact"))
    assert fact["method"] == "adopted" and fact["adopted_from"] == OLD_VENV and fact["path"] == VENV, fact
    shebang, gone = sh(lab, f"head -1 {VENV}/bin/pip; test -e {OLD_VENV} || echo gone").split()
    assert shebang.startswith(f"#!{VENV}/bin/python") and gone == "gone"
    assert VENV in sh(lab, "systemctl show -p ExecStart --value sglang.service")
    assert record[-1]["venv"]["source"] == OLD_VENV and record[-1]["venv"]["method"] == "rename"

    again = playbook("site.yml", limit="b300", extravars=TAKEOVER, timeout=900)
    assert again.rc == 0, again.failures() + "\n" + again.stdout[-3000:]
    assert again.changed_count(HOST) == 0, again.stdout[-4000:]

    back = playbook("playbooks/takeover_revert.yml", limit="b300", timeout=300)
    assert back.rc == 0, back.failures()
    assert sh(lab, f"systemctl is-active {OLD}; systemctl is-enabled {OLD}; systemctl is-active sglang.service",
              check=False).split() == ["active", "enabled", "inactive"]
    shebang, gone = sh(lab, f"head -1 {OLD_VENV}/bin/pip; test -e {VENV} || echo gone", check=False).split()
    assert shebang.startswith(f"#!{OLD_VENV}/bin/python") and gone == "gone"
