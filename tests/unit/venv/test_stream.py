"""ansible.module_utils.venv.stream (controller side): ssh command lines from inventory vars, and a whole stream
through the real tar/zstd pipeline with a stand-in `ssh` that runs the remote command locally."""
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from ansible.module_utils.venv import bytecode as vbc
from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import stage as vs
from ansible.module_utils.venv import stream as st
from tests.helpers.venv_tree import make_tree

CONN = {"name": "ct200-lab", "host": "10.0.0.2", "port": 2222, "user": "root", "key": "/k/id",
        "common_args": "-o StrictHostKeyChecking=no -o 'UserKnownHostsFile=/dev/null'", "extra_args": "-C"}


def test_ssh_argv_uses_inventory_connection_vars():
    argv = st.ssh_argv(CONN, "true")
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert argv[3:9] == ["-p", "2222", "-l", "root", "-i", "/k/id"]
    assert "UserKnownHostsFile=/dev/null" in argv and "-C" in argv
    assert argv[-2:] == ["10.0.0.2", "true"]
    assert st.ssh_argv({"name": "h"}, "x")[-2:] == ["h", "x"]


def test_commands_quote_paths_and_pick_mode():
    full = st.source_command(CONN, "/opt/my venv", True, 1)
    inner = shlex.split(full)[-1]
    assert "tar -C '/opt/my venv' --format=gnu" in inner and "--exclude=__pycache__" in inner
    assert "zstd -q -T0 -1 -c" in inner and "printf 'venv-stream/1 z\\n'" in inner and "nproc" not in inner
    listed = shlex.split(st.source_command(CONN, "/v", False, 0))[-1]
    assert "--null --no-recursion" in listed and "-T -" in listed and "zstd" not in listed
    auto = st.source_pipeline(CONN, "/v", True, "auto")
    assert auto.startswith(f'if [ "$(nproc)" -ge {st.AUTO_ZSTD_MIN_CPUS} ] && command -v zstd >/dev/null; then '
                           "{ printf 'venv-stream/1 z")
    assert "else { printf 'venv-stream/1 t\\n' && tar" in auto and "\n" not in auto  # one line in ps and logs
    tgt = shlex.split(st.target_command(CONN, "/opt/my stage"))
    assert tgt[:2] == ["python3", "-c"] and "def receive(" in tgt[2]
    assert tgt[3:] == ["/opt/my stage"]
    become = dict(CONN, user="deploy", become=True, python="/usr/bin/python3.11")
    assert "sudo -n tar" in st.source_pipeline(become, "/v", True, 0)
    assert shlex.split(st.target_command(become, "/s"))[:3] == ["sudo", "-n", "/usr/bin/python3.11"]


@pytest.mark.parametrize("bad", ["fast", -1, 20, "1; rm -rf /", ""])
def test_bad_zstd_levels_are_refused_before_any_ssh(bad, tmp_path):
    with pytest.raises(ValueError, match="zstd level"):
        st.stream({"name": "a"}, {"name": "b"}, "/v", str(tmp_path), None, zstd_level=bad)
    assert st.check_level(" 3 ") == "3" and st.check_level("auto") == "auto" and st.check_level(0) == "0"


def test_cipher_preference_goes_before_the_inventory_args():
    argv = st.ssh_argv(dict(CONN, ciphers="aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"), "true")
    assert argv[3:5] == ["-c", "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com"]
    assert argv.index("-c") < argv.index("StrictHostKeyChecking=no")  # a -c in common_args comes later and wins
    assert "-c" not in st.ssh_argv(CONN, "true")  # nothing asked: ssh's own choice (the bench's raw baseline)


def test_relay_counts_and_limits_bandwidth():
    r, w = os.pipe()
    r2, w2 = os.pipe()
    payload = b"x" * 300_000
    os.write(w, payload[:65536])
    pid = os.fork()
    if pid == 0:  # writer child: the rest of the payload
        os.close(r)
        os.write(w, payload[65536:])
        os._exit(0)
    os.close(w)
    got = bytearray()
    reader_pid = os.fork()
    if reader_pid == 0:
        os.close(w2)
        while os.read(r2, 1 << 16):
            pass
        os._exit(0)
    os.close(r2)
    moved, early = st.relay(r, w2)
    assert not early
    os.close(w2)
    os.waitpid(pid, 0)
    os.waitpid(reader_pid, 0)
    assert moved == len(payload) and not got


