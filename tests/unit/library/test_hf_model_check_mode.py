"""Check mode of hf_model and of roles/models is truthful: changed (with files and bytes, per model) when a real run
would change something, not changed when everything is present and verified, and nothing is written.

The module runs as Ansible runs it on a host (library/hf_model.py with an argument file); the role runs through
ansible-playbook on this machine (connection local) against a test Hub in its own process.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab.testhub import HubProcess
from ansible.module_utils.hf.model import human_size, plan_message, sync
from tests.helpers.ansible_module import module_command

ROOT = Path(__file__).resolve().parents[3]
MiB = 1 << 20
REPOS = ["t/small:shards=2,shard_size=6MiB", "t/draft:shards=1,shard_size=2MiB"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubProcess(seed=17, repos=REPOS, page_size=4, cache_dir=str(tmp_path_factory.mktemp("hubcache"))) as h:
        yield h


@pytest.fixture(autouse=True)
def _reset(hub):
    hub.set_faults([])
    hub.reset()


def module_args(hub, dest, repo="t/small", **kw):
    args = {"repo_id": repo, "endpoint": hub.endpoint, "dest": str(dest), "free_space_margin_mb": 0,
            "chunk_size_mb": 1, "connections": 4, "stall_timeout": 10, "backoff": 0.1}
    args.update(kw)
    return args


def run_module(args, tmp_path, check_mode=False):
    """library/hf_model.py as Ansible runs it (argument spec, check mode flag), with the plain-python imports."""
    argfile = tmp_path / f"args-{time.monotonic_ns()}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode)}))
    proc = subprocess.run(module_command("hf_model", argfile),
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def snapshot(path):
    """Every entry under path with its size and mtime (what a write would change), but the module argument files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            if name.startswith("args-"):
                continue
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, path)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


MSG = re.compile(r"^check mode: would fetch (\d+) files?, ([0-9.]+ (?:bytes|KiB|MiB|GiB|TiB)) of (\S+) from (\S+)$")


