"""Build a venv from the flavour's full lock (+ local packages) and a patch series, into the stage.

The lock (module_utils/venv/lock.py; roles/venv/files/locks/<flavour>.txt) names every package with one exact version
and the sha256 of every file pip may choose. It is checked before anything is made (a line without hashes or not
pinned is refused, naming it) and installed with ``pip install --require-hashes --no-deps --only-binary :all:``:
nothing outside it enters, nothing is built. Local packages and the clone route's checkout follow with ``--no-deps
--no-build-isolation``: their build backend and dependencies must be in the lock (checked first where the host's
python has tomllib, then ``pip check`` proves every installed distribution's requirements are met).

The venv's scripts carry its absolute path in their shebangs, so it must be built AT the live path. To keep
the live venv untouched until the swap, every build step runs in a private mount namespace where the stage
directory is bind-mounted over the live path (``unshare --mount``): inside, pip sees /opt/sglang/venv; the
bytes land in <parent>/.venv.stage. Nothing outside the namespace sees the half-built venv.

Whether a build is needed at all: the recipe hash (flavour, python, the lock's canonical form, the install mode,
local package trees, patch series) is stored in the provenance fact with the content hash of the venv it produced.
Same recipe and the live venv still has that content hash -> nothing to do. A changed file in the live venv (content
hash differs) or a changed recipe -> rebuild.

The flag schema of the venv (``<venv>/sglang-flag-schema.json``) is extracted at build time from the venv's own
argparse parser, after the patch series (module_utils/sglang/schema_extract.py, run by the stage's python), so it is
venv content: in the manifest and the content hash, streamed with the venv, and always that venv's own flags.

The clone route (``clone_repo`` given) builds from the operator's SGLang fork at a pinned commit instead of a patch
series on the pinned base: the host fetches exactly that commit into ``clone_dir`` (``git fetch --depth 1 <url>
<sha>``; when the server refuses a fetch by sha, e.g. git's dumb HTTP protocol, a full fetch of its branches and tags),
checks ``git rev-parse HEAD`` is the pin, and pip installs ``<checkout>/<clone_subdir>`` after the flavour's lock
(and local packages). The fork carries its own patches: no patch series applies in this route. The
commit, the subdir and the repository URL without credentials are part of the recipe, so another commit rebuilds and
the same one is a no-op that fetches nothing.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import tempfile
from urllib.parse import urlsplit, urlunsplit

from ansible.module_utils.venv.manifest import (ManifestError, is_venv, read_digest, read_json, scan, summary,
                                                write_digest)
from ansible.module_utils.venv.patch import PatchError, apply_series, read_series, series_hash, site_packages
from ansible.module_utils.venv.stage import StageError, paths, recover
from ansible.module_utils.venv import lock as venv_lock

SKIP_IN_TREE_HASH = ("__pycache__", "build", "dist", ".git", ".pytest_cache")
# The venv's flag schema, written into the venv itself (part of its content) by the "flag_schema" build step.
FLAG_SCHEMA_NAME = "sglang-flag-schema.json"
FLAG_SCHEMA_TIMEOUT = 300  # seconds: importing a real server_args (torch, transformers) takes 10-60 s cold
# The clone route's pin: a full commit sha (a branch or tag name moves, a short sha may become ambiguous).
CLONE_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
# Transports a clone URL may use: https/http/git/ssh URLs, file:// URLs, absolute paths, scp-like user@host:path.
CLONE_URL_RE = re.compile(r"^((https?|git|ssh|file)://[^\s]+|/[^\s]*|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+)$")
GIT_PROTOCOLS = "file:git:http:https:ssh"  # GIT_ALLOW_PROTOCOL: never ext:: or fd:: (not even through redirects)
CLONE_TIMEOUT = 1800  # seconds per git step: a full fetch of SGLang's history moves a few hundred MB
# How the lock and what follows it are installed (part of the recipe: another install mode is another venv).
LOCK_PIP_ARGS = ("--require-hashes", "--no-deps", "--only-binary", ":all:")
LOCAL_PIP_ARGS = ("--no-deps", "--no-build-isolation")
INSTALL_MODE = "lock: " + " ".join(LOCK_PIP_ARGS) + "; local, clone: " + " ".join(LOCAL_PIP_ARGS) + "; pip check"


class BuildError(Exception):
    """A build step failed; carries the command and its output tail."""


def tree_hash(root: str) -> str:
    """Content hash of a local package source tree (byte-code, build/ and *.egg-info left out)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_IN_TREE_HASH and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                data = fh.read()
            h.update(f"{os.path.relpath(full, root)}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


def python_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True, check=False, timeout=60)
    if out.returncode != 0:
        raise BuildError(f"{python} does not run: {out.stderr.strip()}")
    return out.stdout.strip()


