"""Byte-code of a venv, compiled once as root so that no service start compiles anything (stdlib only).

The venv is root's and the service user cannot write into it: without byte-code in the venv, every worker of every
start recompiles every module it imports (SGLang is thousands of modules, times 8 TP workers), and nothing is ever
cached. So the stage is compiled before the swap (venv_commit, after the stage's content hash was checked), for a
build and for a stream alike, and a live venv found without valid byte-code is completed in place (venv_bytecode
state=compiled); verify checks it (state=checked).

Invalidation mode: checked-hash (PEP 552). A timestamp pyc is valid while the source's mtime (whole seconds) and size
are what it recorded, whatever the bytes: the stream does carry mtimes (venv_receive sets each file's from the
archive), but a source rewritten within the same second at the same size (a patch that flips one character right
after pip wrote the file; a streamed file replacing one with the same mtime second and size, its old pyc hard-linked
into the stage) would keep a stale pyc "valid". A checked-hash pyc records a hash of the source bytes: importlib reads
the source and compares (no compile), so validity follows the content alone, survives any copy that does not keep
mtimes, and an edited source is recompiled rather than ignored (an unchecked-hash pyc would be used even when the
source changed: a hot fix would silently not run).

Byte-code stays out of the manifest and the content hash (venv_manifest.EXCLUDE_*): it is derived from the sources,
which are in it. Compiling writes only ``__pycache__/*.pyc`` (atomically: a new inode, so a pyc hard-linked from the
live venv into a stream's stage is never written through).

This file is also the script the venv's own interpreter runs (``<venv>/bin/python -I -B venv_bytecode.py
compile|check``): the magic number, the cache tag (``cpython-311``) and the source hash must be that interpreter's, not Ansible's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MODE = "checked-hash"
TIMEOUT = 1800  # seconds: a 12 GB SGLang + torch venv has tens of thousands of modules
LIST_LIMIT = 20  # paths named per category in a result (the counts are complete)


class BytecodeError(Exception):
    """The venv's byte-code cannot be compiled or checked (the interpreter fails, a pyc cannot be written)."""


# ------------------------------------------------------------------ run by the venv's own interpreter
def site_dirs() -> list[str]:
    """purelib and platlib of the running interpreter (a venv: both lib/pythonX.Y/site-packages), real paths,
    deduplicated, only those inside sys.prefix (the venv)."""
    import sysconfig
    paths = sysconfig.get_paths()
    prefix = os.path.realpath(sys.prefix)
    out = []
    for key in ("purelib", "platlib"):
        real = os.path.realpath(paths[key])
        if real not in out and os.path.isdir(real) and (real == prefix or real.startswith(prefix + os.sep)):
            out.append(real)
    return out


def sources(dirs: list[str]) -> list[str]:
    """Every *.py file below dirs (regular files or links to one), sorted; __pycache__ is not descended."""
    out = []
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in filenames:
                if name.endswith(".py"):
                    full = os.path.join(dirpath, name)
                    if os.path.isfile(full):
                        out.append(full)
    return sorted(set(out))


