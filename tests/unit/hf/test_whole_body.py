"""A server that ignores Range (answers a ranged GET with 200 and the whole file, as some proxies and caches do),
sometimes or always: the download still ends complete and sha256-verified, in bounded memory, and the run reports
how many answers ignored Range. A 200 whose Content-Length is not the tree's size is refused.

The test Hub runs in its own process (ansible.module_utils.hf.fetcher lanes and the verifier share this one); its fault
`ignore_range` is tested in-process first.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lab.testhub import HubProcess, TestHub
from ansible.module_utils.hf import watchdog
from ansible.module_utils.hf.file_task import FileTask
from ansible.module_utils.hf.sparse import holes
from ansible.module_utils.hf.transfer_job import Job
from ansible.module_utils.hf.upstream import Upstream
from ansible.module_utils.hf.whole_body import prefer_whole_body
from ansible.module_utils.hf.window import Window
from ansible.module_utils.hf.hub import list_tree
from ansible.module_utils.hf.model import SyncError, sync
from ansible.module_utils.hf.verify import Manifest

MiB = 1 << 20
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
REPOS = ["t/small:shards=2,shard_size=6MiB", "t/big:shards=1,shard_size=48MiB,small=false"]


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


# ---- the test Hub's fault -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    with TestHub(seed=5, repos={"x/y": {}}, cache_dir=tmp_path_factory.mktemp("hubcache-local")) as h:
        yield h


def test_ignore_range_fault_answers_only_ranged_gets_with_the_whole_file(local_hub):
    hub = local_hub
    f = hub.repos["x/y"].file("tokenizer/tokenizer.json")
    url = f"{hub.endpoint}/x/y/resolve/main/tokenizer/tokenizer.json"
    whole = get(url)[2]
    assert len(whole) == f.size
    hub.set_faults([{"kind": "ignore_range", "times": 2}])
    assert get(url)[0] == 200 and hub.faults[0]["times"] == 2  # an unranged GET is no match: no trigger used
    status, headers, body = get(url, {"Range": "bytes=100-199"})
    assert status == 200 and body == whole and int(headers["Content-Length"]) == f.size
    assert "Content-Range" not in headers
    assert get(url, {"Range": "bytes=0-0"})[0] == 200
    status, headers, body = get(url, {"Range": "bytes=100-199"})  # the two triggers are spent
    assert status == 206 and body == whole[100:200] and headers["Content-Range"] == f"bytes 100-199/{f.size}"
    hub.set_faults([{"kind": "ignore_range", "times": -1, "offset": 5000}])
    assert get(url, {"Range": "bytes=0-999"})[0] == 206  # does not cover the offset
    for _ in range(3):
        assert get(url, {"Range": "bytes=4000-5999"})[0] == 200
    assert hub.faults[0]["times"] == -1
    kinds = [x["kind"] for x in hub.snapshot()["faults"]]
    assert kinds.count("ignore_range") == 5


def test_ignore_range_size_delta_and_a_flaky_link_behind_it(local_hub):
    hub = local_hub
    url = f"{hub.endpoint}/x/y/resolve/main/tokenizer/tokenizer.json"
    whole = get(url)[2]
    hub.set_faults([{"kind": "ignore_range", "size_delta": 1000}])
    status, headers, body = get(url, {"Range": "bytes=10-19"})
    assert status == 200 and int(headers["Content-Length"]) == len(whole) + 1000 and body == whole + b"\0" * 1000
    hub.set_faults([{"kind": "ignore_range", "size_delta": -1000}])
    status, headers, body = get(url, {"Range": "bytes=10-19"})
    assert status == 200 and int(headers["Content-Length"]) == len(whole) - 1000 and body == whole[:-1000]
    hub.set_faults([{"kind": "ignore_range"}, {"kind": "flip", "offset": 7}])
    status, _, body = get(url, {"Range": "bytes=5000-5009"})  # the flip at 7 applies to the whole body
    assert status == 200 and len(body) == len(whole) and body[7] == whole[7] ^ 0xFF and body[8:] == whole[8:]
    assert [x["kind"] for x in hub.snapshot()["faults"]][-2:] == ["ignore_range", "flip"]
    hub.set_faults([{"kind": "norange"}])  # the older name
    assert get(url, {"Range": "bytes=10-19"})[0] == 200


# ---- the hole bookkeeping that decides slice vs whole body --------------------------------------------------------

def test_prefer_whole_body_counts_bytes_read(tmp_path):
    path = tmp_path / "f"
    size = 16 * MiB
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert holes(fd, size) == [(0, size - 1)]
        assert prefer_whole_body(fd, size, 0, MiB - 1)  # a fresh file: the body is every missing byte (tie -> whole)
        assert prefer_whole_body(fd, size, 8 * MiB, 9 * MiB - 1)
        os.pwrite(fd, b"x" * (14 * MiB), 2 * MiB)  # holes: [0, 2M)
        assert holes(fd, size) == [(0, 2 * MiB - 1)]
        assert prefer_whole_body(fd, size, MiB, 2 * MiB - 1)  # the body reads 2 MiB, the slice 2 + the other 1 MiB
        os.pwrite(fd, b"x" * MiB, 0)  # holes: [1M, 2M) only
        assert prefer_whole_body(fd, size, MiB, 2 * MiB - 1)  # 2 MiB read either way: a tie goes to the body
        fd2 = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd2, size)
            for start in (0, 2 * MiB):  # holes [1M, 2M) and [15M, 16M): the slice reads 2M + 1M, the body 16M
                os.pwrite(fd2, b"y" * (MiB if start == 0 else 13 * MiB), start)
            assert holes(fd2, size) == [(MiB, 2 * MiB - 1), (15 * MiB, size - 1)]
            assert not prefer_whole_body(fd2, size, MiB, 2 * MiB - 1)
            assert prefer_whole_body(fd2, size, 15 * MiB, size - 1)  # the last hole: 16M vs 16M + 1M
        finally:
            os.close(fd2)
    finally:
        os.close(fd)


# ---- downloads through a Hub that ignores Range -------------------------------------------------------------------

@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubProcess(seed=13, repos=REPOS, page_size=4, cache_dir=str(tmp_path_factory.mktemp("hubcache"))) as h:
        yield h


@pytest.fixture(autouse=True)
def _reset(request):
    if "hub" not in request.fixturenames:
        yield
        return
    hub = request.getfixturevalue("hub")
    hub.set_faults([])
    hub.set_link(0, 0)
    hub.reset()
    yield
    hub.set_faults([])
    hub.set_link(0, 0)


def params(hub, dest, repo="t/small", **kw):
    p = {"repo_id": repo, "endpoint": hub.endpoint, "dest": str(dest), "stall_timeout": 3, "backoff": 0.1,
         "backoff_max": 0.5, "free_space_margin_mb": 0, "chunk_size_mb": 1, "connections": 4}
    p.update(kw)
    return p


def truth_of(hub, repo):
    """path -> (size, sha256 of the true bytes), read straight from the Hub."""
    sha = hub.repos[repo]
    out = {}
    for f in list_tree(hub.endpoint, repo, sha, use_hf_hub=False):
        data = get(f"{hub.endpoint}/{repo}/resolve/{sha}/{f.path}")[2]
        out[f.path] = (f.size, hashlib.sha256(data).hexdigest())
    return out


@pytest.fixture(scope="module")
def truth(hub):
    return truth_of(hub, "t/small")


def assert_verified(dest, truth):
    for path, (size, sha) in truth.items():
        data = (Path(dest) / path).read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == sha, path
    m = Manifest.load(str(Path(dest) / ".hf_model" / "manifest.json"))
    assert set(m.files) == set(truth) and all(m.files[p]["sha256"] == truth[p][1] for p in truth)
    assert not list((Path(dest) / ".hf_model" / "parts").iterdir())


def progress(dest):
    return json.loads((Path(dest) / ".hf_model" / "progress.json").read_text())


def test_server_ignoring_range_twice_still_ends_verified(hub, truth, tmp_path):
    hub.set_faults([{"kind": "ignore_range", "times": 2}])
    r = sync(params(hub, tmp_path / "m"))
    assert [x["kind"] for x in hub.stats()["faults"]] == ["ignore_range"] * 2
    assert_verified(tmp_path / "m", truth)
    assert r["range_ignored"] == 2 and len(r["range_ignored_files"]) == 2 and r["whole_body_streams"] == 2
    assert "ignored Range 2 times" in r["msg"]
    assert progress(tmp_path / "m")["range_ignored"] == 2
    # the two whole bodies were used, not thrown away: every byte left the server once (+ 1-byte probes)
    total = sum(size for size, _ in truth.values())
    assert total <= hub.stats()["bytes"] <= total + len(truth)


def test_server_ignoring_range_on_every_request_completes_one_stream_per_file(hub, truth, tmp_path):
    hub.set_faults([{"kind": "ignore_range", "times": -1}])
    r = sync(params(hub, tmp_path / "m", lanes=2))
    assert_verified(tmp_path / "m", truth)
    nonempty = [p for p, (size, _) in truth.items() if size]
    # each file's probe was answered with the whole file, and that answer was the download: no loop, no retry
    assert r["range_ignored"] == len(nonempty) and sorted(r["range_ignored_files"]) == sorted(nonempty)
    assert r["whole_body_streams"] == len(nonempty)
    assert r["transfer_failures"] == 0 and r["hash_mismatches"] == 0
    assert hub.stats()["bytes"] == sum(size for size, _ in truth.values())
    assert r["changed"] and r["files_fetched"] == len(truth)
    again = sync(params(hub, tmp_path / "m"))
    assert not again["changed"] and again["range_ignored"] == 0


def test_whole_body_to_a_direct_chunk_then_to_the_window(hub, truth, tmp_path):
    """The probe is honoured, then hf_transfer's own chunk covering 3 MiB gets the whole file (it writes it at the
    chunk's offset: the file outgrows the tree size and is discarded), then the window's forwarded hole gets it
    again (a fresh file: the whole body fills it)."""
    victim = "model-00001-of-00002.safetensors"
    hub.set_faults([{"kind": "ignore_range", "path": victim, "offset": 3 * MiB + 5, "times": 2}])
    r = sync(params(hub, tmp_path / "m"))
    assert [x["kind"] for x in hub.stats()["faults"]] == ["ignore_range"] * 2
    assert_verified(tmp_path / "m", truth)
    assert r["range_ignored"] == 2 and r["range_ignored_files"] == [victim]
    # slice or whole body for the window's hole, depending on which chunks hf_transfer had already fetched
    total, size = sum(n for n, _ in truth.values()), truth[victim][0]
    assert r["whole_body_streams"] in (0, 1) and r["bytes_fetched"] <= total + 2 * size + MiB  # no loop, no O(n^2)
    assert r["hash_mismatches"] == 0  # the corrupt partial file was never hashed as a candidate
    assert "past the tree" in progress(tmp_path / "m")["last_error"]


def _seed_partial(hub, dest, repo, path, keep):
    """Lay down an interrupted run's partial file of `path`: the true bytes of the `keep` ranges, holes elsewhere."""
    sha = hub.repos[repo]
    remote = [f for f in list_tree(hub.endpoint, repo, sha, use_hf_hub=False) if f.path == path][0]
    data = get(f"{hub.endpoint}/{repo}/resolve/{sha}/{path}")[2]
    t = FileTask(remote, str(dest), str(Path(dest) / ".hf_model" / "parts"))
    t.load()
    fd = os.open(t.data, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for a, b in keep:
            os.pwrite(fd, data[a:b], a)
    finally:
        os.close(fd)
    return remote


def test_window_cuts_a_slice_or_lets_the_whole_body_fill_the_file(hub, tmp_path):
    """The fill window alone (no hf_transfer: requests made here, one at a time), so the holes at each decision are
    known: a whole body for hole [1M, 2M) while [5M, 6M) is open too -> the slice (2 MiB read, not 6); a whole body
    for the last hole [5M, 6M) while [1M, 2M) is open -> the body fills both (6 MiB, not 6 + 1), and the request gets
    no answer (hf_transfer's lane would be retired)."""
    victim = "model-00001-of-00002.safetensors"  # 6 MiB
    sha = hub.repos["t/small"]
    data = get(f"{hub.endpoint}/t/small/resolve/{sha}/{victim}")[2]
    remote = _seed_partial(hub, tmp_path / "m", "t/small", victim, [(0, MiB), (2 * MiB, 5 * MiB)])
    t = FileTask(remote, str(tmp_path / "m"), str(tmp_path / "m" / ".hf_model" / "parts"))
    t.prepare()
    upstream = Upstream(None, timeout=10)
    t.data_url = upstream.locate(f"{hub.endpoint}/t/small/resolve/{sha}/{victim}", remote.size)
    events = []

    def notify(kind, job, info):
        events.append((kind, info))
        if kind == "takeover":
            job.retired.set()  # what the fetcher does once it killed the lane

    window = Window(upstream, 10, notify=notify)
    job = Job(1, t, "fill")
    job.fd = os.open(t.data, os.O_RDONLY)
    window.add(job)
    try:
        hub.set_faults([{"kind": "ignore_range", "path": victim, "offset": MiB + 7}])
        status, headers, body = get(window.url(job), {"Range": f"bytes={MiB}-{2 * MiB - 1}"})
        assert status == 206 and headers["Content-Range"] == f"bytes {MiB}-{2 * MiB - 1}/{remote.size}"
        assert body == data[MiB:2 * MiB]
        assert events == [("range_ignored", (MiB, 2 * MiB - 1))] and job.mode == "fill"
        # the handler counts after each write, just after the answer reached us: wait for the count (bounded, never
        # a guess at how long it takes: 60 s only ends a run that is broken)
        deadline = time.monotonic() + 60
        while job.received < 2 * MiB and time.monotonic() < deadline:
            time.sleep(0.01)
        assert job.received == 2 * MiB  # 1 MiB read and dropped, 1 MiB passed on; the rest was never read
        assert holes(job.fd, remote.size) == [(MiB, 2 * MiB - 1), (5 * MiB, 6 * MiB - 1)]  # hf_transfer writes

        hub.set_faults([{"kind": "ignore_range", "path": victim, "offset": 5 * MiB + 7}])
        with pytest.raises((urllib.error.URLError, OSError, http.client.HTTPException)):
            get(window.url(job), {"Range": f"bytes={5 * MiB}-{6 * MiB - 1}"})
        assert [k for k, _ in events[1:]] == ["range_ignored", "takeover", "stream_end"] and events[-1][1] is None
        assert job.mode == "stream" and job.received == 2 * MiB + 6 * MiB
        assert holes(job.fd, remote.size) == [] and Path(t.data).read_bytes() == data
    finally:
        window.close()
        upstream.close()
        os.close(job.fd)


def test_resumed_file_whose_hole_gets_a_whole_body_reads_no_more_than_the_holes_need(hub, truth, tmp_path):
    """Through hf_transfer: which of slice or body wins depends on what hf_transfer fetched first; both read 3 MiB
    here (a whole body would be 6)."""
    victim = "model-00001-of-00002.safetensors"  # 6 MiB
    dest = tmp_path / "m"
    _seed_partial(hub, dest, "t/small", victim, [(0, MiB), (2 * MiB, 5 * MiB)])  # holes [1M, 2M) and [5M, 6M)
    hub.set_faults([{"kind": "ignore_range", "path": victim, "offset": MiB + MiB // 2}])
    r = sync(params(hub, dest, allow_patterns=[victim], connections=6))
    assert [x["kind"] for x in hub.stats()["faults"]] == ["ignore_range"]
    assert_verified(dest, {victim: truth[victim]})
    assert r["bytes_resumed"] == 4 * MiB and r["range_ignored"] == 1 and r["transfer_failures"] == 0
    # the slice: 1 MiB dropped + 1 MiB wanted, [5M, 6M) by Range; or (that hole already filled) the body up to 2 MiB
    assert r["bytes_fetched"] == 3 * MiB


def test_content_length_of_a_whole_body_that_is_not_the_tree_size_is_refused(hub, tmp_path):
    victim = "model-00002-of-00002.safetensors"
    hub.set_faults([{"kind": "ignore_range", "path": victim, "size_delta": 4096, "times": -1}])
    with pytest.raises(SyncError) as e:
        sync(params(hub, tmp_path / "m"))
    msg = str(e.value)
    size = 6 * MiB + 1
    assert "size lie" in msg and "ignored Range" in msg and f"Content-Length {size + 4096}" in msg, msg
    assert f"the tree says {size} bytes" in msg and e.value.evidence["file"] == victim
    assert "giving up after 1 attempt(s)" in msg  # refused at once, not retried
    assert not (tmp_path / "m" / victim).exists()
    assert victim not in Manifest.load(str(tmp_path / "m" / ".hf_model" / "manifest.json")).files


def test_a_stalled_whole_body_is_caught_by_the_watchdog_and_resumed(hub, truth, tmp_path):
    victim = "model-00001-of-00002.safetensors"
    hub.set_faults([{"kind": "ignore_range", "path": victim, "times": -1},
                    {"kind": "stall", "path": victim, "offset": 3 * MiB, "stall_s": 30}])
    r = sync(params(hub, tmp_path / "m"))
    assert_verified(tmp_path / "m", truth)
    assert r["stalls"] == 1 and r["range_ignored"] == 2 and r["range_ignored_files"] == [victim]
    assert r["whole_body_streams"] == 2 and r["files_fetched"] == len(truth)
    # the stalled body stopped at 3 MiB; the second was read from its start (the server will not skip)
    assert hub.stats()["by_path"][f"t/small/{victim}"] == 3 * MiB + truth[victim][0]


def test_direct_transfer_buffering_a_whole_body_is_killed_by_the_memory_guard(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(watchdog, "LANE_RSS_BASE", 40 * MiB)  # bound 40 + 3 x 4 x 1 MiB; a lane needs ~30 MiB
    hub.set_link(0, 8)  # 8 MB/s per connection: the 48 MiB body takes 6 s to buffer
    hub.set_faults([{"kind": "ignore_range", "offset": 20 * MiB}])
    r = sync(params(hub, tmp_path / "m", repo="t/big", stall_timeout=10))
    assert [x["kind"] for x in hub.stats()["faults"]] == ["ignore_range"]
    last = progress(tmp_path / "m")["last_error"]
    assert "hf_transfer held" in last and "checked requests" in last, last
    assert r["transfer_failures"] == 1 and r["files_fetched"] == 1
    assert_verified(tmp_path / "m", truth_of(hub, "t/big"))


def test_progress_line_shows_how_often_the_server_ignored_range():
    from ansible.module_utils.hf import progress as hf_progress
    p = {"name": "m", "state": "running", "bytes_total": 100 * MiB, "bytes_done": 50 * MiB, "rate": MiB, "eta": 50}
    assert "Range" not in hf_progress.summary(p)
    assert hf_progress.summary(dict(p, range_ignored=3)) == \
        "m running 50.0% 50.0 MiB/100.0 MiB 1.0 MiB/s ETA 0:00:50 server ignored Range 3x"