def test_plan_message_names_files_bytes_model_and_endpoint():
    class F:
        def __init__(self, size):
            self.size = size
    gib = 1 << 30
    assert plan_message("Kimi-K2.6", "https://huggingface.co", [F(gib), F(gib // 5), F(0)], [], True) \
        == "check mode: would fetch 3 files, 1.2 GiB of Kimi-K2.6 from https://huggingface.co"
    assert plan_message("d", "http://h", [], [F(5 * MiB)], False) == \
        ("check mode: would hash and adopt 1 file present but not vouched for by the manifest (5.0 MiB) of d "
         "from http://h")
    assert plan_message("d", "http://h", [], [], True) == "check mode: would record the commit in the manifest of d " \
                                                          "from http://h"
    assert plan_message("d", "http://h", [], [], False, to_rehash=4).startswith("check mode: nothing to fetch for d")
    assert human_size(512) == "512 bytes" and human_size(3 * MiB + MiB // 2) == "3.5 MiB"


def test_module_check_mode_on_a_fresh_host_reports_changed_with_files_and_bytes_and_writes_nothing(hub, tmp_path):
    parent = tmp_path / "models"
    parent.mkdir()
    before = snapshot(tmp_path)
    r = run_module(module_args(hub, parent / "small", name="small"), tmp_path, check_mode=True)
    assert not r.get("failed"), r
    assert r["changed"] and r["would_change"]
    assert r["files_to_fetch"] == r["files_total"] and r["bytes_to_fetch"] == r["bytes_total"] > 12 * MiB
    m = MSG.match(r["msg"])
    assert m, r["msg"]
    assert int(m.group(1)) == r["files_to_fetch"] and m.group(2) == human_size(r["bytes_to_fetch"])
    assert m.group(3) == "small" and m.group(4) == hub.endpoint
    assert snapshot(tmp_path) == before and not (parent / "small").exists()
    assert hub.stats()["bytes"] == 0 and hub.stats()["api"].get("tree")  # the tree was read, no byte of a file


def test_module_check_mode_after_a_run_reports_no_change_and_touches_nothing(hub, tmp_path):
    dest = tmp_path / "m"
    real = run_module(module_args(hub, dest), tmp_path)
    assert real["changed"] and real["files_fetched"] == real["files_total"], real
    before = snapshot(dest)
    hub.reset()
    r = run_module(module_args(hub, dest), tmp_path, check_mode=True)
    assert not r["changed"] and not r["would_change"] and r["files_to_fetch"] == 0 and r["bytes_to_fetch"] == 0
    assert r["msg"].startswith("check mode: nothing to fetch for m from ")
    assert snapshot(dest) == before and hub.stats()["bytes"] == 0
    # verify=full rehashes in a real run, but a good tree is no change there either, nor in check mode
    full = run_module(module_args(hub, dest, verify="full"), tmp_path, check_mode=True)
    assert not full["changed"] and full["files_to_rehash"] == full["files_total"]
    assert "verify=full would rehash" in full["msg"]
    done = run_module(module_args(hub, dest, verify="full"), tmp_path)
    assert not done["changed"] and done["files_adopted"] == 0 and done["files_fetched"] == 0, done


def test_module_check_mode_counts_only_what_is_missing_or_unvouched(hub, tmp_path):
    dest = tmp_path / "m"
    sync(module_args(hub, dest))
    gone = dest / "model-00002-of-00002.safetensors"
    size = gone.stat().st_size
    gone.unlink()
    copied = dest / "sub" / "dir" / "nested.bin"
    data = copied.read_bytes()
    copied.unlink()
    copied.write_bytes(data)  # the right bytes, put there by hand: the manifest no longer vouches for them
    before = snapshot(dest)
    r = run_module(module_args(hub, dest), tmp_path, check_mode=True)
    assert r["changed"] and r["files_to_fetch"] == 1 and r["bytes_to_fetch"] == size
    assert r["would_fetch"] == [gone.name] and r["files_to_adopt"] == 1 and r["bytes_to_adopt"] == len(data)
    assert r["msg"] == ("check mode: would fetch 1 file, %s; hash and adopt 1 file present but not vouched for by "
                        "the manifest (%s) of m from %s" % (human_size(size), human_size(len(data)), hub.endpoint))
    assert snapshot(dest) == before
    real = run_module(module_args(hub, dest), tmp_path)
    assert real["changed"] and real["files_fetched"] == 1 and real["files_adopted"] == 1
    assert not run_module(module_args(hub, dest), tmp_path, check_mode=True)["changed"]


def test_module_check_mode_adoption_alone_is_a_change(hub, tmp_path):
    """Files complete on disk without a manifest (copied by hand): no byte to fetch, but a real run hashes and
    records them, so check mode says changed."""
    src = tmp_path / "src"
    sync(module_args(hub, src, repo="t/draft"))
    dest = tmp_path / "dest"
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".hf_model"))
    r = run_module(module_args(hub, dest, repo="t/draft"), tmp_path, check_mode=True)
    assert r["changed"] and r["files_to_fetch"] == 0 and r["files_to_adopt"] == r["files_total"]
    assert "hash and adopt" in r["msg"] and not (dest / ".hf_model").exists()
    hub.reset()
    real = run_module(module_args(hub, dest, repo="t/draft"), tmp_path)
    assert real["changed"] and real["files_adopted"] == real["files_total"] and hub.stats()["bytes"] == 0


# ---- the role, through ansible-playbook on this machine ----------------------------------------------------------

PLAY = [{"name": "models check mode", "hosts": "local", "gather_facts": False, "roles": ["models"]}]


class Run:
    def __init__(self, rc, events, stdout):
        self.rc, self.events, self.stdout = rc, events, stdout

    def result(self, task):
        """The task's result on localhost (a loop's result holds `results`)."""
        for ev in self.events:
            data = ev.get("event_data", {})
            if ev.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped") and \
                    data.get("task") == task:
                return data.get("res", {})
        raise AssertionError(f"task {task!r} did not run\n{self.stdout[-3000:]}")

    def changed_tasks(self):
        return [ev["event_data"]["task"] for ev in self.events
                if ev.get("event") == "runner_on_ok" and ev["event_data"].get("res", {}).get("changed")]

    def changed_count(self):
        for ev in reversed(self.events):
            if ev.get("event") == "playbook_on_stats":
                return ev["event_data"].get("changed", {}).get("localhost", 0)
        raise AssertionError("no stats")


def playbook(tmp_path, extravars, check=False):
    import ansible_runner
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump(PLAY))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0", "HF_TOKEN": "", "PYTHONPATH": str(ROOT)}
    pdd = tmp_path / f"runner-{time.monotonic_ns()}"
    pdd.mkdir()
    r = ansible_runner.run(private_data_dir=str(pdd), project_dir=str(ROOT), playbook=str(play),
                           inventory=f"[local]\nlocalhost ansible_connection=local "
                                     f"ansible_python_interpreter={sys.executable}\n",
                           extravars=extravars, cmdline="--check" if check else None, envvars=env, quiet=True,
                           timeout=600)
    return Run(r.rc, list(r.events), r.stdout.read() if r.stdout else "")


CHECK_FETCH = "Fetch each model (check mode - what a real run would fetch)"


def test_role_check_mode_is_truthful_before_and_after_a_real_run(hub, tmp_path):
    pytest.importorskip("ansible_runner")
    import importlib.metadata
    pins = yaml.safe_load((ROOT / "roles" / "models" / "defaults" / "main.yml").read_text())["models_tools_packages"]
    for pin in pins:  # the real run uses this venv as the tool venv: it must not need (and get) a pip install
        name, _, version = pin.partition("==")
        try:
            if importlib.metadata.version(name) != version:
                pytest.skip(f"this venv has {name} {importlib.metadata.version(name)}, the role pins {version}")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"this venv lacks {name}")
    root = tmp_path / "srv" / "models"
    tools = Path(sys.executable).parent.parent  # this venv has the pinned hf-transfer and huggingface-hub
    base = {"models_root": str(root), "models_hf_endpoint": hub.endpoint, "models_free_space_margin_mb": 0,
            "models_list": [{"name": "small", "repo_id": "t/small", "revision": "main"},
                            {"name": "draft", "repo_id": "t/draft", "revision": "main"}],
            "models_poll_interval": 1, "models_stall_timeout": 10, "models_async_timeout": 300,
            "models_chunk_size_mb": 1, "models_backoff": 0.1}
    fresh_venv = tmp_path / "opt" / "hf-tools"
    run = playbook(tmp_path, dict(base, models_tools_venv=str(fresh_venv)), check=True)
    assert run.rc == 0, run.stdout[-4000:]
    changed = run.changed_tasks()
    assert {"Create the tool venv", "Report the packages a real run would install into the tool venv (check mode)",
            "Create the models root", CHECK_FETCH} <= set(changed), changed
    per_model = {r["models_check_item"]["models_item"]["name"]: r for r in run.result(CHECK_FETCH)["results"]}
    for name in ("small", "draft"):
        r = per_model[name]
        assert r["changed"] and r["bytes_to_fetch"] == r["bytes_total"] > 0 and r["files_to_fetch"] == r["files_total"]
        assert MSG.match(r["msg"]) and f" of {name} from {hub.endpoint}" in r["msg"], r["msg"]
    assert not (tmp_path / "srv").exists() and not (tmp_path / "opt").exists()  # nothing written
    assert hub.stats()["bytes"] == 0

    run = playbook(tmp_path, dict(base, models_tools_venv=str(tools)))
    assert run.rc == 0, run.stdout[-4000:]
    for name in ("small", "draft"):
        manifest = json.loads((root / name / ".hf_model" / "manifest.json").read_text())
        assert len(manifest["files"]) >= 1 and len(manifest["revision"]) == 40

    hub.reset()
    run = playbook(tmp_path, dict(base, models_tools_venv=str(tools)), check=True)
    assert run.rc == 0, run.stdout[-4000:]
    assert run.changed_tasks() == [] and run.changed_count() == 0, run.changed_tasks()
    assert all(not r["changed"] and r["files_to_fetch"] == 0 for r in run.result(CHECK_FETCH)["results"])
    assert hub.stats()["bytes"] == 0


