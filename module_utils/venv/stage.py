"""Staging directory and atomic swap for the venv (target side, stdlib only).

Layout next to the live venv L = <parent>/<name>:
    <parent>/.<name>.stage   the new venv being assembled (a transfer or a build writes only here)
    <parent>/.<name>.old     the previous venv for the instant between two renames (fallback swap only)
    <parent>/.<name>.stage.hashes   what the stream's receiver hashed as it wrote each file (venv_receive.py)

The live path only ever changes by rename: renameat2(RENAME_EXCHANGE) swaps stage and live in one step
(Linux >= 3.15, glibc >= 2.28); where the filesystem refuses it, two renames with a recovery rule (live
missing and .old present -> .old goes back). A transfer killed midway leaves only a stale stage, which the
next run deletes before it starts.

For a stream, the stage starts as a hard-link copy of the live venv without the paths that must change:
only the differing files travel, and unchanged files share their inode with the live venv (nothing writes
into them: changed paths are unlinked in the stage before the new ones are extracted).
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat

from ansible.module_utils.venv.manifest import (EXCLUDE_DIRS, ManifestError, diff, digest, drop_cache,
                                                first_differences, is_venv, scan, summary, write_digest)
from ansible.module_utils.venv import receive as venv_receive
from ansible.module_utils.venv.bytecode import BytecodeError, compile_stage

AT_FDCWD = -100
RENAME_EXCHANGE = 2


class StageError(Exception):  # plain: this file also runs on a host with only its venv/ siblings (tests, bench)
    """The stage cannot be prepared, does not match what was expected, or cannot be swapped in."""


def paths(live: str) -> dict:
    live = os.path.normpath(live)
    if not os.path.isabs(live) or live == "/":
        raise StageError(f"venv path must be an absolute path below /, got {live!r}")
    parent, name = os.path.split(live)
    return {"live": live, "parent": parent, "stage": os.path.join(parent, f".{name}.stage"),
            "old": os.path.join(parent, f".{name}.old"),
            "hashes": venv_receive.hashes_path(os.path.join(parent, f".{name}.stage"))}


def _rmtree(path: str) -> bool:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
        return True
    if os.path.isdir(path):
        shutil.rmtree(path)
        return True
    return False


def recover(live: str, check_mode: bool = False) -> list[str]:
    """Undo what an interrupted earlier run left: a stale stage, an .old without a live venv. Returns actions."""
    p = paths(live)
    actions = []
    if not os.path.lexists(p["live"]) and os.path.isdir(p["old"]):
        actions.append(f"restored {p['old']} -> {p['live']} (an earlier swap was interrupted)")
        if not check_mode:
            os.rename(p["old"], p["live"])
    for key in ("stage", "old", "hashes"):
        if os.path.lexists(p[key]):
            actions.append(f"removed stale {p[key]}")
            if not check_mode:
                _rmtree(p[key])
    return actions


def _link_tree(src: str, dst: str, skip: set[str]) -> None:
    """Hard-link copy of src into dst (which exists), leaving out the relative paths in skip and their children.

    Byte-code caches are linked too (outside the manifest): the commit keeps a checked-hash pyc that still matches its
    source and writes a new file for every other (never through the link).
    """
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for name in dirnames + filenames:
            rel = rel_dir + name
            if rel in skip:
                continue
            s, d = os.path.join(dirpath, name), os.path.join(dst, rel)
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(d, 0o700)
                os.chmod(d, stat.S_IMODE(st.st_mode))
                keep.append(name)
            else:
                os.link(s, d)
        dirnames[:] = [n for n in dirnames if n in keep]


def prepare(live: str, source_entries, check_mode: bool = False, cache_dir: str = "") -> dict:
    """Compare the live venv with the source manifest; when they differ, make the stage ready to receive.

    Directories and symlinks are made in the stage from the source manifest itself; only file contents travel.
    Returns in_sync (nothing to move), full (the target has no venv: the whole tree moves), send (files to
    request from the source when not full), delete, send_bytes, stage, live_digest, recovered.
    """
    p = paths(live)
    recovered = recover(live, check_mode)
    if os.path.lexists(p["live"]) and not os.path.isdir(p["live"]):
        raise StageError(f"{p['live']} exists and is not a directory; refusing to replace it")
    have_live = is_venv(p["live"])
    info: dict = {}
    target = scan(p["live"], cache_dir=cache_dir, info=info, save=not check_mode) if have_live else []
    d = diff(source_entries, target)
    src = {e[0]: e for e in source_entries}
    dst = {e[0]: e for e in target}
    in_sync = have_live and not d["send"] and not d["delete"] and not d["root_differs"]
    send_files = [x for x in d["send"] if src[x][1] == "f"]
    result = {"in_sync": in_sync, "full": not have_live, "send": send_files if have_live else [],
              "delete": d["delete"] if have_live else [], "send_count": len(send_files) if have_live else
              sum(1 for e in source_entries if e[1] == "f"),
              "send_bytes": d["send_bytes"], "same": d["same"], "stage": p["stage"],
              "live_digest": digest(target) if have_live else "", "recovered": recovered,
              "hashed_bytes": info.get("hashed_bytes", 0), "cached_files": info.get("cached_files", 0)}
    if in_sync or check_mode:
        return result
    os.makedirs(p["parent"], mode=0o755, exist_ok=True)
    os.mkdir(p["stage"], 0o700)
    if have_live:
        # a directory that only changed mode keeps its contents; anything else that differs is left out
        skip = set(d["delete"]) | {x for x in d["send"] if not (src[x][1] == "d" and dst.get(x, ("", ""))[1] == "d")}
        _link_tree(p["live"], p["stage"], skip)
        for path, kind, mode, _, ref in source_entries:
            full = os.path.join(p["stage"], path)
            if kind == "d":
                if not os.path.isdir(full):
                    os.mkdir(full, 0o700)
                os.chmod(full, mode)
            elif kind == "l" and not os.path.lexists(full):
                os.symlink(ref, full)
    root = src.get(".")
    if root:
        os.chmod(p["stage"], root[2])
    return result


def exchange(a: str, b: str) -> bool:
    """Atomically exchange two paths (renameat2 RENAME_EXCHANGE). False when the kernel/filesystem refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), a)


