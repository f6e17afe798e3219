"""An operator's existing venv adopted as ours (roles/takeover takeover_venv): verified, moved to the venv path,
relocated, recorded; and moved back (playbooks/takeover_revert.yml).

verify(source, ...)  read-only: its python runs and is not older than the lock's (lock.py python_problem), the SGLang
                     module imports and its distribution's version is the one the flavour pins (lock.py
                     pinned_version, on the controller), every patch of the series is applied (patch.py
                     verify_series: the reverse dry runs, either form), its own flag schema extracts (flag_schema.py
                     run_extractor, with the venv's python, into a temp file). The first failing check refuses,
                     named, with its output, before anything changes.
adopt(...)           the verified venv renamed to the venv path (same filesystem) or copied there and the copy's manifest
                     compared with the source's (another filesystem: the source stays); the old prefix rewritten in
                     bin/ (shebangs, activate scripts; pyvenv.cfg's home is the base interpreter and stays); made
                     readable (a+rX); its flag schema written in; the provenance fact (provenance.py) written with
                     method "adopted", adopted_from and the content hash of the manifest (manifest.py), as the venv
                     role computes it; what is about to change recorded first in the takeover record.
revert(...)          the adopted venv moved back (or our copy removed), its old prefix restored, what adoption added
                     removed, the fact removed.

A rerun is a no-op: the fact says adopted from this source and the live venv still has the recorded content hash.
The venv role keeps such a venv (module_utils/venv/build.py up_to_date, adopted_pin; roles/venv/README.md).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.sglang.takeover import load_record, save_record
from ansible.module_utils.venv.build import python_version
from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.flag_schema import FLAG_SCHEMA_NAME, run_extractor, usable_schema
from ansible.module_utils.venv.lock import python_problem
from ansible.module_utils.venv.manifest import DIGEST_NAME, ManifestError, is_venv, read_json, scan, summary
from ansible.module_utils.venv.patch import PatchError, series_form, site_packages, verify_series
from ansible.module_utils.venv.provenance import provenance, venv_versions

FALLBACK = ("Nothing was changed. To build ours instead, leave takeover_venv unset (''): the venv role builds (or "
            "streams) the venv at its path.")
SCRIPT_MAX = 1 << 20  # bin/ files larger than this are binaries, not scripts naming the prefix
ACTIVATE = ("activate", "activate.csh", "activate.fish", "Activate.ps1", "activate.nu", "activate.bat")


class AdoptError(EvidenceError):
    """A venv that is not what the flavour needs (check, output), or a path adoption cannot use."""

    default_kind = "venv_adopt"


def _run(argv: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout, env=env)


def _refuse(source: str, check: str, problem: str, output: str = "") -> AdoptError:
    return AdoptError(f"venv {source} cannot be adopted: {check}: {problem}. {FALLBACK}", check=check,
                      output=output.strip()[-3000:], source=source)


def write_series(series: list[dict], into: str) -> list[str]:
    """The series as the controller read it ([{name, text}], in order) written into a private directory."""
    names = []
    for item in series:
        name = str(item.get("name") or "")
        if not name or "/" in name or name.startswith("."):
            raise AdoptError(f"patch name {name!r} is not a file name", check="patches")
        with open(os.path.join(into, name), "w", encoding="utf-8") as fh:
            fh.write(str(item.get("text") or ""))
        names.append(name)
    with open(os.path.join(into, "series"), "w", encoding="utf-8") as fh:
        fh.write("".join(n + "\n" for n in names))
    return names


def verify(source: str, python_floor: str, sglang_dist: str, sglang_module: str, sglang_version: str,
           series: list[dict], patch_packages=(), schema_module: str = "", schema_out: str = "") -> dict:
    """Every check of an adoptable venv, read-only, in order; AdoptError naming the first that fails."""
    python = os.path.join(source, "bin", "python")
    if not is_venv(source):
        raise _refuse(source, "venv", f"{source} is not a venv (no pyvenv.cfg or bin/python)")
    try:
        found, error = python_version(python), ""
    except BuildError as exc:
        found, error = "", str(exc)
    problem = python_problem(found, python_floor, python, "the flavour's lock", error)
    if problem:
        raise _refuse(source, "python", problem, error)
    run = _run([python, "-c", "import importlib, sys; importlib.import_module(sys.argv[1])", sglang_module])
    if run.returncode != 0:
        raise _refuse(source, "import", f"import {sglang_module} fails (rc={run.returncode})", run.stderr)
    have = venv_versions(source, sglang_dist, sglang_module)["sglang_version"]
    if not sglang_version or have != sglang_version:
        raise _refuse(source, "version", f"{sglang_dist} {have or '(no version)'} is installed, the flavour's lock "
                      f"pins {sglang_version or '(nothing: no such distribution in the lock)'}")
    with tempfile.TemporaryDirectory(prefix="venv-adopt-series.") as tmp:
        names = write_series(series, tmp)
        try:
            form = series_form(tmp, names, patch_packages)
            found_series = verify_series(site_packages(source), tmp, names, form["strip"]) if names else \
                {"applied": [], "missing": {}}
        except PatchError as exc:
            raise _refuse(source, "patches", exc.message) from None
    if found_series["missing"]:
        raise _refuse(source, "patches", "patch(es) not applied: " + ", ".join(found_series["missing"]),
                      "\n".join(f"{n}: {e}" for n, e in found_series["missing"].items()))
    schema = {}
    if schema_module:
        try:
            run_extractor(python, schema_out, schema_module, dict(os.environ))
            schema = usable_schema(schema_out, schema_module)
        except BuildError as exc:
            raise _refuse(source, "flag_schema", f"its flag schema does not extract from {schema_module}",
                          str(exc)) from None
    return {"python_version": found, "sglang_version": have, "patches": found_series["applied"],
            "patch_form": form["form"], "flag_schema": schema}


def relocate(venv: str, old: str, new: str, check: bool = False) -> list[str]:
    """Rewrite the old absolute prefix to the new one in bin/'s scripts (shebangs, pip's sh-exec form) and activate
    scripts: a path naming the prefix itself or a file under it, not a longer sibling (/root/venv2). Returns the
    files rewritten (relative to bin/). Files keep their mode; each rewrite is temp + rename."""
    pattern = re.compile(re.escape(old.encode()) + rb"(?![A-Za-z0-9_.+-])")
    bindir = os.path.join(venv, "bin")
    changed = []
    for name in sorted(os.listdir(bindir)):
        path = os.path.join(bindir, name)
        if os.path.islink(path) or not os.path.isfile(path) or os.path.getsize(path) > SCRIPT_MAX:
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if b"\0" in data or (not data.startswith(b"#!") and name not in ACTIVATE):
            continue
        new_data = pattern.sub(new.encode().replace(b"\\", b"\\\\"), data)
        if new_data == data:
            continue
        changed.append(name)
        if check:
            continue
        tmp = f"{path}.adopt-tmp"
        with open(tmp, "wb") as fh:
            fh.write(new_data)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    return changed


def make_readable(root: str) -> None:
    """a+r on files, a+rx on directories (and on files someone may execute): the service user reads the venv."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, os.stat(dirpath).st_mode | 0o555)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            mode = os.stat(path).st_mode
            os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 else 0))


