"""ansible.module_utils.venv.stage: stage preparation (hard-link copy minus what differs), verification, atomic swap."""
import os

import pytest

from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import stage as vs
from tests.helpers.venv_tree import make_tree


def extract_from(source, stage, files):
    """What the stream's tar does: copy the listed files (or all) from source into the stage."""
    import shutil
    if files is None:
        shutil.copytree(source, stage, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return
    for rel in files:
        dst = os.path.join(stage, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(source, rel), dst)


@pytest.fixture()
def pair(tmp_path):
    src = make_tree(tmp_path / "src" / "venv")
    live = tmp_path / "dst" / "venv"
    return src, live


def test_full_transfer_then_in_sync(pair):
    src, live = pair
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    assert r["full"] and not r["in_sync"] and os.path.isdir(r["stage"])
    extract_from(str(src), r["stage"], None)
    c = vs.commit(str(live), vm.digest(entries))
    assert c["digest"] == vm.digest(entries) and c["how"] == "rename"
    assert not os.path.exists(r["stage"])
    again = vs.prepare(str(live), entries)
    assert again["in_sync"] and again["send"] == [] and not os.path.exists(again["stage"])


def test_corrupt_file_is_repaired_by_sending_only_it(pair):
    src, live = pair
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    extract_from(str(src), r["stage"], None)
    vs.commit(str(live), vm.digest(entries))
    victim = live / "lib/python3.11/site-packages/pkg/__init__.py"
    victim.write_text("X = 9\n")
    (live / "stray").write_text("left by hand")
    os.chmod(live / "bin", 0o700)
    untouched_inode = (live / "bin/tool").stat().st_ino
    r = vs.prepare(str(live), entries)
    assert not r["in_sync"] and not r["full"]
    assert r["send"] == ["lib/python3.11/site-packages/pkg/__init__.py"]
    assert r["delete"] == ["stray"]
    stage = r["stage"]
    assert (os.stat(os.path.join(stage, "bin/tool")).st_ino == untouched_inode)  # hard link, not a copy
    assert not os.path.exists(os.path.join(stage, "stray"))
    assert oct(os.stat(os.path.join(stage, "bin")).st_mode & 0o777) == oct(0o755)  # dir mode from the manifest
    # the live venv is untouched until the swap
    assert victim.read_text() == "X = 9\n"
    extract_from(str(src), stage, r["send"])
    assert victim.read_text() == "X = 9\n"  # writing the stage never wrote through a hard link
    c = vs.commit(str(live), vm.digest(entries))
    assert c["how"] in ("exchange", "two-renames")
    assert victim.read_text() == "X = 1\n" and not (live / "stray").exists()
    assert vm.digest(vm.scan(str(live))) == vm.digest(entries)
    assert vs.prepare(str(live), entries)["in_sync"]


def test_commit_refuses_a_partial_stage_and_live_stays(pair):
    src, live = pair
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    extract_from(str(src), r["stage"], None)
    vs.commit(str(live), vm.digest(entries))
    before = vm.digest(vm.scan(str(live)))
    (src / "big.bin").write_bytes(b"x" * 4096)
    entries2 = vm.scan(str(src))
    r = vs.prepare(str(live), entries2)
    with open(os.path.join(r["stage"], "big.bin"), "wb") as fh:  # a transfer killed midway
        fh.write(b"x" * 100)
    with pytest.raises(vs.StageError, match="does not match the source manifest"):
        vs.commit(str(live), vm.digest(entries2))
    assert vm.digest(vm.scan(str(live))) == before
    # the next run removes the stale stage and starts over
    r = vs.prepare(str(live), entries2)
    assert any("removed stale" in a for a in r["recovered"]) and r["send"] == ["big.bin"]


def test_check_mode_changes_nothing(pair):
    src, live = pair
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries, check_mode=True)
    assert r["full"] and not os.path.exists(r["stage"]) and not live.exists()


def test_recover_after_interrupted_two_rename_swap(tmp_path):
    live = tmp_path / "venv"
    p = vs.paths(str(live))
    os.mkdir(p["old"])
    (tmp_path / ".venv.old" / "pyvenv.cfg").write_text("")
    actions = vs.recover(str(live))
    assert live.is_dir() and (live / "pyvenv.cfg").exists() and "restored" in actions[0]


def test_swap_fallback_when_exchange_unavailable(tmp_path, monkeypatch):
    live = tmp_path / "venv"
    live.mkdir()
    (live / "old").write_text("")
    stage = tmp_path / ".venv.stage"
    stage.mkdir()
    (stage / "new").write_text("")
    monkeypatch.setattr(vs, "exchange", lambda a, b: False)
    assert vs.swap(str(live)) == "two-renames"
    assert (live / "new").exists() and not (live / "old").exists() and not stage.exists()


def test_exchange_is_atomic_swap(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "in_a").write_text("")
    if not vs.exchange(str(a), str(b)):
        pytest.skip("filesystem refuses RENAME_EXCHANGE")
    assert (b / "in_a").exists() and not (a / "in_a").exists()


@pytest.mark.parametrize("bad", ["relative/venv", "/", ""])
def test_paths_rejects_bad_venv_path(bad):
    with pytest.raises(vs.StageError):
        vs.paths(bad)


def test_live_path_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "venv").write_text("")
    with pytest.raises(vs.StageError, match="not a directory"):
        vs.prepare(str(tmp_path / "venv"), [])


def test_every_swap_records_the_venv_digest_in_it_without_writing_through_to_the_live_copy(pair):
    src, live = pair
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    extract_from(str(src), r["stage"], None)
    first = vs.commit(str(live), vm.digest(entries))
    assert vm.read_digest(str(live)) == first["digest"] == vm.digest(entries)
    assert oct(os.stat(live / vm.DIGEST_NAME).st_mode & 0o777) == oct(0o644)   # the service user reads it
    assert vm.digest(vm.scan(str(live))) == first["digest"]                    # the record is not content
    # a changed file: the stage is a hard-link copy of live, the record of the new venv must not reach the old one
    (src / "lib/python3.11/site-packages/pkg/__init__.py").write_text("X = 2\n")
    entries2 = vm.scan(str(src))
    r = vs.prepare(str(live), entries2)
    extract_from(str(src), r["stage"], r["send"])
    # a second name for the old venv's record: a write through a hard link shared with the stage would change it
    keep = live.parent / "old-digest"
    os.link(live / vm.DIGEST_NAME, keep)
    second = vs.commit(str(live), vm.digest(entries2))
    assert vm.read_digest(str(live)) == second["digest"] != first["digest"]
    assert keep.read_text().strip() == first["digest"]
    assert not os.path.exists(str(live) + ".stage")
