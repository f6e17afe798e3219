"""ansible.module_utils.hf.model + fetcher end to end against the test Hub (its own process: hf_transfer holds the GIL).

A subset of the fault matrix (bench/bench_models.py runs >= 100 seeded trials): every run ends with every file
hash-correct or with a clear failure, and a corrupt file is never put in place or in the manifest. Dataset
repositories (repo_type dataset) go through the same code path, from the Hub's dataset routes.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.testhub import HubProcess
from ansible.module_utils.hf import model as hf_sync
from ansible.module_utils.hf.hub import HubError
from ansible.module_utils.hf.model import SyncError, sync
from ansible.module_utils.hf.verify import Manifest
from tests.helpers.ansible_module import ROOT, module_command

MiB = 1 << 20
DATASET = "t/sharegpt"  # README.md + sharegpt_mini.json (literal ShareGPT JSON, LFS) + one seeded LFS shard
REPOS = ["t/small:shards=2,shard_size=6MiB", "t/resume:shards=1,shard_size=48MiB,small=false",
         "t/lie:shards=1,hostile=size_lie", "t/dotdot:shards=1,hostile=dotdot",
         f"{DATASET}:type=dataset,shards=1,shard_size=3MiB"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubProcess(seed=11, repos=REPOS, page_size=4, cache_dir=str(tmp_path_factory.mktemp("hubcache"))) as h:
        yield h


@pytest.fixture(autouse=True)
def _reset(hub):
    hub.set_faults([])
    hub.reset()
    yield
    hub.set_faults([])


def params(hub, dest, repo="t/small", **kw):
    p = {"repo_id": repo, "endpoint": hub.endpoint, "dest": str(dest), "stall_timeout": 3, "backoff": 0.1,
         "backoff_max": 0.5, "free_space_margin_mb": 0, "chunk_size_mb": 1, "connections": 4}
    p.update(kw)
    return p


def tree_truth(hub, repo, repo_type="model"):
    """path -> (size, sha256 of the true bytes), fetched straight from the Hub with urllib."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    sha = hub.repos[repo]
    api = f"{hub.endpoint}/api/{repo_type}s/{repo}"
    files = f"{hub.endpoint}/{'datasets/' if repo_type == 'dataset' else ''}{repo}"
    with opener.open(f"{api}/tree/{sha}?recursive=true") as r:
        entries = json.loads(r.read())
    url = f"{api}/tree/{sha}?recursive=true"
    entries = []
    while url:
        with opener.open(url) as r:
            entries += json.loads(r.read())
            link = r.headers.get("Link")
        url = link.split(";")[0].strip("<>") if link else None
    out = {}
    for e in entries:
        if e["type"] == "file":
            with opener.open(f"{files}/resolve/{sha}/{e['path']}") as r:
                out[e["path"]] = (e["size"], hashlib.sha256(r.read()).hexdigest())
    return out


@pytest.fixture(scope="module")
def truth(hub):
    return tree_truth(hub, "t/small")


def assert_tree_correct(dest, truth):
    for path, (size, sha) in truth.items():
        data = (Path(dest) / path).read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == sha, path
    m = Manifest.load(str(Path(dest) / ".hf_model" / "manifest.json"))
    assert set(m.files) == set(truth)
    assert all(m.files[p]["sha256"] == truth[p][1] for p in truth)


def test_fetch_then_rerun_is_a_noop_without_hashing(hub, truth, tmp_path, monkeypatch):
    from ansible.module_utils.hf import window as hf_window
    windows = []
    real = hf_window._QuietServer
    monkeypatch.setattr(hf_window, "_QuietServer", lambda *a: windows.append(a) or real(*a))
    r = sync(params(hub, tmp_path / "m"))
    assert not windows  # nothing was resumed: the fill window was never bound
    assert r["changed"] and r["files_fetched"] == len(truth) and r["sha"] == hub.repos["t/small"]
    assert_tree_correct(tmp_path / "m", truth)
    assert not list((tmp_path / "m" / ".hf_model" / "parts").iterdir())
    hub.reset()
    hashed = []
    monkeypatch.setattr(hf_sync, "verify_files", lambda items, workers=None: hashed.append(items) or {})
    r = sync(params(hub, tmp_path / "m"))
    assert not r["changed"] and r["files_verified_by_manifest"] == len(truth) and not hashed
    assert hub.stats()["bytes"] == 0
    prog = json.loads((tmp_path / "m" / ".hf_model" / "progress.json").read_text())
    assert prog["state"] == "done" and prog["bytes_done"] == prog["bytes_total"]


