# -*- coding: utf-8 -*-
"""Hashing and the verified manifest of a model directory.

Every LFS file must hash to the Hub's sha256, every non-LFS file to its git blob sha1 (sha1 of b"blob <size>\\0" +
bytes). A file enters the manifest (<dir>/.hf_model/manifest.json: repo id and type, revision, path, size, sha256,
mtime) only after its hash matched, so a rerun trusts (size, mtime_ns) from the manifest and stays O(files); `full`
rehashes every file, in parallel across files (hashlib releases the GIL on large buffers, so threads use every core).
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

READ_SIZE = 4 << 20
MANIFEST_VERSION = 1


class Hasher:
    """Incremental hashing of one file: sha256 always, plus the git blob sha1 for non-LFS files."""

    def __init__(self, size, git=True):
        self.sha256 = hashlib.sha256()
        self.sha1 = None
        if git:
            self.sha1 = hashlib.sha1(b"blob %d\0" % size)
        self.count = 0

    def update(self, data):
        self.sha256.update(data)
        if self.sha1 is not None:
            self.sha1.update(data)
        self.count += len(data)

    def digests(self):
        return {"sha256": self.sha256.hexdigest(), "git-sha1": self.sha1.hexdigest() if self.sha1 else None}


def hash_file(path, size=None, git=True, limit=None, read_size=READ_SIZE):
    """Hash a file (or its first `limit` bytes) -> Hasher."""
    if size is None:
        size = os.path.getsize(path)
    h = Hasher(size, git=git)
    buf = bytearray(read_size)
    view = memoryview(buf)
    remaining = size if limit is None else limit
    with open(path, "rb", buffering=0) as f:
        while remaining > 0:
            n = f.readinto(view[:min(read_size, remaining)])
            if not n:
                break
            h.update(view[:n])
            remaining -= n
    return h


def check_digest(remote, hasher):
    """(ok, expected, actual) for a RemoteFile and a Hasher of its bytes."""
    algo, want = remote.expected
    got = hasher.digests()[algo]
    return got == want, want, got


def verify_files(items, workers=None):
    """items: list of (RemoteFile, local path). Returns {path: (ok, expected, actual, sha256)}, hashing files in
    parallel (largest first)."""
    workers = workers or max(1, os.cpu_count() or 1)
    order = sorted(items, key=lambda it: -it[0].size)

    def one(item):
        remote, local = item
        try:
            if os.path.getsize(local) != remote.size:
                return remote.path, (False, remote.expected[1], "size %d != %d" % (os.path.getsize(local), remote.size),
                                     None)
            h = hash_file(local, remote.size, git=not remote.lfs)
        except OSError as err:
            return remote.path, (False, remote.expected[1], "unreadable: %s" % err, None)
        ok, want, got = check_digest(remote, h)
        return remote.path, (ok, want, got, h.digests()["sha256"])

    if len(order) <= 1 or workers == 1:
        return dict(one(it) for it in order)
    with ThreadPoolExecutor(max_workers=min(workers, len(order))) as pool:
        return dict(pool.map(one, order))


class Manifest:
    """<dir>/.hf_model/manifest.json: {"version", "repo_id", "repo_type", "revision", "files": {path: {size, sha256,
    blob_sha1, mtime_ns, revision}}}. Written atomically (tmp + fsync + rename). repo_type is "model" or "dataset";
    a manifest written before repo_type was recorded is a model's."""

    def __init__(self, path, repo_id=None, revision=None, files=None, repo_type="model"):
        self.path = path
        self.repo_id = repo_id
        self.repo_type = repo_type
        self.revision = revision
        self.files = files or {}

    @classmethod
    def load(cls, path):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return cls(path)
        if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION:
            return cls(path)
        files = data.get("files") if isinstance(data.get("files"), dict) else {}
        return cls(path, data.get("repo_id"), data.get("revision"), files, repo_type=data.get("repo_type") or "model")

    def is_current(self, remote, local):
        """True when the manifest vouches for `local` as `remote` without rehashing: same expected hash, and the
        file's size and mtime_ns are still the ones recorded when it was verified."""
        rec = self.files.get(remote.path)
        if not rec:
            return False
        if remote.lfs:
            if rec.get("sha256") != remote.sha256:
                return False
        elif rec.get("blob_sha1") != remote.blob_sha1:
            return False
        try:
            st = os.stat(local)
        except OSError:
            return False
        return st.st_size == remote.size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns")

    def vouches_stat(self, path, st):
        """The record of `path` when `st` (an os.stat_result of the file) still has the recorded size and mtime_ns
        (the rule of is_current, without a RemoteFile), else None."""
        rec = self.files.get(path)
        if not isinstance(rec, dict):
            return None
        if st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns"):
            return rec
        return None

    def record(self, remote, local, sha256, revision):
        st = os.stat(local)
        self.files[remote.path] = {"size": st.st_size, "sha256": sha256, "blob_sha1": remote.blob_sha1,
                                   "mtime_ns": st.st_mtime_ns, "revision": revision}

    def forget(self, path):
        self.files.pop(path, None)

    def save(self):
        data = {"version": MANIFEST_VERSION, "repo_id": self.repo_id, "repo_type": self.repo_type,
                "revision": self.revision,
                "files": dict(sorted(self.files.items()))}
        tmp = "%s.tmp.%d" % (self.path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path))


def fsync_dir(path):
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
