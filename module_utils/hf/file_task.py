# -*- coding: utf-8 -*-
"""One file's partial copy on disk (FileTask): where it lives, what an earlier run left of it, and its running hash.

Bookkeeping is the file's own sparse map (module_utils/hf/sparse.py). A file is built in
<dir>/.hf_model/parts/<id>/data, created empty, so every region hf_transfer has not written is a hole. hf_transfer
writes a chunk only after receiving all of it, so after any interruption (stall, network error, SIGKILL, reboot:
unflushed delayed-allocation pages come back as holes) the chunks that are complete are exactly the chunk ranges
without a hole (SEEK_HOLE). Incomplete are the `max_files` chunks in flight (6 x 8 MiB = 48 MiB by default) plus
finished chunks whose last write tokio still had queued in its blocking pool (hf_transfer drops its file without
flushing); how many depends on how far the disk lags the network (bench/bench_models.py measures the total against
64 MiB). journal.json beside it pins what the bytes are (path, size, expected hash); a different file starts over.
A hardlink data.keep survives hf_transfer's delete-on-error.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import shutil
import threading

from ansible.module_utils.hf.sparse import data_bytes, has_hole, start_writeback
from ansible.module_utils.hf.verify import Hasher

MiB = 1 << 20
# <model dir>/.hf_model: the manifest, the lock and parts/<id>/ (the partial files) of a model directory.
STATE_DIR = ".hf_model"


def part_id(path):
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:20]


def write_json_atomic(path, obj, mode=0o600):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class FileTask:
    """One remote file on its way: its partial file, journal and hardlink, its state in the run (pending, running,
    hashing, complete), its attempts, and the hash of its written prefix."""

    def __init__(self, remote, dest_dir, parts_root):
        self.remote = remote
        self.final = os.path.join(dest_dir, remote.path)
        self.dir = os.path.join(parts_root, part_id(remote.path))
        self.data = os.path.join(self.dir, "data")
        self.keep = os.path.join(self.dir, "data.keep")
        self.journal = os.path.join(self.dir, "journal.json")
        self.state = "pending"  # pending | running | hashing | complete
        self.attempts = 0
        self.not_before = 0.0
        self.data_url = None
        self.data_url_stale = False
        self.hash_failures = 0
        self.source = None  # module_utils/fanout/sources.Source of the current attempt (None: the Hub, no fan-out)
        self.peer_attempts = 0
        self.range_ignored = 0  # answers for this file that ignored Range (it is probed again before each attempt)
        self.last_error = None
        self.hash_lock = threading.Lock()
        self.hasher = None
        self.hashed_to = 0

    def advance_hash(self, limit=None):
        """Hash the written prefix of data beyond what is hashed already (bytes hf_transfer wrote are final: a
        direct transfer writes each range once, a fill rewrites the same bytes). Returns bytes hashed.
        The hashed pages stay cached: dropping them (POSIX_FADV_DONTNEED) was measured to slow the download here
        (freed page-cache memory comes back cold for hf_transfer's next writes: 0.59x -> 0.88x median of curl),
        and the server's model load reads these files right after; the kernel reclaims clean pages as needed."""
        with self.hash_lock:
            if self.hasher is None:
                self.hasher = Hasher(self.remote.size, git=not self.remote.lfs)
                self.hashed_to = 0
            try:
                fd = os.open(self.data, os.O_RDONLY)
            except OSError:
                return 0
            try:
                end = self.remote.size
                if self.hashed_to < end:
                    try:
                        end = min(end, os.lseek(fd, self.hashed_to, os.SEEK_HOLE))
                    except OSError:
                        end = self.hashed_to
                if limit is not None:
                    end = min(end, self.hashed_to + limit)
                start = self.hashed_to
                buf = bytearray(4 * MiB)
                view = memoryview(buf)
                while self.hashed_to < end:
                    n = os.preadv(fd, [view[:min(len(buf), end - self.hashed_to)]], self.hashed_to)
                    if not n:
                        break
                    self.hasher.update(view[:n])
                    self.hashed_to += n
                return self.hashed_to - start
            finally:
                os.close(fd)

    def start_writeback(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return
        try:
            start_writeback(fd)
        finally:
            os.close(fd)

    def reset_hash(self):
        with self.hash_lock:
            self.hasher = None
            self.hashed_to = 0

    def _expect(self):
        return {"path": self.remote.path, "size": self.remote.size, "hash": list(self.remote.expected)}

    def load(self, sparse_ok=True):
        """Recover what an earlier run left; returns the bytes already on disk."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        try:
            with open(self.journal) as f:
                j = json.load(f)
        except (OSError, ValueError):
            j = None
        if not j or any(j.get(k) != v for k, v in self._expect().items()) or not sparse_ok:
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            write_json_atomic(self.journal, self._expect())
        if not os.path.exists(self.data) and os.path.exists(self.keep):
            os.rename(self.keep, self.data)
        for name in os.listdir(self.dir):
            if name not in ("data", "journal.json"):
                os.unlink(os.path.join(self.dir, name))
        return self.on_disk()

    def on_disk(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return 0
        try:
            return data_bytes(fd, self.remote.size)
        finally:
            os.close(fd)

    def allocated(self):
        try:
            return min(self.remote.size, os.stat(self.data).st_blocks * 512)
        except OSError:
            return 0

    def complete_on_disk(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return self.remote.size == 0
        try:
            return os.fstat(fd).st_size == self.remote.size and (
                self.remote.size == 0 or not has_hole(fd, 0, self.remote.size - 1))
        finally:
            os.close(fd)

    def prepare(self):
        """Make sure data exists (empty, sparse) and has its safety hardlink."""
        fd = os.open(self.data, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        try:
            os.unlink(self.keep)
        except OSError:
            pass
        os.link(self.data, self.keep)

    def restore(self):
        """After hf_transfer deleted data on error, bring it back from the hardlink."""
        if not os.path.exists(self.data) and os.path.exists(self.keep):
            os.rename(self.keep, self.data)
        else:
            try:
                os.unlink(self.keep)
            except OSError:
                pass

    def wipe(self):
        self.reset_hash()
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        write_json_atomic(self.journal, self._expect())
