"""ansible.module_utils.venv.receive: the target side of a stream unpacks real GNU tar / pax archives into the stage,
hashing every file as it writes it; venv_stage.commit trusts only the hashes whose files are unchanged since.
Streams are made by the source pipeline the product runs (venv_stream.source_pipeline), with real tar and zstd."""
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile

import pytest

from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import receive as vr
from ansible.module_utils.venv import stage as vs
from ansible.module_utils.venv import stream as st
from tests.helpers.venv_tree import make_tree

needs_zstd = pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd not installed")


def source_stream(src, path, level=0, files=None, name="stream.bin"):
    """The bytes the source side of a stream sends (the product's own pipeline, run locally)."""
    out = path / name
    listing = b"".join(f.encode() + b"\0" for f in files or [])
    with open(out, "wb") as fh:
        subprocess.run(["bash", "-o", "pipefail", "-c", st.source_pipeline({}, str(src), files is None, level)],
                       input=listing, stdout=fh, check=True)
    return out


def receive(stage, stream_path):
    out = io.StringIO()
    with open(stream_path, "rb") as fh:
        rc = vr.receive(str(stage), stdin=fh, stdout=out)
    return rc, (json.loads(out.getvalue()) if out.getvalue() else None)


def stream_into_new_stage(tmp_path, src, level=0):
    """Scan src, prepare the stage of a venv at tmp_path/dst/venv, stream the whole of src into it.
    -> (entries, live, stage, rc, report)."""
    entries = vm.scan(str(src))
    live = tmp_path / "dst/venv"
    stage = vs.prepare(str(live), entries)["stage"]
    rc, report = receive(stage, source_stream(src, tmp_path, level))
    return entries, live, stage, rc, report


