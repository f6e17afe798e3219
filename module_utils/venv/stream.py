#!/usr/bin/env python3
"""Controller-side venv stream: ``ssh SRC 'tar [| zstd]' | ssh DST venv_receive`` (the target side is
module_utils/venv/receive.py, sent inline, which unpacks the stream into the stage and hashes every file as it
writes it).

This file runs ON THE CONTROLLER (the role calls it with ``delegate_to: localhost``); it is not a target-side
module_utils helper and never runs on the hosts. It opens two ssh connections with the inventory's connection
variables of the two hosts (ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file,
ansible_ssh_common_args, ansible_ssh_extra_args; password authentication is not supported) and joins them with
one pipe: the controller never stores or copies the bytes. With ``--bwlimit-mbps`` a splice(2) relay paces them
instead (and counts them). ``--via direct`` asks the source to ssh to the target itself (the source must reach
the target and hold a key it accepts).

What moves: with ``--full`` the whole venv (byte-code caches excluded); otherwise the relative paths read
as a JSON list from stdin (the venv_stage module's ``send`` list). The stream starts with a frame line that says
whether zstd follows ("auto" decides on the source: see AUTO_ZSTD_MIN_CPUS). The target side only ever writes
into the stage directory; the venv_commit module verifies the stage against the source manifest and swaps it in.

Exit status 0 and a one-line JSON report on stdout: bytes relayed (with a limit; else null), the receiver's
counts (compressed, tar_bytes, members, files_written, file_bytes), seconds, throughput.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

EXCLUDES = ("__pycache__", "*.pyc", ".sglang-venv-digest*")  # derived files: see venv_manifest
PIPE_SIZE = 1 << 20
# ssh's default cipher is chacha20-poly1305; AES-GCM runs on the CPU's AES-NI/PCLMUL units and encrypts several
# times faster per core. A stream is one ssh connection per hop (two through the controller), so the cipher is
# what bounds it: measured here, a 1 GiB relay to /dev/null took 3.5 s with aes128-gcm vs 6.0-7.7 s with chacha20.
# A preference list, not a restriction: the first one the server also offers wins (sshd offers all of these by
# default). "" = ssh's own choice (its config files and defaults).
DEFAULT_CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr"


def ssh_argv(conn: dict, remote: str, extra: list[str] | None = None) -> list[str]:
    """ssh command line for a host from its inventory connection variables (a dict; missing keys = ssh's own).
    conn["ciphers"] (a comma list) comes before the inventory's own arguments, so a -c there still wins."""
    argv = ["ssh", "-o", "BatchMode=yes"]
    if conn.get("ciphers"):
        argv += ["-c", str(conn["ciphers"])]
    if conn.get("port"):
        argv += ["-p", str(conn["port"])]
    if conn.get("user"):
        argv += ["-l", str(conn["user"])]
    if conn.get("key"):
        argv += ["-i", str(conn["key"])]
    argv += shlex.split(conn.get("common_args") or "")
    argv += shlex.split(conn.get("extra_args") or "")
    argv += list(extra or [])
    argv += [str(conn.get("host") or conn["name"]), remote]
    return argv


def _sudo(conn: dict) -> str:
    return "sudo -n " if conn.get("become") and str(conn.get("user", "root")) != "root" else ""


RECEIVER = Path(__file__).with_name("receive.py")
FRAME_TAR = "venv-stream/1 t\n"   # the same 16 bytes as venv_receive.FRAME_TAR / FRAME_ZSTD (checked by a unit test)
FRAME_ZSTD = "venv-stream/1 z\n"
# zstd_level "auto": compress (zstd -1 on every core) only on a source with at least this many CPUs. One ssh
# connection encrypts on one core (AES-GCM: about 1-2 GB/s); zstd -T0 -1 compresses at roughly 0.4 GB/s per core, so
# with many cores it halves the bytes ssh has to carry at no cost in time, while on a small host it competes with ssh
# and tar for the same cores (measured on the 2-core lab: 8.3 s with zstd -1 against 7.0 s without, for 1 GiB).
AUTO_ZSTD_MIN_CPUS = 8
AUTO_ZSTD_LEVEL = 1


def check_level(zstd_level) -> str:
    """"auto" or a zstd level 0-19 (0 = plain tar) -> its text; ValueError for anything else."""
    text = str(zstd_level).strip()
    if text == "auto" or (text.isdigit() and 0 <= int(text) <= 19):
        return text if text == "auto" else str(int(text))
    raise ValueError(f"zstd level must be 'auto' or 0-19, got {zstd_level!r}")


def _printf(frame: str) -> str:
    """A frame line as printf's format argument (no %, the newline as \\n): one line in ps and in logs."""
    return shlex.quote(frame.replace("\n", "\\n"))


def source_pipeline(conn: dict, path: str, full: bool, zstd_level="auto") -> str:
    """Shell pipeline on the source: a framed tar stream of the venv (or of the NUL-separated path list on stdin).

    The first 16 bytes say how the rest is encoded (venv_receive.FRAME_*): the receiver never has to guess, and
    "auto" can decide on the source itself, where the cores are."""
    level = check_level(zstd_level)
    tar = f"{_sudo(conn)}tar -C {shlex.quote(path)} --format=gnu --numeric-owner -cf -"
    if full:
        tar += "".join(f" --exclude={shlex.quote(x)}" for x in EXCLUDES) + " ."
    else:
        tar += " --null --no-recursion --verbatim-files-from -T -"
    # one compound command, so that a pipe after it (the direct path's ssh) gets the frame line too
    plain = f"{{ printf {_printf(FRAME_TAR)} && {tar}; }}"
    if level == "0":
        return plain
    zstd = (f"{{ printf {_printf(FRAME_ZSTD)} && {tar} | zstd -q -T0 "
            f"-{AUTO_ZSTD_LEVEL if level == 'auto' else level} -c; }}")
    if level != "auto":
        return zstd
    # auto never fails for want of zstd on the source: without it the stream is plain tar
    return (f'if [ "$(nproc)" -ge {AUTO_ZSTD_MIN_CPUS} ] && command -v zstd >/dev/null; then {zstd}; '
            f'else {plain}; fi')


def source_command(conn: dict, path: str, full: bool, zstd_level="auto") -> str:
    return "bash -o pipefail -c " + shlex.quote(source_pipeline(conn, path, full, zstd_level))


def target_command(conn: dict, stage: str) -> str:
    """Remote shell command on the target: unpack the stream into the stage (which venv_stage made and owns),
    hashing every file as it is written (module_utils/venv/receive.py, sent inline: nothing is installed on the
    target). The hashes land beside the stage (<stage>.hashes); venv_commit uses the ones whose files are unchanged."""
    code = RECEIVER.read_text(encoding="utf-8")
    python = conn.get("python") or "python3"
    return f"{_sudo(conn)}{shlex.quote(python)} -c {shlex.quote(code)} {shlex.quote(stage)}"


def relay(src_fd: int, dst_fd: int, bwlimit: float = 0.0, chunk: int = 1 << 20) -> tuple[int, bool]:
    """Move bytes src_fd -> dst_fd until EOF (splice, no copy through Python). bwlimit bytes/s, 0 = none.
    Returns (bytes moved, whether the reader closed early)."""
    moved = 0
    started = time.monotonic()
    use_splice = hasattr(os, "splice")
    while True:
        try:
            if use_splice:
                try:
                    n = os.splice(src_fd, dst_fd, chunk)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                        raise
                    use_splice = False
                    continue
            else:
                data = os.read(src_fd, chunk)
                n = len(data)
                view = memoryview(data)
                while view:
                    view = view[os.write(dst_fd, view):]
        except BrokenPipeError:
            return moved, True
        if n == 0:
            return moved, False
        moved += n
        if bwlimit > 0:
            ahead = moved / bwlimit - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


def stream(src: dict, dst: dict, src_path: str, stage: str, files: list[str] | None, zstd_level="auto",
           via: str = "controller", bwlimit: float = 0.0, timeout: float = 0.0, ciphers: str | None = None) -> dict:
    """Move the venv (files=None) or the listed files from src_path on src into stage on dst. ciphers: the ssh
    cipher preference of every hop (None = DEFAULT_CIPHERS, "" = ssh's own); a conn's own "ciphers" key wins."""
    full = files is None
    check_level(zstd_level)
    if ciphers is None:
        ciphers = DEFAULT_CIPHERS
    src, dst = ({"ciphers": ciphers, **src}, {"ciphers": ciphers, **dst}) if ciphers else (src, dst)
    listing = b"".join(f.encode() + b"\0" for f in files or [])
    started = time.monotonic()
    if via == "direct":
        inner = " ".join(shlex.quote(a) for a in ssh_argv(dst, target_command(dst, stage)))
        remote = "bash -o pipefail -c " + shlex.quote(f"{source_pipeline(src, src_path, full, zstd_level)} | {inner}")
        proc = subprocess.run(ssh_argv(src, remote), input=listing, capture_output=True, check=False,
                              timeout=timeout or None)
        if proc.returncode != 0:
            raise RuntimeError(f"direct stream failed (rc={proc.returncode}): {proc.stderr.decode()[-2000:]}")
        return _report(via, None, time.monotonic() - started, proc.stdout)
    # Without a bandwidth limit the two ssh processes share one pipe (as in `ssh src tar | ssh dst tar`): nothing on
    # the controller copies or even touches the bytes. With one, a splice relay paces them.
    paced = bwlimit > 0
    s = subprocess.Popen(ssh_argv(src, source_command(src, src_path, full, zstd_level)), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        d = subprocess.Popen(ssh_argv(dst, target_command(dst, stage)),
                             stdin=subprocess.PIPE if paced else s.stdout, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    except BaseException:
        s.kill()
        raise
    # every stderr/stdout pipe is read all along: a chatty side (tar warning about each of many files) must never
    # block on a full pipe while the controller waits for the other side
    collected = {name: _collect(pipe) for name, pipe in (("err_s", s.stderr), ("out_d", d.stdout),
                                                          ("err_d", d.stderr))}
    moved = None
    try:
        fds = [s.stdout.fileno()] + ([d.stdin.fileno()] if paced else [])
        for fd in fds:  # 1 MiB pipes: fewer wake-ups per MiB for every process on the path
            try:
                fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
            except OSError:
                pass
        s.stdin.write(listing)  # small (paths only); tar reads the whole list before it writes much
        s.stdin.close()
        if paced:
            moved, early = relay(s.stdout.fileno(), d.stdin.fileno(), bwlimit)
            if early:
                # The target side stopped reading: its exit status below says why. Drain the source so it can
                # finish; the stage is verified against the source manifest before any swap anyway.
                while s.stdout.read(1 << 20):
                    pass
            try:
                d.stdin.close()
            except BrokenPipeError:
                pass
        s.stdout.close()  # the target's ssh holds its own copy; ours would keep the pipe open if it died
        deadline = None if not timeout else max(1.0, timeout - (time.monotonic() - started))
        rc_d = d.wait(timeout=deadline)
        deadline = None if not timeout else max(1.0, timeout - (time.monotonic() - started))
        rc_s = s.wait(timeout=deadline)
    except BaseException:
        for p in (s, d):
            if p.poll() is None:
                p.kill()
        raise
    out = {name: got() for name, got in collected.items()}
    err_s = out["err_s"].decode(errors="replace")[-2000:]
    err_d = out["err_d"].decode(errors="replace")[-2000:]
    out_d = out["out_d"]
    if rc_s != 0 or rc_d != 0:
        raise RuntimeError(f"stream failed: source rc={rc_s} {err_s.strip()!r}; target rc={rc_d} {err_d.strip()!r}")
    return _report(via, moved, time.monotonic() - started, out_d)


def _report(via: str, moved: int | None, seconds: float, receiver_out: bytes) -> dict:
    """The stream's report: bytes on the wire (only a paced relay counts them), the receiver's counts, throughput
    (of the wire bytes when counted, else of the uncompressed archive)."""
    report = {"via": via, "bytes": moved, "seconds": round(seconds, 3), **receiver_report(receiver_out)}
    size = moved if moved is not None else report.get("tar_bytes")
    report["mb_per_s"] = round(size / seconds / 1e6, 1) if size and seconds > 0 else None
    return report


def _collect(pipe):
    """Read pipe to EOF in a thread; returns a function that waits for it and gives the bytes."""
    chunks: list[bytes] = []
    t = threading.Thread(target=lambda: chunks.extend(iter(lambda: pipe.read(1 << 16), b"")), daemon=True)
    t.start()

    def got() -> bytes:
        t.join()
        pipe.close()
        return b"".join(chunks)
    return got


def receiver_report(out: bytes) -> dict:
    """The receiver's one-line JSON report (venv_receive.py's stdout) -> compressed, tar_bytes (the uncompressed
    archive), members, files_written, file_bytes."""
    for line in reversed(out.decode(errors="replace").strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            names = {"compressed": "compressed", "tar_bytes": "tar_bytes", "members": "members",
                     "files": "files_written", "file_bytes": "file_bytes"}
            return {ours: data[theirs] for theirs, ours in names.items() if theirs in data}
    return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="source connection, JSON {host,port,user,key,common_args,...}")
    ap.add_argument("--dst", required=True, help="target connection, JSON")
    ap.add_argument("--src-path", required=True, help="venv path on the source")
    ap.add_argument("--stage", required=True, help="stage directory on the target (made by venv_stage)")
    ap.add_argument("--full", action="store_true", help="send the whole venv; else read a JSON path list on stdin")
    ap.add_argument("--zstd-level", default="auto", help="'auto' (zstd -1 on a source with at least "
                    f"{AUTO_ZSTD_MIN_CPUS} CPUs, else none), 0 = no compression, or a level up to 19")
    ap.add_argument("--via", choices=("controller", "direct"), default="controller")
    ap.add_argument("--bwlimit-mbps", type=float, default=0.0, help="relay limit in MB/s (0 = none)")
    ap.add_argument("--timeout", type=float, default=0.0, help="seconds (0 = none)")
    ap.add_argument("--ciphers", default=DEFAULT_CIPHERS,
                    help="ssh cipher preference of every hop (comma list; '' = ssh's own choice)")
    args = ap.parse_args(argv)
    files = None if args.full else json.load(sys.stdin)
    if files is not None and not isinstance(files, list):
        print("stdin must be a JSON list of relative paths", file=sys.stderr)
        return 2
    try:
        report = stream(json.loads(args.src), json.loads(args.dst), args.src_path, args.stage, files,
                        args.zstd_level, args.via, args.bwlimit_mbps * 1e6, args.timeout, args.ciphers)
    except (RuntimeError, ValueError, subprocess.TimeoutExpired, OSError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    report["files"] = "all" if files is None else len(files)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
