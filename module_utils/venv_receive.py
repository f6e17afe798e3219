"""Target side of a venv stream (stdlib only): unpack into the stage and hash every file as soon as tar is done with it.

The controller sends this file's text as ``python3 -c CODE STAGE ZSTD_LEVEL`` over ssh (it is never
installed on the target). stdin is the stream; it goes straight to ``[zstd -d |] tar -x -v`` (this process never
touches the bytes). GNU tar prints a member's name before it extracts the member, so once the name of member N+1
has arrived, member N is complete on disk, its mode and times set. Such a file is then read back from the stage (the
page cache, right after tar wrote it) and hashed by a small pool of threads while tar goes on with the rest: the
verification that used to read the whole stage after the transfer now overlaps it.

HASHES (``<stage>.hashes``, beside the stage, written 0600 at the end) maps each hashed path to [size, mtime_ns, ctime_ns, inode,
device, sha256], the stat key taken before the read and checked unchanged after it. venv_stage.commit trusts an
entry only while the file still has that key (the same rule as the hash cache), hashes everything else itself,
and compares the complete manifest with the source's digest before any swap. So this is never the last word:
a lost, partial or missing HASHES file only means commit reads more.

Exit status: tar's (or zstd's) when either failed, else 0; a hashing error is reported on stderr and only leaves
that file out of HASHES.
"""
from __future__ import annotations

import codecs
import errno
import fcntl
import hashlib
import json
import os
import queue
import shlex
import stat
import subprocess
import sys
import threading
import time

HASH_THREADS = 1  # hashlib releases the GIL, but the lab's 2 cores are busy with ssh and tar; more threads only contend
CHUNK = 1 << 20
BATCH_S = 0.02
VERSION = 1


def member_path(line: bytes) -> str:
    """tar -v name (``--quoting-style=c``: "..." with C escapes) -> path relative to the stage, '' for the root."""
    text = line.rstrip(b"\n")
    if text.startswith(b'"') and text.endswith(b'"') and len(text) >= 2:
        text = codecs.escape_decode(text[1:-1])[0]
    name = os.fsdecode(text).rstrip("/")
    while name.startswith("./"):
        name = name[2:]
    return "" if name in (".", "") else name


def stat_key(st) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def hash_file(root: str, rel: str, view: memoryview | None = None):
    """-> [size, mtime_ns, ctime_ns, inode, device, sha256] of a regular file, None when it is not one (a symlink,
    a directory) or it changed while being read. view: a reusable read buffer."""
    full = os.path.join(root, rel)
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR):  # a symlink or a directory: nothing to hash
            return None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None
        if view is None:
            view = memoryview(bytearray(CHUNK))
        h = hashlib.sha256()
        while True:
            n = os.readv(fd, [view])
            if not n:
                break
            h.update(view[:n])
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if stat_key(before) != stat_key(after):
        return None
    return stat_key(after) + [h.hexdigest()]


def hashes_path(stage: str) -> str:
    """Where receive() leaves its hashes for `stage` (and where venv_stage.commit looks)."""
    return os.path.normpath(stage) + ".hashes"


def extract_command(stage: str, zstd_level: int) -> str:
    tar = "tar -C %s --numeric-owner -xpvf - --quoting-style=c" % shlex.quote(stage)
    return ("zstd -q -d -c | " + tar) if zstd_level > 0 else tar


def receive(stage: str, zstd_level: int, stdin=None, threads: int = HASH_THREADS) -> int:
    if not os.path.isdir(stage):
        sys.stderr.write("stage %s missing: run venv_stage first\n" % stage)
        return 3
    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", extract_command(stage, zstd_level)],
                            stdin=stdin if stdin is not None else sys.stdin, stdout=subprocess.PIPE)
    todo: queue.Queue = queue.Queue()
    done: dict = {}
    errors: list = []
    lock = threading.Lock()

    def worker():
        view = memoryview(bytearray(CHUNK))  # one buffer per thread, not one per file
        while True:
            batch = todo.get()
            if batch is None:
                return
            for rel in batch:
                try:
                    rec = hash_file(stage, rel, view)
                except OSError as exc:
                    with lock:
                        errors.append("%s: %s" % (rel, exc))
                    continue
                if rec is not None:
                    with lock:
                        done[rel] = rec

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, threads))]
    for t in pool:
        t.start()
    previous = None
    rest = b""
    listing = proc.stdout.fileno()
    try:
        fcntl.fcntl(listing, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)  # ~15k names: tar never waits on us
    except OSError:
        pass
    while True:
        # tar flushes after every name: reading as they come would cost a wake-up (and a batch) per file, 25k for
        # a venv. Names are collected for BATCH_S instead and handed to the pool as one batch.
        block = os.read(listing, 1 << 20)
        if not block:
            break
        if len(block) < 1 << 16:
            time.sleep(BATCH_S)
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        batch = []
        for line in lines:
            rel = member_path(line)
            if previous:
                batch.append(previous)  # tar has moved on: the previous member is complete
            previous = rel
        if batch:
            todo.put(batch)
    if rest:  # a last name without its newline
        if previous:
            todo.put([previous])
        previous = member_path(rest)
    rc = proc.wait()
    if previous and rc == 0:
        todo.put([previous])
    for _ in pool:
        todo.put(None)
    for t in pool:
        t.join()
    for e in errors[:5]:
        sys.stderr.write("venv_receive: not hashed (commit will read it): %s\n" % e)
    if rc == 0:
        out = hashes_path(stage)
        tmp = out + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({"version": VERSION, "root": os.path.abspath(stage), "files": done},
                                separators=(",", ":")))  # dumps: C encoder, unlike dump()
        os.replace(tmp, out)
    return rc


def load(stage: str) -> dict:
    """The HASHES file receive() wrote for stage: rel path -> record ({} when absent, foreign or not ours)."""
    try:
        fd = os.open(hashes_path(stage), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return {}
        try:
            data = json.load(fh)
        except ValueError:
            return {}
    if not isinstance(data, dict) or data.get("version") != VERSION or data.get("root") != os.path.abspath(stage):
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


if __name__ == "__main__":
    sys.exit(receive(sys.argv[1], int(sys.argv[2])))
