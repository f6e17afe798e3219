"""Full lock of a venv flavour: every package pip installs, one exact version, the sha256 of every file of that release
pip may choose (stdlib only; runs on the controller at preflight and on the host in the build module).

A lock is a pip requirements file as ``uv pip compile --universal --generate-hashes`` (or ``pip-compile
--generate-hashes``) writes it (roles/venv/files/locks/<flavour>.txt, made by roles/venv/files/locks/lock.sh from the
flavour's top-level pins in roles/venv/files/requirements/<flavour>.txt):

    # input: requirements/ddtree.txt sha256=<hex of the input file>
    --extra-index-url https://download.pytorch.org/whl/cu130          (optional: an index the hashes were taken from)
    torch==2.11.0 \\
        --hash=sha256:<64 hex> \\
        --hash=sha256:<64 hex>
    numpy==2.3.5 ; python_full_version < '3.13' \\
        --hash=sha256:<64 hex>

The build installs it with ``pip install --require-hashes --no-deps --only-binary :all: -r <lock>``: pip refuses any
file whose sha256 is not listed, resolves nothing (no package outside the lock can enter) and builds nothing (a source
build would run a build backend that the lock does not cover). That command would refuse a bad lock too, but only
on the host, after the venv was begun; ``parse`` refuses it first, naming the line: a requirement that is not
``name==version`` (a range, a wildcard, ``===``, a URL or path), a requirement without ``--hash=sha256:<64 hex>``, an
include (``-r``/``-c``), an editable (``-e``), any option but the index ones, a name locked twice for the same markers.

The recipe hash covers the lock's canonical form (``canonical``): index options in order, then every entry with its
sorted hashes. A changed version, marker or hash line rebuilds; a comment or the order of the lines does not.
"""
from __future__ import annotations

import hashlib
import os
import re

from ansible.module_utils.evidence.error import EvidenceError

try:  # Python >= 3.11; older hosts skip the early local-package check (pip check after the install still runs)
    import tomllib
except ImportError:  # pragma: no cover - exercised on Python < 3.11 only
    tomllib = None

# Options a lock may carry: where pip looks for the files (the hashes decide which files it accepts).
INDEX_OPTIONS = {"--index-url": "--index-url", "-i": "--index-url", "--extra-index-url": "--extra-index-url",
                 "--find-links": "--find-links", "-f": "--find-links"}
HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
# PEP 440 version, epoch and local part included (2.11.0+cu130); no wildcard, no range.
VERSION = (r"(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:[._-]?(?:a|b|c|rc|alpha|beta|pre|preview)[._-]?[0-9]*)?"
           r"(?:[._-]?(?:post|rev|r)[._-]?[0-9]*|-[0-9]+)?(?:[._-]?dev[._-]?[0-9]*)?"
           r"(?:\+[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)?")
PINNED_RE = re.compile(rf"^(?P<name>{NAME})\s*(?P<extras>\[[^\]]*\])?\s*==\s*(?P<version>{VERSION})\s*"
                       r"(?:;\s*(?P<marker>\S.*?))?\s*$", re.I)
LEADING_NAME_RE = re.compile(rf"^\s*({NAME})")
COMMENT_RE = re.compile(r"(^|\s+)#.*$")
HASH_OPT_RE = re.compile(r"(?:^|\s)--hash(?:=|\s+)(\S+)")
INPUT_RE = re.compile(r"^#\s*input:\s*(?P<path>\S+)\s+sha256=(?P<sha256>[0-9a-f]{64})\s*$")
# lock.sh's "# resolver: uv ... pip compile --universal ... --python-version 3.11," header line: the lowest CPython the
# universal resolution serves (LOCK_PYTHON). The one record of what Python a flavour's lock needs on the host.
RESOLVER_PYTHON_RE = re.compile(r"^#\s*resolver:.*--python-version[ =](?P<python>[0-9]+\.[0-9]+)\b")


