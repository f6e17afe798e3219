"""module_utils.venv_receive: the target side of a stream hashes each file once GNU tar is done with it, and
venv_stage.commit trusts only the hashes whose files are unchanged since (real tar, real files)."""
import hashlib
import os
import subprocess

import pytest

from module_utils import venv_manifest as vm
from module_utils import venv_receive as vr
from module_utils import venv_stage as vs
from tests.unit.test_venv_manifest import make_tree


def tar_stream(src, path):
    """The bytes venv_stream's source side would send for a full stream (no compression)."""
    out = path / "stream.tar"
    subprocess.run(["tar", "-C", str(src), "--numeric-owner", "-cf", str(out), "--exclude=__pycache__",
                    "--exclude=*.pyc", "."], check=True)
    return out


@pytest.mark.parametrize("line,want", [
    (b'"./lib/python3.11/site-packages/pkg/__init__.py"\n', "lib/python3.11/site-packages/pkg/__init__.py"),
    (b'"./"\n', ""),
    (b'"./bin/"\n', "bin"),
    (b'"sp ace/tab\\there"\n', "sp ace/tab\there"),
    (b'"q\\"uote\\\\back"\n', 'q"uote\\back'),
    (b'"caf\\303\\251.py"\n', "caf\u00e9.py"),
])
def test_member_path_reads_tar_c_quoting(line, want):
    assert vr.member_path(line) == want


def test_member_path_matches_what_gnu_tar_prints(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    odd = ['a "q".txt', "back\\slash", "caf\u00e9.py", "sp ace"]
    for n in odd:
        (src / n).write_text(n)
    archive = tmp_path / "a.tar"
    subprocess.run(["tar", "-C", str(src), "-cf", str(archive), "."], check=True)
    dst = tmp_path / "dst"
    dst.mkdir()
    out = subprocess.run(["tar", "-C", str(dst), "-xvf", str(archive), "--quoting-style=c"], check=True,
                         capture_output=True).stdout
    names = {vr.member_path(x) for x in out.splitlines(keepends=True)}
    assert names == {""} | set(odd)


def test_receive_hashes_every_file_and_commit_reads_none_again(tmp_path):
    src = make_tree(tmp_path / "src/venv")
    big = os.urandom(3 << 20)
    (src / "lib/big.so").write_bytes(big)
    entries = vm.scan(str(src))
    live = tmp_path / "dst/venv"
    r = vs.prepare(str(live), entries)
    hashes = vr.hashes_path(r["stage"])
    assert hashes == vs.paths(str(live))["hashes"]  # one rule: where the receiver writes is where commit looks
    with open(tar_stream(src, tmp_path), "rb") as stream:
        assert vr.receive(r["stage"], 0, stdin=stream) == 0
    got = vr.load(r["stage"])
    files = {e[0]: e for e in entries if e[1] == "f"}
    assert set(got) == set(files)
    assert got["lib/big.so"][5] == hashlib.sha256(big).hexdigest()
    assert os.stat(hashes).st_mode & 0o777 == 0o600
    res = vs.commit(str(live), vm.digest(entries))
    assert res["hashed_at_commit_files"] == 0 and res["hashed_while_receiving_files"] == len(files)
    assert not os.path.exists(hashes)  # tied to that stage: gone with it
    assert vm.digest(vm.scan(str(live))) == vm.digest(entries)


def test_a_file_changed_after_it_was_hashed_is_read_again_and_caught(tmp_path):
    src = make_tree(tmp_path / "src/venv")
    entries = vm.scan(str(src))
    live = tmp_path / "dst/venv"
    r = vs.prepare(str(live), entries)
    with open(tar_stream(src, tmp_path), "rb") as stream:
        assert vr.receive(r["stage"], 0, stdin=stream) == 0
    victim = os.path.join(r["stage"], "bin/tool")
    data = open(victim, "rb").read()
    with open(victim, "r+b") as fh:  # same size, other bytes: only the (changed) ctime can tell
        fh.write(b"X" + data[1:])
    with pytest.raises(vs.StageError, match="does not match the source manifest"):
        vs.commit(str(live), vm.digest(entries))
    assert not live.exists()  # nothing swapped in


def test_forged_or_foreign_hash_files_are_ignored(tmp_path):
    stage = tmp_path / ".venv.stage"
    stage.mkdir()
    h = tmp_path / ".venv.stage.hashes"
    h.write_text('{"version": 1, "root": "%s", "files": {"x": [1, 2, 3, 4, 5, "%s"]}}' % (stage, "0" * 64))
    os.chmod(h, 0o644)  # readable by others: not what receive() writes
    assert vr.load(str(stage)) == {}
    os.chmod(h, 0o600)
    assert set(vr.load(str(stage))) == {"x"}
    other = tmp_path / "other"
    other.mkdir()
    h.rename(vr.hashes_path(str(other)))
    assert vr.load(str(other)) == {}  # written for another stage
    h.write_text("not json")
    os.chmod(h, 0o600)
    assert vr.load(str(stage)) == {}


def test_failed_extraction_writes_no_hashes_and_says_why(tmp_path):
    stage = tmp_path / "stage"
    stage.mkdir()
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"this is not a tar archive" * 100)
    with open(bad, "rb") as stream:
        assert vr.receive(str(stage), 0, stdin=stream) != 0
    assert not os.path.exists(vr.hashes_path(str(stage)))
    assert vr.receive(str(tmp_path / "missing"), 0) == 3
