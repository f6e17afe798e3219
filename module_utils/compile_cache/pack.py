# -*- coding: utf-8 -*-
"""Pack a compile-cache bundle: an uncompressed, deterministic tar (sorted members, uid/gid 0, no owner names) of
the home's cache dirs plus `manifest.json` (the key and its document, the dirs, every file's relpath, size, mode and
sha256); plan() is what it would take, read-only (check mode).
"""
from __future__ import absolute_import, division, print_function

import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
import time

from ansible.module_utils.compile_cache.bundle import (MANIFEST_NAME, check_dirs, file_sha256,
                                                      symlink_on_path)
from ansible.module_utils.compile_cache.key import FORMAT, cache_key

class _HashingReader(object):
    def __init__(self, fh):
        self.fh, self.h, self.n = fh, hashlib.sha256(), 0

    def read(self, size=-1):
        data = self.fh.read(size)
        self.h.update(data)
        self.n += len(data)
        return data


def _tarinfo(name: str, st, kind) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = st.st_mode & 0o777
    ti.mtime = st.st_mtime
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.size = st.st_size if kind == tarfile.REGTYPE else 0
    return ti


def plan(home: str, dirs, settle_s: float = 0.0, now=None) -> dict:
    """What pack would take: {dirs (present), directories, files [(relpath, size)], skipped {links, special,
    settling}}; read-only (check mode uses it)."""
    dirs = check_dirs(dirs)
    now = time.time() if now is None else now
    out = {"dirs": [], "directories": [], "files": [], "skipped": {"links": 0, "special": 0, "settling": 0}}
    for d in dirs:
        top = os.path.join(home, d)
        if symlink_on_path(home, d) or not os.path.isdir(top):
            continue
        out["dirs"].append(d)
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            rel_dir = os.path.relpath(dirpath, home)
            keep = []
            for name in sorted(dirnames):
                if os.path.islink(os.path.join(dirpath, name)):
                    out["skipped"]["links"] += 1
                else:
                    keep.append(name)
            dirnames[:] = keep
            out["directories"].append(rel_dir)
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    out["skipped"]["links"] += 1
                elif not stat.S_ISREG(st.st_mode):
                    out["skipped"]["special"] += 1
                elif settle_s > 0 and st.st_mtime > now - settle_s:
                    out["skipped"]["settling"] += 1  # being written right now (a JIT compile in progress)
                else:
                    out["files"].append((os.path.join(rel_dir, name), st.st_size))
    out["directories"].sort()
    out["files"].sort()
    return out


def pack(home: str, dirs, key_doc_: dict, out: str, settle_s: float = 0.0) -> dict:
    """Write the bundle of home's cache dirs to out (atomically: a temp file beside it, then rename).
    Returns {sha256, bytes, files, key, dirs, skipped}. The manifest's hashes are of the bytes put in the tar."""
    key, doc = cache_key(key_doc_)
    p = plan(home, dirs, settle_s)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".pack-", suffix=".tar", dir=os.path.dirname(os.path.abspath(out)))
    entries = []
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for rel in p["directories"]:
                    tf.addfile(_tarinfo(rel, os.lstat(os.path.join(home, rel)), tarfile.DIRTYPE))
                for rel, _size in p["files"]:
                    path = os.path.join(home, rel)
                    try:
                        fh = open(path, "rb")
                    except FileNotFoundError:
                        continue  # removed since the plan (a cache evicting an entry): not packed
                    with fh:
                        st = os.fstat(fh.fileno())
                        if not stat.S_ISREG(st.st_mode):
                            continue
                        reader = _HashingReader(fh)
                        tf.addfile(_tarinfo(rel, st, tarfile.REGTYPE), reader)
                        entries.append({"path": rel, "size": st.st_size, "mode": st.st_mode & 0o777,
                                        "sha256": reader.h.hexdigest()})
                manifest = {"format": FORMAT, "key": key, "key_doc": doc, "dirs": p["dirs"],
                            "directories": p["directories"], "files": entries}
                data = json.dumps(manifest, sort_keys=True, indent=1).encode("utf-8")
                ti = tarfile.TarInfo(MANIFEST_NAME)
                ti.size, ti.mode, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = len(data), 0o644, 0, 0, 0, "", ""
                tf.addfile(ti, io.BytesIO(data))
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return {"sha256": file_sha256(out), "bytes": os.path.getsize(out), "files": len(entries), "key": key,
            "dirs": p["dirs"], "skipped": p["skipped"]}