def _device(path: str) -> int:
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return os.stat(path).st_dev


def adopted_state(path: str, fact_path: str, source: str) -> tuple[bool, str]:
    """(adopted earlier from source and still there, why)."""
    fact = read_json(fact_path) or {}
    if fact.get("method") != "adopted" or fact.get("adopted_from") != source or not is_venv(path):
        return False, ""
    digest = summary(scan(path))["digest"]
    if digest == fact.get("content_hash"):
        return True, f"{source} was adopted into {path} ({fact.get('adopted_time', '')}); unchanged since"
    return True, (f"{source} was adopted into {path}; it changed since (content {digest[:12]}, recorded "
                  f"{str(fact.get('content_hash'))[:12]}): the venv role rebuilds it")


def _record(record_path: str, entry: dict) -> None:
    """The adoption, in the last takeover of the record (or a takeover of its own), before anything moves."""
    takeovers = load_record(record_path)
    if takeovers and "venv" not in takeovers[-1]:
        takeovers[-1]["venv"] = entry
    else:
        takeovers.append({"time": entry["time"], "units": [], "venv": entry})
    save_record(record_path, takeovers)


def adopt(source: str, path: str, fact_path: str, record_path: str, fields: dict, python_floor: str,
          sglang_dist: str, sglang_module: str, sglang_version: str, series: list[dict], patch_packages=(),
          schema_module: str = "", check_only: bool = False, check_mode: bool = False,
          clock=time.time) -> dict:
    """What the venv_adopt module does for state verified (check_only) and adopted."""
    source, path = os.path.normpath(source), os.path.normpath(path)
    if not os.path.isabs(source) or source in ("/", path) or path.startswith(source + "/") \
            or source.startswith(path + "/"):
        raise AdoptError(f"takeover_venv {source!r} must be an absolute path apart from the venv path {path}. "
                         + FALLBACK, check="paths", source=source)
    done, why = adopted_state(path, fact_path, source)
    if done:
        return {"changed": False, "adopted": False, "method": "", "msg": why, "relocated": [], "verified": {}}
    if os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise AdoptError(f"the venv path {path} is taken (a venv of ours, or something else): adopting {source} "
                         f"would replace it. Move it away, or {FALLBACK[len('Nothing was changed. '):]}",
                         check="paths", source=source, path=path)
    with tempfile.TemporaryDirectory(prefix="venv-adopt.") as tmp:
        schema_out = os.path.join(tmp, FLAG_SCHEMA_NAME)
        verified = verify(source, python_floor, sglang_dist, sglang_module, sglang_version, series, patch_packages,
                          schema_module, schema_out)
        how = "rename" if _device(source) == _device(os.path.dirname(path)) else "copy"
        relocated = relocate(source, source, path, check=True)
        plan = f"{source} into {path} ({how}; {len(relocated)} script(s) in bin/ relocated)"
        if check_only or check_mode:
            verb = "verified: would adopt" if check_only else "would adopt"
            return {"changed": not check_only, "adopted": False, "method": how, "msg": f"{verb} {plan}",
                    "relocated": relocated, "verified": verified}
        added = [n for n in (FLAG_SCHEMA_NAME, DIGEST_NAME) if not os.path.lexists(os.path.join(source, n))]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))
        _record(record_path, {"time": now, "source": source, "path": path, "method": how, "added": added,
                              "fact_path": fact_path})
        _move(source, path, how)
        relocated = relocate(path, source, path)
        if schema_module:
            shutil.copyfile(schema_out, os.path.join(path, FLAG_SCHEMA_NAME))
    make_readable(path)
    run = _run([os.path.join(path, "bin", "python"), "-c",
                "import importlib, sys; importlib.import_module(sys.argv[1])", sglang_module])
    if run.returncode != 0:
        raise AdoptError(f"{path} (adopted from {source}) does not import {sglang_module} after the move: undo with "
                         "playbooks/takeover_revert.yml", check="import", output=run.stderr[-3000:])
    content = summary(scan(path))["digest"]
    fact_fields = dict(fields, method="adopted", adopted_from=source, adopted_time=now, recipe_hash="",
                       adopted_schema_module=schema_module, adopted_pin=f"{sglang_dist}=={sglang_version}")
    try:
        provenance(path, fact_path, content, fact_fields, sglang_dist, sglang_module)
    except BuildError as exc:
        raise AdoptError(str(exc), check="fact") from None
    return {"changed": True, "adopted": True, "method": how, "msg": f"adopted {plan}", "relocated": relocated,
            "verified": verified}


