"""module_utils/compile_cache/pack.py and install.py: a bundle packed deterministically, installed by swapping the
dirs in and recording it, refused (and nothing written) when corrupt, unsafe or of another key."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.install import install
from ansible.module_utils.compile_cache.key import cache_key, key_doc
from ansible.module_utils.compile_cache.pack import pack
from ansible.module_utils.compile_cache.record import RECORD_NAME
from tests.helpers.compile_cache import DIRS, facts, make_home


# ---------------------------------------------------------------------------------------------------------------
# pack




def members(path) -> list:
    with tarfile.open(path) as tf:
        return [m.name for m in tf.getmembers()]


def manifest_of(path) -> dict:
    with tarfile.open(path) as tf:
        return json.loads(tf.extractfile("manifest.json").read())


def test_pack_is_deterministic_and_its_manifest_lists_every_file(tmp_path):
    home = make_home(tmp_path)
    key, doc = cache_key(facts())
    a = pack(str(home), DIRS, doc, str(tmp_path / "a.tar"))
    b = pack(str(home), list(reversed(DIRS)), doc, str(tmp_path / "b.tar"))
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes() and a["sha256"] == b["sha256"]
    assert a["sha256"] == hashlib.sha256((tmp_path / "a.tar").read_bytes()).hexdigest()
    assert a["files"] == 5 and a["key"] == key and a["skipped"]["links"] == 1
    names = members(tmp_path / "a.tar")
    assert names[-1] == "manifest.json" and ".cache/tvm-ffi/link.so" not in names
    assert not any(n.startswith(".cache/huggingface") for n in names)  # only the cache dirs
    files = [n for n in names if n != "manifest.json"]
    m = manifest_of(tmp_path / "a.tar")
    assert m["key"] == key and m["key_doc"] == doc and m["dirs"] == sorted([".triton/cache", ".cache/flashinfer",
                                                                            ".cache/tvm-ffi"])
    by = {e["path"]: e for e in m["files"]}
    assert by[".triton/cache/ABC/_fwd_kernel.cubin"] == {
        "path": ".triton/cache/ABC/_fwd_kernel.cubin", "size": 3004, "mode": 0o755,
        "sha256": hashlib.sha256(b"\x7fELF" + b"k" * 3000).hexdigest()}
    assert set(by) < set(files) | set(m["directories"]) and set(by) == {f for f in files if f not in m["directories"]}
    with tarfile.open(tmp_path / "a.tar") as tf:
        assert all(x.uid == 0 and x.gid == 0 and x.uname == "" for x in tf.getmembers())
    # a changed file changes the bundle
    (home / ".cache/tvm-ffi/k_1234/k.so").write_bytes(b"tvm2")
    assert pack(str(home), DIRS, doc, str(tmp_path / "c.tar"))["sha256"] != a["sha256"]


def test_pack_leaves_out_files_still_being_written(tmp_path):
    home = make_home(tmp_path)
    fresh = home / ".triton/cache/ABC/new.cubin"
    fresh.write_bytes(b"half-written")
    res = pack(str(home), DIRS, key_doc(facts()), str(tmp_path / "b.tar"), settle_s=60)
    assert res["skipped"]["settling"] == 1 and ".triton/cache/ABC/new.cubin" not in members(tmp_path / "b.tar")


@pytest.mark.parametrize("dirs", [["/etc"], ["../x"], [".cache", ".cache/sglang"], ["manifest.json"]])
def test_bad_cache_dirs_are_refused(tmp_path, dirs):
    with pytest.raises(CompileCacheError):
        pack(str(tmp_path), dirs, key_doc(facts()), str(tmp_path / "x.tar"))


# ---------------------------------------------------------------------------------------------------------------
# install


@pytest.fixture
def bundle(tmp_path):
    home = make_home(tmp_path / "publisher")
    key, doc = cache_key(facts())
    res = pack(str(home), DIRS, doc, str(tmp_path / "bundle.tar"))
    return SimpleNamespace(path=tmp_path / "bundle.tar", key=key, doc=doc, sha=res["sha256"], src=home)


def target_home(tmp_path) -> Path:
    home = tmp_path / "target"
    (home / ".triton/cache/OLD").mkdir(parents=True)
    (home / ".triton/cache/OLD/stale.cubin").write_bytes(b"old")
    (home / ".cache/sglang").mkdir(parents=True)
    (home / ".cache/sglang/mine").write_bytes(b"not in the bundle: kept")
    return home


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if not p.is_symlink()}


def test_install_swaps_the_dirs_in_records_and_is_then_a_no_op(tmp_path, bundle):
    home = target_home(tmp_path)
    res = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert res["installed"] and res["changed"] and res["files"] == 5, res
    for rel in (".triton/cache/ABC/_fwd_kernel.cubin", ".cache/flashinfer/0.6.8.post1/90a/cached_ops/norm/norm.so",
                ".cache/tvm-ffi/k_1234/k.so", ".cache/flashinfer/0.6.8.post1/90a/cached_ops/tmp/norm.lock"):
        assert (home / rel).read_bytes() == (bundle.src / rel).read_bytes(), rel
        assert (home / rel).stat().st_mtime == pytest.approx(1700000000.25)
    assert (home / ".triton/cache/ABC/_fwd_kernel.cubin").stat().st_mode & 0o777 == 0o755
    assert not (home / ".triton/cache/OLD").exists()  # old aside, new in, old removed
    assert (home / ".cache/sglang/mine").read_bytes() == b"not in the bundle: kept"  # a dir the bundle lacks
    assert not (home / ".cache/huggingface").exists()
    assert [p.name for p in home.iterdir() if p.name.startswith(".sglang-compile-cache-")] == []  # no staging left
    rec = json.loads((home / RECORD_NAME).read_text())
    assert (rec["key"], rec["sha256"], rec["source"]) == (bundle.key, bundle.sha, "installed") and rec["installed_at"]
    before = tree(home)
    again = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert again["installed"] and not again["changed"] and "already installed" in again["reason"]
    assert tree(home) == before


def test_a_bundle_whose_sha256_differs_is_deleted_and_nothing_written(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    data = bytearray(bundle.path.read_bytes())
    data[700] ^= 0xFF  # a flipped byte, bundle.json's sha256 unchanged
    bundle.path.write_bytes(bytes(data))
    res = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and res["reason"].startswith("corrupt bundle: sha256")
    assert not bundle.path.exists() and tree(home) == before


def test_a_bundle_of_another_key_is_refused_naming_the_first_differing_field(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    other_doc = key_doc(facts(driver_version="570.86.15", tp_size=4))
    other = pack(str(bundle.src), DIRS, other_doc, str(tmp_path / "other.tar"))
    res = install(str(tmp_path / "other.tar"), bundle.key, other["sha256"], str(home), DIRS,
                     expected_doc=bundle.doc)
    assert not res["installed"] and not res["changed"]
    assert "key mismatch" in res["reason"] and "key field driver_version" in res["reason"]
    assert "'580.159.04'" in res["reason"] and "'570.86.15'" in res["reason"]
    assert tree(home) == before and (tmp_path / "other.tar").exists()  # a valid bundle, only not this host's


def _rebuild(src: Path, dest: Path, edit) -> str:
    """A tar with src's members, passed through edit(list of (TarInfo, bytes|None)) -> same; returns its sha256."""
    items = []
    with tarfile.open(src) as tf:
        for m in tf.getmembers():
            items.append((m, tf.extractfile(m).read() if m.isreg() else None))
    items = edit(items)
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        for m, data in items:
            out.addfile(m, io.BytesIO(data) if data is not None else None)
    return hashlib.sha256(dest.read_bytes()).hexdigest()