def test_check_mode_reports_and_changes_nothing(hub, truth, tmp_path):
    r = sync(params(hub, tmp_path / "m"), check_mode=True)
    assert r["changed"] and r["files_to_fetch"] == len(truth)
    assert r["bytes_to_fetch"] == sum(s for s, _ in truth.values()) and r["space_ok"]
    assert not (tmp_path / "m").exists() and hub.stats()["bytes"] == 0


def test_local_corruption_full_verify_refetches_only_that_file(hub, truth, tmp_path):
    sync(params(hub, tmp_path / "m"))
    victim = tmp_path / "m" / "model-00001-of-00002.safetensors"
    st = victim.stat()
    with open(victim, "r+b") as f:
        f.seek(4242)
        b = f.read(1)
        f.seek(4242)
        f.write(bytes([b[0] ^ 0x55]))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only a rehash can tell
    hub.reset()
    assert not sync(params(hub, tmp_path / "m"))["changed"]  # quick trusts the manifest (documented)
    r = sync(params(hub, tmp_path / "m", verify="full"))
    assert r["changed"] and r["files_rehashed_bad"] == [victim.name] and r["files_fetched"] == 1
    by_path = hub.stats()["by_path"]
    assert list(by_path) == [f"t/small/{victim.name}"]
    assert truth[victim.name][0] <= by_path[f"t/small/{victim.name}"] <= truth[victim.name][0] + 2  # + 2 probe bytes
    assert_tree_correct(tmp_path / "m", truth)


@pytest.mark.parametrize("fault", [
    {"kind": "drop", "path": "model-00001*", "offset": 3 * MiB},
    {"kind": "status", "status": 503, "times": 3},
    {"kind": "429", "retry_after": 0, "times": 2},
    {"kind": "flip", "path": "model-00002*", "offset": 5 * MiB + 7},
    {"kind": "norange", "path": "sub/*"},
    {"kind": "truncate", "path": "model-00002*", "offset": 2 * MiB + 5},
    {"kind": "stall", "path": "model-00001*", "offset": 4 * MiB, "stall_s": 30},
], ids=lambda f: f["kind"])
def test_fault_matrix_subset_ends_correct(hub, truth, tmp_path, fault):
    hub.set_faults([fault])
    r = sync(params(hub, tmp_path / "m"))
    assert hub.stats()["faults"], "the fault never fired"
    assert_tree_correct(tmp_path / "m", truth)
    if fault["kind"] == "flip":
        assert r["hash_mismatches"] == 1
    if fault["kind"] == "stall":
        assert r["stalls"] >= 1


def test_persistent_corruption_fails_naming_both_hashes_and_never_lands(hub, truth, tmp_path):
    hub.set_faults([{"kind": "flip", "path": "model-00002*", "offset": 100, "times": -1}])
    with pytest.raises(SyncError) as e:
        sync(params(hub, tmp_path / "m", hash_retries=1))
    msg = str(e.value)
    assert "model-00002-of-00002.safetensors" in msg and truth["model-00002-of-00002.safetensors"][1] in msg
    assert msg.count("expected") == 1 and "got " in msg and e.value.evidence["failure"] == "hash"
    assert not (tmp_path / "m" / "model-00002-of-00002.safetensors").exists()
    m = Manifest.load(str(tmp_path / "m" / ".hf_model" / "manifest.json"))
    assert "model-00002-of-00002.safetensors" not in m.files
    prog = json.loads((tmp_path / "m" / ".hf_model" / "progress.json").read_text())
    assert prog["state"] == "failed" and "mismatch" in prog["error"]


