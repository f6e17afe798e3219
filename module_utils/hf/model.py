# -*- coding: utf-8 -*-
"""Bring one model directory to a pinned Hub revision: the single entry point of library/hf_model.py.

The repository is a model (repo_type "model", the default) or a dataset (repo_type "dataset": same guarantees, the
Hub's /api/datasets/ and /datasets/<repo>/resolve/ routes); any other type is refused before anything is asked or
written, and the manifest records the type.

Order: validate -> resolve the revision to a sha -> list and validate the tree -> lock the directory (taking
over from a stale worker) -> plan (manifest says verified + size/mtime unchanged = skip) -> free-space preflight
-> verify files present but not vouched for -> fetch the rest (module_utils/hf/fetcher.py) -> manifest.

Check mode stops after the plan (the Hub is only read: revision and tree; the directory is only read: manifest,
sizes, partial files) and reports what a real run would do: `changed` (= `would_change`) is true when a file would
be fetched, a file present but not vouched for by the manifest would be hashed and adopted (or replaced), or the
manifest names another commit or repository type; `msg` says it in one line ("check mode: would fetch 3 files,
1.2 GiB of Kimi-K2.6 from https://huggingface.co"). verify=full rehashes every file in a real run, but a file the
manifest vouches for only changes when its bytes turned out bad, which check mode cannot know without reading them:
such files are counted (files_to_rehash), not reported as a change. A real run reports changed for the same things
(a full verification that finds every file good is no change).
"""
from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import shutil
import signal
import threading
import time

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.hf.hub import (HubError, filter_files, list_tree, resolve_revision, tree_from_dicts,
                                         validate_repo_id, validate_repo_type)
from ansible.module_utils.fanout.sources import Source, SourceSet
from ansible.module_utils.hf.verify import Manifest, verify_files
from ansible.module_utils.hf.fetch_errors import FetchError
from ansible.module_utils.hf.fetcher import Fetcher
from ansible.module_utils.hf.file_task import STATE_DIR, FileTask
from ansible.module_utils.hf.lanes import kill_pid
from ansible.module_utils.hf import progress as hf_progress

MiB = 1 << 20
GiB = 1 << 30
DEFAULTS = {
    "revision": "main", "allow_patterns": [], "ignore_patterns": [], "verify": "quick", "fetch": True,
    "token": None, "lanes": 2, "connections": 6, "chunk_size_mb": 8, "inner_retries": 3,
    "stall_timeout": 60, "retries": 5, "hash_retries": 2, "backoff": 2.0, "backoff_max": 60.0,
    "free_space_margin_mb": 1024, "lock_timeout": 60, "name": None, "hash_workers": 0, "use_hf_hub": None,
    "repo_type": "model", "tree": None, "peers": None, "peer_self": None, "peer_token": None, "fanout": 2,
    "hub_fallback": True,
}


class SyncError(EvidenceError):
    """A sync that cannot complete; evidence: what library/hf_model.py reports beside msg (file, bytes_done,
    last_error, failure ...), its kind the evidence's failure when named."""

    default_kind = "sync"

    def __init__(self, msg, **evidence):
        super(SyncError, self).__init__(msg, kind=evidence.get("failure"), evidence=evidence)
        self.evidence = evidence


