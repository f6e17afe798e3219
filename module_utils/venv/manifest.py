"""Content manifest of a venv tree: what decides whether a venv must move, and what proves it arrived.

Runs on the target with the target's python3 (stdlib only). A manifest is a sorted list of entries, one per
path below the venv root (the root itself is entry "."):

    (path, kind, mode, size, ref)   kind "f" file, "d" directory, "l" symlink
                                    mode = permission bits (0 for symlinks), size = bytes (files only)
                                    ref = sha256 hex for files, link target for symlinks, "" for directories

Byte-code caches (``__pycache__`` directories, ``*.pyc``) are left out: they are derived from the sources (each
host compiles its own in the stage before a swap: module_utils/venv/bytecode.py), so they mean nothing the sources
do not, and a host's may differ (an interpreter that wrote a timestamp pyc) without the venv differing.
Owner and mtime are left out too: the venv is root's everywhere and tar carries mtimes.

The digest (the venv's "content hash") is the sha256 of the canonical text of the sorted entries.

Hash cache (optional, ``cache_dir``): like rsync's quick check, a file whose (size, mtime_ns, ctime_ns, inode,
device) equal what was recorded when it was last hashed is not read again. What that trusts: nothing rewrote
the file without changing its ctime (which userland cannot set; only a clock change or a raw block-device write
could). Entries changed less than RACY_NS before the scan started are never cached (coarse timestamps: a write in
the same tick would not change ctime). The cache is root's alone (directory 0700, file 0600, ignored when owned
by anyone else or writable by others); ``cache_dir=""`` hashes everything (full verify).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


EXCLUDE_DIRS = ("__pycache__",)
EXCLUDE_SUFFIXES = (".pyc",)
# The venv's own record of its content hash, written into the stage at every swap (the service's launcher refuses
# a venv whose digest is not the one its unit was rendered for); derived from the content, so never part of it.
DIGEST_NAME = ".sglang-venv-digest"
# Hashing releases the GIL (OpenSSL), so a few threads keep a fast disk busy on big venvs.
HASH_WORKERS = 4
CHUNK = 1 << 20
CACHE_VERSION = 1
RACY_NS = 100_000_000  # entries changed < 100 ms before the scan are not cached (ctime ticks are <= 10 ms)


class ManifestError(Exception):  # plain: this file also runs on a host with only its venv/ siblings (tests, bench)
    """A tree that cannot be described (unsupported file type, unreadable file, not a venv)."""


def file_sha256(path: str) -> str:
    with open(path, "rb") as fh:
        if hasattr(hashlib, "file_digest"):
            return hashlib.file_digest(fh, "sha256").hexdigest()
        h = hashlib.sha256()  # Python < 3.11
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
        return h.hexdigest()


def excluded(name: str, is_dir: bool) -> bool:
    if is_dir:
        return name in EXCLUDE_DIRS
    return name.endswith(EXCLUDE_SUFFIXES) or name.startswith(DIGEST_NAME)


def read_digest(root: str) -> str:
    """The content hash recorded in the venv at its last swap ("" when it has none)."""
    try:
        with open(os.path.join(root, DIGEST_NAME), encoding="ascii") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def write_digest(root: str, value: str) -> bool:
    """Record value as the venv's content hash (world-readable: the service user's launcher reads it). A new inode
    every time (temp + rename): a stage hard-linked to the live venv never writes through into the live copy.
    Returns whether it changed."""
    if read_digest(root) == value:
        return False
    path = os.path.join(root, DIGEST_NAME)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(value + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


def walk(root: str, stats: dict | None = None) -> list[tuple[str, str, int, int, str]]:
    """Stat every entry below root (no hashing yet: files carry ref None). stats, when given, receives
    rel path -> (size, mtime_ns, ctime_ns, inode, device) of every file (the hash cache's key).

    One lstat per entry, through os.scandir's DirEntry (its path is made in C): about 20% less time than os.walk
    plus os.lstat on a 28k-entry venv, and this runs on both sides of every stream and on every no-op check."""
    if not os.path.isdir(root) or os.path.islink(root):
        raise ManifestError(f"{root} is not a directory")
    st = os.lstat(root)
    entries = [(".", "d", stat.S_IMODE(st.st_mode), 0, "")]
    add = entries.append
    todo = [("", root)]
    while todo:
        prefix, path = todo.pop()
        try:
            it = os.scandir(path)
        except OSError as exc:
            raise ManifestError(f"cannot list {path}: {exc}") from exc
        with it:
            for de in it:
                name = de.name
                rel = prefix + name
                if "\n" in name or "\t" in name:
                    raise ManifestError(f"path with a tab or newline in {root}: {rel!r}")
                st = de.stat(follow_symlinks=False)
                mode = st.st_mode
                if stat.S_ISREG(mode):
                    if excluded(name, False):
                        continue
                    add((rel, "f", stat.S_IMODE(mode), st.st_size, None))
                    if stats is not None:
                        stats[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
                elif stat.S_ISDIR(mode):  # a symlink to a directory is S_ISLNK here: never followed
                    if excluded(name, True):
                        continue
                    add((rel, "d", stat.S_IMODE(mode), 0, ""))
                    todo.append((rel + "/", de.path))
                elif stat.S_ISLNK(mode):
                    target = os.readlink(de.path)
                    if "\n" in target or "\t" in target:  # would break the canonical text (and the digest)
                        raise ManifestError(f"symlink target with a tab or newline in {root}: {rel!r}")
                    add((rel, "l", 0, 0, target))
                else:
                    raise ManifestError(f"unsupported file type at {de.path} (mode {mode:o}): a venv holds only "
                                        "files, directories and symlinks")
    entries.sort(key=lambda e: e[0])
    return entries


def cache_file(cache_dir: str, root: str) -> str:
    key = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:24]
    return os.path.join(cache_dir, f"hashes-{key}.json")


def _owned_private(st) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def load_cache(cache_dir: str, root: str) -> dict:
    """rel path -> [size, mtime_ns, ctime_ns, inode, device, sha256] recorded for root ({} when absent/untrusted)."""
    if not cache_dir:
        return {}
    path = cache_file(cache_dir, root)
    try:
        if not _owned_private(os.stat(cache_dir)):
            return {}
        with open(path, encoding="utf-8") as fh:
            if not _owned_private(os.fstat(fh.fileno())):
                return {}
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or data.get("root") != os.path.abspath(root):
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def save_cache(cache_dir: str, root: str, entries, stats: dict, started_ns: int) -> bool:
    """Record the hashes of entries for root, keyed by stats (walk's); racy entries left out. Best effort."""
    if not cache_dir:
        return False
    cutoff = started_ns - RACY_NS
    files = {}
    for p, k, _, _, ref in entries:
        st = stats.get(p)
        if k == "f" and st and ref and st[1] < cutoff and st[2] < cutoff:
            files[p] = [*st, ref]
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        if not _owned_private(os.stat(cache_dir)):
            return False
        fd, tmp = tempfile.mkstemp(prefix=".hashes-", dir=cache_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:  # mkstemp: mode 0600
                # dumps, not dump: dump() encodes in pure Python (0.32 s for 25k entries here, dumps ~5x less)
                fh.write(json.dumps({"version": CACHE_VERSION, "root": os.path.abspath(root), "files": files},
                                    separators=(",", ":")))
            os.replace(tmp, cache_file(cache_dir, root))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def drop_cache(cache_dir: str, root: str) -> None:
    if cache_dir:
        try:
            os.unlink(cache_file(cache_dir, root))
        except OSError:
            pass


def scan(root: str, workers: int = HASH_WORKERS, cache_dir: str = "", info: dict | None = None,
         cache_as: str = "", save: bool = True, known: dict | None = None) -> list[tuple[str, str, int, int, str]]:
    """Full manifest of root: every file hashed (sha256), in parallel.

    With cache_dir, files whose stat key matches the cache are not read (see the module docstring), and the
    cache is rewritten for root (or for cache_as: the path root will have after a rename, which keeps inodes
    and ctimes). known: hashes taken earlier in this run, in the cache's form (rel path -> [size, mtime_ns,
    ctime_ns, inode, device, sha256]), trusted by the same stat-key rule. info, when given, receives
    hashed/cached counts and bytes.
    """
    started = time.time_ns()
    stats: dict = {}
    entries = walk(root, stats)
    cached = load_cache(cache_dir, root) if cache_dir and not cache_as else {}
    if known:
        cached = {**cached, **known}
    files = []
    hits = 0
    for i, e in enumerate(entries):
        if e[1] != "f":
            continue
        c = cached.get(e[0])
        if isinstance(c, list) and len(c) == 6 and tuple(c[:5]) == stats[e[0]] and isinstance(c[5], str) \
                and len(c[5]) == 64:
            entries[i] = (e[0], e[1], e[2], e[3], c[5])
            hits += 1
        else:
            files.append(i)

    def one(i: int) -> str:
        try:
            return file_sha256(os.path.join(root, entries[i][0]))
        except OSError as exc:
            raise ManifestError(f"cannot read {entries[i][0]} in {root}: {exc}") from exc

    # big files first: the pool stays busy to the end instead of waiting on one late large file
    files.sort(key=lambda i: -entries[i][3])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        digests = list(pool.map(one, files))
    for i, d in zip(files, digests):
        p, k, m, s, _ = entries[i]
        entries[i] = (p, k, m, s, d)
    if cache_dir and save and (files or cache_as or len(cached) != hits):
        save_cache(cache_dir, cache_as or root, entries, stats, started)
    if info is not None:
        info.update({"hashed_files": len(files), "hashed_bytes": sum(entries[i][3] for i in files),
                     "cached_files": hits})
    return entries


def canonical(entries) -> bytes:
    return "".join(f"{p}\t{k}\t{m:o}\t{s}\t{r}\n" for p, k, m, s, r in entries).encode()


def digest(entries) -> str:
    return hashlib.sha256(canonical(sorted(entries, key=lambda e: e[0]))).hexdigest()


def summary(entries) -> dict:
    return {
        "digest": digest(entries),
        "files": sum(1 for e in entries if e[1] == "f"),
        "entries": len(entries),
        "bytes": sum(e[3] for e in entries),
    }


def encode(entries) -> str:
    """The form the venv_manifest module returns and venv_stage takes: the canonical text itself (one entry per
    line, path TAB kind TAB octal mode TAB size TAB ref), so its sha256 is the digest. One string, not a list of
    28k lists: Ansible templates and passes it as one value (a list of lists cost about 3 s of task overhead
    per 28k entries on the lab, in the registering and in the next task's arguments)."""
    return canonical(sorted(entries, key=lambda e: e[0])).decode()


def decode(text: str) -> list[tuple[str, str, int, int, str]]:
    """encode()'s text -> sorted entries; ManifestError on a malformed line or a path that would escape the root."""
    if not isinstance(text, str):
        raise ManifestError(f"a manifest is venv_manifest's text, got {type(text).__name__}")
    out = []
    for line in text.splitlines():
        fields = line.split("\t")
        bad = ManifestError(f"malformed manifest line: {line[:200]!r}")
        if len(fields) != 5:
            raise bad
        p, k, m, s, r = fields
        if k not in ("f", "d", "l") or not p or os.path.isabs(p) or "/../" in f"/{p}/" or "\0" in p:
            raise bad
        try:
            out.append((p, k, int(m, 8), int(s), r))
        except ValueError:
            raise bad from None
    out.sort(key=lambda e: e[0])
    return out


def diff(source, target) -> dict:
    """What must move so that target becomes source.

    send: paths whose entry differs or is missing on the target (sorted, parents before children).
    delete: paths on the target that the source lacks.  same: count of identical entries.
    A directory whose mode differs is re-sent as an entry (tar --no-recursion), not with its contents.
    """
    src = {e[0]: e for e in source}
    dst = {e[0]: e for e in target}
    send = sorted(p for p, e in src.items() if dst.get(p) != e and p != ".")
    delete = sorted(p for p in dst if p not in src)
    same = sum(1 for p, e in src.items() if dst.get(p) == e)
    root_differs = src.get(".") != dst.get(".") if "." in src else False
    return {"send": send, "delete": delete, "same": same, "root_differs": root_differs,
            "send_bytes": sum(src[p][3] for p in send)}


def first_differences(expected, actual, limit: int = 5) -> list[str]:
    """Human-readable evidence of how two manifests differ (for error messages)."""
    a = {e[0]: e for e in expected}
    b = {e[0]: e for e in actual}
    out = []
    for p in sorted(set(a) | set(b)):
        if a.get(p) == b.get(p):
            continue
        if p not in b:
            out.append(f"missing: {p}")
        elif p not in a:
            out.append(f"unexpected: {p}")
        else:
            ea, eb = a[p], b[p]
            fields = [n for n, x, y in zip(("kind", "mode", "size", "content"), ea[1:], eb[1:]) if x != y]
            out.append(f"differs ({', '.join(fields)}): {p}")
        if len(out) >= limit:
            break
    return out


def is_venv(root: str) -> bool:
    return os.path.isfile(os.path.join(root, "pyvenv.cfg")) and os.path.exists(os.path.join(root, "bin", "python"))


def read_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def describe(root: str, fact_path: str = "", with_entries: bool = False, must_exist: bool = True,
             cache_dir: str = "", save_cache: bool = True) -> dict:
    """What the venv_manifest module returns: does the venv exist, its manifest summary, its provenance fact."""
    result = {"path": root, "exists": False, "digest": "", "files": 0, "entries": 0, "bytes": 0,
              "provenance": read_json(fact_path) if fact_path else None}
    if not is_venv(root):
        if must_exist:
            why = "does not exist" if not os.path.lexists(root) else "is not a venv (no pyvenv.cfg or bin/python)"
            raise ManifestError(f"{root} {why}")
        return result
    info: dict = {}
    entries = scan(root, cache_dir=cache_dir, info=info, save=save_cache)
    result.update(summary(entries))
    result.update(info)
    result["exists"] = True
    if with_entries:
        result["manifest"] = encode(entries)
    return result
