# -*- coding: utf-8 -*-
"""Compile-cache bundles of the SGLang service: key, pack, install (stdlib only; runs on the targets).

Real SGLang JIT-compiles kernels into its HOME on a cold start (measured on an H200 with 0.5.11, recorded in
tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json): `.triton/cache` (Triton), `.cache/flashinfer`
(FlashInfer), `.cache/tvm-ffi` (sgl-kernel's JIT kernels), `.cache/sglang` (SGLang's torch_compile_cache). A host
whose HOME is seeded with them skips that compilation. The service role spreads them: the first host of a key that
becomes ready packs them (pack), the controller keeps the bundle, the other hosts of that key install it before
their service starts (install).

The key (cache_key) is everything that invalidates the caches: GPU model and compute capability, driver, CUDA,
SGLang version and patch-series hash, torch version, the venv's content digest, tp and ep sizes, and the server
argv minus the few flags that cannot change kernels (NON_KERNEL_FLAGS). Canonical JSON -> sha256.

A bundle is an uncompressed tar (deterministic: sorted members, uid/gid 0, no owner names) of the cache directories
(paths relative to HOME) plus `manifest.json`: the key and its document, the directories, and every file's relpath,
size, mode and sha256. install() refuses, and changes nothing, when the bundle's sha256 is not the one the
controller recorded (the bundle is then deleted: corrupt), when its key is not the host's (the first differing key
field is named) or when a member is unsafe (absolute, `..`, links, devices, not in the manifest) or a file's bytes
differ from the manifest (everything extracted is discarded). Otherwise the directories are swapped in (old aside,
new in, old removed), chowned to the service user, and `<home>/.sglang-compile-cache.json` records {key, sha256,
installed_at}; the same key and sha256 already recorded is no change.
"""
from __future__ import absolute_import, division, print_function

import datetime
import glob
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time

FORMAT = 1
RECORD_NAME = ".sglang-compile-cache.json"
MANIFEST_NAME = "manifest.json"
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
KEY_FIELDS = ("gpu_name", "compute_capability", "driver_version", "cuda_version", "sglang_version",
              "patch_series_hash", "torch_version", "venv_digest", "tp_size", "ep_size", "kernel_flags")
INT_FIELDS = ("tp_size", "ep_size")
# Flags that cannot change which kernels are compiled or how: where the server listens, who may call it, how it
# logs and names itself, its chat/tool/reasoning text formats, its place in a multi-node group. Small and conservative on purpose: a flag missing here
# only costs a cache miss, a wrong entry would install kernels built for another configuration. Every flag named
# here exists in every committed schema (schemas/sglang/*.json; tests/unit/test_compile_cache.py checks it).
NON_KERNEL_FLAGS = frozenset((
    "--host", "--port", "--api-key", "--admin-api-key", "--served-model-name",
    "--log-level", "--log-level-http", "--log-requests", "--log-requests-level", "--decode-log-interval",
    "--enable-metrics", "--watchdog-timeout",
    "--chat-template", "--tool-call-parser", "--reasoning-parser",
    # a multi-node group's ranks run the same shards' shapes: where rank 0 is and which rank this is are networking
    "--node-rank", "--dist-init-addr", "--nccl-init-addr",
))
TP_FLAGS = ("--tensor-parallel-size", "--tp-size")
EP_FLAGS = ("--expert-parallel-size", "--ep-size", "--ep")
# what real SGLang 0.5.11 wrote under a fresh HOME on the H200 (the recording), plus the caches its source names
# that a bf16 135M model did not need there (DeepGEMM's FP8 JIT, the CUDA driver's PTX JIT cache)
DEFAULT_DIRS = (".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang", ".cache/deep_gemm",
                ".nv/ComputeCache")


class CompileCacheError(Exception):
    """A real failure (I/O, a broken probe): the module fails with it. Mismatches and corruption are not errors."""


# ---------------------------------------------------------------------------------------------------------------
# key


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def split_argv(argv) -> list:
    """[[flag, [values...]], ...] in argv order: a token starting with `--` opens a flag (`--f=v` carries its value),
    the tokens up to the next such token are its values. A token before any flag is kept as ["", [token]]."""
    out = []
    for tok in [str(t) for t in (argv or [])]:
        if tok.startswith("--"):
            name, sep, value = tok.partition("=")
            out.append([name, [value] if sep else []])
        elif out:
            out[-1][1].append(tok)
        else:
            out.append(["", [tok]])
    return out


def kernel_flags(argv) -> list:
    """The argv's flags that may change kernels, canonical: NON_KERNEL_FLAGS and the tp/ep flags (their own key
    fields) dropped, sorted by flag name (a repeated flag keeps its occurrences in argv order)."""
    pairs = [p for p in split_argv(argv) if p[0] not in NON_KERNEL_FLAGS and p[0] not in TP_FLAGS + EP_FLAGS]
    return [[name, values] for name, values in sorted(pairs, key=lambda p: p[0])]