def _member(name, kind=tarfile.REGTYPE, data=b"", linkname=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname, ti.mode = kind, linkname, 0o644
    ti.size = len(data) if kind == tarfile.REGTYPE else 0
    return ti, (data if kind == tarfile.REGTYPE else None)


def _insert(extra):
    return lambda items: items[:-1] + [extra] + items[-1:]  # before the manifest


def _flip_content(items):
    out = []
    for m, data in items:
        if m.name == ".cache/tvm-ffi/k_1234/k.so":
            data = b"TVM"  # same size, other bytes, the manifest unchanged
        out.append((m, data))
    return out


def _drop(name):
    return lambda items: [(m, d) for m, d in items if m.name != name]


@pytest.mark.parametrize("edit,needle", [
    (_insert(_member("/etc/cron.d/x", data=b"x")), "unsafe member '/etc/cron.d/x'"),
    (_insert(_member(".triton/cache/../../../.ssh/authorized_keys", data=b"x")), "unsafe member"),
    (_insert(_member(".triton/cache/evil", tarfile.SYMTYPE, linkname="/etc/shadow")), "a link"),
    (_insert(_member(".triton/cache/hard", tarfile.LNKTYPE, linkname=".triton/cache/ABC/_fwd_kernel.json")), "a link"),
    (_insert(_member(".triton/cache/dev", tarfile.CHRTYPE)), "a device or fifo"),
    (_insert(_member(".triton/cache/fifo", tarfile.FIFOTYPE)), "a device or fifo"),
    (_insert(_member(".bashrc", data=b"x")), "outside the bundle's cache dirs"),
    (_insert(_member(".triton/cache/extra", data=b"x")), "not in the manifest"),
    (_flip_content, "has sha256"),
    (_drop(".cache/tvm-ffi/k_1234/k.so"), "missing"),
], ids=["absolute", "dotdot", "symlink", "hardlink", "device", "fifo", "outside", "unlisted", "bytes", "missing"])
def test_unsafe_or_corrupt_members_discard_everything(tmp_path, bundle, edit, needle):
    home = target_home(tmp_path)
    before = tree(home)
    bad = tmp_path / "bad.tar"
    sha = _rebuild(bundle.path, bad, edit)  # the controller recorded this (tampered) bundle's sha256
    res = install(str(bad), bundle.key, sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and needle in res["reason"], res["reason"]
    assert tree(home) == before and not bad.exists()
    assert not Path("/etc/cron.d/x").exists()


def test_a_manifest_whose_key_is_not_its_documents_hash_is_corrupt(tmp_path, bundle):
    home = target_home(tmp_path)

    def forge(items):
        out = []
        for m, data in items:
            if m.name == "manifest.json":
                man = json.loads(data)
                man["key_doc"]["driver_version"] = "1.0"  # key kept: someone edited the document
                data = json.dumps(man).encode()
                m.size = len(data)
            out.append((m, data))
        return out
    sha = _rebuild(bundle.path, tmp_path / "forged.tar", forge)
    res = install(str(tmp_path / "forged.tar"), bundle.key, sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and "not the hash of its key document" in res["reason"]


def test_a_symlink_in_the_home_is_never_followed(tmp_path, bundle):
    home = tmp_path / "target"
    outside = tmp_path / "outside"
    outside.mkdir()
    home.mkdir()
    (home / ".cache").symlink_to(outside)
    res = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and "is a symlink" in res["reason"]
    assert list(outside.iterdir()) == [] and not (home / RECORD_NAME).exists()


def test_check_mode_verifies_but_writes_nothing(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    res = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc,
                     check_mode=True)
    assert res["changed"] and not res["installed"] and "would install 5 files" in res["reason"]
    bad = install(str(bundle.path), bundle.key, "0" * 64, str(home), DIRS, check_mode=True)
    assert "corrupt" in bad["reason"] and not bad["changed"] and bundle.path.exists()
    gone = install(str(tmp_path / "not-copied.tar"), bundle.key, bundle.sha, str(home), DIRS, check_mode=True)
    assert gone["changed"] and "would copy and install" in gone["reason"]
    assert tree(home) == before
    with pytest.raises(CompileCacheError, match="no bundle"):
        install(str(tmp_path / "not-copied.tar"), bundle.key, bundle.sha, str(home), DIRS)


def test_install_chowns_to_the_service_user(tmp_path, bundle):
    import grp
    import pwd
    me, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    home = tmp_path / "fresh-home"
    home.mkdir()
    res = install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, owner=me, group=group)
    assert res["installed"]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in (home / ".cache").rglob("*")} == {(os.getuid(), os.getgid())}
    with pytest.raises(CompileCacheError, match="no user"):
        install(str(bundle.path), bundle.key, "f" * 64, str(home), DIRS, owner="no-such-user-xyz")
