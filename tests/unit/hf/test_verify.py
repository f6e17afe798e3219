"""ansible.module_utils.hf.verify: git blob sha1 / sha256, parallel verification, manifest fast path."""
from __future__ import annotations

import hashlib
import os

from ansible.module_utils.hf.hub import RemoteFile
from ansible.module_utils.hf.verify import Manifest, hash_file, verify_files


def test_git_blob_sha1_matches_git(tmp_path):
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert hash_file(str(empty)).digests()["git-sha1"] == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's empty blob
    hello = tmp_path / "hello"
    hello.write_bytes(b"hello\n")
    assert hash_file(str(hello)).digests()["git-sha1"] == "ce013625030ba8dba906f756967f9e9ca394464a"


def _files(tmp_path, n=6, size=3 << 20):
    out = []
    for i in range(n):
        data = os.urandom(size + i)
        p = tmp_path / f"f{i}"
        p.write_bytes(data)
        if i % 2:
            r = RemoteFile(f"f{i}", len(data), sha256=hashlib.sha256(data).hexdigest())
        else:
            r = RemoteFile(f"f{i}", len(data), blob_sha1=hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        out.append((r, str(p)))
    return out


def test_parallel_verification_finds_the_one_flipped_byte(tmp_path):
    items = _files(tmp_path)
    assert all(v[0] for v in verify_files(items, workers=2).values())
    remote, path = items[3]
    with open(path, "r+b") as f:
        f.seek(12345)
        b = f.read(1)
        f.seek(12345)
        f.write(bytes([b[0] ^ 1]))
    res = verify_files(items, workers=2)
    assert [p for p, v in res.items() if not v[0]] == ["f3"]
    ok, want, got, _ = res["f3"]
    assert want == remote.sha256 and got != want and len(got) == 64


def test_wrong_size_is_not_hashed_and_fails(tmp_path):
    remote, path = _files(tmp_path, n=1)[0]
    with open(path, "ab") as f:
        f.write(b"x")
    ok, _, got, _ = verify_files([(remote, path)])["f0"]
    assert not ok and got.startswith("size")


def test_manifest_vouches_only_while_size_and_mtime_hold(tmp_path):
    items = _files(tmp_path, n=2, size=1000)
    m = Manifest(str(tmp_path / "manifest.json"), "a/b", "c" * 40)
    for remote, path in items:
        m.record(remote, path, hash_file(path).digests()["sha256"], "c" * 40)
    m.save()
    m2 = Manifest.load(str(tmp_path / "manifest.json"))
    assert all(m2.is_current(r, p) for r, p in items)
    remote, path = items[0]
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert not m2.is_current(remote, path)
    other = RemoteFile(items[1][0].path, items[1][0].size, sha256="e" * 64)  # another revision's bytes
    assert not m2.is_current(other, items[1][1])
    assert oct(os.stat(tmp_path / "manifest.json").st_mode & 0o777) == "0o644"


def test_corrupt_manifest_is_empty_not_trusted(tmp_path):
    p = tmp_path / "manifest.json"
    p.write_text("{not json")
    assert Manifest.load(str(p)).files == {}
    p.write_text('{"version": 99, "files": {"a": {}}}')
    assert Manifest.load(str(p)).files == {}


def test_manifest_records_the_repo_type_and_an_older_manifest_is_a_models(tmp_path):
    import json
    path = tmp_path / "manifest.json"
    m = Manifest(str(path), repo_id="org/data", revision="a" * 40, repo_type="dataset")
    m.save()
    data = json.loads(path.read_text())
    assert data["repo_type"] == "dataset" and data["repo_id"] == "org/data" and data["version"] == 1
    assert Manifest.load(str(path)).repo_type == "dataset"
    del data["repo_type"]  # written before repo_type was recorded: only models were fetched then
    path.write_text(json.dumps(data))
    loaded = Manifest.load(str(path))
    assert loaded.repo_type == "model" and loaded.repo_id == "org/data" and loaded.revision == "a" * 40
    assert Manifest(str(tmp_path / "none.json")).repo_type == "model"