class LockError(EvidenceError):
    """A lock that pip's hash-checking mode could not install as it stands, or that does not fit its input."""


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name (Foo_Bar.baz -> foo-bar-baz)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each logical line, read as pip reads a requirements file: a line ending
    in a backslash continues on the next one (a comment line ends the continuation), then comments (``#`` at the start
    or after whitespace) are dropped and blank lines skipped."""
    joined: list[tuple[int, str]] = []
    parts: list[str] = []
    primary = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.endswith("\\") or COMMENT_RE.match(line):
            if COMMENT_RE.match(line):
                line = " " + line
            if parts:
                parts.append(line)
                joined.append((primary, "".join(parts)))
                parts = []
            else:
                joined.append((number, line))
        else:
            if not parts:
                primary = number
            parts.append(line.strip("\\"))
    if parts:
        joined.append((primary, "".join(parts)))
    out = []
    for number, line in joined:
        line = COMMENT_RE.sub("", line).strip()
        if line:
            out.append((number, line))
    return out


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse(text: str, path: str = "lock") -> dict:
    """The lock's entries and index options; LockError naming the first bad line (``path:line: text: problem``)."""
    entries: list[dict] = []
    options: list[list[str]] = []
    seen: dict[tuple[str, str], int] = {}
    for number, line in logical_lines(text):
        where = f"{path}:{number}: {_short(' '.join(line.split()))!r}"
        hashes = HASH_OPT_RE.findall(line)
        spec = HASH_OPT_RE.sub(" ", line).strip()
        if spec.startswith("-"):
            tokens = spec.split()
            opt, _, value = tokens[0].partition("=") if tokens[0].startswith("--") else (tokens[0], "", "")
            values = ([value] if value else []) + tokens[1:]
            if hashes:
                raise LockError(f"{where}: --hash belongs to a requirement, not to an option line")
            if opt not in INDEX_OPTIONS:
                raise LockError(f"{where}: option {opt} is not allowed in a lock (only --index-url, "
                                "--extra-index-url, --find-links: an include, an editable or another option would "
                                "put something outside the lock's hashes)")
            if len(values) != 1:
                raise LockError(f"{where}: {opt} needs exactly one URL or path")
            options.append([INDEX_OPTIONS[opt], values[0]])
            continue
        match = PINNED_RE.match(spec)
        if not match:
            lead = LEADING_NAME_RE.match(spec)
            if "@" in spec.split(";", 1)[0] or "://" in spec or spec.startswith((".", "/")):
                problem = "a URL or path is not a locked release (give name==version with its hashes)"
            elif lead and re.search(r"(===|~=|!=|>=|<=|[<>]|==\s*\S*\*)", spec):
                problem = f"{lead.group(1)} is not pinned to one exact version (name==version)"
            elif lead:
                problem = f"{lead.group(1)} is not pinned (name==version)"
            else:
                problem = "not a requirement pip's hash-checking mode accepts"
            raise LockError(f"{where}: {problem}")
        name = canonical_name(match.group("name"))
        if not hashes:
            raise LockError(f"{where}: {name}=={match.group('version')} has no --hash=sha256:<64 hex> (pip "
                            "--require-hashes refuses it; run roles/venv/files/locks/lock.sh)")
        bad = [h for h in hashes if not HASH_RE.match(h)]
        if bad:
            raise LockError(f"{where}: {name}: hash {bad[0]!r} is not sha256:<64 lowercase hex>")
        marker = re.sub(r"\s+", " ", match.group("marker") or "").strip()
        key = (name, marker)
        if key in seen:
            raise LockError(f"{where}: {name} is locked twice{' for ' + marker if marker else ''} (first at line "
                            f"{seen[key]})")
        seen[key] = number
        entries.append({"name": name, "version": match.group("version"), "extras": match.group("extras") or "",
                        "marker": marker, "hashes": sorted(set(hashes)), "line": number})
    header = {}
    for raw in text.splitlines():
        if not raw.startswith("#"):
            if raw.strip():
                break
            continue
        m = INPUT_RE.match(raw.strip())
        if m:
            header["input"] = m.group("path")
            header["input_sha256"] = m.group("sha256")
        m = RESOLVER_PYTHON_RE.match(raw.strip())
        if m:
            header["python"] = m.group("python")
    return {"entries": entries, "options": options, "header": header, "names": sorted({e["name"] for e in entries})}