def free_bytes(path):
    """Free bytes for an unprivileged writer on the filesystem that holds `path` (or its nearest ancestor)."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


class DirLock:
    """flock on <dir>/.hf_model/lock; the holder's pid is written inside. A live holder (e.g. the async worker
    of a controller that was SIGKILLed) is asked to stop, then killed, so a rerun takes over its journal."""

    def __init__(self, state_dir, timeout):
        self.path = os.path.join(state_dir, "lock")
        self.timeout = timeout
        self.fd = None
        self.took_over = None

    def acquire(self):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        asked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not asked:
                try:
                    pid = int(os.pread(fd, 32, 0).decode().strip() or 0)
                except ValueError:
                    pid = 0
                if pid and pid != os.getpid():
                    kill_pid(pid, grace=min(10.0, self.timeout / 2.0))
                    self.took_over = pid
                asked = True
            if time.monotonic() > deadline:
                os.close(fd)
                raise SyncError("model directory is locked by another worker that did not stop within %ss"
                                % self.timeout)
            time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def plan(files, dest, manifest, verify):
    """-> (ok, to_hash, to_fetch) lists of RemoteFile."""
    ok, to_hash, to_fetch = [], [], []
    for f in files:
        local = os.path.join(dest, f.path)
        if verify != "full" and manifest.is_current(f, local):
            ok.append(f)
        elif os.path.isfile(local) and not os.path.islink(local) and os.path.getsize(local) == f.size:
            to_hash.append(f)
        else:
            to_fetch.append(f)
    return ok, to_hash, to_fetch


def human_size(n):
    """'1.2 GiB', '340.0 MiB', '512 bytes' (for result messages)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / float(size), unit)
    return "%d bytes" % n


def _files(n):
    return "%d file%s" % (n, "" if n == 1 else "s")


def plan_message(name, endpoint, to_fetch, to_adopt, stale_manifest, to_rehash=0):
    """One line for a check-mode result: what a real run would change, e.g. "check mode: would fetch 3 files,
    1.2 GiB of Kimi-K2.6 from https://huggingface.co"."""
    parts = []
    if to_fetch:
        parts.append("fetch %s, %s" % (_files(len(to_fetch)), human_size(sum(f.size for f in to_fetch))))
    if to_adopt:
        parts.append("hash and adopt %s present but not vouched for by the manifest (%s)"
                     % (_files(len(to_adopt)), human_size(sum(f.size for f in to_adopt))))
    if stale_manifest and not parts:  # (a fetch records it anyway)
        parts.append("record the commit in the manifest")
    if parts:
        return "check mode: would %s of %s from %s" % ("; ".join(parts), name, endpoint)
    line = "check mode: nothing to fetch for %s from %s: every file is present and vouched for by the manifest" % (
        name, endpoint)
    if to_rehash:
        line += " (verify=full would rehash %s; a bad one would be fetched again)" % _files(to_rehash)
    return line


def journaled_bytes(dest, files):
    """Bytes of `files` already written under .hf_model/parts (resume credit for the space check)."""
    parts = os.path.join(dest, STATE_DIR, "parts")
    return sum(FileTask(f, dest, parts).on_disk() for f in files)