@pytest.fixture()
def fake_ssh(tmp_path, monkeypatch):
    """`ssh ... HOST CMD` -> `bash -c CMD` on this machine (all other arguments ignored)."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    script = bindir / "ssh"
    script.write_text('#!/bin/bash\nfor a; do last="$a"; done\nexec bash -c "$last"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return bindir


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd not installed")
@pytest.mark.parametrize("level,bwlimit", [(0, 0), (1, 0), ("auto", 0), (0, 50e6)])
def test_stream_full_then_partial_repair(tmp_path, fake_ssh, level, bwlimit):
    src = make_tree(tmp_path / "src/venv")
    (src / "data.bin").write_bytes(os.urandom(200_000))
    live = tmp_path / "dst/venv"
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    rep = st.stream({"name": "a"}, {"name": "b"}, str(src), r["stage"], None, zstd_level=level, bwlimit=bwlimit)
    assert rep["compressed"] is (level == 1 or (level == "auto" and (os.cpu_count() or 1) >= st.AUTO_ZSTD_MIN_CPUS))
    assert rep["files_written"] == sum(1 for e in entries if e[1] == "f") and rep["tar_bytes"] > 200_000
    assert (rep["bytes"] is None) is (bwlimit == 0)  # only the paced relay counts wire bytes
    vs.commit(str(live), vm.digest(entries))
    assert vm.digest(vm.scan(str(live))) == vm.digest(entries)
    # byte-code never travels (the source's pyc is junk): the commit compiled the target's own before the swap
    assert b"junk" not in {p.read_bytes() for p in (live / "lib/python3.11/site-packages/pkg/__pycache__").iterdir()}
    assert vbc.run(str(live), "check")["invalid"] == 0
    # corrupt one file: only it moves
    (live / "data.bin").write_bytes(b"\0" * 200_000)
    r = vs.prepare(str(live), entries)
    assert r["send"] == ["data.bin"]
    rep = st.stream({"name": "a"}, {"name": "b"}, str(src), r["stage"], r["send"], zstd_level=level, bwlimit=bwlimit)
    assert rep["files_written"] == 1 and 200_000 < rep["tar_bytes"] < 260_000
    vs.commit(str(live), vm.digest(entries))
    assert (live / "data.bin").read_bytes() == (src / "data.bin").read_bytes()


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd not installed")
@pytest.mark.parametrize("cpus,compressed", [(st.AUTO_ZSTD_MIN_CPUS, True), (st.AUTO_ZSTD_MIN_CPUS - 1, False)])
def test_auto_compresses_only_on_a_source_with_cores_to_spare(tmp_path, fake_ssh, cpus, compressed):
    (fake_ssh / "nproc").write_text(f"#!/bin/sh\necho {cpus}\n")
    (fake_ssh / "nproc").chmod(0o755)
    src = make_tree(tmp_path / "src/venv")
    live = tmp_path / "dst/venv"
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    rep = st.stream({"name": "a"}, {"name": "b"}, str(src), r["stage"], None)
    assert rep["compressed"] is compressed
    vs.commit(str(live), vm.digest(entries))


def test_direct_path_carries_the_frame_to_the_target(tmp_path, fake_ssh):
    src = make_tree(tmp_path / "src/venv")
    live = tmp_path / "dst/venv"
    entries = vm.scan(str(src))
    r = vs.prepare(str(live), entries)
    rep = st.stream({"name": "a"}, {"name": "b"}, str(src), r["stage"], None, zstd_level=0, via="direct")
    assert rep["via"] == "direct" and rep["compressed"] is False and rep["files_written"] == 3
    vs.commit(str(live), vm.digest(entries))


def test_stream_fails_loudly_without_stage_and_cli_reports_json(tmp_path, fake_ssh):
    src = make_tree(tmp_path / "src/venv")
    with pytest.raises(RuntimeError, match="stage .* missing"):
        st.stream({"name": "a"}, {"name": "b"}, str(src), str(tmp_path / "nostage"), None, zstd_level=0)
    stage = tmp_path / "stage"
    (stage / "bin").mkdir(parents=True)  # venv_stage.prepare makes every directory before a partial stream
    out = subprocess.run([sys.executable, st.__file__, "--src", '{"name": "a"}', "--dst", '{"name": "b"}',
                          "--src-path", str(src), "--stage", str(stage), "--zstd-level", "0"],
                         input=json.dumps(["bin/tool"]), capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["files"] == 1 and report["files_written"] == 1 and report["tar_bytes"] >= 1024
    assert (stage / "bin/tool").exists() and not (stage / "pyvenv.cfg").exists()
    bad = subprocess.run([sys.executable, st.__file__, "--src", '{"name": "a"}', "--dst", '{"name": "b"}',
                          "--src-path", str(src), "--stage", str(stage), "--zstd-level", "fast", "--full"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "zstd level must be" in bad.stderr