def test_bounded_retries_then_failure_names_file_bytes_and_error(hub, tmp_path):
    hub.set_faults([{"kind": "status", "status": 502, "path": "model-00001*", "times": -1}])
    with pytest.raises(SyncError) as e:
        sync(params(hub, tmp_path / "m", retries=2, inner_retries=0))
    ev = e.value.evidence
    assert ev["file"] == "model-00001-of-00002.safetensors" and "502" in ev["last_error"]
    assert "giving up after 3 attempt(s)" in str(e.value) and "bytes on disk" in str(e.value)


def test_server_lying_about_sizes_is_refused(hub, tmp_path):
    with pytest.raises(SyncError) as e:
        sync(params(hub, tmp_path / "m", repo="t/lie"))
    assert "size lie" in str(e.value) and e.value.evidence["file"] == "sub/dir/nested.bin"  # the file that lies
    assert not (tmp_path / "m" / "sub" / "dir" / "nested.bin").exists()


def test_hostile_tree_is_refused_before_any_change(hub, tmp_path):
    with pytest.raises(HubError) as e:
        sync(params(hub, tmp_path / "m", repo="t/dotdot"))
    assert e.value.code == "HostileEntry"
    assert not (tmp_path / "m").exists() and hub.stats()["bytes"] == 0


def test_preflight_refuses_a_too_small_disk(hub, truth, tmp_path, monkeypatch):
    monkeypatch.setattr(hf_sync, "free_bytes", lambda path: 10 * MiB)
    with pytest.raises(SyncError) as e:
        sync(params(hub, tmp_path / "m", free_space_margin_mb=1))
    assert "not enough space" in str(e.value) and e.value.evidence["free_bytes"] == 10 * MiB
    assert not (tmp_path / "m").exists() and hub.stats()["bytes"] == 0


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a size-limited tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_enospc_mid_download_fails_cleanly(hub, small_fs, monkeypatch):
    monkeypatch.setattr(hf_sync, "free_bytes", lambda path: 1 << 40)  # get past the preflight on purpose
    with pytest.raises(SyncError) as e:
        sync(params(hub, small_fs / "m", retries=1))
    assert e.value.evidence["failure"] == "enospc" and "No space left" in str(e.value), str(e.value)
    assert e.value.evidence["file"], "the failure must name the file it was writing"
    m = Manifest.load(str(small_fs / "m" / ".hf_model" / "manifest.json"))
    for path, rec in m.files.items():  # whatever landed is verified
        assert hashlib.sha256((small_fs / "m" / path).read_bytes()).hexdigest() == rec["sha256"]


WORKER = """
import json, sys
import ansible.module_utils as mu
mu.__path__.append(sys.argv.pop(1))
from ansible.module_utils.hf.model import sync
print(json.dumps(sync(json.loads(sys.argv[1]))), flush=True)
"""


