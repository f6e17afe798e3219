"""Target side of a venv stream (stdlib only): unpack the tar stream into the stage, hashing every file on the way.

The controller sends this file's text as ``python3 -c CODE STAGE`` over ssh (it is never installed on the
target). stdin is the stream: a 16-byte frame line (FRAME_TAR or FRAME_ZSTD, written by the source's pipeline, see
venv_stream.source_pipeline), then a GNU or POSIX (pax) tar archive, zstd-compressed after FRAME_ZSTD (``zstd -d``
then decompresses it into this process). This process is the extractor: each member's bytes are read
from the stream once into a ring of buffers, written to the stage from there and hashed (sha256) from there, by a
second thread where there are CPUs for one (HashPipe), so verification costs no second read of the stage and no
second process. Measured: on
the 2-CPU lab (1 GiB, 25k files) ``tar -x`` plus reading every file back and hashing it cost 2.2-2.7 CPU-s more
than a plain ``tar -x``; on a 16-CPU server (7.2 GB of torch + CUDA, 49k files) this receiver took 8.9 s against
16.8 s for ``tar -x`` then hashing, and 6.5 s for a ``tar -x`` that verifies nothing (bench/device_venv_receive.py).

What it writes, and only below the stage: regular files (created new, O_EXCL, never written through an existing
inode: the stage of a partial stream shares unchanged files with the live venv by hard link), directories, symlinks
and hard links to members earlier in the same stream. Modes, mtimes and (as root) numeric owners are those of the
archive; directory modes and mtimes are set last, as tar does. A member name that is absolute, has a ``..``
component, or would be reached through a symlink is refused, as is any member type a venv cannot hold (devices,
fifos, sparse files).

HASHES (``<stage>.hashes``, beside the stage, written 0600 at the end) maps each regular file to [size, mtime_ns,
ctime_ns, inode, device, sha256]: the sha256 of the bytes written, the stat key taken once the file was complete.
venv_stage.commit trusts an entry only while the file still has that key (the same rule as the hash cache), hashes
everything else itself, and compares the complete manifest with the source's digest before any swap. So this is
never the last word: a lost, partial or missing HASHES file only means commit reads more.

stdout: one JSON line, {"compressed", "tar_bytes", "members", "files", "file_bytes", "seconds"}. Exit status: 0; 3
when the stage is missing; 4 when the stream has no frame line, is not a valid archive or ends early; 5 when a
member cannot be written (or zstd cannot run); zstd's own status when it failed. Every failure names the member
and the reason on stderr, and writes no HASHES.
"""
from __future__ import annotations

import hashlib
import json
import os
import queue
import stat
import subprocess
import sys
import threading
import time

BLOCK = 512
BUF = 4 << 20
SLOTS = 3  # ring buffers: one being read into, one or two being hashed
HASH_THREAD_MIN_CPUS = 4  # hash on a thread of its own only with at least this many usable CPUs (HashPipe)
VERSION = 1
ZERO_BLOCK = bytes(BLOCK)
FRAME_TAR = b"venv-stream/1 t\n"
FRAME_ZSTD = b"venv-stream/1 z\n"
REGULAR, HARDLINK, SYMLINK, DIRECTORY = b"0", b"1", b"2", b"5"
LONGNAME, LONGLINK, PAX, PAX_GLOBAL = b"L", b"K", b"x", b"g"


class StreamError(Exception):
    """The stream is not a tar archive we can trust, or ends early (exit 4)."""


class WriteError(Exception):
    """A member cannot be written into the stage (exit 5)."""


def hashes_path(stage: str) -> str:
    """Where receive() leaves its hashes for `stage` (and where venv_stage.commit looks)."""
    return os.path.normpath(stage) + ".hashes"


def stat_key(st) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def octal(field: bytes, what: str) -> int:
    """A numeric header field: octal text, or GNU base-256 (first byte 0x80 / 0xff) for large values."""
    if field and field[0] in (0x80, 0xFF):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] == 0xFF else value
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise StreamError("bad %s field %r in a tar header" % (what, field)) from None


def checksum_ok(header: bytes) -> bool:
    want = octal(header[148:156], "checksum")
    return want == sum(header[:148]) + 256 + sum(header[156:])


