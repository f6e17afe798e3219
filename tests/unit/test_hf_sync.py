"""module_utils.hf_sync + hf_fetch end to end against the test Hub (its own process: hf_transfer holds the GIL).

A subset of the fault matrix (bench/bench_models.py runs >= 100 seeded trials): every run ends with every file
hash-correct or with a clear failure, and a corrupt file is never put in place or in the manifest.
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
from module_utils import hf_sync
from module_utils.hf_hub import HubError
from module_utils.hf_sync import SyncError, sync
from module_utils.hf_verify import Manifest

MiB = 1 << 20
REPOS = ["t/small:shards=2,shard_size=6MiB", "t/resume:shards=1,shard_size=48MiB,small=false",
         "t/lie:shards=1,hostile=size_lie", "t/dotdot:shards=1,hostile=dotdot"]


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


def tree_truth(hub, repo):
    """path -> (size, sha256 of the true bytes), fetched straight from the Hub with urllib."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    sha = hub.repos[repo]
    with opener.open(f"{hub.endpoint}/api/models/{repo}/tree/{sha}?recursive=true") as r:
        entries = json.loads(r.read())
    url = f"{hub.endpoint}/api/models/{repo}/tree/{sha}?recursive=true"
    entries = []
    while url:
        with opener.open(url) as r:
            entries += json.loads(r.read())
            link = r.headers.get("Link")
        url = link.split(";")[0].strip("<>") if link else None
    out = {}
    for e in entries:
        if e["type"] == "file":
            with opener.open(f"{hub.endpoint}/{repo}/resolve/{sha}/{e['path']}") as r:
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
    from module_utils import hf_fetch
    windows = []
    real = hf_fetch._QuietServer
    monkeypatch.setattr(hf_fetch, "_QuietServer", lambda *a: windows.append(a) or real(*a))
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
from module_utils.hf_sync import sync
print(json.dumps(sync(json.loads(sys.argv[1]))), flush=True)
"""


def _start_worker(p):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(p)], env=env, stdout=subprocess.PIPE,
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
    # chunks in flight + finished chunks whose last write tokio still had queued (see hf_fetch docstring)
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
    from module_utils.hf_fetch import start_writeback
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
