"""Ordered patch series applied to a venv's site-packages (target side; stdlib + GNU patch).

A series is a directory of unified diffs relative to site-packages (``patch -p1``), in the order named by its
``series`` file (one file name a line, ``#`` comments; quilt's format). Without a ``series`` file the
``*.patch``/``*.diff`` files are taken in name order.

The state of a series is decided on a scratch copy of the files it touches (nothing in site-packages is
written to decide): the applied prefix is the longest one whose patches reverse-apply, last patch first
(``patch -R``; a later patch may change lines an earlier one added, so a patch is never judged alone); the
rest must then apply in order (``patch --forward``, no fuzz). A patch that neither applies nor is applied is a
conflict: the error names it and shows the hunks GNU patch rejected, and nothing of the series is written.
Applying is idempotent: applied patches are skipped, the rest applied in order.

Two forms of a series are accepted, decided from the paths its diffs name (``series_form``), one form per series:

- site: paths relative to site-packages (``a/sglang/srt/server_args.py``), applied with ``patch -p1``;
- repository: ``git format-patch`` from SGLang's repository, whose package lives in ``python/``
  (``a/python/sglang/srt/server_args.py``), applied with ``patch -p2`` (the ``a/`` and ``python/`` components go).

A series mixing the forms, a repository-form path outside ``python/`` (tests, docs, CI: site-packages has none of
them) or, with ``packages`` given, a path outside those top-level packages, is refused naming each patch and path.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile

from ansible.module_utils.evidence.error import EvidenceError

PATCH_BIN = "patch"
SERIES_FILE = "series"
# SGLang's repository keeps its Python package under python/ (python/pyproject.toml, python/sglang/): a
# format-patch series from it names python/sglang/..., which is sglang/... in site-packages (the 0.5.11 wheel's
# sglang-0.5.11.dist-info/RECORD lists sglang/srt/server_args.py; its top_level.txt names sglang and tools).
REPO_DIR = "python"
FORMS = {"site": 1, "repository": 2}  # form -> patch -p level
MAKE_SERIES = ("git format-patch <base>..FETCH_HEAD -- python/sglang (only the package's paths; "
               "roles/venv/README.md)")


class PatchError(EvidenceError):
    """A series that is empty, names a missing file, or a patch that neither applies nor is applied."""


def read_series(patch_dir: str, require: bool = False) -> list[str]:
    """Names of the patches in order. require=True: an empty or missing directory is an error."""
    if not os.path.isdir(patch_dir):
        if require:
            raise PatchError(f"patch directory {patch_dir} does not exist")
        return []
    series = os.path.join(patch_dir, SERIES_FILE)
    if os.path.isfile(series):
        names = []
        with open(series, encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    names.append(line.split()[0])
    else:
        names = sorted(n for n in os.listdir(patch_dir) if n.endswith((".patch", ".diff")))
    missing = [n for n in names if not os.path.isfile(os.path.join(patch_dir, n))]
    if missing:
        raise PatchError(f"series in {patch_dir} names missing patch file(s): {', '.join(missing)}")
    bad = [n for n in names if "/" in n or n.startswith(".")]
    if bad:
        raise PatchError(f"series in {patch_dir} names files outside the directory: {', '.join(bad)}")
    if require and not names:
        raise PatchError(f"patch directory {patch_dir} holds no patches (no series file, no *.patch): "
                         "fill it with the operator's patch series")
    return names


def series_hash(patch_dir: str, names: list[str]) -> str:
    """sha256 over the ordered (name, content) pairs: the patch-series hash of the provenance fact."""
    h = hashlib.sha256()
    for name in names:
        with open(os.path.join(patch_dir, name), "rb") as fh:
            data = fh.read()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest() if names else ""


def _patch(site: str, patch_file: str, *extra: str, strip: int = 1) -> subprocess.CompletedProcess:
    argv = [PATCH_BIN, f"-p{strip}", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-r", "-", "-d", site,
            "-i", patch_file, *extra]
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    except FileNotFoundError as exc:
        raise PatchError(f"GNU patch is not installed ({PATCH_BIN}): {exc}") from exc


def split_hunks(patch_text: str, strip: int = 1) -> dict[str, list[str]]:
    """{target file (as patch names it, -p<strip> stripped): [hunk text, ...]} of a unified diff."""
    files: dict[str, list[str]] = {}
    current = None
    hunk: list[str] | None = None
    lines = patch_text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            if name == "/dev/null" and i > 0 and lines[i - 1].startswith("--- "):
                name = lines[i - 1][4:].split("\t")[0].strip()
            current = name.split("/", strip)[-1] if name.count("/") >= strip else name
            files.setdefault(current, [])
            hunk = None
        elif line.startswith("@@") and current is not None:
            hunk = [line]
            files[current].append(hunk)  # type: ignore[arg-type]
        elif hunk is not None and line[:1] in (" ", "+", "-", "\\"):
            if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
                hunk = None
                continue
            hunk.append(line)
        else:
            hunk = None
    return {f: ["\n".join(h) for h in hs] for f, hs in files.items()}  # type: ignore[misc]


def failed_hunks(patch_text: str, output: str, limit: int = 3, strip: int = 1) -> list[str]:
    """The hunks GNU patch reported as FAILED (from its dry-run output), as text for the error message."""
    hunks = split_hunks(patch_text, strip)
    out = []
    current = None
    for line in output.splitlines():
        m = re.match(r"(?:checking|patching) file '?(.+?)'?$", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"Hunk #(\d+) FAILED", line)
        if m and current is not None:
            n = int(m.group(1))
            hs = hunks.get(current, [])
            if 0 < n <= len(hs):
                out.append(f"{current} hunk #{n}:\n{hs[n - 1]}")
        if "can't find file to patch" in line:
            out.append(line)
        if len(out) >= limit:
            break
    return out


def _read(patch_dir: str, name: str) -> str:
    with open(os.path.join(patch_dir, name), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def series_form(patch_dir: str, names: list[str], packages: list[str] | tuple = ()) -> dict:
    """{"form": "site" | "repository" | "" (no patches), "strip": 1 | 2}: which form the series is in, from the paths
    its diffs name. A patch naming any python/... path is in the repository form; every patch must be in the same
    form; a repository-form path must be under python/<package>/ (or python/<module>.py); with packages given,
    each path's top-level name in site-packages must be one of them. PatchError names each offending patch and path."""
    forms: dict[str, list[str]] = {}
    outside = []
    for name in names:
        paths = sorted(split_hunks(_read(patch_dir, name)))
        form = "repository" if any(p.split("/", 1)[0] == REPO_DIR for p in paths) else "site"
        forms.setdefault(form, []).append(f"{name} ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})")
        for path in paths:
            rel = path
            if form == "repository":
                rel = path.split("/", 1)[1] if path.split("/", 1)[0] == REPO_DIR and "/" in path else ""
            top = rel.split("/", 1)[0]
            top = top[:-3] if "/" not in rel and top.endswith(".py") else top
            if not rel or (form == "repository" and "/" not in rel and not rel.endswith(".py")) or \
                    (packages and top not in packages):
                outside.append(f"{name}: {path}")
    if len(forms) > 1:
        raise PatchError(f"patch series in {patch_dir} mixes forms: repository (python/... paths, patch -p2): "
                         f"{'; '.join(forms['repository'])}; site-packages (patch -p1): {'; '.join(forms['site'])}. "
                         f"Make the whole series one way, e.g. {MAKE_SERIES}")
    if outside:
        where = (f"python/{{{', '.join(packages)}}}/" if packages else "python/<package>/") \
            if "repository" in forms else (f"the package(s) {', '.join(packages)}" if packages else "site-packages")
        raise PatchError(f"patch series in {patch_dir} touches files outside {where} (site-packages holds only the "
                         f"installed package: no tests, docs or build files): {'; '.join(outside)}. Leave them out, "
                         f"e.g. {MAKE_SERIES}")
    form = next(iter(forms), "")
    return {"form": form, "strip": FORMS.get(form, 1)}