def cstr(field: bytes) -> bytes:
    return field.split(b"\0", 1)[0]


def parse_pax(data: bytes) -> dict:
    """pax extended header records ``LEN key=value\\n`` -> {key: value bytes}."""
    out = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError:
            raise StreamError("bad pax record at offset %d" % pos) from None
        record = data[space + 1:pos + length - 1]
        if length <= 0 or b"=" not in record:
            raise StreamError("bad pax record at offset %d" % pos)
        key, value = record.split(b"=", 1)
        out[key.decode("utf-8", "replace")] = value
        pos += length
    return out


def safe_rel(name: bytes) -> str:
    """Archive member name -> path relative to the stage ('' for the stage itself); refuses an escape."""
    text = os.fsdecode(name)
    if text.startswith("/") or "\0" in text:
        raise StreamError("refusing member %r: an absolute path" % text)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise StreamError("refusing member %r: a '..' component" % text)
    return "/".join(parts)


class HashPipe:
    """sha256 of the file bytes on a thread of its own, beside the writes (hashlib releases the GIL). The bytes are
    views of the Reader's ring buffers: each buffer's views go over as one batch when the Reader leaves it, and the
    Reader reuses a buffer only once its batch is hashed. One hand-over per buffer (4 MiB), not per file.

    Measured on a 16-CPU server (7.2 GB torch + CUDA site-packages, 49k files): hashing in line made the receiver
    0.58x of a plain `tar -x`, sha256 running at about 1 GB/s on one core while the writes waited; with this thread,
    1.67x faster. Only where there is a core for it (HASH_THREAD_MIN_CPUS): on the 2-CPU lab, where ssh, the source
    and this process already share both cores, the hand-overs cost 0.2-0.5 s per GiB, so the hashing stays in line."""

    def __init__(self, slots: int, threaded: bool = True):
        self.threaded = threaded
        self.pending: list = []
        self.free = [threading.Event() for _ in range(slots)]
        for e in self.free:
            e.set()
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        if threaded:
            self.thread.start()

    def add(self, h, view) -> None:
        if self.threaded:
            self.pending.append((h, view))
        else:
            h.update(view)

    def switch(self, leaving: int, entering: int) -> None:
        """The Reader moves from buffer `leaving` to `entering`: hash the first, wait until the second is free."""
        if not self.threaded:
            return
        self.free[leaving].clear()
        self.q.put((leaving, self.pending))
        self.pending = []
        self.free[entering].wait()

    def _run(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            slot, batch = item
            try:
                for h, view in batch:
                    h.update(view)
            except BaseException as exc:  # reported by finish(); the buffer is released all the same
                self.error = exc
            if slot is not None:
                self.free[slot].set()

    def finish(self) -> None:
        """Hash what is pending and wait for all of it."""
        if not self.threaded:
            return
        self.q.put((None, self.pending))
        self.pending = []
        self.stop()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        if self.thread.is_alive():
            self.q.put(None)
            self.thread.join()


class Reader:
    """Reads from a pipe into a ring of buffers and hands out file bytes as views of them (no copy). A buffer is
    reused only after the HashPipe has released it; counts the bytes."""

    def __init__(self, fd: int, hasher: HashPipe | None = None, size: int = 0, slots: int = 0):
        self.fd = fd
        self.views = [memoryview(bytearray(size or BUF)) for _ in range(slots or SLOTS)]
        self.slot = 0
        self.view = self.views[0]
        self.start = self.end = 0
        self.total = 0
        self.hasher = hasher

    def _fill(self) -> bool:
        if self.end == len(self.view):  # this buffer is full: the next one, with what is left unread of this one
            nxt = (self.slot + 1) % len(self.views)
            if self.hasher is not None:
                self.hasher.switch(self.slot, nxt)
            n = self.end - self.start
            self.views[nxt][:n] = self.view[self.start:self.end]
            self.slot, self.view = nxt, self.views[nxt]
            self.start, self.end = 0, n
        got = os.readv(self.fd, [self.view[self.end:]])
        self.end += got
        self.total += got
        return got > 0

    def take(self, n: int) -> bytes:
        """Exactly n bytes (n <= BUF) as bytes; StreamError at an early end."""
        while self.end - self.start < n:
            if not self._fill():
                raise StreamError("the stream ended early (%d bytes in, %d more wanted)" % (self.total, n))
        data = bytes(self.view[self.start:self.start + n])
        self.start += n
        return data

    def chunks(self, n: int):
        """n bytes as memoryview slices of the ring buffers (valid until the HashPipe releases their buffer)."""
        while n > 0:
            if self.start == self.end and not self._fill():
                raise StreamError("the stream ended early (%d bytes in, %d more wanted)" % (self.total, n))
            k = min(n, self.end - self.start)
            yield self.view[self.start:self.start + k]
            self.start += k
            n -= k

    def skip(self, n: int) -> None:
        for _ in self.chunks(n):
            pass

    def drain(self) -> None:
        """Read to EOF (the record padding after the end-of-archive blocks), so the sender never sees a broken pipe.
        Only once nothing is left to hash: it overwrites the ring."""
        while os.readv(self.fd, [self.views[0]]):
            pass


class Extractor:
    def __init__(self, stage: str, hasher: HashPipe):
        self.stage = os.path.abspath(stage)
        self.hasher = hasher
        self.root = os.geteuid() == 0
        self.done: dict = {}           # rel -> stat key + sha256 (HASHES; a hash object until finish())
        self.dirs_ok = {""}            # relative dirs known to be real directories (not symlinks) in the stage
        self.dir_meta: list = []       # (rel, mode, mtime_ns, uid, gid): applied last, deepest first
        self.members = self.files = self.file_bytes = 0

    def path(self, rel: str) -> str:
        return os.path.join(self.stage, rel) if rel else self.stage

    def parent_ok(self, rel: str) -> None:
        """Every directory above rel must be a real directory in the stage: never write through a symlink."""
        parent = rel.rpartition("/")[0]
        if parent in self.dirs_ok:
            return
        so_far = ""
        for part in parent.split("/"):
            so_far = part if not so_far else so_far + "/" + part
            if so_far in self.dirs_ok:
                continue
            try:
                st = os.lstat(self.path(so_far))
            except FileNotFoundError:
                raise WriteError("cannot write %r: its directory %r is missing from the stage (not in the stream "
                                 "before it)" % (rel, so_far)) from None
            if not stat.S_ISDIR(st.st_mode):
                raise WriteError("refusing %r: %r in the stage is not a directory (a symlink?)" % (rel, so_far))
            self.dirs_ok.add(so_far)

    def _clear(self, full: str) -> None:
        """Make room for a new member at full: an existing non-directory goes (unlinked, never overwritten)."""
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise WriteError("cannot replace directory %s with a non-directory" % full)
        os.unlink(full)

    def owner(self, full: str, uid: int, gid: int, fd: int | None = None) -> None:
        if self.root and (uid, gid) != (0, 0):
            if fd is not None:
                os.fchown(fd, uid, gid)
            else:
                os.lchown(full, uid, gid)

    def regular(self, rel: str, reader: Reader, size: int, mode: int, mtime_ns: int, uid: int, gid: int) -> None:
        full = self.path(rel)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(full, flags, mode & 0o777)
        except FileExistsError:
            self._clear(full)
            fd = os.open(full, flags, mode & 0o777)
        try:
            h = hashlib.sha256()
            for piece in reader.chunks(size):
                self.hasher.add(h, piece)
                while piece:
                    piece = piece[os.write(fd, piece):]
            self.owner(full, uid, gid, fd)
            if mode & 0o7000 or (self.root and (uid, gid) != (0, 0)):
                os.fchmod(fd, mode & 0o7777)  # after chown, which clears set-id bits
            os.utime(fd, ns=(mtime_ns, mtime_ns))
            st = os.fstat(fd)
        finally:
            os.close(fd)
        self.done[rel] = stat_key(st) + [h]
        self.files += 1
        self.file_bytes += size

    def hardlink(self, rel: str, target: str) -> None:
        full = self.path(rel)
        src = self.path(target)
        st = os.lstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise WriteError("hard link %r -> %r: the target is not a regular file from this stream" % (rel, target))
        self._clear(full)
        os.link(src, full, follow_symlinks=False)
        rec = self.done.get(target)
        if rec is not None:  # the link changed the inode's ctime: both names get the new key
            key = stat_key(os.lstat(full))
            self.done[target] = key + [rec[5]]
            self.done[rel] = key + [rec[5]]

    def symlink(self, rel: str, target: str, mtime_ns: int, uid: int, gid: int) -> None:
        full = self.path(rel)
        self._clear(full)
        os.symlink(target, full)
        self.owner(full, uid, gid)
        os.utime(full, ns=(mtime_ns, mtime_ns), follow_symlinks=False)

    def directory(self, rel: str, mode: int, mtime_ns: int, uid: int, gid: int) -> None:
        full = self.path(rel)
        if rel:
            try:
                os.mkdir(full, 0o700)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(full).st_mode):
                    raise WriteError("refusing directory %r: a non-directory is in its place" % rel) from None
        self.dirs_ok.add(rel)
        self.dir_meta.append((rel, mode, mtime_ns, uid, gid))

    def finish_dirs(self) -> None:
        for rel, mode, mtime_ns, uid, gid in sorted(self.dir_meta, key=lambda d: -d[0].count("/") - bool(d[0])):
            full = self.path(rel)
            self.owner(full, uid, gid)
            os.chmod(full, mode & 0o7777)
            os.utime(full, ns=(mtime_ns, mtime_ns))

    def run(self, reader: Reader) -> None:
        long_name = long_link = None
        pax: dict = {}
        while True:
            header = reader.take(BLOCK)
            if header == ZERO_BLOCK:  # end of archive; the rest (second zero block, padding) is drained later
                return
            if not checksum_ok(header):
                raise StreamError("bad tar header checksum %d bytes into the stream: not a tar archive, or "
                                  "corrupted in transit" % (reader.total - (reader.end - reader.start) - BLOCK))
            kind = header[156:157]
            size = octal(header[124:136], "size")
            if "size" in pax:
                size = int(pax["size"])
            padded = -(-size // BLOCK) * BLOCK
            if kind in (LONGNAME, LONGLINK, PAX, PAX_GLOBAL):
                data = reader.take(padded)[:size] if padded <= BUF else None
                if data is None:
                    raise StreamError("an extended header of %d bytes is larger than any path" % size)
                if kind == LONGNAME:
                    long_name = cstr(data)
                elif kind == LONGLINK:
                    long_link = cstr(data)
                elif kind == PAX:
                    pax = parse_pax(data)
                continue
            name = long_name if long_name is not None else cstr(header[0:100])
            if long_name is None and header[257:262] == b"ustar" and header[345:346] != b"\0":
                name = cstr(header[345:500]) + b"/" + name  # ustar prefix
            if "path" in pax:
                name = pax["path"]
            link = long_link if long_link is not None else cstr(header[157:257])
            if "linkpath" in pax:
                link = pax["linkpath"]
            mode = octal(header[100:108], "mode")
            uid = int(pax["uid"]) if "uid" in pax else octal(header[108:116], "uid")
            gid = int(pax["gid"]) if "gid" in pax else octal(header[116:124], "gid")
            if "mtime" in pax:
                sec, _, frac = pax["mtime"].decode().partition(".")
                mtime_ns = int(sec) * 10**9 + (int((frac + "000000000")[:9]) if frac else 0)
            else:
                mtime_ns = octal(header[136:148], "mtime") * 10**9
            long_name = long_link = None
            pax = {}
            rel = safe_rel(name)
            self.members += 1
            try:
                if kind in (REGULAR, b"\0", b"7"):
                    if not rel:
                        raise StreamError("a regular file member without a name")
                    self.parent_ok(rel)
                    self.regular(rel, reader, size, mode, mtime_ns, uid, gid)
                    reader.skip(padded - size)
                    continue
                reader.skip(padded)
                if kind == DIRECTORY:
                    if rel:
                        self.parent_ok(rel)
                    self.directory(rel, mode, mtime_ns, uid, gid)
                elif kind == SYMLINK:
                    self.parent_ok(rel)
                    self.symlink(rel, os.fsdecode(link), mtime_ns, uid, gid)
                elif kind == HARDLINK:
                    target = safe_rel(link)
                    self.parent_ok(rel)
                    self.parent_ok(target)
                    self.hardlink(rel, target)
                else:
                    raise StreamError("member %r has tar type %r, which a venv cannot hold (only files, "
                                      "directories, symlinks and hard links)" % (rel, kind.decode("latin-1")))
            except OSError as exc:
                raise WriteError("cannot write %r into %s: %s" % (rel, self.stage, exc)) from exc

    def finish(self) -> None:
        """Wait for the hashes and put them in the records."""
        self.hasher.finish()
        for rec in self.done.values():
            if not isinstance(rec[5], str):
                rec[5] = rec[5].hexdigest()

    def save(self) -> None:
        out = hashes_path(self.stage)
        tmp = out + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps({"version": VERSION, "root": self.stage, "files": self.done},
                                separators=(",", ":")))  # dumps: C encoder, unlike dump()
        os.replace(tmp, out)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_frame(fd: int) -> bytes:
    """The stream's first line (exactly len(FRAME_TAR) bytes, read without reading past it)."""
    want = len(FRAME_TAR)
    got = b""
    while len(got) < want:
        piece = os.read(fd, want - len(got))
        if not piece:
            break
        got += piece
    if got not in (FRAME_TAR, FRAME_ZSTD):
        raise StreamError("the stream does not start with a venv-stream frame line (got %r): not sent by "
                          "venv_stream's source pipeline" % got[:32])
    return got