def _extractor():
    """The schema extractor module (ansible.module_utils.* inside a module payload, module_utils.* in the repo).
    Imported lazily: its import empties CUDA_VISIBLE_DEVICES in the importing process, undone here."""
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        from ansible.module_utils.sglang import schema_extract as mod
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    return mod


def extractor_source() -> str:
    """Source text of module_utils/sglang/schema_extract.py, also from inside an AnsiballZ payload (zipimport)."""
    try:
        return inspect.getsource(_extractor())
    except (OSError, TypeError, ImportError) as exc:
        raise BuildError(f"cannot read the flag schema extractor's source: {exc}") from exc


def strip_credentials(url: str) -> str:
    """The repository URL as recorded (recipe, provenance fact, messages): no password, and for http(s) no user
    either (a token is often passed as the user name). ssh and scp-like users are kept (not secrets)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or "@" not in parts.netloc:
        return url
    userinfo, host = parts.netloc.rsplit("@", 1)
    user = userinfo.split(":", 1)[0]
    netloc = host if parts.scheme in ("http", "https") or not user else f"{user}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def check_clone_inputs(repo: str, commit: str, subdir: str) -> None:
    """The clone route's inputs, checked before anything is made: a URL git may fetch from, a pinned commit (a
    full sha, never a branch name), a relative subdir inside the checkout."""
    if not CLONE_URL_RE.match(repo or ""):
        raise BuildError(f"clone_repo {strip_credentials(repo)!r} is not a git URL (https/http/git/ssh/file URL, an "
                         "absolute path or user@host:path)")
    if not CLONE_COMMIT_RE.match(commit or ""):
        raise BuildError(f"clone_commit {commit!r} is not a pinned commit: give the full 40-hex sha (a branch or tag "
                         "name moves, so it pins nothing)")
    if subdir and (os.path.isabs(subdir) or os.path.normpath(subdir) != subdir.rstrip("/")
                   or ".." in subdir.split("/")):
        raise BuildError(f"clone_subdir {subdir!r} must be a normalised path inside the checkout (\"\" = its root)")


def clone_part(repo: str, commit: str, subdir: str) -> dict:
    """The recipe's record of a clone route build (credentials stripped from the URL)."""
    return {"repo": strip_credentials(repo), "commit": commit, "subdir": subdir}


def read_lock(lock: str) -> dict:
    """The parsed lock; BuildError naming the first line pip's hash-checking mode would refuse."""
    try:
        return venv_lock.read(lock)
    except venv_lock.LockError as exc:
        raise BuildError(str(exc)) from exc