def touched_files(patch_dir: str, names: list[str], strip: int = 1) -> list[str]:
    files = set()
    for name in names:
        files.update(split_hunks(_read(patch_dir, name), strip))
    return sorted(f for f in files if f and not os.path.isabs(f) and ".." not in f.split("/"))


def _scratch(site: str, files: list[str], into: str) -> str:
    """Copy the files a series touches from site into a fresh scratch dir (absent files stay absent)."""
    if os.path.isdir(into):
        shutil.rmtree(into)
    os.makedirs(into)
    for rel in files:
        src = os.path.join(site, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(into, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(into, rel))
    return into


def series_state(site: str, patch_dir: str, names: list[str], strip: int = 1) -> tuple[int, tuple[str, str] | None]:
    """(k, conflict): the first k patches are applied (the longest prefix that reverse-applies, last patch
    first, on a scratch copy), and conflict = (name, evidence) for the first of the rest that does not apply
    after them, or None. Later patches may change lines earlier ones added, so a patch is never judged alone.
    Nothing in site is written."""
    files = touched_files(patch_dir, names, strip)
    with tempfile.TemporaryDirectory(prefix="venv-patch-") as tmp:
        scratch = os.path.join(tmp, "s")
        applied = 0
        for k in range(len(names), 0, -1):
            _scratch(site, files, scratch)
            if all(_patch(scratch, os.path.join(patch_dir, n), "-R", "-f", strip=strip).returncode == 0
                   for n in reversed(names[:k])):
                applied = k
                break
        _scratch(site, files, scratch)
        for name in names[applied:]:
            path = os.path.join(patch_dir, name)
            run = _patch(scratch, path, "--forward", strip=strip)
            if run.returncode != 0:
                text = _read(patch_dir, name)
                output = (run.stdout + run.stderr).replace(scratch, site).strip()
                hunks = failed_hunks(text, output, strip=strip)
                evidence = output + ("\n--- rejected hunk(s):\n" + "\n".join(hunks) if hunks else "")
                return applied, (name, evidence)
    return applied, None


def apply_series(site: str, patch_dir: str, names: list[str], check_mode: bool = False, strip: int = 1) -> dict:
    """Apply the series in order; returns {"applied": [...newly], "already": [...], "changed": bool}.
    A patch that neither applies nor is applied fails the whole call before anything is written."""
    if not os.path.isdir(site):
        raise PatchError(f"site-packages directory {site} does not exist")
    k, conflict = series_state(site, patch_dir, names, strip)
    if conflict:
        name, evidence = conflict
        raise PatchError(f"patch {name} neither applies to nor is applied in {site} "
                         f"(after {k} applied patch(es)):\n{evidence}")
    if not check_mode:
        for name in names[k:]:
            run = _patch(site, os.path.join(patch_dir, name), "--forward", strip=strip)
            if run.returncode != 0:
                raise PatchError(f"patch {name} failed although its dry run passed:\n{run.stdout}{run.stderr}")
    return {"applied": names[k:], "already": names[:k], "changed": bool(names[k:])}


def verify_series(site: str, patch_dir: str, names: list[str], strip: int = 1) -> dict:
    """Every patch of the series must be present; returns {"applied": [...], "missing": {name: evidence}}."""
    k, conflict = series_state(site, patch_dir, names, strip)
    missing = {n: "applicable" for n in names[k:]}
    if conflict:
        missing[conflict[0]] = conflict[1]
    return {"applied": names[:k], "missing": missing}


def site_packages(venv: str) -> str:
    """<venv>/lib/pythonX.Y/site-packages (the only one; a venv has exactly one)."""
    lib = os.path.join(venv, "lib")
    found = sorted(os.path.join(lib, d, "site-packages") for d in (os.listdir(lib) if os.path.isdir(lib) else [])
                   if d.startswith("python") and os.path.isdir(os.path.join(lib, d, "site-packages")))
    if len(found) != 1:
        raise PatchError(f"expected one lib/python*/site-packages in {venv}, found {found}")
    return found[0]


def run_state(state_name: str, patch_dir: str, venv: str | None, require: bool, check_mode: bool = False,
              packages: list[str] | tuple = ()) -> dict:
    """What the venv_patch module does for state series | present | verify."""
    names = read_series(patch_dir, require=require)
    form = series_form(patch_dir, names, packages)
    result = {"changed": False, "patches": names, "series_hash": series_hash(patch_dir, names), **form}
    strip = form["strip"]
    if state_name == "series" or not names:
        result.update({"applied": [], "already": []})
        return result
    site = site_packages(venv or "")
    if state_name == "present":
        result.update(apply_series(site, patch_dir, names, check_mode, strip))
        return result
    found = verify_series(site, patch_dir, names, strip)
    if found["missing"]:
        detail = "\n".join(f"{n}: {e}" for n, e in found["missing"].items())
        raise PatchError(f"patches missing from {site}:\n{detail}")
    result["applied"] = found["applied"]
    return result