def framed_tar(path, build, fmt=tarfile.GNU_FORMAT, frame=vr.FRAME_TAR):
    """A hand-made archive (tarfile), framed like a plain stream: for members the source's tar would not send."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        build(tf)
    path.write_bytes(frame + buf.getvalue())
    return path


def add_file(tf, name, data=b"x", mode=0o644, mtime=1_600_000_000):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, mtime
    tf.addfile(info, io.BytesIO(data))


def pax_info(name, headers):
    info = tarfile.TarInfo(name)
    info.pax_headers = headers
    return info


def add_entry(tf, name, kind, linkname="", mode=0o755):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    tf.addfile(info)


def test_frames_agree_between_the_two_ends():
    assert st.FRAME_TAR.encode() == vr.FRAME_TAR and st.FRAME_ZSTD.encode() == vr.FRAME_ZSTD
    assert len(vr.FRAME_TAR) == len(vr.FRAME_ZSTD) == 16


@pytest.mark.parametrize("level", [0, pytest.param(1, marks=needs_zstd)])
def test_receive_hashes_every_file_and_commit_reads_none_again(tmp_path, level):
    src = make_tree(tmp_path / "src/venv")
    big = os.urandom(9 << 20)  # larger than the read buffer: a file spans many reads
    (src / "lib/big.so").write_bytes(big)
    deep = src / ("lib/" + "d" * 90 + "/" + "e" * 90)  # > 100 bytes: GNU long-name members
    deep.mkdir(parents=True)
    (deep / ("f" * 120 + ".py")).write_text("long\n")
    (src / "lib/link-to-long").symlink_to("d" * 90 + "/" + "e" * 90 + "/" + "f" * 120 + ".py")
    os.chmod(src / "bin", 0o555)  # a read-only directory: its mode is set after its contents are written
    os.utime(src / "lib/big.so", ns=(1_500_000_000_123_456_789, 1_500_000_000_123_456_789))
    entries, live, stage, rc, report = stream_into_new_stage(tmp_path, src, level)
    assert rc == 0
    hashes = vr.hashes_path(stage)
    assert hashes == vs.paths(str(live))["hashes"]  # one rule: where the receiver writes is where commit looks
    files = {e[0]: e for e in entries if e[1] == "f"}
    assert report["compressed"] is bool(level) and report["files"] == len(files)
    assert report["file_bytes"] == sum(e[3] for e in files.values())
    got = vr.load(stage)
    assert set(got) == set(files)
    assert got["lib/big.so"][5] == hashlib.sha256(big).hexdigest()
    assert os.stat(hashes).st_mode & 0o777 == 0o600
    assert os.stat(os.path.join(stage, "bin")).st_mode & 0o777 == 0o555
    assert os.stat(os.path.join(stage, "lib/big.so")).st_mtime_ns // 10**9 == 1_500_000_000  # GNU: whole seconds
    res = vs.commit(str(live), vm.digest(entries))
    assert res["hashed_at_commit_files"] == 0 and res["hashed_while_receiving_files"] == len(files)
    assert not os.path.exists(hashes)  # tied to that stage: gone with it
    assert vm.digest(vm.scan(str(live))) == vm.digest(entries)
    assert os.readlink(live / "bin/python") == "/usr/bin/python3"


def test_partial_stream_replaces_linked_files_without_touching_the_live_inode(tmp_path):
    src = make_tree(tmp_path / "src/venv")
    entries, live, _, rc, _ = stream_into_new_stage(tmp_path, src)
    assert rc == 0
    vs.commit(str(live), vm.digest(entries))
    tool = live / "bin/tool"
    before = tool.read_bytes()
    (src / "bin/tool").write_text("#!/opt/sglang/venv/bin/python\nnew\n")
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    assert r["send"] == ["bin/tool"]
    stage = r["stage"]
    # the stage shares every other file with the live venv; put the old tool back in as a link too, as if the
    # stage had kept it: the receiver must unlink it, never write through it
    os.link(tool, os.path.join(stage, "bin/tool"))
    rc, report = receive(stage, source_stream(src, tmp_path, files=r["send"]))
    assert rc == 0 and report["files"] == 1
    assert tool.read_bytes() == before  # the live venv's inode is untouched
    vs.commit(str(live), vm.digest(entries))
    assert (live / "bin/tool").read_text().endswith("new\n")


@pytest.mark.parametrize("threaded", [True, False])
def test_tiny_ring_buffers_still_hash_every_byte_right(tmp_path, monkeypatch, threaded):
    """Two 8 KiB buffers: headers, small files and a large file all straddle buffer switches, and the hasher
    thread (where there is one) is always behind; every hash must still be that of the file's bytes."""
    monkeypatch.setattr(vr, "HASH_THREAD_MIN_CPUS", 1 if threaded else 1 << 20)
    monkeypatch.setattr(vr, "BUF", 8192)
    monkeypatch.setattr(vr, "SLOTS", 2)
    src = make_tree(tmp_path / "src/venv")
    sizes = [0, 1, 511, 512, 513, 4095, 8191, 8192, 8193, 20_000, 1 << 20]
    for i, n in enumerate(sizes * 3):
        (src / f"lib/f{i:03d}").write_bytes(os.urandom(n))
    entries, live, stage, rc, _ = stream_into_new_stage(tmp_path, src)
    assert rc == 0
    got = vr.load(stage)
    want = {e[0]: e[4] for e in entries if e[1] == "f"}
    assert {k: v[5] for k, v in got.items()} == want
    assert vs.commit(str(live), vm.digest(entries))["hashed_at_commit_files"] == 0


def test_pax_archives_hard_links_and_sub_second_times(tmp_path):
    def build(tf):
        add_entry(tf, "./", tarfile.DIRTYPE, mode=0o750)
        add_entry(tf, "bin", tarfile.DIRTYPE)
        info = tarfile.TarInfo("bin/caf\u00e9-" + "n" * 150)  # pax path: non-ASCII and long
        info.size, info.mode = 5, 0o755
        info.pax_headers = {"mtime": "1600000000.25"}
        tf.addfile(info, io.BytesIO(b"hello"))
        add_entry(tf, "bin/twin", tarfile.LNKTYPE, linkname="bin/caf\u00e9-" + "n" * 150)
    stage = tmp_path / "stage"
    stage.mkdir()
    rc, report = receive(stage, framed_tar(tmp_path / "p.bin", build, fmt=tarfile.PAX_FORMAT))
    assert rc == 0 and report["members"] == 4
    one = stage / "bin" / ("caf\u00e9-" + "n" * 150)
    assert one.read_bytes() == b"hello" and os.stat(one).st_mtime_ns == 1_600_000_000_250_000_000
    assert os.stat(stage / "bin/twin").st_ino == os.stat(one).st_ino
    assert stat.S_IMODE(os.stat(stage).st_mode) == 0o750
    got = vr.load(str(stage))
    assert got["bin/twin"][5] == got["bin/caf\u00e9-" + "n" * 150][5] == hashlib.sha256(b"hello").hexdigest()
    assert got["bin/twin"][:5] == vr.stat_key(os.stat(one))  # the link's new ctime: both records still valid