def pyc_state(source: str) -> tuple[str, str]:
    """("valid", mode) | ("missing", "") | ("stale", why): what importlib's SourceLoader.get_code decides for the
    pyc of `source` (magic number, flags, then source hash or mtime and size), without importing anything."""
    import _imp
    import importlib.util
    cfile = importlib.util.cache_from_source(source)
    try:
        with open(cfile, "rb") as fh:
            head = fh.read(17)
    except FileNotFoundError:
        return "missing", ""
    except OSError as exc:
        return "missing", f"unreadable: {exc.strerror}"
    if len(head) < 17:
        return "stale", "truncated pyc"
    if head[:4] != importlib.util.MAGIC_NUMBER:
        return "stale", f"magic {head[:4].hex()} is not this interpreter's {importlib.util.MAGIC_NUMBER.hex()}"
    flags = int.from_bytes(head[4:8], "little")
    if flags & ~0b11:
        return "stale", f"invalid flags {flags:#x}"
    if flags & 0b1:
        checked = bool(flags & 0b10)
        if _imp.check_hash_based_pycs == "never" or (not checked and _imp.check_hash_based_pycs != "always"):
            return "valid", "unchecked-hash"
        try:
            with open(source, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            return "stale", f"source unreadable: {exc.strerror}"
        if importlib.util.source_hash(data) != head[8:16]:
            return "stale", "source hash differs (the source changed after it was compiled)"
        return "valid", "checked-hash" if checked else "unchecked-hash"
    try:
        st = os.stat(source)
    except OSError as exc:
        return "stale", f"source unreadable: {exc.strerror}"
    if head[8:12] != (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little"):
        return "stale", "source mtime differs from the one the timestamp pyc recorded"
    if head[12:16] != (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"):
        return "stale", "source size differs from the one the timestamp pyc recorded"
    return "valid", "timestamp"


def readable_by_others(source: str) -> str:
    """"" when the service user (not root, not the owner) can read the pyc of a source it can read; else why not
    (it would then compile the module on every start)."""
    import importlib.util
    cfile = importlib.util.cache_from_source(source)
    try:
        src, pyc, cache = os.stat(source), os.stat(cfile), os.stat(os.path.dirname(cfile))
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    if not src.st_mode & 0o004:
        return ""  # the source itself is private: whoever can import it can read what root wrote for it
    if not pyc.st_mode & 0o004:
        return f"pyc mode {pyc.st_mode & 0o777:04o} is not readable by other users"
    if cache.st_mode & 0o005 != 0o005:
        return f"__pycache__ mode {cache.st_mode & 0o777:04o} cannot be searched by other users"
    return ""


def _compilable(source: str) -> str:
    """"" when the source compiles, else the error (such a file can never be imported: no pyc can exist for it)."""
    try:
        with open(source, "rb") as fh:
            compile(fh.read(), source, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _compile_one(task: tuple[str, str, str]) -> tuple[str, str, str]:
    """(outcome, source, detail): kept (its pyc already counts), compiled, uncompilable (a syntax error: the module
    can never be imported) or error (the pyc cannot be written)."""
    import importlib.util
    import py_compile
    source, dfile, keep = task
    state, mode = pyc_state(source)
    if state == "valid" and (keep == "valid" or mode == MODE) and not readable_by_others(source):
        return "kept", source, mode
    cfile = importlib.util.cache_from_source(source)
    try:
        cache = os.path.dirname(cfile)
        if os.path.isdir(cache) and os.stat(cache).st_mode & 0o005 != 0o005:
            os.chmod(cache, os.stat(cache).st_mode & 0o7777 | 0o055)  # searchable by the service user
        py_compile.compile(source, cfile=cfile, dfile=dfile, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    except py_compile.PyCompileError as exc:
        return "uncompilable", source, exc.msg.strip().splitlines()[-1] if exc.msg.strip() else "compile error"
    except OSError as exc:
        return "error", source, f"{type(exc).__name__}: {exc}"
    return "compiled", source, ""


def prune_orphans(dirs: list[str]) -> int:
    """Remove this interpreter's pycs whose source is gone (a stream deleted it; the pyc was hard-linked into the
    stage). importlib never loads them; they would only accumulate. Returns how many were removed."""
    tag = sys.implementation.cache_tag
    if not tag:
        return 0
    pattern = re.compile(rf"^(?P<stem>.+)\.{re.escape(tag)}(\.opt-[12])?\.pyc$")
    removed = 0
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            if os.path.basename(dirpath) != "__pycache__":
                continue
            parent = os.path.dirname(dirpath)
            for name in filenames:
                m = pattern.match(name)
                if m and not os.path.exists(os.path.join(parent, m.group("stem") + ".py")):
                    os.unlink(os.path.join(dirpath, name))
                    removed += 1
    return removed


def _dfile(source: str, strip: str, prepend: str) -> str:
    """The path the code object names (tracebacks): the live path for a stage's source."""
    if strip and (source == strip or source.startswith(strip.rstrip("/") + "/")):
        return prepend.rstrip("/") + source[len(strip.rstrip("/")):]
    return source


def compile_tree(dirs: list[str], strip: str = "", prepend: str = "", workers: int = 0, keep: str = MODE,
                 prune: bool = False) -> dict:
    """Compile every source below dirs whose pyc does not count yet (keep=checked-hash: only a valid checked-hash
    pyc counts; keep=valid: any pyc importlib would accept), as checked-hash pycs, on `workers` processes (0 = all
    CPUs). Syntax errors are reported, not fatal (such modules cannot be imported at all); a pyc that cannot be
    written is an error."""
    from concurrent.futures import ProcessPoolExecutor
    found = sources(dirs)
    tasks = [(s, _dfile(s, strip, prepend), keep) for s in found]
    n = workers or os.cpu_count() or 1
    results = None
    if n > 1 and len(tasks) > 64:
        try:
            with ProcessPoolExecutor(max_workers=n) as pool:
                results = list(pool.map(_compile_one, tasks, chunksize=max(1, min(256, len(tasks) // (n * 8)))))
        except (OSError, NotImplementedError):  # no working multiprocessing here (e.g. no /dev/shm): one process
            n = 1
    if results is None:
        results = [_compile_one(t) for t in tasks]
    out: dict = {"dirs": dirs, "sources": len(found), "compiled": 0, "kept": 0, "uncompilable_count": 0,
                 "uncompilable": [], "errors": [], "mode": MODE, "workers": n}
    for outcome, source, detail in results:
        if outcome in ("compiled", "kept"):
            out[outcome] += 1
        elif outcome == "uncompilable":
            out["uncompilable_count"] += 1
            if len(out["uncompilable"]) < LIST_LIMIT:
                out["uncompilable"].append({"path": source, "error": detail})
        else:
            out["errors"].append({"path": source, "error": detail})
    out["orphans_removed"] = prune_orphans(dirs) if prune else 0
    return out


def check_tree(dirs: list[str]) -> dict:
    """Every source below dirs: does importlib accept its pyc without recompiling? Counts per outcome and mode; the
    first LIST_LIMIT stale and missing files are named. A source without pyc that does not compile (a syntax error:
    no import can use it) is counted as uncompilable, not missing."""
    out: dict = {"dirs": dirs, "sources": 0, "valid": 0, "stale_count": 0, "missing_count": 0,
                 "uncompilable_count": 0, "stale": [], "missing": [], "uncompilable": [], "modes": {}}
    for source in sources(dirs):
        out["sources"] += 1
        state, detail = pyc_state(source)
        if state == "valid":
            private = readable_by_others(source)
            if private:
                state, detail = "stale", private
        if state == "valid":
            out["valid"] += 1
            out["modes"][detail] = out["modes"].get(detail, 0) + 1
            continue
        if state == "missing":
            error = _compilable(source)
            if error:
                out["uncompilable_count"] += 1
                if len(out["uncompilable"]) < LIST_LIMIT:
                    out["uncompilable"].append({"path": source, "error": error})
                continue
        out[f"{state}_count"] += 1
        if len(out[state]) < LIST_LIMIT:
            out[state].append({"path": source, "why": detail} if state == "stale" else {"path": source})
    out["invalid"] = out["stale_count"] + out["missing_count"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="compile or check the byte-code of the running venv")
    parser.add_argument("action", choices=["compile", "check"])
    parser.add_argument("--strip", default="", help="compile: path prefix of the sources to replace in the pycs")
    parser.add_argument("--prepend", default="", help="compile: what replaces it (the live venv path)")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--keep", choices=[MODE, "valid"], default=MODE)
    parser.add_argument("--prune", action="store_true", help="compile: remove pycs whose source is gone")
    args = parser.parse_args(argv)
    dirs = site_dirs()
    if not dirs:
        print(json.dumps({"error": f"no purelib/platlib inside {sys.prefix}"}))
        return 2
    if args.action == "compile":
        os.umask(0o022)  # pycs and __pycache__ readable by the service user whatever umask the caller had
        result = compile_tree(dirs, args.strip, args.prepend, args.workers, args.keep, args.prune)
    else:
        result = check_tree(dirs)
    result.update(python=sys.version.split()[0], cache_tag=sys.implementation.cache_tag, prefix=sys.prefix)
    print(json.dumps(result))
    return 0


# ------------------------------------------------------------------ called from the modules (Ansible's python)
def script_source() -> str:
    """This file's source, also from inside an AnsiballZ payload (zipimport)."""
    import inspect
    try:
        return inspect.getsource(sys.modules[__name__])
    except (OSError, TypeError) as exc:
        raise BytecodeError(f"cannot read the byte-code script's source: {exc}") from exc


def run(venv: str, action: str, extra: list[str] | None = None, timeout: int = TIMEOUT) -> dict:
    """Run this script with <venv>/bin/python (-I: no PYTHON* variables, no user site; -B: the script writes no
    byte-code of its own) and return its JSON result. BytecodeError when the interpreter fails."""
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        raise BytecodeError(f"no interpreter at {python}")
    tmp = tempfile.mkdtemp(prefix="venv-bytecode.")
    try:
        script = os.path.join(tmp, "venv_bytecode.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(script_source())
        argv = [python, "-I", "-B", script, action, *(extra or [])]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        try:
            out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as exc:
            raise BytecodeError(f"byte-code {action} of {venv} timed out after {timeout}s") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        result = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    except ValueError:
        result = {}
    if out.returncode != 0 or not result or "error" in result:
        raise BytecodeError(f"byte-code {action} of {venv} failed (rc={out.returncode}): "
                            f"{result.get('error') or (out.stderr or out.stdout).strip()[-2000:]}")
    return result


def compile_stage(stage: str, live: str, workers: int = 0, timeout: int = TIMEOUT) -> dict:
    """Compile the stage's byte-code before the swap: every module as a checked-hash pyc naming its live path,
    except those whose checked-hash pyc (hard-linked from the live venv by a stream) is still valid; pycs of
    deleted sources removed. BytecodeError when a pyc cannot be written."""
    result = run(stage, "compile", ["--strip", stage, "--prepend", live, "--workers", str(workers), "--prune"],
                 timeout)
    if result["errors"]:
        first = "; ".join(f"{e['path']}: {e['error']}" for e in result["errors"][:5])
        raise BytecodeError(f"{len(result['errors'])} pyc file(s) could not be written in {stage}: {first}")
    return result


def describe_invalid(result: dict) -> str:
    """One line naming what is stale or missing (for failure messages)."""
    named = [f"{e['path']} (stale: {e['why']})" for e in result.get("stale", [])]
    named += [f"{e['path']} (missing)" for e in result.get("missing", [])]
    more = result.get("invalid", 0) - len(named)
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def ensure(venv: str, check_mode: bool = False, workers: int = 0, timeout: int = TIMEOUT) -> dict:
    """What venv_bytecode state=compiled does: check; compile what is stale or missing in place (the pycs of a live
    venv, written atomically); check again. Returns {changed, before, after, compiled}."""
    before = run(venv, "check", timeout=timeout)
    if before["invalid"] == 0:
        return {"changed": False, "before": before, "after": before, "compiled": {}}
    if check_mode:
        return {"changed": True, "before": before, "after": {}, "compiled": {}}
    compiled = run(venv, "compile", ["--keep", "valid", "--workers", str(workers)], timeout)
    if compiled["errors"]:
        first = "; ".join(f"{e['path']}: {e['error']}" for e in compiled["errors"][:5])
        raise BytecodeError(f"{len(compiled['errors'])} pyc file(s) could not be written in {venv}: {first}")
    after = run(venv, "check", timeout=timeout)
    if after["invalid"]:
        raise BytecodeError(f"{after['invalid']} module(s) of {venv} still have no valid byte-code after compiling: "
                            f"{describe_invalid(after)}")
    return {"changed": True, "before": before, "after": after, "compiled": compiled}


if __name__ == "__main__":
    sys.exit(main())
