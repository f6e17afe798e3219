# -*- coding: utf-8 -*-
"""Adopt weights a hand-made deployment already has on disk into the models role's layout, so the models role then
finds them complete and fetches nothing.

For one model (its Hub tree at the pinned commit, handed over by the controller: library/hf_tree.py), look for a
source directory among the operator's old model directories (<dir>/<repo name>, then <dir>/<entry name>), check each
file the models role would fetch against the Hub's hashes (size, then sha256 for LFS files / the git blob sha1 for
the others: hf/verify.py, hashed in parallel with progress in <dest>/.hf_model/progress.json, the file the models
role's progress poll reads), hard-link the good ones into <dest> (same filesystem; another filesystem is refused
unless copy is asked for: then copied and the copy hashed again), make them readable (a+r), and record them in the
models role's manifest (<dest>/.hf_model/manifest.json) at that commit. Files missing or bad in the source are left
for the models role to fetch, and reported. The source directory is not changed (hard links share its inodes: the
old deployment can still be started from it, which is what makes a takeover reversible).

    adopt(name, dest, tree, repo_id, sources, repo_type="model", copy=False, check=False) -> result dict
"""
from __future__ import absolute_import, division, print_function

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.hf import progress as hf_progress
from ansible.module_utils.hf.hub import tree_from_dicts
from ansible.module_utils.hf.verify import Manifest, fsync_dir, verify_files

STATE_DIR = ".hf_model"


class AdoptError(EvidenceError):
    """Weights that cannot be adopted as asked (another filesystem without copy, a dest that is not a directory)."""

    default_kind = "adopt"


def candidates(sources, repo_id, name):
    """Where the old deployment may keep this model: <dir>/<repo name>, then <dir>/<entry name>, per dir."""
    out = []
    for base in sources:
        for leaf in (repo_id.split("/")[-1], name):
            path = os.path.join(base, leaf)
            if path not in out:
                out.append(path)
    return out


def _device(path):
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    return os.stat(p).st_dev


def _source_file(source, remote):
    """The real file behind <source>/<path> (a Hub cache snapshot is symlinks to blobs), or None."""
    path = os.path.realpath(os.path.join(source, remote.path))
    try:
        return path if os.path.isfile(path) and os.stat(path).st_size == remote.size else None
    except OSError:
        return None


def _place(src, final, copy):
    """Hard-link (or copy) src to final through a temporary name, replacing what is there."""
    os.makedirs(os.path.dirname(final), mode=0o755, exist_ok=True)
    tmp = final + ".adopt.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    if copy:
        shutil.copyfile(src, tmp)
    else:
        os.link(src, tmp)
    st = os.stat(tmp)
    if st.st_mode & 0o444 != 0o444:
        os.chmod(tmp, st.st_mode | 0o444)
    os.replace(tmp, final)