def parallel_sizes(argv) -> tuple:
    """(tp_size, ep_size) from the argv (the last occurrence wins, like argparse); 1 when absent."""
    tp = ep = 1
    for name, values in split_argv(argv):
        if name in TP_FLAGS and values:
            tp = int(values[-1])
        elif name in EP_FLAGS and values:
            ep = int(values[-1])
    return tp, ep


def key_doc(facts: dict) -> dict:
    """The normalised key document: every KEY_FIELDS entry (strings stripped, sizes int, kernel_flags canonical)
    plus the format. A missing or unknown field is a CompileCacheError (a key must never be silently partial)."""
    facts = dict(facts or {})
    missing = [f for f in KEY_FIELDS if f not in facts]
    unknown = sorted(set(facts) - set(KEY_FIELDS) - {"format"})
    if missing or unknown:
        raise CompileCacheError(f"cache key facts: missing {missing}, unknown {unknown}")
    doc = {"format": FORMAT}
    for f in KEY_FIELDS:
        v = facts[f]
        if f in INT_FIELDS:
            try:
                doc[f] = int(v)
            except (TypeError, ValueError):
                raise CompileCacheError(f"cache key fact {f}={v!r} is not an integer")
        elif f == "kernel_flags":
            if not isinstance(v, (list, tuple)) or not all(
                    isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[1], (list, tuple)) for p in v):
                raise CompileCacheError("cache key fact kernel_flags must be [[flag, [values]], ...] (kernel_flags())")
            doc[f] = [[str(p[0]), [str(x) for x in p[1]]] for p in sorted(v, key=lambda p: str(p[0]))]
        else:
            doc[f] = "" if v is None else str(v).strip()
    return doc


def cache_key(facts: dict) -> tuple:
    """(hex, doc): sha256 of the canonical JSON of key_doc(facts), and that document."""
    doc = key_doc(facts)
    return hashlib.sha256(canonical(doc)).hexdigest(), doc


def first_difference(have: dict, bundle: dict):
    """(field, have value, bundle value) of the first key field (format first, then KEY_FIELDS order) that differs,
    or None when the documents agree on every field."""
    have, bundle = have or {}, bundle if isinstance(bundle, dict) else {}
    for f in ("format",) + KEY_FIELDS:
        if have.get(f) != bundle.get(f):
            return f, have.get(f), bundle.get(f)
    return None


# ---------------------------------------------------------------------------------------------------------------
# facts read on the host (read-only)