@pytest.mark.parametrize("name,build,why", [
    ("dotdot", lambda tf: add_file(tf, "bin/../../escape"), "'..' component"),
    ("absolute", lambda tf: add_file(tf, "/tmp/escape"), "absolute path"),
    ("through-symlink", lambda tf: (add_entry(tf, "out", tarfile.SYMTYPE, linkname="/tmp"),
                                    add_file(tf, "out/escape")), "not a directory"),
    ("fifo", lambda tf: add_entry(tf, "fifo", tarfile.FIFOTYPE), "a venv cannot hold"),
    ("hardlink-out", lambda tf: add_entry(tf, "x", tarfile.LNKTYPE, linkname="../outside"), "'..' component"),
    ("pax-size", lambda tf: tf.addfile(pax_info("p", {"size": "12x"})), "invalid literal"),
])
def test_members_that_would_escape_or_cannot_be_in_a_venv_are_refused(tmp_path, name, build, why, capsys):
    stage = tmp_path / "stage"
    stage.mkdir()
    fmt = tarfile.PAX_FORMAT if name.startswith("pax") else tarfile.GNU_FORMAT
    rc, _ = receive(stage, framed_tar(tmp_path / f"{name}.bin", build, fmt=fmt))
    assert rc in (4, 5)
    assert why in capsys.readouterr().err
    assert not os.path.exists("/tmp/escape") or name != "through-symlink"
    assert not (tmp_path / "escape").exists() and not (tmp_path / "outside").exists()
    assert not os.path.exists(vr.hashes_path(str(stage)))


def test_truncated_corrupt_or_unframed_streams_fail_and_say_why(tmp_path, capsys):
    src = make_tree(tmp_path / "src/venv")
    (src / "blob").write_bytes(os.urandom(300_000))
    whole = source_stream(src, tmp_path).read_bytes()
    stage = tmp_path / "stage"
    cases = {
        "cut": (whole[:len(whole) // 2], "ended early"),
        "flipped": (whole[:16 + 148] + b"9" + whole[16 + 149:], "checksum"),
        "unframed": (whole[16:], "frame line"),
        "not tar": (vr.FRAME_TAR + b"this is not a tar archive" * 100, "checksum"),
    }
    for what, (data, why) in cases.items():
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        (tmp_path / "bad.bin").write_bytes(data)
        rc, report = receive(stage, tmp_path / "bad.bin")
        assert rc == 4 and report is None, what
        assert why in capsys.readouterr().err, what
        assert not os.path.exists(vr.hashes_path(str(stage))), what
    assert vr.receive(str(tmp_path / "missing")) == 3


@needs_zstd
def test_corrupt_zstd_stream_fails(tmp_path, capsys):
    src = make_tree(tmp_path / "src/venv")
    (src / "blob").write_bytes(os.urandom(300_000))
    data = bytearray(source_stream(src, tmp_path, level=1).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.bin").write_bytes(bytes(data))
    stage = tmp_path / "stage"
    stage.mkdir()
    rc, _ = receive(stage, tmp_path / "bad.bin")
    assert rc != 0
    assert not os.path.exists(vr.hashes_path(str(stage)))


def test_a_file_changed_after_it_was_hashed_is_read_again_and_caught(tmp_path):
    src = make_tree(tmp_path / "src/venv")
    entries, live, stage, rc, _ = stream_into_new_stage(tmp_path, src)
    assert rc == 0
    victim = os.path.join(stage, "bin/tool")
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


@pytest.mark.parametrize("field,want", [
    (b"0000644\0", 0o644), (b"     17 ", 0o17), (b"\0" * 8, 0),
    (b"\x80" + (5 << 33).to_bytes(11, "big"), 5 << 33),  # GNU base-256: sizes of 8 GiB and more
])
def test_numeric_header_fields(field, want):
    assert vr.octal(field, "size") == want
