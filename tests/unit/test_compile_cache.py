"""module_utils/compile_cache/cache/cache.py (key, pack, install), library/compile_cache.py, the stand-in's compile cache, and
their agreement with the H200 recording (tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json)."""
from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from ansible.module_utils.compile_cache import cache as cc  # noqa: E402
from tests.helpers.ansible_module import module_command

RECORDING = ROOT / "tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json"
SCHEMAS = sorted((ROOT / "schemas/sglang").glob("*.json"))
DIRS = [".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang"]
ARGV = ["--model-path", "/srv/models/Kimi-K2.6", "--host", "0.0.0.0", "--port", "30001", "--tp-size", "8",
        "--attention-backend", "triton", "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8",
        "--served-model-name", "kimi", "--log-level", "info", "--trust-remote-code"]


def facts(**over) -> dict:
    tp, ep = cc.parallel_sizes(ARGV)
    base = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "driver_version": "580.159.04",
            "cuda_version": "13.0.88", "sglang_version": "0.5.11", "patch_series_hash": "ab" * 32,
            "torch_version": "2.11.0+cu130", "venv_digest": "cd" * 32, "tp_size": tp, "ep_size": ep,
            "kernel_flags": cc.kernel_flags(ARGV)}
    base.update(over)
    return base


# ---------------------------------------------------------------------------------------------------------------
# key


def test_key_is_sha256_of_the_canonical_document_and_independent_of_order():
    key, doc = cc.cache_key(facts())
    assert key == hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    shuffled = ARGV[8:] + ARGV[:8]
    key2, _ = cc.cache_key(facts(kernel_flags=cc.kernel_flags(shuffled)))
    assert key2 == key  # flag order in the argv does not matter
    assert cc.cache_key(dict(reversed(list(facts().items()))))[0] == key


@pytest.mark.parametrize("field,value", [
    ("gpu_name", "NVIDIA B300"), ("compute_capability", "10.3"), ("driver_version", "580.65.06"),
    ("cuda_version", "13.1.0"), ("sglang_version", "0.5.23"), ("patch_series_hash", "ef" * 32),
    ("torch_version", "2.14.1"), ("venv_digest", "01" * 32), ("tp_size", 4), ("ep_size", 8),
    ("kernel_flags", cc.kernel_flags(ARGV + ["--page-size", "1"])),
])
def test_every_key_field_changes_the_key(field, value):
    assert cc.cache_key(facts(**{field: value}))[0] != cc.cache_key(facts())[0]
    diff = cc.first_difference(cc.key_doc(facts()), cc.key_doc(facts(**{field: value})))
    assert diff[0] == field


def test_flags_that_cannot_change_kernels_do_not_change_the_key():
    other = ["--model-path", "/srv/models/Kimi-K2.6", "--host=127.0.0.1", "--port", "31000", "--tp-size", "8",
             "--attention-backend", "triton", "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8",
             "--trust-remote-code", "--api-key", "secret-key", "--enable-metrics", "--chat-template", "x.jinja"]
    assert cc.kernel_flags(other) == cc.kernel_flags(ARGV)
    assert "secret-key" not in json.dumps(cc.key_doc(facts(kernel_flags=cc.kernel_flags(other))))
    # tp has its own field; kernel-relevant flags stay, with their values
    flags = dict((k, v) for k, v in cc.kernel_flags(ARGV))
    assert "--tp-size" not in flags and flags["--speculative-ddtree-budget"] == ["8"] and flags["--trust-remote-code"] == []


def test_parallel_sizes_from_any_spelling():
    assert cc.parallel_sizes([]) == (1, 1)
    assert cc.parallel_sizes(["--tensor-parallel-size", "8", "--ep", "4"]) == (8, 4)
    assert cc.parallel_sizes(["--tp-size=2", "--expert-parallel-size", "2"]) == (2, 2)


def test_a_partial_or_padded_key_is_refused():
    f = facts()
    del f["venv_digest"]
    with pytest.raises(cc.CompileCacheError, match="missing.*venv_digest"):
        cc.cache_key(f)
    with pytest.raises(cc.CompileCacheError, match="unknown.*hostname"):
        cc.cache_key(facts(hostname="b300-01"))
    with pytest.raises(cc.CompileCacheError, match="tp_size"):
        cc.cache_key(facts(tp_size="eight"))