def read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"cannot read the lock {path}: {exc}") from exc
    return parse(text, path)


def canonical(lock: dict) -> str:
    """What the recipe hash covers: the index options in order, then the entries (name, extras, version, marker,
    sorted hashes) in sorted order, one a line. Comments and line order are not part of it."""
    lines = [" ".join(opt) for opt in lock["options"]]
    lines += sorted(f"{e['name']}{e['extras']}=={e['version']}" + (f" ; {e['marker']}" if e["marker"] else "")
                    + "".join(f" --hash={h}" for h in e["hashes"]) for e in lock["entries"])
    return "\n".join(lines) + "\n"


def lock_hash(lock: dict) -> str:
    return hashlib.sha256(canonical(lock).encode()).hexdigest()


def file_sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def check_input(lock: dict, input_path: str, lock_path: str = "lock") -> dict:
    """The lock was generated from the flavour's input as it is now: its ``# input: ... sha256=`` header line names
    the sha256 of input_path. LockError otherwise (the input changed and nobody re-locked)."""
    want = lock["header"].get("input_sha256", "")
    if not want:
        raise LockError(f"{lock_path} has no '# input: <file> sha256=<hex>' header line: it was not generated by "
                        "roles/venv/files/locks/lock.sh (run it)")
    try:
        have = file_sha256(input_path)
    except OSError as exc:
        raise LockError(f"cannot read the lock's input {input_path}: {exc}") from exc
    if have != want:
        raise LockError(f"{lock_path} was generated from another {os.path.basename(input_path)} (sha256 {want[:12]}, "
                        f"the file now {have[:12]}): re-run roles/venv/files/locks/lock.sh for this flavour")
    return {"input": input_path, "input_sha256": have}


def pyproject_requirements(tree: str) -> dict | None:
    """{"build": [...], "dependencies": [...] | None} of a source tree, from its pyproject.toml (a tree with only a
    setup.py builds with setuptools; dependencies None = not statically known). None when tomllib is missing."""
    if tomllib is None:
        return None
    path = os.path.join(tree, "pyproject.toml")
    if not os.path.isfile(path):
        return {"build": ["setuptools>=40.8.0"], "dependencies": None}
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except (OSError, ValueError) as exc:
        raise LockError(f"cannot read {path}: {exc}") from exc
    system = doc.get("build-system") or {}
    project = doc.get("project") or {}
    build = list(system.get("requires", ["setuptools>=40.8.0"]))  # PEP 518: no table = setuptools' legacy build
    if "project" not in doc or "dependencies" in (project.get("dynamic") or []):
        deps = None
    else:
        deps = list(project.get("dependencies") or [])
    return {"build": build, "dependencies": deps}


def missing_from_lock(lock: dict, requirements: list[str], skip: tuple[str, ...] = ()) -> list[str]:
    """Requirements (PEP 508 strings) whose distribution the lock does not hold. A requirement with an environment
    marker is not judged here (whether it applies is the host's business: pip check after the install decides)."""
    names = set(lock["names"]) | {canonical_name(s) for s in skip}
    out = []
    for req in requirements:
        if ";" in req:
            continue
        m = LEADING_NAME_RE.match(req)
        if m and canonical_name(m.group(1)) not in names:
            out.append(req.strip())
    return out