def _start_worker(p):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    return subprocess.Popen([sys.executable, "-c", WORKER, str(ROOT / "module_utils"), json.dumps(p)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_progress(dest, pred, timeout=60):
    path = Path(dest) / ".hf_model" / "progress.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            p = json.loads(path.read_text())
            if pred(p):
                return p
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"progress never matched; last: {path.read_text() if path.exists() else None}")


def test_sigkill_mid_download_then_rerun_refetches_within_the_bound(hub, tmp_path):
    size = 48 * MiB
    p = params(hub, tmp_path / "m", repo="t/resume", chunk_size_mb=2, connections=4, stall_timeout=120, lanes=1)
    hub.set_faults([{"kind": "stall", "offset": 40 * MiB, "stall_s": 120}])  # holds one chunk so we kill mid-way
    proc = _start_worker(p)
    try:
        _wait_progress(p["dest"], lambda x: x["bytes_done"] >= 30 * MiB)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    first = hub.stats()["bytes"]
    assert first < size
    hub.set_faults([])
    hub.reset()
    r = sync(p)
    assert r["files_fetched"] == 1 and r["bytes_resumed"] > 0
    refetched = hub.stats()["bytes"] - (size - r["bytes_resumed"])
    # chunks in flight + finished chunks whose last write tokio still had queued (see the hf/file_task.py docstring)
    bound = (p["connections"] + 4) * p["chunk_size_mb"] * MiB
    assert hub.stats()["bytes"] <= size - r["bytes_resumed"] + bound, (refetched, r)
    data = (tmp_path / "m" / "model-00001-of-00001.safetensors").read_bytes()
    assert hashlib.sha256(data).hexdigest() == tree_truth(hub, "t/resume")["model-00001-of-00001.safetensors"][1]


def test_rerun_takes_over_from_a_live_worker(hub, tmp_path):
    p = params(hub, tmp_path / "m", repo="t/resume", chunk_size_mb=2, connections=4, stall_timeout=120, lanes=1)
    hub.set_faults([{"kind": "stall", "offset": 20 * MiB, "stall_s": 120}])
    proc = _start_worker(p)
    try:
        running = _wait_progress(p["dest"], lambda x: x["bytes_done"] >= 8 * MiB)
        hub.set_faults([])
        r = sync(dict(p, lock_timeout=20))
        assert r["took_over_pid"] == running["pid"] and r["files_fetched"] == 1
        assert proc.wait(timeout=20) != 0
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_start_writeback_asks_the_kernel_and_leaves_bytes_alone(tmp_path):
    from ansible.module_utils.hf.sparse import start_writeback
    p = tmp_path / "f"
    data = os.urandom(1 << 20)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        assert start_writeback(fd) is True  # sync_file_range(2) accepted the call (a wrong binding gets EINVAL)
        assert start_writeback(-1) is False
    finally:
        os.close(fd)
    assert p.read_bytes() == data


# ---- dataset repositories (repo_type dataset) ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def dtruth(hub):
    return tree_truth(hub, DATASET, repo_type="dataset")


def dparams(hub, dest, **kw):
    return params(hub, dest, repo=DATASET, repo_type="dataset", **kw)


def _manifest_json(dest):
    return json.loads((Path(dest) / ".hf_model" / "manifest.json").read_text())


def test_dataset_is_fetched_verified_recorded_and_a_rerun_moves_nothing(hub, dtruth, tmp_path, monkeypatch):
    dest = tmp_path / "d"
    assert hub.repo_types[DATASET] == "dataset" and set(dtruth) == {
        "README.md", "sharegpt_mini.json", "data/shard-00001-of-00001.bin"}
    plan_ = sync(dparams(hub, dest), check_mode=True)
    assert plan_["changed"] and plan_["repo_type"] == "dataset" and plan_["files_to_fetch"] == len(dtruth)
    assert not dest.exists() and hub.stats()["bytes"] == 0
    r = sync(dparams(hub, dest))
    assert r["changed"] and r["repo_type"] == "dataset" and r["sha"] == hub.repos[DATASET]
    assert r["files_fetched"] == len(dtruth) and r["hash_mismatches"] == 0
    assert_tree_correct(dest, dtruth)
    m = _manifest_json(dest)
    assert m["repo_type"] == "dataset" and m["repo_id"] == DATASET and m["revision"] == hub.repos[DATASET]
    # the LFS sha256 from the tree is what the manifest vouches for; README.md (not LFS) was checked by git blob sha1
    assert m["files"]["sharegpt_mini.json"]["sha256"] == dtruth["sharegpt_mini.json"][1]
    conversations = json.loads((dest / "sharegpt_mini.json").read_text())
    assert len(conversations) >= 20 and len({c["id"] for c in conversations}) == len(conversations)
    for c in conversations:
        turns = c["conversations"]
        assert len(turns) >= 2 and len(turns) % 2 == 0
        assert [t["from"] for t in turns] == ["human", "gpt"] * (len(turns) // 2)
        assert all(isinstance(t["value"], str) and t["value"].strip() for t in turns)
    hub.reset()
    hashed = []
    monkeypatch.setattr(hf_sync, "verify_files", lambda items, workers=None: hashed.append(items) or {})
    again = sync(dparams(hub, dest), check_mode=True)
    assert not again["changed"] and again["files_to_fetch"] == 0 and again["files_to_hash"] == 0
    r = sync(dparams(hub, dest))
    assert not r["changed"] and r["files_verified_by_manifest"] == len(dtruth) and r["files_fetched"] == 0
    assert not hashed and hub.stats()["bytes"] == 0
    assert _manifest_json(dest)["repo_type"] == "dataset"


def test_dataset_corrupt_file_is_refetched(hub, dtruth, tmp_path):
    dest = tmp_path / "d"
    sync(dparams(hub, dest))
    victim = dest / "sharegpt_mini.json"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[100] ^= 0x20
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size and mtime: only a rehash can tell
    hub.reset()
    r = sync(dparams(hub, dest, verify="full"))
    assert r["changed"] and r["files_rehashed_bad"] == ["sharegpt_mini.json"] and r["files_fetched"] == 1
    assert list(hub.stats()["by_path"]) == [f"{DATASET}/sharegpt_mini.json"]
    assert_tree_correct(dest, dtruth)
    victim.write_bytes(b"[]\n")  # a different size: quick mode sees it without hashing
    hub.reset()
    r = sync(dparams(hub, dest))
    assert r["changed"] and r["files_fetched"] == 1 and r["fetched"] == ["sharegpt_mini.json"]
    assert_tree_correct(dest, dtruth)


@pytest.mark.parametrize("use_hf_hub", [False, True], ids=["stdlib", "huggingface_hub"])
@pytest.mark.parametrize("repo,asked,actual", [(DATASET, "model", "dataset"), ("t/small", "dataset", "model")],
                         ids=["dataset-as-model", "model-as-dataset"])
def test_repo_asked_for_under_the_wrong_type_is_not_found_naming_the_type(hub, tmp_path, repo, asked, actual,
                                                                          use_hf_hub):
    for check_mode in (True, False):
        with pytest.raises(HubError) as e:
            sync(params(hub, tmp_path / "m", repo=repo, repo_type=asked, use_hf_hub=use_hf_hub),
                 check_mode=check_mode)
        msg = str(e.value)
        assert e.value.code == "RepoNotFound" and e.value.status == 404
        assert f"{asked} repository {repo} not found" in msg and f"repo_type: {actual}" in msg, msg
    assert not (tmp_path / "m").exists() and hub.stats()["bytes"] == 0


@pytest.mark.parametrize("bad", ["space", "datasets", "Dataset", "", 1])
def test_invalid_repo_type_is_refused_before_anything(hub, tmp_path, bad):
    with pytest.raises(HubError) as e:
        sync(params(hub, tmp_path / "m", repo=DATASET, repo_type=bad))
    assert e.value.code == "BadInput" and "invalid repo_type" in str(e.value) and "model, dataset" in str(e.value)
    stats = hub.stats()
    assert not (tmp_path / "m").exists() and stats["api"] == {} and stats["bytes"] == 0


def test_dataset_through_huggingface_hub_passes_repo_type(hub, dtruth, tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    calls = []
    real_info, real_tree = HfApi.repo_info, HfApi.list_repo_tree

    def repo_info(self, repo_id, **kw):
        calls.append(("repo_info", repo_id, kw.get("repo_type")))
        return real_info(self, repo_id, **kw)

    def list_repo_tree(self, repo_id, *a, **kw):
        calls.append(("list_repo_tree", repo_id, kw.get("repo_type")))
        return real_tree(self, repo_id, *a, **kw)

    monkeypatch.setattr(HfApi, "repo_info", repo_info)
    monkeypatch.setattr(HfApi, "list_repo_tree", list_repo_tree)
    r = sync(dparams(hub, tmp_path / "d", use_hf_hub=True))
    assert calls == [("repo_info", DATASET, "dataset"), ("list_repo_tree", DATASET, "dataset")]
    assert r["files_fetched"] == len(dtruth) and r["sha"] == hub.repos[DATASET]
    assert_tree_correct(tmp_path / "d", dtruth)
    assert _manifest_json(tmp_path / "d")["repo_type"] == "dataset"
    plain = sync(dparams(hub, tmp_path / "d", use_hf_hub=False), check_mode=True)
    assert not plain["changed"] and plain["files_verified_by_manifest"] == len(dtruth)


def test_a_model_manifest_without_repo_type_stays_a_models(hub, truth, tmp_path):
    """Manifests written before repo_type was recorded belong to models: a rerun is no change and keeps every file."""
    dest = tmp_path / "m"
    sync(params(hub, dest))
    path = dest / ".hf_model" / "manifest.json"
    old = _manifest_json(dest)
    assert old["repo_type"] == "model"
    del old["repo_type"]
    path.write_text(json.dumps(old))
    hub.reset()
    assert not sync(params(hub, dest), check_mode=True)["changed"]
    r = sync(params(hub, dest))
    assert not r["changed"] and r["repo_type"] == "model" and hub.stats()["bytes"] == 0
    assert _manifest_json(dest)["repo_type"] == "model"


def test_a_manifest_of_another_repo_type_is_a_change_in_check_mode_too(hub, dtruth, tmp_path):
    dest = tmp_path / "d"
    sync(dparams(hub, dest))
    path = dest / ".hf_model" / "manifest.json"
    path.write_text(json.dumps(dict(_manifest_json(dest), repo_type="model")))
    hub.reset()
    plan_ = sync(dparams(hub, dest), check_mode=True)
    assert plan_["changed"] and plan_["files_to_fetch"] == 0 and _manifest_json(dest)["repo_type"] == "model"
    r = sync(dparams(hub, dest))
    assert r["changed"] and r["files_fetched"] == 0 and hub.stats()["bytes"] == 0
    assert _manifest_json(dest)["repo_type"] == "dataset"
    assert not sync(dparams(hub, dest))["changed"]


def _run_module(args, tmp_path, check_mode=False):
    """library/hf_model.py as Ansible runs it on the host (argument spec included), with the plain-python imports."""
    root = Path(__file__).resolve().parents[3]
    argfile = tmp_path / f"args-{time.monotonic_ns()}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode)}))
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run(module_command("hf_model", argfile, root), env=env,
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_module_fetches_a_dataset_and_refuses_another_type(hub, dtruth, tmp_path):
    dest = tmp_path / "d"
    args = {"repo_id": DATASET, "repo_type": "dataset", "endpoint": hub.endpoint, "dest": str(dest),
            "free_space_margin_mb": 0, "chunk_size_mb": 1, "connections": 4, "stall_timeout": 10}
    bad = _run_module(dict(args, repo_type="space"), tmp_path)
    assert bad["failed"] and "repo_type" in bad["msg"] and "model, dataset" in bad["msg"]
    wrong = _run_module(dict(args, repo_type="model"), tmp_path, check_mode=True)
    assert wrong["failed"] and wrong["error_code"] == "RepoNotFound" and "model repository" in wrong["msg"]
    assert not dest.exists() and hub.stats()["bytes"] == 0
    planned = _run_module(args, tmp_path, check_mode=True)
    assert planned["changed"] and planned["repo_type"] == "dataset" and planned["files_to_fetch"] == len(dtruth)
    assert not dest.exists()
    r = _run_module(args, tmp_path)
    assert r["changed"] and r["repo_type"] == "dataset" and r["files_fetched"] == len(dtruth), r
    assert_tree_correct(dest, dtruth)
    assert _manifest_json(dest)["repo_type"] == "dataset"
    again = _run_module(args, tmp_path)
    assert not again["changed"] and again["files_verified_by_manifest"] == len(dtruth)