def sync(params, check_mode=False, python=None):
    p = dict(DEFAULTS)
    p.update({k: v for k, v in params.items() if v is not None})
    started = time.monotonic()
    repo_id = validate_repo_id(p["repo_id"])
    repo_type = validate_repo_type(p["repo_type"])
    dest = os.path.abspath(p["dest"])
    if p["verify"] not in ("quick", "full"):
        raise SyncError("verify must be quick or full, got %r" % p["verify"])
    name = p["name"] or os.path.basename(dest)
    peers = p["peers"] or []
    if peers and (not p["peer_self"] or not p["peer_token"]):
        raise SyncError("peers given without peer_self and peer_token: this host's place in the fan-out and the run's "
                        "peer token are both needed")
    if p["tree"]:
        # the controller read the Hub's tree once for the fleet (hf_tree): the only source of hashes
        sha, handed = tree_from_dicts(p["tree"])
        if p["revision"] != sha:
            raise SyncError("the handed tree is of commit %s but revision is %r: pass the tree's sha as revision"
                            % (sha, p["revision"]))
        files = filter_files(handed, p["allow_patterns"], p["ignore_patterns"])
    else:
        if peers:
            raise SyncError("peers need the tree the controller read from the Hub (tree): a peer is never trusted "
                            "for hashes")
        sha = resolve_revision(p["endpoint"], repo_id, p["revision"], token=p["token"], use_hf_hub=p["use_hf_hub"],
                               repo_type=repo_type)
        files = filter_files(list_tree(p["endpoint"], repo_id, sha, token=p["token"], use_hf_hub=p["use_hf_hub"],
                                       repo_type=repo_type),
                             p["allow_patterns"], p["ignore_patterns"])
    if not files:
        raise SyncError("%s@%s: no file matches allow_patterns=%s ignore_patterns=%s"
                        % (repo_id, sha, p["allow_patterns"], p["ignore_patterns"]))
    total = sum(f.size for f in files)
    state_dir = os.path.join(dest, STATE_DIR)
    manifest = Manifest.load(os.path.join(state_dir, "manifest.json"))
    ok, to_hash, to_fetch = plan(files, dest, manifest, p["verify"])
    # the manifest names another commit or repo type: saving it is a change even when no byte moves
    stale_manifest = manifest.revision != sha or manifest.repo_type != repo_type
    # files to hash that the manifest does not vouch for are adopted (a change); the rest (verify=full) change
    # only if their bytes turn out bad
    to_adopt = [f for f in to_hash if not manifest.is_current(f, os.path.join(dest, f.path))]
    vouched_before = set(f.path for f in to_hash) - set(f.path for f in to_adopt)
    would_change = bool(to_fetch) or bool(to_adopt) or stale_manifest
    result = {
        "changed": False, "repo_id": repo_id, "repo_type": repo_type, "revision": p["revision"], "sha": sha,
        "dest": dest,
        "files_total": len(files), "bytes_total": total, "files_verified_by_manifest": len(ok),
        "files_to_hash": len(to_hash), "files_to_fetch": len(to_fetch),
        "bytes_to_fetch": sum(f.size for f in to_fetch),
        "would_fetch": [f.path for f in to_fetch][:200],
        "files_to_adopt": len(to_adopt), "bytes_to_adopt": sum(f.size for f in to_adopt),
        "files_to_rehash": len(vouched_before), "would_change": would_change,
        "endpoint": p["endpoint"], "name": name,
        "manifest": manifest.path,
    }
    sources = None
    if peers:
        sources = SourceSet(Source("hub", "hub", p["endpoint"], p["token"]), peers, p["peer_self"], int(p["fanout"]),
                            os.path.basename(dest), sha, p["peer_token"], hub_fallback=bool(p["hub_fallback"]),
                            stale_after=max(90.0, 3 * float(p["stall_timeout"])))
        result["fanout_position"] = sources.me
        result["fanout_parent"] = sources.parent()
    already = journaled_bytes(dest, to_fetch) if os.path.isdir(state_dir) else 0
    need = max(0, result["bytes_to_fetch"] - already) + int(p["free_space_margin_mb"]) * MiB
    free = free_bytes(dest)
    result.update(free_bytes=free, bytes_needed=need, bytes_journaled=already)
    if check_mode:
        result["changed"] = would_change
        result["space_ok"] = free >= need
        where = p["endpoint"]
        if sources is not None and not sources.is_root:
            where = "peer %s (fan-out %d; other earlier hosts%s)" % (sources.parent(), sources.fanout,
                                                                   ", then the Hub" if p["hub_fallback"] else "")
        result["msg"] = plan_message(name, where, to_fetch, to_adopt, stale_manifest, len(vouched_before))
        return result
    if free < need:
        raise SyncError("not enough space in %s: %d bytes free, %d needed (%d to fetch - %d already "
                        "written + margin); nothing was fetched" % (dest, free, need, result["bytes_to_fetch"],
                                                                       already), free_bytes=free, bytes_needed=need)
    if not p["fetch"] and to_fetch:
        raise SyncError("%d file(s) missing and fetch is off: %s" % (len(to_fetch), [f.path for f in to_fetch][:20]))

    os.makedirs(dest, mode=0o755, exist_ok=True)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o755)  # progress/manifest readable; parts/ and lock stay 0700/0600
    lock = DirLock(state_dir, int(p["lock_timeout"]))
    lock.acquire()
    if threading.current_thread() is threading.main_thread():
        # a rerun taking over sends SIGTERM: stop the lanes and record why, through the handlers below
        signal.signal(signal.SIGTERM, _terminated)
    progress_path = os.path.join(state_dir, "progress.json")
    meter = hf_progress.RateMeter()
    prog = {"name": name, "repo_id": repo_id, "sha": sha, "pid": os.getpid(), "state": "running",
            "bytes_total": total, "bytes_done": sum(f.size for f in ok), "files_total": len(files),
            "files_done": len(ok), "started": time.time(), "error": None, "rate": 0.0, "eta": None,
            "updated": time.time()}
    base_done = [sum(f.size for f in ok)]

    def report(done, in_flight, stats, final=False):
        now_done = base_done[0] + done
        meter.add(now_done)
        rate = meter.rate()
        prog.update(bytes_done=now_done, rate=rate, in_flight=in_flight[:8], updated=time.time(),
                    eta=(total - now_done) / rate if rate > 0 else None,
                    stalls=stats.get("stalls", 0), transfer_failures=stats.get("failures", 0),
                    range_ignored=stats.get("range_ignored", 0),
                    bytes_by_source=dict(stats.get("bytes_by_source") or {}),
                    last_error=(stats.get("errors") or [None])[-1])
        hf_progress.write(progress_path, prog)

    try:
        hf_progress.write(progress_path, prog)
        manifest.repo_id = repo_id
        manifest.repo_type = repo_type
        verified, refetched_after_hash = [], []
        if to_hash:
            res = verify_files([(f, os.path.join(dest, f.path)) for f in to_hash], workers=p["hash_workers"] or None)
            for f in to_hash:
                good, _want, _got, sha256 = res[f.path]
                if good:
                    manifest.record(f, os.path.join(dest, f.path), sha256, sha)
                    verified.append(f.path)
                    base_done[0] += f.size
                else:
                    manifest.forget(f.path)
                    os.unlink(os.path.join(dest, f.path))
                    to_fetch.append(f)
                    refetched_after_hash.append(f.path)
            manifest.revision = manifest.revision or sha
            manifest.save()
        if not p["fetch"] and to_fetch:
            raise SyncError("fetch is off and %d file(s) are missing or failed verification (bad ones were deleted): "
                            "%s" % (len(to_fetch), [f.path for f in to_fetch][:20]),
                            failed_verification=refetched_after_hash)
        fetched = []

        def on_verified(remote, final, sha256):
            manifest.record(remote, final, sha256, sha)
            manifest.save()
            fetched.append(remote.path)
            prog["files_done"] = len(ok) + len(verified) + len(fetched)

        stats = {}
        if to_fetch:
            for f in to_fetch:
                manifest.forget(f.path)
            fetcher = Fetcher(p["endpoint"], repo_id, sha, dest, token=p["token"], repo_type=repo_type,
                              lanes=int(p["lanes"]), max_files=int(p["connections"]),
                              inner_retries=int(p["inner_retries"]),
                              chunk_size=int(p["chunk_size_mb"]) * MiB, stall_timeout=float(p["stall_timeout"]),
                              retries=int(p["retries"]), hash_retries=int(p["hash_retries"]),
                              backoff=float(p["backoff"]), backoff_max=float(p["backoff_max"]), python=python,
                              progress=report, on_verified=on_verified, sources=sources)
            stats = fetcher.run(to_fetch)
        changed_rev = stale_manifest
        manifest.revision = sha
        manifest.save()
        _prune_parts(state_dir, files, dest)
        adopted = [x for x in verified if x not in vouched_before]  # rehashed good under verify=full: no change
        result.update(changed=bool(fetched) or bool(adopted) or bool(refetched_after_hash) or changed_rev,
                      files_fetched=len(fetched),
                      files_adopted=len(adopted), files_rehashed_bad=refetched_after_hash,
                      bytes_fetched=stats.get("bytes_fetched", 0), bytes_resumed=stats.get("bytes_resumed", 0),
                      stalls=stats.get("stalls", 0), transfer_failures=stats.get("failures", 0),
                      hash_mismatches=stats.get("hash_mismatches", 0), took_over_pid=lock.took_over,
                      range_ignored=stats.get("range_ignored", 0),
                      range_ignored_files=stats.get("range_ignored_files", [])[:50],
                      whole_body_streams=stats.get("streams", 0),
                      bytes_by_source=stats.get("bytes_by_source", {}),
                      files_by_source=stats.get("files_by_source", {}),
                      peer_failures=stats.get("peer_failures", 0),
                      peer_hash_mismatches=stats.get("peer_hash_mismatches", [])[:50],
                      seconds=round(time.monotonic() - started, 3), fetched=fetched[:200])
        result["msg"] = "%s: %s fetched (%s received), %s adopted; all %s vouched for by the manifest" % (
            name, _files(len(fetched)), human_size(result["bytes_fetched"]), _files(len(adopted)), _files(len(files)))
        if sources is not None and result["bytes_by_source"]:
            result["msg"] += "; received from %s" % ", ".join(
                "%s %s" % (src, human_size(n)) for src, n in sorted(result["bytes_by_source"].items()))
        if result["peer_hash_mismatches"]:
            result["msg"] += "; bad copies caught and fetched again: %s" % ", ".join(
                "%s from %s" % (m["file"], m["peer"]) for m in result["peer_hash_mismatches"][:5])
        if result["range_ignored"]:
            result["msg"] += ("; the server ignored Range %d time%s (answered with the whole file: used, then "
                              "sha256-checked): %s" % (result["range_ignored"],
                                                      "" if result["range_ignored"] == 1 else "s",
                                                      ", ".join(result["range_ignored_files"][:5])))
        if p["verify"] == "full":
            result["files_rehashed"] = len(to_hash)
        prog.update(state="done", bytes_done=total, files_done=len(files), updated=time.time(), eta=0,
                    range_ignored=result["range_ignored"])
        hf_progress.write(progress_path, prog)
        return result
    except FetchError as err:
        prog.update(state="failed", error=str(err), updated=time.time())
        hf_progress.write(progress_path, prog)
        _save_quietly(manifest)
        raise SyncError(str(err), file=err.path, bytes_done=err.bytes_done, last_error=err.last_error,
                        failure=err.kind)
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        msg = "no space left on the filesystem of %s (%s); %d bytes free now" % (dest, err, free_bytes(dest))
        prog.update(state="failed", error=msg, updated=time.time())
        hf_progress.write(progress_path, prog)
        _save_quietly(manifest)
        raise SyncError(msg, file=getattr(err, "filename", None), bytes_done=prog.get("bytes_done"),
                        last_error=str(err), failure="enospc")
    except BaseException as err:
        prog.update(state="failed", error="%s: %s" % (type(err).__name__, err), updated=time.time())
        hf_progress.write(progress_path, prog)
        raise
    finally:
        lock.release()


class Terminated(SystemExit):
    pass


def _terminated(signum, frame):
    raise Terminated("stopped by SIGTERM (a newer run took this directory over?)")


def _save_quietly(manifest):
    try:
        manifest.save()
    except OSError:
        pass


def _prune_parts(state_dir, files, dest):
    """Drop journals of files no longer wanted (another revision or pattern)."""
    parts = os.path.join(state_dir, "parts")
    if not os.path.isdir(parts):
        return
    keep = set(FileTask(f, dest, parts).dir for f in files)
    for name in os.listdir(parts):
        full = os.path.join(parts, name)
        if full not in keep:
            shutil.rmtree(full, ignore_errors=True)


__all__ = ["HubError", "SyncError", "sync", "free_bytes", "plan"]