def recipe(flavour: str, python: str, lock: str, local_packages: list[str], patch_dir: str,
           patches: list[str], pip_args: list[str], schema_module: str = "", clone: dict | None = None) -> dict:
    """The recipe parts and their hash. The lock counts by its canonical form (entries, markers, hashes, index
    options; not its comments or line order)."""
    parsed = read_lock(lock)
    parts = {
        "flavour": flavour,
        "python": python_version(python),
        "lock": venv_lock.lock_hash(parsed),
        "lock_packages": len(parsed["entries"]),
        "install": INSTALL_MODE,
        "local_packages": {os.path.basename(os.path.normpath(p)): tree_hash(p) for p in local_packages},
        "patch_series_hash": series_hash(patch_dir, patches),
        "pip_args": list(pip_args),
    }
    if schema_module:  # absent when no schema is extracted: such a recipe hashes as it did before the step existed
        parts["flag_schema"] = {"module": schema_module, "format": _extractor().SCHEMA_FORMAT}
    if clone:  # absent on the pypi route: its recipes hash as they did before the clone route existed
        parts["clone"] = {k: clone[k] for k in ("repo", "commit", "subdir")}
    parts["recipe_hash"] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return parts


def up_to_date(live: str, fact_path: str, recipe_hash: str) -> tuple[bool, str, dict]:
    """(live venv matches recipe and its recorded content, reason, live summary)."""
    if not is_venv(live):
        return False, f"no venv at {live}", {}
    fact = read_json(fact_path) or {}
    info = summary(scan(live))
    if fact.get("recipe_hash") != recipe_hash:
        return False, ("recipe changed (lock, local packages, patches, python, flavour, install mode or flag "
                       "schema module)"), info
    if fact.get("content_hash") != info["digest"]:
        return False, (f"live venv content {info['digest'][:12]} differs from the recorded "
                       f"{str(fact.get('content_hash'))[:12]} (files changed since the build)"), info
    return True, "live venv matches the recipe and its recorded content hash", info


def in_namespace(stage: str, live: str, argv: list[str]) -> list[str]:
    """argv that runs `argv` with stage bind-mounted over live in a private mount namespace."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", stage, live,
            *argv]


def _run(argv: list[str], env: dict, what: str, timeout: int) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what}: timed out after {timeout}s: {' '.join(argv)}") from exc
    if out.returncode != 0:
        tail = (out.stdout + out.stderr).strip()[-3000:]
        raise BuildError(f"{what} failed (rc={out.returncode}): {' '.join(argv)}\n{tail}")
    return out.stdout


def _redact(text: str, repo: str) -> str:
    return text.replace(repo, strip_credentials(repo)) if repo else text


def _git(args: list[str], env: dict, timeout: int, repo: str = "") -> subprocess.CompletedProcess:
    argv = ["git", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(_redact(f"git {' '.join(args)}: timed out after {timeout}s", repo)) from exc


def _git_head(dest: str, env: dict) -> str:
    out = _git(["-C", dest, "rev-parse", "HEAD"], env, 60)
    return out.stdout.strip() if out.returncode == 0 else ""


def fetch_commit(repo: str, commit: str, dest: str, env: dict | None = None, timeout: int = CLONE_TIMEOUT) -> dict:
    """Check out exactly `commit` of `repo` into a fresh `dest` (removed first): git init, a depth-1 fetch of
    the sha and a checkout of FETCH_HEAD; when the server refuses that (dumb HTTP has no shallow fetch, older or
    stricter servers refuse unadvertised shas) a full fetch of its branches and tags, then a checkout of the sha.
    The URL is given on the command line, never stored in the checkout's config. Returns
    {"commit", "fetch": "depth1"|"full", "dir"}; BuildError when the commit is not there or HEAD is not the pin."""
    if shutil.which("git", path=(env or os.environ).get("PATH")) is None:
        raise BuildError("git is not installed on the host (the clone route needs it: add git to venv_apt_packages)")
    shown = strip_credentials(repo)
    env = dict(os.environ if env is None else env, GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL=GIT_PROTOCOLS,
               LC_ALL="C")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest, mode=0o755)
    init = _git(["init", "-q", dest], env, 60)
    if init.returncode != 0:
        raise BuildError(f"git init {dest} failed: {init.stderr.strip()[-1000:]}")
    git = ["-C", dest, "-c", "advice.detachedHead=false"]
    shallow = _git([*git, "fetch", "--quiet", "--no-tags", "--depth", "1", repo, commit], env, timeout, repo)
    if shallow.returncode == 0:
        method, target = "depth1", "FETCH_HEAD"
    else:
        refused = _redact(shallow.stderr.strip()[-600:], repo)
        full = _git([*git, "fetch", "--quiet", "--no-tags", repo, "+refs/heads/*:refs/remotes/origin/*",
                     "+refs/tags/*:refs/tags/*"], env, timeout, repo)
        if full.returncode != 0:
            raise BuildError(f"cannot fetch from {shown}: fetch by sha: {refused}; full fetch: "
                             f"{_redact(full.stderr.strip()[-1000:], repo)}")
        if _git([*git, "cat-file", "-e", f"{commit}^{{commit}}"], env, 60).returncode != 0:
            raise BuildError(f"commit {commit} is not in {shown}: the server refused it by sha ({refused}) and no "
                             "branch or tag there contains it")
        method, target = "full", commit
    checkout = _git([*git, "checkout", "-q", "--detach", target], env, timeout)
    if checkout.returncode != 0:
        raise BuildError(f"git checkout {commit} in {dest} failed: {checkout.stderr.strip()[-1000:]}")
    head = _git_head(dest, env)
    if head != commit:
        raise BuildError(f"the checkout of {shown} is at {head or '(no HEAD)'}, not the pinned commit {commit}")
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(dest, ".git", "FETCH_HEAD"))
    return {"commit": head, "fetch": method, "dir": dest}


def read_flag_schema(path: str) -> dict:
    """sha256, sglang_version and option count of a flag schema file; {} when there is none (or it cannot be
    read). An unparsable file gives its sha256 and an empty version: the role's verify step names what is wrong."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:  # none there (or not a readable file): verify names it
        return {}
    info = {"sha256": hashlib.sha256(data).hexdigest(), "sglang_version": "", "options": 0}
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return info
    if isinstance(doc, dict):
        info["sglang_version"] = str(doc.get("sglang_version") or "")
        info["options"] = len(doc.get("options") or {}) if isinstance(doc.get("options"), dict) else 0
    return info