def _schema_flags(path: Path) -> set:
    return {f for o in json.loads(path.read_text())["options"].values() for f in o["flags"]}


@pytest.mark.parametrize("schema", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_every_excluded_and_parallel_flag_exists_in_every_committed_schema(schema):
    flags = _schema_flags(schema)
    assert len(SCHEMAS) >= 2
    missing = sorted(f for f in cc.NON_KERNEL_FLAGS | set(cc.TP_FLAGS) | set(cc.EP_FLAGS) if f not in flags)
    assert not missing, f"{schema.name} lacks {missing}"
    # and every spelling the schema has for tp/ep is known (an alias would otherwise slip into kernel_flags)
    opts = json.loads(schema.read_text())["options"]
    for dest in ("tensor_parallel_size", "tp_size", "expert_parallel_size", "ep_size"):
        if dest in opts:
            known = cc.TP_FLAGS if "t" == dest[0] else cc.EP_FLAGS
            assert set(opts[dest]["flags"]) <= set(known), (schema.name, dest, opts[dest]["flags"])


# ---------------------------------------------------------------------------------------------------------------
# host facts


def _fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    for name, version in (("sglang", "0.5.11"), ("torch", "2.11.0+cu130"), ("six", "1.17.0")):
        d = venv / "lib" / "python3.12" / "site-packages" / f"{name}-{version}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\nVersion: 9\n")
    (venv / ".sglang-venv-digest").write_text("cd" * 32 + "\n")
    return venv


def test_host_facts_read_the_venv_the_fact_cuda_and_the_gpus(tmp_path):
    venv = _fake_venv(tmp_path)
    fact = tmp_path / "sglang_venv.fact"
    fact.write_text(json.dumps({"sglang_version": "0.5.11", "patch_series_hash": "ab" * 32}))
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.88"}}))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf 'NVIDIA H200, 9.0, 580.159.04\\nNVIDIA H200, 9.0, 580.159.04\\n'\n")
    smi.chmod(0o755)
    got = cc.host_facts(ARGV, str(venv), str(venv / ".sglang-venv-digest"), str(fact), str(cuda), str(smi))
    assert got == facts()
    # no nvidia-smi (the lab): empty GPU fields; no fact: SGLang's version from the dist-info
    lab = cc.host_facts([], str(venv), str(venv / ".sglang-venv-digest"), str(tmp_path / "none"), "",
                        str(tmp_path / "no-such-smi"))
    assert (lab["gpu_name"], lab["compute_capability"], lab["driver_version"], lab["cuda_version"]) == ("", "", "", "")
    assert lab["sglang_version"] == "0.5.11" and lab["patch_series_hash"] == "" and lab["torch_version"] == "2.11.0+cu130"


def test_gpu_facts_mixed_gpus_and_a_failing_nvidia_smi(tmp_path):
    ok = SimpleNamespace(returncode=0, stdout="NVIDIA H200, 9.0, 580.1\nNVIDIA H100 80GB HBM3, 9.0, 580.1\n", stderr="")
    got = cc.gpu_facts(sys.executable, runner=lambda argv: ok)
    assert got == {"gpu_name": "NVIDIA H100 80GB HBM3+NVIDIA H200", "compute_capability": "9.0",
                   "driver_version": "580.1"}
    bad = SimpleNamespace(returncode=9, stdout="", stderr="NVIDIA-SMI has failed because it couldn't communicate")
    with pytest.raises(cc.CompileCacheError, match="couldn't communicate"):
        cc.gpu_facts(sys.executable, runner=lambda argv: bad)


def test_cuda_version_from_version_txt(tmp_path):
    (tmp_path / "version.txt").write_text("CUDA Version 12.4.131\n")
    assert cc.cuda_version(str(tmp_path)) == "12.4.131"
    assert cc.cuda_version(str(tmp_path / "none")) == ""


# ---------------------------------------------------------------------------------------------------------------
# pack