def adopt(name, dest, tree, repo_id, sources, repo_type="model", copy=False, check=False, workers=None,
          clock=time.time):
    sha, files = tree_from_dicts(tree)
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise AdoptError("%s exists and is not a directory" % dest, dest=dest)
    manifest = Manifest.load(os.path.join(dest, STATE_DIR, "manifest.json"))
    same_repo = manifest.repo_id in (None, repo_id) and manifest.revision in (None, sha)
    need = [f for f in files if not (same_repo and manifest.is_current(f, os.path.join(dest, f.path)))]
    result = {"changed": False, "name": name, "sha": sha, "dest": dest, "source": None, "method": None,
              "files_total": len(files), "files_vouched": len(files) - len(need), "files_adopted": 0,
              "bytes_adopted": 0, "files_missing": [], "files_bad": [], "looked_in": candidates(sources, repo_id, name)}
    if not need:
        result["msg"] = "%s: every file is already in %s and vouched for by its manifest" % (name, dest)
        return result
    source = next((c for c in result["looked_in"] if os.path.isdir(c)), None)
    if source is None:
        result["msg"] = "%s: no old copy in %s; the models role fetches it" % (name, ", ".join(result["looked_in"]))
        return result
    result["source"] = source
    found = [(f, _source_file(source, f)) for f in need]
    present = [(f, p) for f, p in found if p]
    result["files_missing"] = [f.path for f, p in found if not p]
    same_fs = _device(source) == _device(dest)
    result["method"] = "hardlink" if same_fs else "copy"
    if not same_fs and not copy:
        raise AdoptError("%s: the old copy %s is on another filesystem than %s: hard links cannot cross it. Move it "
                         "there yourself, or let the takeover copy it (takeover_models_copy: true; %d bytes)"
                         % (name, source, dest, sum(f.size for f, _ in present)),
                         source=source, dest=dest, bytes=sum(f.size for f, _ in present))
    total = sum(f.size for f, _ in present)
    if check:
        result.update(changed=bool(present), files_adopted=len(present), bytes_adopted=total,
                      msg="check mode: would verify and %s %d files (%d bytes) of %s from %s into %s; %d missing"
                          % ("hard-link" if same_fs else "copy", len(present), total, name, source, dest,
                             len(result["files_missing"])))
        return result
    state_dir = os.path.join(dest, STATE_DIR)
    os.makedirs(state_dir, mode=0o755, exist_ok=True)
    progress_path = os.path.join(state_dir, "progress.json")
    meter = hf_progress.RateMeter()
    prog = {"name": name + " (adopt)", "repo_id": repo_id, "sha": sha, "pid": os.getpid(), "state": "running",
            "bytes_total": total, "bytes_done": 0, "files_total": len(present), "files_done": 0,
            "started": clock(), "updated": clock(), "rate": 0.0, "eta": None, "error": None}
    hf_progress.write(progress_path, prog)
    manifest.repo_id, manifest.repo_type, manifest.revision = repo_id, repo_type, sha
    try:
        good = _verify(present, prog, meter, progress_path, workers, clock)
        for f, src in present:
            if f.path not in good:
                result["files_bad"].append(f.path)
                continue
            final = os.path.join(dest, f.path)
            _place(src, final, copy and not same_fs)
            if copy and not same_fs:
                ok, _want, got, sha256 = verify_files([(f, final)])[f.path]
                if not ok:
                    os.unlink(final)
                    result["files_bad"].append(f.path)
                    continue
                good[f.path] = sha256
            manifest.record(f, final, good[f.path], sha)
            result["files_adopted"] += 1
            result["bytes_adopted"] += f.size
        manifest.save()
        fsync_dir(dest)
    except Exception as exc:
        hf_progress.write(progress_path, dict(prog, state="failed", error=str(exc), updated=clock()))
        raise
    hf_progress.write(progress_path, dict(prog, state="done", updated=clock()))
    result["changed"] = result["files_adopted"] > 0
    result["msg"] = ("%s: adopted %d files (%d bytes) from %s by %s; %d missing and %d bad there, left for the models "
                     "role to fetch" % (name, result["files_adopted"], result["bytes_adopted"], source,
                                        result["method"], len(result["files_missing"]), len(result["files_bad"])))
    return result


def _verify(present, prog, meter, progress_path, workers, clock):
    """{path: sha256} of the source files whose bytes match the Hub's hash; progress written per file."""
    good = {}
    workers = workers or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(present) or 1))) as pool:
        jobs = {pool.submit(verify_files, [(f, src)], 1): f for f, src in sorted(present, key=lambda x: -x[0].size)}
        for job in as_completed(jobs):
            f = jobs[job]
            ok, _want, _got, sha256 = job.result()[f.path]
            if ok:
                good[f.path] = sha256
            prog["bytes_done"] += f.size
            prog["files_done"] += 1
            meter.add(prog["bytes_done"])
            rate = meter.rate()
            prog.update(rate=rate, updated=clock(),
                        eta=(prog["bytes_total"] - prog["bytes_done"]) / rate if rate > 0 else None)
            hf_progress.write(progress_path, prog)
    return good
