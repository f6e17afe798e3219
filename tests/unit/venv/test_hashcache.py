"""ansible.module_utils.venv.manifest hash cache: an unchanged file is not re-read; any change that touches ctime is."""
import os

from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import stage as vs

from tests.helpers.venv_tree import make_tree


def ctime_ticked(path):
    """Wait (bounded) until a fresh write gets a later ctime than path's: the coarse file clock advanced."""
    ref = os.lstat(path).st_ctime_ns
    probe = str(path) + ".tick"
    for _ in range(100000):
        with open(probe, "w") as fh:
            fh.write("x")
        if os.lstat(probe).st_ctime_ns > ref:
            os.unlink(probe)
            return
    raise AssertionError("file clock did not advance")


def counting(monkeypatch):
    seen = []
    real = vm.file_sha256

    def fake(path):
        seen.append(path)
        return real(path)
    monkeypatch.setattr(vm, "file_sha256", fake)
    return seen


def later_scan(monkeypatch):
    """The scan happens 1 s after the tree was written (nothing is racy)."""
    real = vm.time.time_ns
    monkeypatch.setattr(vm.time, "time_ns", lambda: real() + 1_000_000_000)


def test_unchanged_tree_is_not_reread_and_digest_is_the_same(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "v")
    cache = tmp_path / "cache"
    later_scan(monkeypatch)
    full = vm.scan(str(root))
    info = {}
    assert vm.scan(str(root), cache_dir=str(cache), info=info) == full and info["cached_files"] == 0
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    assert all(oct(os.stat(cache / f).st_mode & 0o777) == "0o600" for f in os.listdir(cache))
    seen = counting(monkeypatch)
    assert vm.scan(str(root), cache_dir=str(cache), info=info) == full
    assert seen == [] and info["hashed_bytes"] == 0 and info["cached_files"] == 3


def test_in_place_rewrite_and_replaced_file_are_rehashed(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "v")
    cache = str(tmp_path / "cache")
    f = root / "lib/python3.11/site-packages/pkg/__init__.py"
    later_scan(monkeypatch)
    vm.scan(str(root), cache_dir=cache)
    ctime_ticked(f)
    st = os.stat(f)
    with open(f, "r+") as fh:  # same size, same mtime afterwards: only ctime tells
        fh.write("X = 2\n")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    monkeypatch.undo()
    later_scan(monkeypatch)
    assert {e[0]: e for e in vm.scan(str(root), cache_dir=cache)}[str(f.relative_to(root))][4] == \
        vm.file_sha256(str(f))
    tool = root / "bin/tool"
    (root / "tmp").write_text("#!/opt/sglang/venv/bin/pythoX\n")  # same size, new inode
    os.chmod(root / "tmp", 0o755)
    os.replace(root / "tmp", tool)
    assert vm.scan(str(root), cache_dir=cache) == vm.scan(str(root))


def test_racy_entries_are_not_cached_and_foreign_cache_is_ignored(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "v")
    cache = tmp_path / "cache"
    vm.scan(str(root), cache_dir=str(cache))  # files written just now: none may be trusted later
    info = {}
    vm.scan(str(root), cache_dir=str(cache), info=info)
    assert info["cached_files"] == 0
    later_scan(monkeypatch)
    vm.scan(str(root), cache_dir=str(cache))
    os.chmod(cache, 0o777)  # writable by others: not trusted
    vm.scan(str(root), cache_dir=str(cache), info=info, save=False)
    assert info["cached_files"] == 0


def test_commit_records_the_stage_hashes_for_the_live_path(tmp_path, monkeypatch):
    src = make_tree(tmp_path / "src")
    live = tmp_path / "opt/venv"
    cache = str(tmp_path / "cache")
    entries = vm.scan(str(src))
    vs.prepare(str(live), entries, cache_dir=cache)
    stage = vs.paths(str(live))["stage"]
    for p, k, m, _, ref in entries:
        if k == "f":
            dst = os.path.join(stage, p)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(os.path.join(src, p), "rb") as a, open(dst, "wb") as b:
                b.write(a.read())
            os.chmod(dst, m)
        elif k == "l":
            os.makedirs(os.path.dirname(os.path.join(stage, p)) or ".", exist_ok=True)
            os.symlink(ref, os.path.join(stage, p))
        elif p != ".":
            os.makedirs(os.path.join(stage, p), exist_ok=True)
            os.chmod(os.path.join(stage, p), m)
    later_scan(monkeypatch)
    seen = counting(monkeypatch)
    assert vs.commit(str(live), vm.digest(entries), cache_dir=cache)["digest"] == vm.digest(entries)
    assert len(seen) == 3  # the stage is always read in full
    seen.clear()
    again = vs.prepare(str(live), entries, cache_dir=cache)
    assert again["in_sync"] and again["hashed_bytes"] == 0 and seen == []
