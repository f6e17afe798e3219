#!/usr/bin/env python3
"""Controller-side venv stream: ``ssh SRC 'tar | zstd' | ssh DST 'zstd -d | tar -x -C STAGE'`` (the target side run by
venv_receive.py, which hashes each file once tar has written it).

This file runs ON THE CONTROLLER (the role calls it with ``delegate_to: localhost``); it is not a target-side
module_utils helper and never runs on the hosts. It opens two ssh connections with the inventory's connection
variables of the two hosts (ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file,
ansible_ssh_common_args, ansible_ssh_extra_args; password authentication is not supported) and moves bytes
from the first to the second with splice(2): the controller relays compressed bytes and counts them, it
never stores them. ``--via direct`` instead asks the source to ssh to the target itself (the source must
reach the target and hold a key it accepts).

What moves: with ``--full`` the whole venv (byte-code caches excluded); otherwise the relative paths read
as a JSON list from stdin (the venv_stage module's ``send`` list). The target side only ever writes into the
stage directory; the venv_commit module verifies the stage against the source manifest and swaps it in.

Exit status 0 and a one-line JSON report on stdout: bytes relayed, seconds, throughput.
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
import time
from pathlib import Path

EXCLUDES = ("__pycache__", "*.pyc")
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


def source_pipeline(conn: dict, path: str, full: bool, zstd_level: int) -> str:
    """Shell pipeline on the source: a tar stream of the venv (or of the NUL-separated path list on stdin)."""
    tar = f"{_sudo(conn)}tar -C {shlex.quote(path)} --numeric-owner -cf -"
    if full:
        tar += "".join(f" --exclude={shlex.quote(x)}" for x in EXCLUDES) + " ."
    else:
        tar += " --null --no-recursion --verbatim-files-from -T -"
    if zstd_level > 0:
        tar += f" | zstd -q -T0 -{int(zstd_level)} -c"
    return tar


def source_command(conn: dict, path: str, full: bool, zstd_level: int) -> str:
    return "bash -o pipefail -c " + shlex.quote(source_pipeline(conn, path, full, zstd_level))


RECEIVER = Path(__file__).with_name("venv_receive.py")


def target_command(conn: dict, stage: str, zstd_level: int) -> str:
    """Remote shell command on the target: unpack into the stage (which venv_stage made and owns), hashing every
    file while tar goes on (module_utils/venv_receive.py, sent inline: nothing is installed on the target).
    The hashes land beside the stage (<stage>.hashes); venv_commit uses the ones whose files are unchanged."""
    code = RECEIVER.read_text(encoding="utf-8")
    python = conn.get("python") or "python3"
    return f"{_sudo(conn)}{shlex.quote(python)} -c {shlex.quote(code)} {shlex.quote(stage)} {int(zstd_level)}"


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


def stream(src: dict, dst: dict, src_path: str, stage: str, files: list[str] | None, zstd_level: int = 1,
           via: str = "controller", bwlimit: float = 0.0, timeout: float = 0.0, ciphers: str | None = None) -> dict:
    """Move the venv (files=None) or the listed files from src_path on src into stage on dst. ciphers: the ssh
    cipher preference of every hop (None = DEFAULT_CIPHERS, "" = ssh's own); a conn's own "ciphers" key wins."""
    full = files is None
    if ciphers is None:
        ciphers = DEFAULT_CIPHERS
    src, dst = ({"ciphers": ciphers, **src}, {"ciphers": ciphers, **dst}) if ciphers else (src, dst)
    listing = b"".join(f.encode() + b"\0" for f in files or [])
    started = time.monotonic()
    if via == "direct":
        inner = " ".join(shlex.quote(a) for a in ssh_argv(dst, target_command(dst, stage, zstd_level)))
        remote = "bash -o pipefail -c " + shlex.quote(f"{source_pipeline(src, src_path, full, zstd_level)} | {inner}")
        proc = subprocess.run(ssh_argv(src, remote), input=listing, capture_output=True, check=False,
                              timeout=timeout or None)
        if proc.returncode != 0:
            raise RuntimeError(f"direct stream failed (rc={proc.returncode}): {proc.stderr.decode()[-2000:]}")
        return {"via": via, "bytes": None, "seconds": round(time.monotonic() - started, 3)}
    s = subprocess.Popen(ssh_argv(src, source_command(src, src_path, full, zstd_level)), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    d = subprocess.Popen(ssh_argv(dst, target_command(dst, stage, zstd_level)), stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    # 1 MiB pipes: the relay wakes up once per MiB instead of once per 64 KiB (matters on a busy controller)
    for fd in (s.stdout.fileno(), d.stdin.fileno()):
        try:
            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
        except OSError:
            pass
    try:
        s.stdin.write(listing)  # small (paths only); tar reads the whole list before it writes much
        s.stdin.close()
        moved, early = relay(s.stdout.fileno(), d.stdin.fileno(), bwlimit)
        if early:
            # The target side stopped reading. tar -x stops at the end-of-archive blocks and may leave the
            # record padding unread; anything else shows up as a non-zero exit status below. Drain the source
            # so it can finish; the stage is verified against the source manifest before any swap anyway.
            while s.stdout.read(1 << 20):
                pass
        try:
            d.stdin.close()
        except BrokenPipeError:
            pass
        deadline = None if not timeout else max(1.0, timeout - (time.monotonic() - started))
        rc_s = s.wait(timeout=deadline)
        rc_d = d.wait(timeout=deadline)
    except BaseException:
        for p in (s, d):
            if p.poll() is None:
                p.kill()
        raise
    err_s = s.stderr.read().decode(errors="replace")[-2000:]
    err_d = d.stderr.read().decode(errors="replace")[-2000:]
    if rc_s != 0 or rc_d != 0:
        raise RuntimeError(f"stream failed: source rc={rc_s} {err_s.strip()!r}; target rc={rc_d} {err_d.strip()!r}")
    seconds = time.monotonic() - started
    return {"via": via, "bytes": moved, "seconds": round(seconds, 3),
            "mb_per_s": round(moved / seconds / 1e6, 1) if seconds > 0 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="source connection, JSON {host,port,user,key,common_args,...}")
    ap.add_argument("--dst", required=True, help="target connection, JSON")
    ap.add_argument("--src-path", required=True, help="venv path on the source")
    ap.add_argument("--stage", required=True, help="stage directory on the target (made by venv_stage)")
    ap.add_argument("--full", action="store_true", help="send the whole venv; else read a JSON path list on stdin")
    ap.add_argument("--zstd-level", type=int, default=1, help="0 = no compression")
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
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    report["files"] = "all" if files is None else len(files)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