def _canon_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_versions(venv: str, names=("sglang", "torch")) -> dict:
    """{name: version} of the distributions installed in the venv, read from their dist-info METADATA (no
    interpreter started); "" for a name that is not installed."""
    want = {_canon_dist(n): n for n in names}
    found = {n: "" for n in names}
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "*.dist-info", "METADATA")
    for meta in sorted(glob.glob(pattern)):
        name = version = None
        try:
            with open(meta, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        break
                    if line.startswith("Name:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
        except OSError:
            continue
        if name and version and _canon_dist(name) in want:
            found[want[_canon_dist(name)]] = version
    return found


def cuda_version(cuda_home: str) -> str:
    """The CUDA toolkit's version at cuda_home (version.json, else version.txt); "" when there is none."""
    if not cuda_home:
        return ""
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as fh:
            return str(json.load(fh)["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(cuda_home, "version.txt"), encoding="utf-8") as fh:
            m = re.search(r"CUDA Version\s+([0-9.]+)", fh.read())
            return m.group(1) if m else ""
    except OSError:
        return ""


def gpu_facts(nvidia_smi: str = "nvidia-smi", runner=None, timeout: float = 60) -> dict:
    """{gpu_name, compute_capability, driver_version} from nvidia-smi (several GPUs of different kinds: their
    distinct values joined with "+", sorted). A host without nvidia-smi (the lab) has "" for all three; an nvidia-smi
    that is there but fails is a CompileCacheError (a key must not pretend the GPU is unknown)."""
    empty = {"gpu_name": "", "compute_capability": "", "driver_version": ""}
    binary = shutil.which(nvidia_smi) if os.sep not in nvidia_smi else (nvidia_smi if os.path.exists(nvidia_smi)
                                                                         else None)
    if not binary:
        return empty
    run = runner or (lambda argv: subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False))
    argv = [binary, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    try:
        out = run(argv)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileCacheError(f"{' '.join(argv)}: {exc}")
    if out.returncode != 0:
        raise CompileCacheError(f"{' '.join(argv)} exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}")
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    if not rows or any(len(r) != 3 for r in rows):
        raise CompileCacheError(f"{' '.join(argv)}: unexpected output {out.stdout.strip()[-500:]!r}")
    return {f: "+".join(sorted({r[i] for r in rows})) for i, f in enumerate(empty)}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def host_facts(argv, venv_path: str, venv_digest_path: str, fact_path: str = "", cuda_home: str = "",
               nvidia_smi: str = "nvidia-smi", sglang_dist: str = "sglang", runner=None) -> dict:
    """Every KEY_FIELDS fact as this host has it: the GPUs (nvidia-smi), the CUDA toolkit (cuda_home), SGLang's
    version and patch-series hash from the venv role's provenance fact (SGLang's version from the venv's dist-info
    when the fact has none), torch's from the venv's dist-info, the venv's content digest, tp/ep and the kernel
    flags from the server argv."""
    prov = _read_json(fact_path) if fact_path else None
    prov = prov if isinstance(prov, dict) else {}
    dists = dist_versions(venv_path, (sglang_dist, "torch"))
    tp, ep = parallel_sizes(argv)
    facts = dict(gpu_facts(nvidia_smi, runner))
    facts.update({
        "cuda_version": cuda_version(cuda_home),
        "sglang_version": str(prov.get("sglang_version") or dists[sglang_dist]),
        "patch_series_hash": str(prov.get("patch_series_hash") or ""),
        "torch_version": dists["torch"],
        "venv_digest": _read_text(venv_digest_path),
        "tp_size": tp, "ep_size": ep,
        "kernel_flags": kernel_flags(argv),
    })
    return facts


# ---------------------------------------------------------------------------------------------------------------
# paths


def safe_rel(path: str) -> bool:
    """A relative path with no empty, `.` or `..` part and no NUL or backslash."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path or "\\" in path:
        return False
    parts = path.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def check_dirs(dirs) -> list:
    """The cache directories, validated (relative, safe, none inside another, not the manifest's name) and sorted."""
    out = sorted({str(d).rstrip("/") for d in (dirs or [])})
    for d in out:
        if not safe_rel(d) or d == MANIFEST_NAME or d == RECORD_NAME:
            raise CompileCacheError(f"cache dir {d!r} must be a plain path relative to the home")
    for a in out:
        for b in out:
            if a != b and b.startswith(a + "/"):
                raise CompileCacheError(f"cache dirs {a!r} and {b!r} overlap")
    return out


def _under(path: str, dirs) -> str:
    for d in dirs:
        if path == d or path.startswith(d + "/"):
            return d
    return ""


def _no_symlink_between(home: str, rel: str) -> str:
    """"" when every existing component of home/rel below home is a real directory (the last one may be anything
    but a symlink); else the first offending path. The home belongs to the service user: root must never follow a
    link planted there."""
    cur = home
    for part in rel.split("/"):
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            return cur
        if not os.path.lexists(cur):
            return ""
    return ""


def file_sha256(path: str, bufsize: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(bufsize), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# pack


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
        if _no_symlink_between(home, d) or not os.path.isdir(top):
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


# ---------------------------------------------------------------------------------------------------------------
# record


def read_record(home: str) -> dict:
    """<home>/.sglang-compile-cache.json, or {} (missing, unreadable, a link, not an object)."""
    path = os.path.join(home, RECORD_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "r", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_record(home: str, record: dict) -> None:
    """Atomically (a fresh temp file in home, O_EXCL, then rename over the record: a link there is replaced, never
    followed). Root-owned, 0644."""
    fd, tmp = tempfile.mkstemp(prefix=".sglang-compile-cache.", suffix=".tmp", dir=home)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(home, RECORD_NAME))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------------------------------------------------------
# install


class _Refused(Exception):
    """Not installed (corrupt or unsafe bundle): discard and say why."""


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
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), list):
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
        if not _under(name, mdirs):
            raise _Refused(f"unsafe member {m.name!r}: outside the bundle's cache dirs {mdirs}")
        if m.isreg() and (name not in by_path or by_path[name].get("size") != m.size):
            raise _Refused(f"corrupt bundle: member {name!r} is not in the manifest with size {m.size}")
        if not _under(name, wanted):
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
    missing = [p for p in by_path if _under(p, wanted) and p not in seen]
    if missing:
        raise _Refused(f"corrupt bundle: {len(missing)} file(s) of the manifest missing, e.g. {missing[0]}")
    for m in tf.getmembers():  # directory modes and times last (writing files into them changed their mtime)
        name = m.name.rstrip("/")
        if m.isdir() and _under(name, wanted):
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
                n = len([e for e in manifest["files"] if isinstance(e, dict) and _under(str(e.get("path")), todo)])
                return _result(False, True, f"check mode: would install {n} files of key {expected_key[:12]}")
            for d in todo:
                link = _no_symlink_between(home, d)
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
        write_record(home, {"key": expected_key, "sha256": expected_sha256, "installed_at": _now(),
                            "files": n, "bytes": total, "source": "installed"})
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


# ---------------------------------------------------------------------------------------------------------------
# what the module's states do


def record_published(home: str, key: str, sha256: str, files: int, nbytes: int) -> None:
    """The publisher's own record: its cache is the bundle's source, so it never installs its own bundle."""
    write_record(home, {"key": key, "sha256": sha256, "installed_at": _now(), "files": files, "bytes": nbytes,
                        "source": "published"})