def extract_flag_schema(stage: str, live: str, schema_module: str, env: dict,
                        timeout: int = FLAG_SCHEMA_TIMEOUT) -> dict:
    """Write <venv>/sglang-flag-schema.json from the venv's own parser. Runs the stage's python in the namespace
    (it sees itself at the live path, as it will run) on the extractor's source, copied to a private temp file:
    -I (no user site, no PYTHON* variables, not the cwd) and -B (no byte-code in the venv)."""
    source = extractor_source()
    tmp = tempfile.mkdtemp(prefix="sglang-schema-extract.")
    try:
        script = os.path.join(tmp, "sglang_schema_extract.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.chmod(tmp, 0o755)  # readable by the namespace's python, whatever umask the module runs under
        os.chmod(script, 0o644)
        argv = [os.path.join(live, "bin", "python"), "-I", "-B", script, "--module", schema_module,
                "--out", os.path.join(live, FLAG_SCHEMA_NAME)]
        run_env = dict(env, CUDA_VISIBLE_DEVICES="")  # the extractor never sees a GPU
        full = in_namespace(stage, live, argv)
        try:
            out = subprocess.run(full, capture_output=True, text=True, check=False, env=run_env, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            partial = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise BuildError(f"flag schema: extracting {schema_module} timed out after {timeout}s\n"
                             f"{partial.strip()[-3000:]}".rstrip()) from exc
        if out.returncode != 0:
            tail = (out.stderr or out.stdout).strip()[-3000:]
            raise BuildError(f"flag schema: extracting the parser of {schema_module} from the venv failed "
                             f"(rc={out.returncode}):\n{tail}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    target = os.path.join(stage, FLAG_SCHEMA_NAME)
    info = read_flag_schema(target)
    if not info.get("options") or not info.get("sglang_version"):
        raise BuildError(f"flag schema: {schema_module} gave no usable schema ({target}: {info or 'missing'})")
    os.chmod(target, 0o644)
    return dict(info, module=schema_module, path=os.path.join(live, FLAG_SCHEMA_NAME))


def build(live: str, python: str, lock: str, local_packages: list[str], patch_dir: str,
          patches: list[str], pip_args: list[str], import_names: list[str], env: dict | None = None,
          timeout: int = 3600, schema_module: str = "", clone_source: str = "", lock_entries: int = -1) -> dict:
    """Build the stage for live: the lock (hash-checked, no dependency resolution, wheels only), then the local
    packages and clone_source (a checked-out fork's package directory) with --no-deps --no-build-isolation (their
    build backend is the lock's), pip check, patches applied, imports checked, flag schema extracted (unless
    schema_module is ""). No byte-code is written here (pip --no-compile, PYTHONDONTWRITEBYTECODE): venv_commit
    compiles the stage before the swap. lock_entries 0 (an empty lock) skips the lock step. The live path is
    not touched (except that an empty directory is made there as the bind-mount point when no venv exists yet)."""
    p = paths(live)
    recover(live)
    env = dict(os.environ if env is None else env)
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    made_mountpoint = False
    if not os.path.lexists(p["live"]):
        os.makedirs(p["live"], mode=0o755)
        made_mountpoint = True
    os.mkdir(p["stage"], 0o755)
    steps = []
    try:
        _run(in_namespace(p["stage"], p["live"], [python, "-m", "venv", p["live"]]), env, "python -m venv", 600)
        steps.append("venv")
        pip = [os.path.join(p["live"], "bin", "python"), "-m", "pip", "install", "--no-input", "--no-compile",
               *pip_args]
        if lock_entries != 0:
            # pip refuses any file whose sha256 the lock does not list and resolves nothing: a tampered or
            # substituted file fails here, naming the package, before anything is swapped
            _run(in_namespace(p["stage"], p["live"], [*pip, *LOCK_PIP_ARGS, "-r", lock]), env,
                 "pip install --require-hashes (the lock)", timeout)
            steps.append("lock")
        if local_packages:
            # a local tree is copied by pip into a temporary build dir; with --no-build-isolation its backend is the
            # venv's own (from the lock, or an in-tree one): no build backend is downloaded unhashed
            _run(in_namespace(p["stage"], p["live"], [*pip, *LOCAL_PIP_ARGS, *local_packages]), env,
                 "pip install (local packages)", timeout)
            steps.append("local_packages")
        if clone_source:
            _run(in_namespace(p["stage"], p["live"], [*pip, *LOCAL_PIP_ARGS, clone_source]), env,
                 "pip install (clone checkout)", timeout)
            steps.append("clone")
        # every installed distribution's requirements are met: a local package or fork needing something the lock
        # does not hold (they were installed with --no-deps) fails here, named by pip
        _run([os.path.join(p["stage"], "bin", "python"), "-m", "pip", "check"], env,
             "pip check (a requirement of an installed package is not in the lock)", 300)
        steps.append("pip_check")
        patched = apply_series(site_packages(p["stage"]), patch_dir, patches) if patches else {"applied": []}
        steps.append("patches")
        # the stage's own python finds the stage's pyvenv.cfg: imports are checked without the namespace
        check = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
        if import_names:
            _run([os.path.join(p["stage"], "bin", "python"), "-c", check, *import_names], env, "import check", 300)
        steps.append("imports")
        schema = {}
        if schema_module:
            schema = extract_flag_schema(p["stage"], p["live"], schema_module, env)
            steps.append("flag_schema")
    except BaseException:
        if made_mountpoint:
            try:
                os.rmdir(p["live"])
            except OSError:
                pass
        raise
    return {"stage": p["stage"], "steps": steps, "patches_applied": patched["applied"], "flag_schema": schema}


def venv_versions(venv: str, dist: str, module: str) -> dict:
    """python and SGLang (dist) versions as the venv itself reports them."""
    code = ("import json, platform, sys, importlib\n"
            "v = ''\n"
            "try:\n    from importlib.metadata import version\n    v = version(sys.argv[1])\n"
            "except Exception:\n"
            "    try:\n        v = getattr(importlib.import_module(sys.argv[2]), '__version__', '')\n"
            "    except Exception:\n        v = ''\n"
            "print(json.dumps({'python_version': platform.python_version(), 'sglang_version': v}))\n")
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code, dist, module], capture_output=True,
                         text=True, check=False, timeout=120, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if out.returncode != 0:
        raise BuildError(f"{venv}/bin/python cannot report its versions: {out.stderr.strip()[-1000:]}")
    return json.loads(out.stdout)


def write_fact(fact_path: str, data: dict, check_mode: bool = False) -> bool:
    """Write the provenance fact (JSON) when its content differs; atomic (temp + rename). Returns changed."""
    if read_json(fact_path) == data:
        return False
    if check_mode:
        return True
    os.makedirs(os.path.dirname(fact_path), mode=0o755, exist_ok=True)
    tmp = f"{fact_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, fact_path)
    return True


def check_against_lock(parsed: dict, trees: list[str], others: list[str]) -> None:
    """BuildError when a tree installed after the lock (--no-deps --no-build-isolation) needs a build backend or a
    dependency the lock does not hold (the other local packages count as present)."""
    names = tuple(n for n in (venv_lock.project_name(t) for t in others) if n)
    problems = venv_lock.check_local_packages(parsed, trees, names)
    if problems:
        raise BuildError("; ".join(problems))


def build_if_needed(path: str, python: str, flavour: str, lock: str, local_packages: list[str],
                    patch_dir: str, require_patches: bool, pip_args: list[str], import_names: list[str],
                    fact_path: str, timeout: int = 3600, check_mode: bool = False, schema_module: str = "",
                    clone_repo: str = "", clone_commit: str = "", clone_subdir: str = "", clone_dir: str = "",
                    clone_timeout: int = CLONE_TIMEOUT) -> dict:
    """What the venv_build module does: decide, then (unless check mode) build the stage. clone_repo given: the
    clone route (fetch clone_commit into clone_dir, install <clone_dir>/<clone_subdir>; no patch series)."""
    try:
        clone = {}
        if clone_repo:
            check_clone_inputs(clone_repo, clone_commit, clone_subdir)
            if not clone_dir or not os.path.isabs(clone_dir) or os.path.normpath(clone_dir) in ("/", path):
                raise BuildError(f"clone_dir {clone_dir!r} must be an absolute directory of its own")
            clone = dict(clone_part(clone_repo, clone_commit, clone_subdir), fetched=False, fetch="")
        would_fetch = (f"; would fetch {clone_commit} from {clone['repo']} into {clone_dir}"
                       f"{' (package in ' + clone_subdir + ')' if clone_subdir else ''}") if clone else ""
        if check_mode and not (os.path.isfile(lock) and os.path.isdir(patch_dir)):
            # the copy tasks before this one did not run for real: report the build that would happen
            result = {"built": True, "reason": "check mode: build inputs are not on the host yet", "recipe": {},
                      "live_digest": "", "patches": [], "stage": "", "patches_applied": [], "steps": [],
                      "flag_schema": {}}
            if clone:
                result.update(reason=result["reason"] + would_fetch, clone=clone)
            return result
        if not os.path.isfile(lock):
            raise BuildError(f"lock file {lock} does not exist")
        parsed = read_lock(lock)  # a line pip's hash-checking mode would refuse fails here, named, before pip runs
        missing = [d for d in local_packages if not os.path.isfile(os.path.join(d, "pyproject.toml"))
                   and not os.path.isfile(os.path.join(d, "setup.py"))]
        if missing:
            raise BuildError(f"local package(s) without pyproject.toml or setup.py: {', '.join(missing)}")
        check_against_lock(parsed, local_packages, local_packages)
        patches = read_series(patch_dir, require=require_patches)
        if clone and patches:
            raise BuildError(f"the clone route builds the fork as it is at {clone_commit}: the patch series in "
                             f"{patch_dir} ({', '.join(patches)}) does not apply to it (the fork carries its patches)")
        parts = recipe(flavour, python, lock, local_packages, patch_dir, patches, pip_args, schema_module,
                       clone=clone or None)
        ok, reason, live = up_to_date(path, fact_path, parts["recipe_hash"])
        result = {"built": not ok, "reason": reason, "recipe": parts, "live_digest": live.get("digest", ""),
                  "patches": patches, "stage": "", "patches_applied": [], "steps": [], "flag_schema": {}}
        if clone:
            result["clone"] = clone
            if not ok and check_mode:
                result["reason"] = f"check mode: {reason}{would_fetch}"
        if ok:  # what a failed build left (its stage, e.g. after a hash pip refused): removed, or in check mode named
            result["recovered"] = recover(path, check_mode)
        if ok or check_mode:
            return result
        clone_source = ""
        if clone:
            fetched = fetch_commit(clone_repo, clone_commit, clone_dir, timeout=clone_timeout)
            clone.update(fetched=True, fetch=fetched["fetch"])
            clone_source = os.path.join(clone_dir, clone_subdir) if clone_subdir else clone_dir
            if not (os.path.isfile(os.path.join(clone_source, "pyproject.toml"))
                    or os.path.isfile(os.path.join(clone_source, "setup.py"))):
                raise BuildError(f"commit {clone_commit} of {clone['repo']} has no pyproject.toml or setup.py in "
                                 f"{clone_subdir or 'its root'} (clone_subdir: real SGLang's package is in python/)")
            check_against_lock(parsed, [clone_source], local_packages)  # the fork's backend and dependencies
        result.update(build(path, python, lock, local_packages, patch_dir, patches, pip_args,
                            import_names, timeout=timeout, schema_module=schema_module, clone_source=clone_source,
                            lock_entries=len(parsed["entries"])))
        if clone:
            result["steps"].insert(0, "fetch")
        return result
    except (PatchError, ManifestError, StageError, venv_lock.LockError, OSError) as exc:
        raise BuildError(str(exc)) from exc


def provenance(path: str, fact_path: str, content_hash: str, fields: dict, sglang_dist: str,
               sglang_module: str, check_mode: bool = False) -> tuple[bool, dict]:
    """Write the provenance fact of the live venv; (changed, fact). flag_schema_sha256 and
    flag_schema_sglang_version are read from the live venv's own schema file ("" when it has none), so a streamed
    venv records the schema it received."""
    if not is_venv(path):
        if check_mode:  # a first run in check mode has no venv yet: report what would be written
            return True, dict(fields, content_hash=content_hash)
        raise BuildError(f"no venv at {path}")
    fact = dict(fields)
    fact.update(venv_versions(path, sglang_dist, sglang_module))
    schema = read_flag_schema(os.path.join(path, FLAG_SCHEMA_NAME))
    fact.update({"content_hash": content_hash, "path": path, "flag_schema_sha256": schema.get("sha256", ""),
                 "flag_schema_sglang_version": schema.get("sglang_version", "")})
    try:
        # a venv swapped in before digests were recorded gets its record here (the service unit needs it)
        digest_changed = bool(content_hash) and (read_digest(path) != content_hash if check_mode
                                                 else write_digest(path, content_hash))
        return write_fact(fact_path, fact, check_mode) or digest_changed, fact
    except OSError as exc:
        raise BuildError(f"cannot write {fact_path} or the venv's digest: {exc}") from exc