def swap(live: str) -> str:
    """Put the stage at the live path. Returns how ("exchange", "rename" or "two-renames")."""
    p = paths(live)
    if not os.path.isdir(p["stage"]):
        raise StageError(f"no stage at {p['stage']} to swap in")
    if not os.path.lexists(p["live"]):
        os.rename(p["stage"], p["live"])
        return "rename"
    if exchange(p["stage"], p["live"]):
        _rmtree(p["stage"])  # now holds the previous venv
        return "exchange"
    if os.path.lexists(p["old"]):
        _rmtree(p["old"])
    os.rename(p["live"], p["old"])
    os.rename(p["stage"], p["live"])  # recover() handles a crash between these two lines
    _rmtree(p["old"])
    return "two-renames"


def commit(live: str, expected_digest: str = "", check_mode: bool = False, cache_dir: str = "",
           bytecode: bool = True) -> dict:
    """Verify the stage (full manifest, every file read and hashed during this run; must equal expected_digest
    when given), compile its byte-code (bytecode=True; after the digest check, so the stage's interpreter only runs
    once the stage is what was expected) and swap it in. Files the stream's receiver hashed as it wrote them, and
    that still have the stat key they had once complete, are not read again; every other file is read here. With
    cache_dir the hashes are recorded for the live path (a rename keeps inodes and ctimes), so the next run's comparison does
    not read the venv again."""
    p = paths(live)
    if check_mode:
        return {"changed": True, "how": "", "digest": expected_digest}
    if not is_venv(p["stage"]):
        raise StageError(f"stage {p['stage']} is not a complete venv (no pyvenv.cfg or bin/python)")
    received = venv_receive.load(p["stage"])
    if os.path.lexists(p["hashes"]):
        os.unlink(p["hashes"])
    scanned: dict = {}
    entries = scan(p["stage"], cache_dir=cache_dir, cache_as=p["live"], known=received, info=scanned)
    info = summary(entries)
    info.update({"hashed_at_commit_files": scanned["hashed_files"], "hashed_at_commit_bytes": scanned["hashed_bytes"],
                 "hashed_while_receiving_files": scanned["cached_files"]})
    if expected_digest and info["digest"] != expected_digest:
        drop_cache(cache_dir, p["live"])
        raise StageError(f"stage {p['stage']} does not match the source manifest (digest {info['digest']} != "
                         f"{expected_digest}); live venv left untouched")
    if bytecode:  # pycs are outside the manifest: the digest above stays the venv's content hash
        try:
            info["bytecode"] = compile_stage(p["stage"], p["live"])
        except BytecodeError as exc:
            drop_cache(cache_dir, p["live"])
            raise StageError(f"byte-code of the stage: {exc}; live venv left untouched") from exc
    write_digest(p["stage"], info["digest"])  # in the stage, before the rename: the venv and its record arrive together
    how = swap(live)
    info.update({"changed": True, "how": how})
    return info


def verify_against(root: str, expected_entries) -> list[str]:
    """Differences between the tree at root and the expected manifest (empty = identical)."""
    return first_differences(expected_entries, scan(root))


__all__ = ["StageError", "ManifestError", "paths", "recover", "prepare", "exchange", "swap", "commit",
           "verify_against", "EXCLUDE_DIRS"]