def test_role_refuses_a_directory_named_after_another_repository_before_anything(hub, tmp_path):
    """The hand deployment's lie: z-lab's public drafter in a directory named after the operator's own drafter. The
    preflight names the entry, its repository and the name it must have; nothing is read from the Hub or written."""
    pytest.importorskip("ansible_runner")
    root = tmp_path / "srv" / "models"
    run = playbook(tmp_path, {"models_root": str(root), "models_hf_endpoint": hub.endpoint,
                              "models_tools_venv": str(tmp_path / "opt" / "hf-tools"),
                              "models_list": [{"name": "small", "repo_id": "t/small", "revision": "main"},
                                              {"name": "Kimi-K2.6-DFlash-tmp-long", "repo_id": "t/draft",
                                               "revision": "main"}]})
    assert run.rc != 0
    failed = [ev["event_data"] for ev in run.events if ev.get("event") == "runner_on_failed"]
    assert [f["task"] for f in failed] == ["Each model directory names the repository it holds "
                                           "(module_utils/hf/model_dir.py)"], run.stdout[-3000:]
    msg = failed[0]["res"]["msg"]
    assert "'Kimi-K2.6-DFlash-tmp-long' holds t/draft" in msg and "must be named 'draft'" in msg, msg
    assert "'small'" not in msg and "Nothing was fetched" in msg
    assert not (tmp_path / "srv").exists() and not (tmp_path / "opt").exists()
    stats = hub.stats()
    assert stats["api"] == {} and stats["bytes"] == 0  # the Hub was never asked (its stats call is the one request)
