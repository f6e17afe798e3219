"""The test Hub speaks the Hub protocol the real clients need (FACTS.md) and injects the faults it promises."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from lab.testhub import DEFAULT_REPOS, TestHub, parse_repo_arg, parse_size

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


RAW = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def get(url, headers=None, method="GET", opener=OPENER):
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with TestHub(seed=7, page_size=3, cache_dir=tmp_path_factory.mktemp("hubcache")) as h:
        yield h


@pytest.fixture(autouse=True)
def _clean(hub):
    hub.set_faults([])
    yield
    hub.set_faults([])


def test_revision_resolves_branch_and_sha_and_404s_carry_error_codes(hub):
    sha = hub.repos["test/tiny"].sha
    status, _, body = get(f"{hub.endpoint}/api/models/test/tiny/revision/main")
    assert status == 200 and json.loads(body)["sha"] == sha
    status, _, body = get(f"{hub.endpoint}/api/models/test/tiny/revision/{sha}?blobs=true")
    siblings = json.loads(body)["siblings"]
    assert any("lfs" in s and len(s["lfs"]["sha256"]) == 64 for s in siblings)
    assert get(f"{hub.endpoint}/api/models/test/tiny/revision/nope")[1]["X-Error-Code"] == "RevisionNotFound"
    assert get(f"{hub.endpoint}/api/models/test/none/revision/main")[1]["X-Error-Code"] == "RepoNotFound"
    status, headers, _ = get(f"{hub.endpoint}/test/tiny/resolve/main/missing.bin", method="HEAD")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"


def paged_tree(url, route=None):
    """(entries, pages) of a tree listing followed through its Link headers; each next page stays on `route`."""
    entries, pages = [], 0
    while url:
        status, headers, body = get(url)
        assert status == 200
        entries += json.loads(body)
        pages += 1
        link = headers.get("Link")
        assert not link or route is None or route in link
        url = link.split(";")[0].strip("<>") if link else None
    return entries, pages


def test_tree_is_paged_with_link_header_and_lists_nested_lfs_and_empty_files(hub):
    entries, pages = paged_tree(f"{hub.endpoint}/api/models/test/tiny/tree/main?recursive=true")
    assert pages >= 3  # page_size=3
    files = {e["path"]: e for e in entries if e["type"] == "file"}
    assert files["README.md"]["size"] == 0
    assert "lfs" in files["sub/dir/nested.bin"] and "xetHash" not in files["sub/dir/nested.bin"]
    assert {"sub", "sub/dir", "tokenizer"} <= {e["path"] for e in entries if e["type"] == "directory"}
    cfg = files["config.json"]
    _, _, body = get(f"{hub.endpoint}/test/tiny/resolve/main/config.json")
    assert hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest() == cfg["oid"]


def test_lfs_resolve_redirects_to_file_server_which_honours_range(hub):
    f = hub.repos["test/tiny"].file("sub/dir/nested.bin")
    status, headers, _ = get(f"{hub.endpoint}/test/tiny/resolve/main/sub/dir/nested.bin", method="HEAD", opener=RAW)
    assert status == 302
    assert headers["X-Linked-Etag"] == f'"{f.sha256}"' and int(headers["X-Linked-Size"]) == f.size
    assert f":{hub.file_port}/" in headers["Location"] and headers["X-Repo-Commit"] == hub.repos["test/tiny"].sha
    status, headers, body = get(headers["Location"], {"Range": "bytes=0-0"})
    assert status == 206 and headers["Content-Range"] == f"bytes 0-0/{f.size}" and len(body) == 1
    status, _, body = get(f"{hub.endpoint}/test/tiny/resolve/main/sub/dir/nested.bin")
    assert status == 200 and hashlib.sha256(body).hexdigest() == f.sha256
    status, _, _ = get(f"{hub.endpoint}/test/tiny/resolve/main/README.md", {"Range": "bytes=0-0"})
    assert status == 416  # a 0-byte file has no byte 0


def test_faults_range_ignored_429_flip_truncate(hub):
    f = hub.repos["test/tiny"].file("tokenizer/tokenizer.json")
    url = f"{hub.endpoint}/test/tiny/resolve/main/tokenizer/tokenizer.json"
    good = get(url)[2]
    hub.set_faults([{"kind": "norange", "path": "tokenizer/*"}])
    status, _, body = get(url, {"Range": "bytes=10-19"})
    assert status == 200 and body == good
    hub.set_faults([{"kind": "429", "retry_after": 3}])
    status, headers, _ = get(url)
    assert status == 429 and headers["Retry-After"] == "3"
    assert get(url)[0] == 200  # times defaults to 1
    hub.set_faults([{"kind": "flip", "offset": 100}])
    body = get(url)[2]
    assert body != good and sum(a != b for a, b in zip(body, good)) == 1 and body[100] == good[100] ^ 0xFF
    hub.set_faults([{"kind": "truncate", "offset": 1000}])
    status, headers, body = get(url, {"Range": "bytes=0-4999"})
    assert status == 206 and headers["Content-Range"] == f"bytes 0-4999/{f.size}" and len(body) == 1000
    assert [x["kind"] for x in hub.snapshot()["faults"]] == ["norange", "429", "flip", "truncate"]


def test_drop_closes_the_connection_at_the_offset(hub):
    url = f"{hub.endpoint}/test/tiny/resolve/main/tokenizer/tokenizer.json"
    hub.set_faults([{"kind": "drop", "offset": 5000}])
    with pytest.raises(Exception):
        get(url)
    assert hub.snapshot()["faults"][-1]["kind"] == "drop"


def test_content_is_a_function_of_the_seed():
    a = TestHub(seed=1, repos={"x/y": {}})
    b = TestHub(seed=1, repos={"x/y": {}})
    c = TestHub(seed=2, repos={"x/y": {}})
    try:
        sa = {f.path: f.sha256 or f.blob_sha1 for f in a.repos["x/y"].files}
        assert sa == {f.path: f.sha256 or f.blob_sha1 for f in b.repos["x/y"].files}
        assert sa != {f.path: f.sha256 or f.blob_sha1 for f in c.repos["x/y"].files}
    finally:
        for h in (a, b, c):
            h.stop()


def test_repo_arg_and_sizes():
    assert parse_size("1GiB") == 1 << 30 and parse_size("8MiB") == 8 << 20 and parse_size("123") == 123
    assert parse_repo_arg("a/b:shards=3,shard_size=2MiB,small=false") == (
        "a/b", {"shards": 3, "shard_size": 2 << 20, "small": False})
    assert parse_repo_arg("lab/sharegpt-mini:type=dataset") == ("lab/sharegpt-mini", {"type": "dataset"})
    assert parse_repo_arg("a/b:type=model,shards=1") == ("a/b", {"type": "model", "shards": 1})
    with pytest.raises(ValueError):
        parse_repo_arg("a/b:bogus=1")
    with pytest.raises(ValueError):
        parse_repo_arg("a/b:type=space")
    with pytest.raises(ValueError):
        TestHub(repos={"a/b": {"type": "space"}})


def test_cli_prints_ready_line_and_serves(tmp_path):
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "lab.testhub", "--port", "0", "--seed", "3", "--repo", "o/n:shards=1",
                             "--repo", "o/d:type=dataset", "--ready-file", str(ready), "--cache-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert json.loads(ready.read_text()) == info
        status, _, body = get(f"{info['endpoint']}/api/models/o/n/revision/main")
        assert status == 200 and json.loads(body)["sha"] == info["repos"]["o/n"]
        assert info["repo_types"] == {"o/n": "model", "o/d": "dataset"}
        status, _, body = get(f"{info['endpoint']}/api/datasets/o/d/revision/main")
        assert status == 200 and json.loads(body)["sha"] == info["repos"]["o/d"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_link_pacing_holds_file_bytes_to_the_rate_in_all_and_per_connection(hub):
    """A 2 MiB shard at 8 MB/s per connection takes >= 0.13 s beyond the one piece of burst; two at once under a
    10 MB/s link share it (>= 0.3 s for both); unpaced it is far faster; 0 switches pacing off again."""
    import threading
    import time
    f = hub.repos["test/drafter"].files
    big = [x for x in f if x.size >= 2 * 1024 * 1024][0]
    url = f"{hub.endpoint}/test/drafter/resolve/main/{big.path}"

    def timed(n=1):
        bodies = []
        t0 = time.monotonic()
        threads = [threading.Thread(target=lambda: bodies.append(get(url)[2])) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(hashlib.sha256(b).hexdigest() == big.sha256 for b in bodies)
        return time.monotonic() - t0

    unpaced = timed()
    try:
        hub.set_link(0, 8)
        per_conn = timed()
        hub.set_link(10, 0)
        shared = timed(2)
    finally:
        hub.set_link(0, 0)
    assert per_conn >= (big.size - (1 << 20)) / 8e6 * 0.95 > unpaced
    assert shared >= (2 * big.size - (1 << 20)) / 10e6 * 0.95 > unpaced


# ---- dataset repositories ------------------------------------------------------------------------------------------

DS = "lab/sharegpt-mini"


def test_default_hub_serves_the_sharegpt_mini_dataset(hub):
    assert DEFAULT_REPOS[DS] == {"type": "dataset"} and hub.repos[DS].repo_type == "dataset"
    assert all(r.repo_type == "model" for k, r in hub.repos.items() if k != DS)
    assert {f.path for f in hub.repos[DS].files} == {"README.md", "sharegpt_mini.json"}


def test_dataset_routes_work_like_the_model_routes(hub):
    repo = hub.repos[DS]
    status, _, body = get(f"{hub.endpoint}/api/datasets/{DS}/revision/main?blobs=true")
    info = json.loads(body)
    assert status == 200 and info["sha"] == repo.sha and info["id"] == DS and "modelId" not in info
    assert {s["rfilename"] for s in info["siblings"]} == {"README.md", "sharegpt_mini.json"}
    assert get(f"{hub.endpoint}/api/datasets/{DS}/revision/nope")[1]["X-Error-Code"] == "RevisionNotFound"
    # pages stay on the dataset route
    entries, _ = paged_tree(f"{hub.endpoint}/api/datasets/{DS}/tree/{repo.sha}?recursive=true",
                                route=f"/api/datasets/{DS}/tree/")
    files = {e["path"]: e for e in entries if e["type"] == "file"}
    assert set(files) == {"README.md", "sharegpt_mini.json"}
    js = repo.file("sharegpt_mini.json")
    assert files["sharegpt_mini.json"]["lfs"]["oid"] == js.sha256 and "lfs" not in files["README.md"]
    # non-LFS: bytes from the Hub, git blob sha1 as in the tree
    status, _, card = get(f"{hub.endpoint}/datasets/{DS}/resolve/main/README.md")
    assert status == 200 and hashlib.sha1(b"blob %d\0" % len(card) + card).hexdigest() == files["README.md"]["oid"]
    assert card.startswith(b"---\n") and b"sharegpt_mini.json" in card
    # LFS: 302 to the file server, which honours Range; the bytes hash to the tree's sha256
    status, headers, _ = get(f"{hub.endpoint}/datasets/{DS}/resolve/{repo.sha}/sharegpt_mini.json", method="HEAD",
                             opener=RAW)
    assert status == 302 and headers["X-Linked-Etag"] == f'"{js.sha256}"' and int(headers["X-Linked-Size"]) == js.size
    assert f":{hub.file_port}/" in headers["Location"] and headers["X-Repo-Commit"] == repo.sha
    status, rh, _ = get(headers["Location"], {"Range": "bytes=0-0"})
    assert status == 206 and rh["Content-Range"] == f"bytes 0-0/{js.size}"
    status, _, body = get(f"{hub.endpoint}/datasets/{DS}/resolve/main/sharegpt_mini.json")
    assert status == 200 and hashlib.sha256(body).hexdigest() == js.sha256 and len(body) == js.size
    status, headers, _ = get(f"{hub.endpoint}/datasets/{DS}/resolve/main/missing.json", method="HEAD")
    assert status == 404 and headers["X-Error-Code"] == "EntryNotFound"


def test_a_repo_is_reachable_only_under_its_own_kind(hub):
    sha = hub.repos[DS].sha
    tiny = hub.repos["test/tiny"].sha
    for url in (f"/api/models/{DS}/revision/main", f"/api/models/{DS}/tree/{sha}?recursive=true",
                f"/{DS}/resolve/main/README.md", "/api/datasets/test/tiny/revision/main",
                f"/api/datasets/test/tiny/tree/{tiny}", "/datasets/test/tiny/resolve/main/config.json",
                "/api/datasets/test/none/revision/main"):
        status, headers, _ = get(hub.endpoint + url)
        assert status == 404 and headers["X-Error-Code"] == "RepoNotFound", url


def test_sharegpt_mini_is_real_sharegpt_json(hub):
    f = hub.repos[DS].file("sharegpt_mini.json")
    data = json.loads(bytes(f.content.read(0, f.size)).decode("utf-8"))
    assert isinstance(data, list) and 20 <= len(data) <= 40
    assert len({c["id"] for c in data}) == len(data)
    for c in data:
        assert set(c) == {"id", "conversations"}
        turns = c["conversations"]
        assert turns and len(turns) % 2 == 0
        for i, t in enumerate(turns):
            assert set(t) == {"from", "value"} and t["from"] == ("human", "gpt")[i % 2]
            assert isinstance(t["value"], str) and len(t["value"].strip()) > 10
    text = " ".join(t["value"] for c in data for t in c["conversations"])
    assert "```python" in text and "391" in text  # code and arithmetic among the questions
    # literal bytes: the same for every seed (only the commit sha depends on it)
    other = TestHub(seed=99, repos={DS: {"type": "dataset"}})
    try:
        assert other.repos[DS].file("sharegpt_mini.json").sha256 == f.sha256
        assert other.repos[DS].sha != hub.repos[DS].sha
    finally:
        other.stop()


def test_dataset_spec_with_seeded_shards():
    h = TestHub(seed=1, repos={"d/s": {"type": "dataset", "shards": 2, "shard_size": 1 << 20, "small": False}})
    try:
        files = {f.path: f for f in h.repos["d/s"].files}
        assert set(files) == {"data/shard-00001-of-00002.bin", "data/shard-00002-of-00002.bin"}
        assert all(f.lfs and len(f.sha256) == 64 for f in files.values())
    finally:
        h.stop()


def test_a_drafter_spec_carries_its_block_size_like_a_real_dflash_drafter():
    """block_size=N makes config.json a DFlash drafter's: the block size top-level and in dflash_config, the two
    places SGLang 0.5.11 reads it (sglang/srt/speculative/dflash_utils.py parse_dflash_draft_config)."""
    assert parse_repo_arg("demo/D:shards=1,block_size=8") == ("demo/D", {"shards": 1, "block_size": 8})
    h = TestHub(seed=1, repos={"demo/D": {"shards": 1, "block_size": 8}, "demo/T": {"shards": 1}})
    try:
        cfg = json.loads(bytes(h.repos["demo/D"].file("config.json").content.read(0, 1 << 20)))
        assert cfg["architectures"] == ["DFlashDraftModel"]
        assert cfg["block_size"] == 8 and cfg["dflash_config"] == {"block_size": 8}
        plain = json.loads(bytes(h.repos["demo/T"].file("config.json").content.read(0, 1 << 20)))
        assert "block_size" not in plain and "dflash_config" not in plain
    finally:
        h.stop()


def test_a_real_directory_is_served_byte_for_byte_with_lfs_for_the_large_files(tmp_path):
    """dir=PATH serves a real model directory (the H200 rehearsal's model and drafter) through the Hub protocol:
    the tree lists every file with its true size, large files are LFS with their sha256, and the bytes resolved are
    the directory's. The revision changes when a byte does."""
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    weights = bytes(range(256)) * 8192 + b"tail"  # 2 MiB + 4: over the LFS threshold
    (model / "model.safetensors").write_bytes(weights)
    (model / "sub" / "tokenizer.json").write_text("{}")
    with TestHub(seed=1, repos=dict([parse_repo_arg(f"real/model:dir={model}")]),
                 cache_dir=tmp_path / "cache") as h:
        entries, _ = paged_tree(f"{h.endpoint}/api/models/real/model/tree/main?recursive=true")
        files = {e["path"]: e for e in entries if e["type"] == "file"}
        assert set(files) == {"config.json", "model.safetensors", "sub/tokenizer.json"}
        assert files["model.safetensors"]["size"] == len(weights)
        assert files["model.safetensors"]["lfs"]["oid"] == hashlib.sha256(weights).hexdigest()
        assert "lfs" not in files["config.json"]
        assert get(f"{h.endpoint}/real/model/resolve/main/model.safetensors")[2] == weights
        assert get(f"{h.endpoint}/real/model/resolve/main/config.json")[2] == (model / "config.json").read_bytes()
        first = h.repos["real/model"].sha
    (model / "config.json").write_text('{"architectures": ["Other"]}')
    with TestHub(seed=1, repos=dict([parse_repo_arg(f"real/model:dir={model}")]),
                 cache_dir=tmp_path / "cache") as h:
        assert h.repos["real/model"].sha != first
    with pytest.raises(ValueError, match="not a directory"):
        TestHub(seed=1, repos={"x/y": {"dir": str(tmp_path / "none")}}, cache_dir=tmp_path / "cache")