def _move(source: str, path: str, how: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if os.path.isdir(path):
        os.rmdir(path)  # an empty directory (a mount point made earlier) only: checked by the caller
    if how == "rename":
        os.rename(source, path)
        return
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.adopt")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, symlinks=True)
    try:
        want, got = summary(scan(source))["digest"], summary(scan(tmp))["digest"]
    except ManifestError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AdoptError(f"copying {source} failed: {exc}", check="copy") from None
    if want != got:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AdoptError(f"the copy of {source} differs from it (content {got[:12]} vs {want[:12]}); nothing was "
                         "changed", check="copy", source=source)
    os.rename(tmp, path)


def revert(record_path: str, check_mode: bool = False) -> dict:
    """Undo the venv adoption of the last takeover: moved back (a copy removed), old prefix restored in bin/, the files
    adoption added removed, the adopted fact removed. No adoption in the record, or already undone: no change."""
    takeovers = load_record(record_path)
    entry = (takeovers[-1].get("venv") if takeovers else None) or {}
    if not entry or entry.get("reverted"):
        return {"changed": False, "msg": "no venv adoption to undo", "relocated": []}
    source, path, how = entry["source"], entry["path"], entry["method"]
    if not os.path.lexists(path):
        raise AdoptError(f"the adopted venv {path} is gone: {source} cannot be restored from it", check="revert",
                         record_path=record_path)
    if how == "rename" and os.path.lexists(source):
        raise AdoptError(f"{source} exists again: the adopted venv {path} cannot be moved back there",
                         check="revert", record_path=record_path)
    fact = read_json(entry.get("fact_path") or "") or {}
    if how == "rename" and (fact.get("method") != "adopted" or fact.get("adopted_from") != source):
        raise AdoptError(f"the venv at {path} is no longer the one adopted from {source} (its fact records method "
                         f"{fact.get('method')!r}: the venv role built over it), so {source} cannot be restored",
                         check="revert", record_path=record_path)
    msg = f"{path} moved back to {source}" if how == "rename" else f"our copy {path} removed ({source} was kept)"
    if check_mode:
        return {"changed": True, "msg": f"would undo the adoption: {msg}", "relocated": []}
    relocated = []
    if how == "rename":
        relocated = relocate(path, path, source)
        for name in entry.get("added") or []:
            if os.path.lexists(os.path.join(path, name)):
                os.unlink(os.path.join(path, name))
        os.rename(path, source)
    else:
        shutil.rmtree(path)
    if fact.get("adopted_from") == source:
        os.unlink(entry["fact_path"])
    entry["reverted"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save_record(record_path, takeovers)
    return {"changed": True, "msg": msg, "relocated": relocated}
