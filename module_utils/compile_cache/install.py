# -*- coding: utf-8 -*-
"""Install a compile-cache bundle into a service home, or refuse and change nothing.

install() refuses when the bundle's sha256 is not the one the controller recorded (the bundle is then deleted:
corrupt), when its key is not the host's (the first differing key field is named) or when a member is unsafe
(absolute, `..`, links, devices, not in the manifest) or a file's bytes differ from the manifest (everything
extracted is discarded). Otherwise the directories are swapped in (old aside, new in, old removed), chowned to the
service user, and the home's record (record.py) says {key, sha256, installed_at}; the same key and sha256 already
recorded is no change.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import shutil
import tarfile
import tempfile

from ansible.module_utils.compile_cache.bundle import (MANIFEST_MAX_BYTES, MANIFEST_NAME, check_dirs, containing_dir,
                                                      file_sha256, safe_rel, symlink_on_path)
from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.key import FORMAT, cache_key, first_difference
from ansible.module_utils.compile_cache.record import read_record, record_installed
from ansible.module_utils.evidence.error import EvidenceError


class _Refused(EvidenceError):
    """Not installed (corrupt or unsafe bundle): discard and say why."""

    default_kind = "refused"


def read_manifest(tf: tarfile.TarFile) -> dict:
    try:
        member = tf.getmember(MANIFEST_NAME)
    except KeyError:
        raise _Refused(f"corrupt bundle: no {MANIFEST_NAME}")
    if not member.isreg() or member.size > MANIFEST_MAX_BYTES:
        raise _Refused(f"corrupt bundle: {MANIFEST_NAME} is not a regular file of at most {MANIFEST_MAX_BYTES} bytes")
    try:
        manifest = json.loads(tf.extractfile(member).read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Refused(f"corrupt bundle: {MANIFEST_NAME} is not JSON ({exc})")
    if (not isinstance(manifest, dict) or manifest.get("format") != FORMAT
            or not isinstance(manifest.get("files"), list)):
        raise _Refused(f"corrupt bundle: {MANIFEST_NAME} is not a format {FORMAT} manifest")
    return manifest


def _ids(owner, group):
    uid = gid = -1
    if owner:
        import pwd
        try:
            uid = pwd.getpwnam(owner).pw_uid
        except KeyError:
            raise CompileCacheError(f"no user {owner!r}")
    if group:
        import grp
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise CompileCacheError(f"no group {group!r}")
    return uid, gid


def _chown_tree(top: str, uid: int, gid: int) -> None:
    if uid == -1 and gid == -1:
        return
    os.chown(top, uid, gid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def _extract(tf: tarfile.TarFile, manifest: dict, wanted: list, dest: str) -> tuple:
    """Extract the members under the wanted dirs into dest, checking each against the manifest. (files, bytes)."""
    mdirs = manifest.get("dirs") or []
    if not isinstance(mdirs, list) or not all(safe_rel(d) for d in mdirs):
        raise _Refused("unsafe bundle: the manifest's dirs are not plain relative paths")
    by_path = {}
    for entry in manifest["files"]:
        if not isinstance(entry, dict) or not safe_rel(entry.get("path")) or entry["path"] in by_path:
            raise _Refused(f"unsafe bundle: manifest entry {entry!r}")
        by_path[entry["path"]] = entry
    seen, n, total = set(), 0, 0
    for m in tf.getmembers():
        name = m.name
        if name == MANIFEST_NAME:
            continue
        if name.endswith("/") and m.isdir():
            name = name.rstrip("/")
        if not safe_rel(name):
            raise _Refused(f"unsafe member {m.name!r}: absolute or with '..'")
        if not (m.isreg() or m.isdir()):
            kind = "link" if (m.issym() or m.islnk()) else "device or fifo" if (m.isdev() or m.isfifo()) else "special"
            raise _Refused(f"unsafe member {m.name!r}: a {kind}")
        if name in seen:
            raise _Refused(f"unsafe member {m.name!r}: twice in the bundle")
        seen.add(name)
        if not containing_dir(name, mdirs):
            raise _Refused(f"unsafe member {m.name!r}: outside the bundle's cache dirs {mdirs}")
        if m.isreg() and (name not in by_path or by_path[name].get("size") != m.size):
            raise _Refused(f"corrupt bundle: member {name!r} is not in the manifest with size {m.size}")
        if not containing_dir(name, wanted):
            continue
        target = os.path.join(dest, name)
        if m.isdir():
            os.makedirs(target, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        h = hashlib.sha256()
        src = tf.extractfile(m)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                out.write(block)
        if h.hexdigest() != by_path[name].get("sha256"):
            raise _Refused(f"corrupt bundle: {name} has sha256 {h.hexdigest()}, the manifest says "
                           f"{by_path[name].get('sha256')}")
        os.chmod(target, int(by_path[name].get("mode", 0o644)) & 0o755)
        os.utime(target, (m.mtime, m.mtime))
        n += 1
        total += m.size
    missing = [p for p in by_path if containing_dir(p, wanted) and p not in seen]
    if missing:
        raise _Refused(f"corrupt bundle: {len(missing)} file(s) of the manifest missing, e.g. {missing[0]}")
    for m in tf.getmembers():  # directory modes and times last (writing files into them changed their mtime)
        name = m.name.rstrip("/")
        if m.isdir() and containing_dir(name, wanted):
            os.chmod(os.path.join(dest, name), (m.mode & 0o755) | 0o700)
            os.utime(os.path.join(dest, name), (m.mtime, m.mtime))
    return n, total


def _result(installed: bool, changed: bool, reason: str, **more) -> dict:
    return dict({"installed": installed, "changed": changed, "reason": reason}, **more)


def install(bundle: str, expected_key: str, expected_sha256: str, home: str, dirs, owner=None, group=None,
            expected_doc=None, check_mode: bool = False) -> dict:
    """Install the bundle's cache dirs into home. Returns {installed, changed, reason[, files, bytes]}; installed is
    false, and nothing in home changed, for a corrupt or unsafe bundle (then deleted), a key mismatch (kept: it is a
    valid bundle, only not this host's) or a symlink in the home where a cache dir goes. CompileCacheError only for
    real failures (I/O, an unknown owner)."""
    wanted = check_dirs(dirs)
    rec = read_record(home)
    if rec.get("key") == expected_key and rec.get("sha256") == expected_sha256:
        return _result(True, False, f"already installed: key {expected_key[:12]}, sha256 {expected_sha256[:12]}")
    if not os.path.isfile(bundle):
        if check_mode:
            return _result(False, True, f"check mode: would copy and install the bundle of key {expected_key[:12]}")
        raise CompileCacheError(f"no bundle at {bundle}")
    uid, gid = _ids(owner, group)

    def discard(reason: str) -> dict:
        if not check_mode:
            try:
                os.unlink(bundle)
            except OSError:
                pass
        return _result(False, not check_mode, reason + ("" if check_mode else "; the bundle was deleted"))

    have = file_sha256(bundle)
    if have != expected_sha256:
        return discard(f"corrupt bundle: sha256 {have}, the controller recorded {expected_sha256}")
    staged = None
    try:
        with tarfile.open(bundle, mode="r:") as tf:
            manifest = read_manifest(tf)
            if manifest.get("key") != expected_key:
                diff = first_difference(expected_doc, manifest.get("key_doc")) if expected_doc else None
                what = (f"key field {diff[0]}: this host has {diff[1]!r}, the bundle {diff[2]!r}" if diff
                        else f"the bundle's key is {str(manifest.get('key'))[:12]}")
                return _result(False, False, f"key mismatch, not installed: {what} (bundle key "
                                             f"{str(manifest.get('key'))[:12]}, this host's {expected_key[:12]})")
            try:
                own_key = cache_key(manifest.get("key_doc") or {})[0]
            except CompileCacheError:
                own_key = None
            if own_key != expected_key:
                raise _Refused("corrupt bundle: the manifest's key is not the hash of its key document")
            todo = [d for d in wanted if d in (manifest.get("dirs") or [])]
            if check_mode:
                n = len([e for e in manifest["files"]
                         if isinstance(e, dict) and containing_dir(str(e.get("path")), todo)])
                return _result(False, True, f"check mode: would install {n} files of key {expected_key[:12]}")
            for d in todo:
                link = symlink_on_path(home, d)
                if link:
                    return _result(False, False, f"not installed: {link} is a symlink (root follows no link in "
                                                 "the service home)")
            staged = tempfile.mkdtemp(prefix=".sglang-compile-cache-", dir=home)
            n, total = _extract(tf, manifest, todo, staged)
    except _Refused as exc:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
        return discard(str(exc))
    except (tarfile.TarError, EOFError, UnicodeError) as exc:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
        return discard(f"corrupt bundle: {type(exc).__name__}: {exc}")
    except OSError as exc:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)
        raise CompileCacheError(f"extracting {bundle} into {home}: {exc}")
    try:
        swap_in(home, staged, todo, uid, gid)
        record_installed(home, expected_key, expected_sha256, n, total)
    except OSError as exc:
        raise CompileCacheError(f"recording the install in {home}: {exc}")
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return _result(True, True, f"installed {n} files ({total} bytes) of key {expected_key[:12]}", files=n,
                   bytes=total)


def swap_in(home: str, staged: str, dirs, uid: int = -1, gid: int = -1) -> None:
    """For each dir: home/dir aside into staged/.old, staged/dir into its place (two renames on one filesystem),
    then the old ones removed. Parents the home lacks are created (0755, chowned). A failed rename puts back what
    was moved."""
    old_root = os.path.join(staged, ".old")
    os.makedirs(old_root, exist_ok=True)
    moved = []
    try:
        for i, d in enumerate(dirs):
            src, dst = os.path.join(staged, d), os.path.join(home, d)
            if not os.path.isdir(src):
                os.makedirs(src)
            _chown_tree(src, uid, gid)
            cur = home
            for part in d.split("/")[:-1]:
                cur = os.path.join(cur, part)
                if not os.path.lexists(cur):
                    os.mkdir(cur, 0o755)
                    if uid != -1 or gid != -1:
                        os.chown(cur, uid, gid, follow_symlinks=False)
            aside = None
            if os.path.lexists(dst):
                aside = os.path.join(old_root, str(i))
                os.rename(dst, aside)
            moved.append((dst, aside))
            os.rename(src, dst)
    except OSError as exc:
        for dst, aside in reversed(moved):
            try:
                if aside and os.path.lexists(aside):
                    if os.path.lexists(dst):
                        shutil.rmtree(dst, ignore_errors=True)
                    os.rename(aside, dst)
            except OSError:
                pass
        raise CompileCacheError(f"swapping the cache dirs into {home}: {exc}")
    shutil.rmtree(old_root, ignore_errors=True)