def check_local_packages(lock: dict, trees: list[str], names_installed_with: tuple[str, ...] = ()) -> list[str]:
    """Problems of local package trees installed after the lock with --no-deps --no-build-isolation: their build
    backend and their dependencies must come from the lock (or be another local package). Empty = none found."""
    problems = []
    for tree in trees:
        req = pyproject_requirements(tree)
        if req is None:
            continue
        build = missing_from_lock(lock, req["build"], names_installed_with)
        if build:
            problems.append(f"{tree}: build backend requirement(s) {', '.join(build)} not in the lock (the build "
                            "runs with --no-build-isolation: add them to the flavour's input and re-lock)")
        deps = missing_from_lock(lock, req["dependencies"] or [], names_installed_with)
        if deps:
            problems.append(f"{tree}: dependencies {', '.join(deps)} not in the lock (installed with --no-deps: "
                            "add them to the flavour's input and re-lock)")
    return problems


def project_name(tree: str) -> str:
    """[project].name of a source tree ("" when unknown)."""
    if tomllib is None:
        return ""
    try:
        with open(os.path.join(tree, "pyproject.toml"), "rb") as fh:
            return canonical_name(str((tomllib.load(fh).get("project") or {}).get("name") or ""))
    except (OSError, ValueError):
        return ""


def project_version(tree: str) -> str:
    """[project].version of a source tree ("" when unknown or dynamic)."""
    if tomllib is None:
        return ""
    try:
        with open(os.path.join(tree, "pyproject.toml"), "rb") as fh:
            return str((tomllib.load(fh).get("project") or {}).get("version") or "")
    except (OSError, ValueError):
        return ""


def pinned_version(lock: dict, dist: str, local_trees=()) -> str:
    """The version the flavour installs of dist: its lock entry's (one version whatever the markers), else that of
    the local package named dist (the lab's stand-in is installed from its tree, not the lock); "" when neither."""
    name = canonical_name(dist)
    versions = sorted({e["version"] for e in lock["entries"] if e["name"] == name})
    if versions:
        return versions[0] if len(versions) == 1 else ""
    for tree in local_trees:
        if project_name(tree) == name:
            return project_version(tree)
    return ""


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of "3.10.12" / "3.11" / "3.12.0rc1"; () when it is not a version."""
    m = re.match(r"^\s*([0-9]+)\.([0-9]+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else ()


def python_problem(found: str, floor: str, interpreter: str, lock_path: str = "lock", error: str = "",
                   same_as: str = "") -> str:
    """"" when the host's base interpreter (``interpreter``, version ``found`` as platform.python_version() prints
    it) can carry the flavour's venv, else the refusal naming what was found, what is needed and the fix.

    ``floor``: the lock's CPython (its resolver header, ``header["python"]``): an older interpreter is refused (pip
    would find no wheel for half the lock, after the venv was begun). ``same_as``: the Python of a streamed venv's
    source: a venv only runs on the major.minor it was made with (its site-packages is lib/pythonX.Y). ``error``: why
    the interpreter did not run, when it did not."""
    fix = ("Install a newer CPython and point venv_python at it (Ubuntu 22.04: add-apt-repository ppa:deadsnakes/ppa; "
           "apt-get install python3.12 python3.12-venv; then venv_python: /usr/bin/python3.12 and python3.12-venv "
           "in venv_apt_packages in place of python3-venv), or set venv_python to an interpreter the host already has")
    if not _release(found):
        return (f"venv_python {interpreter} does not run or reports no version ({(error or found or 'no output').strip()}): "
                f"the venv needs CPython {floor or '3'}+. {fix}.")
    need = []
    if floor and _release(floor) and _release(found) < _release(floor):
        need.append(f"the lock {lock_path} was resolved for CPython >= {floor}")
    if same_as and _release(same_as) and _release(found) != _release(same_as):
        need.append(f"the streamed venv was made with Python {same_as} (a venv runs only on the major.minor it was "
                    "made with)")
    if not need:
        return ""
    return f"venv_python {interpreter} is Python {found.strip()}, but {' and '.join(need)}. {fix}."


def summary(lock: dict) -> dict:
    return {"packages": len(lock["entries"]), "names": lock["names"], "options": lock["options"],
            "lock_hash": lock_hash(lock), "input_sha256": lock["header"].get("input_sha256", ""),
            "python": lock["header"].get("python", "")}