def make_home(root: Path) -> Path:
    home = root / "home"
    files = {
        ".triton/cache/ABC/_fwd_kernel.cubin": b"\x7fELF" + b"k" * 3000,
        ".triton/cache/ABC/_fwd_kernel.json": b'{"name": "_fwd_kernel"}',
        ".cache/flashinfer/0.6.8.post1/90a/cached_ops/norm/norm.so": b"so" * 500,
        ".cache/flashinfer/0.6.8.post1/90a/cached_ops/tmp/norm.lock": b"",
        ".cache/tvm-ffi/k_1234/k.so": b"tvm",
        ".cache/huggingface/token": b"not a compile cache",
    }
    for rel, data in files.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (1700000000.25, 1700000000.25))
    (home / ".triton/cache/ABC/_fwd_kernel.cubin").chmod(0o755)
    (home / ".cache/tvm-ffi/link.so").symlink_to("/etc/passwd")
    return home


def members(path) -> list:
    with tarfile.open(path) as tf:
        return [m.name for m in tf.getmembers()]


def manifest_of(path) -> dict:
    with tarfile.open(path) as tf:
        return json.loads(tf.extractfile("manifest.json").read())


def test_pack_is_deterministic_and_its_manifest_lists_every_file(tmp_path):
    home = make_home(tmp_path)
    key, doc = cc.cache_key(facts())
    a = cc.pack(str(home), DIRS, doc, str(tmp_path / "a.tar"))
    b = cc.pack(str(home), list(reversed(DIRS)), doc, str(tmp_path / "b.tar"))
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
    assert cc.pack(str(home), DIRS, doc, str(tmp_path / "c.tar"))["sha256"] != a["sha256"]


def test_pack_leaves_out_files_still_being_written(tmp_path):
    home = make_home(tmp_path)
    fresh = home / ".triton/cache/ABC/new.cubin"
    fresh.write_bytes(b"half-written")
    res = cc.pack(str(home), DIRS, cc.key_doc(facts()), str(tmp_path / "b.tar"), settle_s=60)
    assert res["skipped"]["settling"] == 1 and ".triton/cache/ABC/new.cubin" not in members(tmp_path / "b.tar")


@pytest.mark.parametrize("dirs", [["/etc"], ["../x"], [".cache", ".cache/sglang"], ["manifest.json"]])
def test_bad_cache_dirs_are_refused(tmp_path, dirs):
    with pytest.raises(cc.CompileCacheError):
        cc.pack(str(tmp_path), dirs, cc.key_doc(facts()), str(tmp_path / "x.tar"))


# ---------------------------------------------------------------------------------------------------------------
# install


@pytest.fixture
def bundle(tmp_path):
    home = make_home(tmp_path / "publisher")
    key, doc = cc.cache_key(facts())
    res = cc.pack(str(home), DIRS, doc, str(tmp_path / "bundle.tar"))
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
    res = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
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
    rec = json.loads((home / cc.RECORD_NAME).read_text())
    assert (rec["key"], rec["sha256"], rec["source"]) == (bundle.key, bundle.sha, "installed") and rec["installed_at"]
    before = tree(home)
    again = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert again["installed"] and not again["changed"] and "already installed" in again["reason"]
    assert tree(home) == before