def receive(stage: str, stdin=None, stdout=None) -> int:
    """Unpack the framed stream on stdin (a file object or fd; default sys.stdin) into stage. Returns the exit status."""
    started = time.monotonic()
    out = stdout or sys.stdout
    if not os.path.isdir(stage):
        sys.stderr.write("stage %s missing: run venv_stage first\n" % stage)
        return 3
    src = stdin if stdin is not None else sys.stdin.buffer
    src_fd = src if isinstance(src, int) else src.fileno()
    try:
        compressed = read_frame(src_fd) == FRAME_ZSTD
    except StreamError as exc:
        sys.stderr.write("venv_receive: %s\n" % exc)
        return 4
    unzip = None
    if compressed:
        try:
            unzip = subprocess.Popen(["zstd", "-q", "-d", "-c"], stdin=src_fd, stdout=subprocess.PIPE)
        except OSError as exc:
            sys.stderr.write("venv_receive: the stream is zstd-compressed and zstd cannot run here (%s): install "
                             "zstd on the target, or stream with zstd level 0\n" % exc)
            return 5
        src_fd = unzip.stdout.fileno()
    old_umask = os.umask(0)
    hasher = HashPipe(SLOTS, threaded=usable_cpus() >= HASH_THREAD_MIN_CPUS)
    ex = Extractor(stage, hasher)
    reader = Reader(src_fd, hasher)
    rc = 0
    try:
        try:
            ex.run(reader)
            ex.finish()
            reader.drain()
            ex.finish_dirs()
        except (StreamError, ValueError, UnicodeDecodeError) as exc:  # ValueError: a pax number that is not one
            sys.stderr.write("venv_receive: %s\n" % exc)
            rc = 4
        except (WriteError, OSError) as exc:
            sys.stderr.write("venv_receive: %s\n" % exc)
            rc = 5
        if unzip is not None:
            if rc:
                unzip.kill()
            unzip.stdout.close()
            zrc = unzip.wait()
            if zrc and not rc:
                sys.stderr.write("venv_receive: zstd -d failed (exit %d)\n" % zrc)
                rc = zrc
        if rc == 0:
            ex.save()
    finally:
        hasher.stop()
        os.umask(old_umask)
    if rc == 0:
        out.write(json.dumps({"compressed": compressed, "tar_bytes": reader.total, "members": ex.members,
                              "files": ex.files, "file_bytes": ex.file_bytes,
                              "seconds": round(time.monotonic() - started, 3)}) + "\n")
        out.flush()
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
    sys.exit(receive(sys.argv[1]))