def test_a_bundle_whose_sha256_differs_is_deleted_and_nothing_written(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    data = bytearray(bundle.path.read_bytes())
    data[700] ^= 0xFF  # a flipped byte, bundle.json's sha256 unchanged
    bundle.path.write_bytes(bytes(data))
    res = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and res["reason"].startswith("corrupt bundle: sha256")
    assert not bundle.path.exists() and tree(home) == before


def test_a_bundle_of_another_key_is_refused_naming_the_first_differing_field(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    other_doc = cc.key_doc(facts(driver_version="570.86.15", tp_size=4))
    other = cc.pack(str(bundle.src), DIRS, other_doc, str(tmp_path / "other.tar"))
    res = cc.install(str(tmp_path / "other.tar"), bundle.key, other["sha256"], str(home), DIRS,
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
    res = cc.install(str(bad), bundle.key, sha, str(home), DIRS, expected_doc=bundle.doc)
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
    res = cc.install(str(tmp_path / "forged.tar"), bundle.key, sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and "not the hash of its key document" in res["reason"]


def test_a_symlink_in_the_home_is_never_followed(tmp_path, bundle):
    home = tmp_path / "target"
    outside = tmp_path / "outside"
    outside.mkdir()
    home.mkdir()
    (home / ".cache").symlink_to(outside)
    res = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc)
    assert not res["installed"] and "is a symlink" in res["reason"]
    assert list(outside.iterdir()) == [] and not (home / cc.RECORD_NAME).exists()


def test_check_mode_verifies_but_writes_nothing(tmp_path, bundle):
    home = target_home(tmp_path)
    before = tree(home)
    res = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, expected_doc=bundle.doc,
                     check_mode=True)
    assert res["changed"] and not res["installed"] and "would install 5 files" in res["reason"]
    bad = cc.install(str(bundle.path), bundle.key, "0" * 64, str(home), DIRS, check_mode=True)
    assert "corrupt" in bad["reason"] and not bad["changed"] and bundle.path.exists()
    gone = cc.install(str(tmp_path / "not-copied.tar"), bundle.key, bundle.sha, str(home), DIRS, check_mode=True)
    assert gone["changed"] and "would copy and install" in gone["reason"]
    assert tree(home) == before
    with pytest.raises(cc.CompileCacheError, match="no bundle"):
        cc.install(str(tmp_path / "not-copied.tar"), bundle.key, bundle.sha, str(home), DIRS)


def test_install_chowns_to_the_service_user(tmp_path, bundle):
    import grp
    import pwd
    me, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    home = tmp_path / "fresh-home"
    home.mkdir()
    res = cc.install(str(bundle.path), bundle.key, bundle.sha, str(home), DIRS, owner=me, group=group)
    assert res["installed"]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in (home / ".cache").rglob("*")} == {(os.getuid(), os.getgid())}
    with pytest.raises(cc.CompileCacheError, match="no user"):
        cc.install(str(bundle.path), bundle.key, "f" * 64, str(home), DIRS, owner="no-such-user-xyz")


# ---------------------------------------------------------------------------------------------------------------
# the module


def _docs():
    tree_ = ast.parse((ROOT / "library/compile_cache.py").read_text())
    return {t.targets[0].id: yaml.safe_load(t.value.value) for t in tree_.body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


def test_module_docs_parse_and_match_the_argument_spec():
    docs = _docs()
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == "compile_cache" and docs["EXAMPLES"][0]["name"]
    src = (ROOT / "library/compile_cache.py").read_text()
    spec = set(re.findall(r"^\s{12}([a-z_0-9]+)=dict\(", src, re.M))
    assert spec == set(doc["options"]), (spec, set(doc["options"]))
    assert doc["options"]["dirs"]["default"] == list(cc.DEFAULT_DIRS)
    assert set(docs["RETURN"]) == {"key", "key_doc", "recorded", "installed", "reason", "sha256", "bytes", "files"}


def run_module(tmp_path, args: dict, check: bool = False) -> dict:
    argsfile = tmp_path / f"args-{len(list(tmp_path.glob('args-*')))}.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(module_command("compile_cache", argsfile), capture_output=True,
                         text=True, timeout=60, env=env, cwd=str(tmp_path))
    return json.loads(out.stdout)


def test_module_key_pack_install_with_check_mode_truthful(tmp_path):
    venv = _fake_venv(tmp_path)
    src = make_home(tmp_path / "pub")
    key = run_module(tmp_path, {"state": "key", "home": str(src), "argv": ARGV, "venv_path": str(venv),
                                "venv_digest_path": str(venv / ".sglang-venv-digest"),
                                "fact_path": str(tmp_path / "none"), "nvidia_smi": str(tmp_path / "none")})
    assert not key["changed"] and len(key["key"]) == 64 and key["reason"] == "the home records no compile cache"
    out = tmp_path / "stage" / "b.tar"
    dry = run_module(tmp_path, {"state": "packed", "home": str(src), "key_doc": key["key_doc"], "dest": str(out),
                                "settle_s": 0}, check=True)
    assert dry["changed"] and dry["files"] == 5 and not out.exists() and not (src / cc.RECORD_NAME).exists()
    packed = run_module(tmp_path, {"state": "packed", "home": str(src), "key_doc": key["key_doc"], "dest": str(out),
                                   "settle_s": 0})
    assert packed["changed"] and packed["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert packed["recorded"]["key"] == key["key"] and packed["recorded"]["source"] == "published"
    home = tmp_path / "host2"
    home.mkdir()
    args = {"state": "installed", "home": str(home), "bundle": str(out), "key_doc": key["key_doc"],
            "sha256": packed["sha256"]}
    dry = run_module(tmp_path, args, check=True)
    assert dry["changed"] and not dry["installed"] and list(home.iterdir()) == []
    done = run_module(tmp_path, args)
    assert done["changed"] and done["installed"] and done["recorded"]["key"] == key["key"]
    # another key: not a failure, a warning, installed false
    other = dict(key["key_doc"], driver_version="1")
    refused = run_module(tmp_path, dict(args, key_doc=other, home=str(tmp_path / "pub")))
    assert not refused.get("failed") and not refused["installed"] and "key field driver_version" in refused["reason"]
    assert "the service starts cold" in json.dumps(refused.get("warnings", []))
    # a real error fails with the evidence
    err = run_module(tmp_path, dict(args, bundle=str(tmp_path / "gone.tar"), sha256="0" * 64))
    assert err["failed"] and "no bundle at" in err["msg"]


# ---------------------------------------------------------------------------------------------------------------
# the recording, the role's defaults and the stand-in agree


def test_the_role_default_dirs_cover_every_dir_real_sglang_wrote_on_the_h200():
    rec = json.loads(RECORDING.read_text())
    written = set(rec["dirs_written"])
    assert written == {".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang"}
    assert all(rec["dirs_written"][d]["files"] > 0 for d in written)
    defaults = yaml.safe_load((ROOT / "roles/sglang_service/defaults/main.yml").read_text())
    role_dirs = defaults["sglang_service_compile_cache_dirs"]
    assert written <= set(role_dirs) and set(rec["cache_dirs_known_not_written_here"]) <= set(role_dirs)
    assert role_dirs == list(cc.DEFAULT_DIRS)
    cc.check_dirs(role_dirs)
    assert rec["time_to_ready_seeded_s"] < rec["time_to_ready_fresh_s"]
    assert all(s["seeded"]["t_ready"] < s["fresh"]["t_ready"] for s in rec["samples"])
    assert rec["gpu"]["name"] == "NVIDIA H200" and rec["software"]["sglang"] == "0.5.11"


def _standin_args(**over):
    base = dict(model_path="/srv/models/m", attention_backend="triton", speculative_algorithm=None, page_size=1,
                tp_size=1, disable_cuda_graph=False)
    base.update(over)
    return SimpleNamespace(**base)


def test_the_standin_writes_its_cache_under_the_recorded_dirs_and_hits_only_its_own_config(tmp_path, monkeypatch):
    from sglang_standin import jit_cache
    monkeypatch.setenv("HOME", str(tmp_path))
    for v in ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR"):
        monkeypatch.delenv(v, raising=False)
    waits, logs = [], []

    def wait(s):
        waits.append(s)
        return False
    assert not jit_cache.warm_up(_standin_args(), 2.0, wait, logs.append)
    assert waits == [2.0] and "13 of 13 kernels not in the compile cache" in logs[-1]
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    rec = set(json.loads(RECORDING.read_text())["dirs_written"])
    assert written and all(cc._under(p, sorted(rec)) for p in written)
    assert {cc._under(p, sorted(rec)) for p in written} == rec  # every recorded dir, nothing else
    jit_cache.warm_up(_standin_args(), 2.0, wait, logs.append)
    assert waits == [2.0] and "all 13 kernels found" in logs[-1]  # warm: no compile time
    jit_cache.warm_up(_standin_args(speculative_algorithm="DDTREE"), 2.0, wait, logs.append)
    assert waits[-1] == pytest.approx(2.0 * 12 / 13)  # another config: all but FlashInfer's op are missing


def test_the_standin_is_ready_sooner_with_a_seeded_home(tmp_path):
    from sglang_standin.local import LocalServer
    env = {"HOME": str(tmp_path), "SGLANG_STANDIN_LOAD_S": "0.1", "SGLANG_STANDIN_WARMUP_S": "0.1",
           "SGLANG_STANDIN_COMPILE_S": "1.5"}
    for v in ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR"):
        env[v] = ""
    lines = []
    for _ in range(2):
        with LocalServer(["--model-path", "/srv/models/m", "--host", "127.0.0.1"], env=env) as srv:
            srv.wait_for_line("fired up", timeout=30)
            lines.append([ln for ln in srv.lines if "stand-in JIT" in ln])
    assert "not in the compile cache" in lines[0][0] and "(1.5 s)" in lines[0][0]
    assert "all 13 kernels found in the compile cache" in lines[1][0]
