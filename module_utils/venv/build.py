"""Build a venv from the flavour's full lock (+ local packages, or the clone route's checkout) and a patch series,
into the stage; decide first whether a build is needed at all.

The lock (module_utils/venv/lock.py; roles/venv/files/locks/<flavour>.txt) names every package with one exact version
and the sha256 of every file pip may choose. It is checked before anything is made (a line without hashes or not
pinned is refused, naming it) and installed with ``pip install --require-hashes --no-deps --only-binary :all:``:
nothing outside it enters, nothing is built. Local packages and the clone route's checkout follow with ``--no-deps
--no-build-isolation``: their build backend and dependencies must be in the lock (checked first where the host's
python has tomllib, then ``pip check`` proves every installed distribution's requirements are met).

Every build step runs in the private mount namespace of module_utils/venv/namespace.py (the stage bind-mounted over
the live path: the venv is built AT the live path, the live venv is untouched until the swap).

Whether a build is needed at all: the recipe hash (flavour, python, the lock's canonical form, the install mode,
local package trees, patch series, flag schema module, clone source) is stored in the provenance fact
(module_utils/venv/provenance.py) with the content hash of the venv it produced. Same recipe and the live venv still
has that content hash -> nothing to do. A changed file in the live venv (content hash differs) or a changed recipe ->
rebuild.

The last step extracts the venv's flag schema (module_utils/venv/flag_schema.py). The clone route's inputs, fetch and
recipe part are module_utils/venv/clone.py's.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.clone import CLONE_TIMEOUT, check_clone_inputs, clone_part, fetch_commit
from ansible.module_utils.venv.flag_schema import extract_flag_schema, extractor
from ansible.module_utils.venv.manifest import ManifestError, is_venv, read_json, scan, summary
from ansible.module_utils.venv.namespace import in_namespace
from ansible.module_utils.venv.pip_check import unexempted
from ansible.module_utils.venv.patch import (PatchError, apply_series, read_series, series_form, series_hash,
                                              site_packages)
from ansible.module_utils.venv.stage import StageError, paths, recover
from ansible.module_utils.venv import lock as venv_lock
from ansible.module_utils.venv.wheelhouse import pip_args as wheelhouse_pip_args

SKIP_IN_TREE_HASH = ("__pycache__", "build", "dist", ".git", ".pytest_cache")
# How the lock and what follows it are installed (part of the recipe: another install mode is another venv).
LOCK_PIP_ARGS = ("--require-hashes", "--no-deps", "--only-binary", ":all:")
LOCAL_PIP_ARGS = ("--no-deps", "--no-build-isolation")
# image packages (venv_system_site_packages, venv_extra_site_dirs): a .pth in the venv's site-packages naming the image's own
# site directories (a GPU image whose torch lives in a venv of its own, e.g. /opt/torch/.venv, is not the base
# interpreter's "system" site); appended after the venv's site-packages, so what the lock installed wins
SITE_DIRS_PTH = "sglang-deploy-image-site-dirs.pth"
# How a venv that sees the image is installed (in its recipe only then): every locked package into the venv itself,
# the image joined after (a build of the older order lacked the console scripts of what the image also has).
IMAGE_INSTALL = ("the lock installed whole into the venv (--ignore-installed with system site packages); "
                 "image site dirs joined after")
INSTALL_MODE = "lock: " + " ".join(LOCK_PIP_ARGS) + "; local, clone: " + " ".join(LOCAL_PIP_ARGS) + "; pip check"


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


def read_lock(lock: str) -> dict:
    """The parsed lock; BuildError naming the first line pip's hash-checking mode would refuse."""
    try:
        return venv_lock.read(lock)
    except venv_lock.LockError as exc:
        raise BuildError(str(exc)) from exc


def recipe(flavour: str, python: str, lock: str, local_packages: list[str], patch_dir: str,
           patches: list[str], pip_args: list[str], schema_module: str = "", clone: dict | None = None,
           image: dict | None = None) -> dict:
    """The recipe parts and their hash. The lock counts by its canonical form (entries, markers, hashes, index
    options; not its comments or line order). image: system_site_packages, site_dirs, pip_check_exempt (what the venv
    sees of the host's image and what pip check tolerates); the wheelhouse is not part of it (the lock's hashes decide
    the bytes, not where pip found them)."""
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
        parts["flag_schema"] = {"module": schema_module, "format": extractor().SCHEMA_FORMAT}
    if clone:  # absent on the pypi route: its recipes hash as they did before the clone route existed
        parts["clone"] = {k: clone[k] for k in ("repo", "commit", "subdir")}
    for key, value in (image or {}).items():  # each absent while off: such recipes hash as they did before
        if value:
            parts[key] = sorted(value) if key == "pip_check_exempt" else value
    if (image or {}).get("site_dirs") or (image or {}).get("system_site_packages"):
        parts["image_install"] = IMAGE_INSTALL
    parts["recipe_hash"] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return parts


def up_to_date(live: str, fact_path: str, recipe_hash: str, adopted: dict | None = None) -> tuple[bool, str, dict]:
    """(live venv matches recipe and its recorded content, reason, live summary). adopted: what an adopted venv's
    fact must still record to be kept (adopted_kept)."""
    if not is_venv(live):
        return False, f"no venv at {live}", {}
    fact = read_json(fact_path) or {}
    info = summary(scan(live))
    if fact.get("method") == "adopted":
        why = adopted_kept(fact, info["digest"], adopted or {})
        return not why, why or (f"adopted venv (from {fact.get('adopted_from')}) kept: unchanged since its "
                                "adoption, verified for this flavour, pin, patch series and schema module"), info
    if fact.get("recipe_hash") != recipe_hash:
        return False, ("recipe changed (lock, local packages, patches, python, flavour, install mode, flag "
                       "schema module or image site packages)"), info
    if fact.get("content_hash") != info["digest"]:
        return False, (f"live venv content {info['digest'][:12]} differs from the recorded "
                       f"{str(fact.get('content_hash'))[:12]} (files changed since the build)"), info
    return True, "live venv matches the recipe and its recorded content hash", info


# An adopted venv (module_utils/venv/adopt.py: an operator's venv verified and moved to the venv path; fact method
# "adopted") was never built from the lock, so its fact has no recipe hash. It is kept, not rebuilt, while its content
# hash is the one recorded at adoption and the fact still records what adoption verified it for: the flavour, the
# pinned SGLang (adopted_pin, dist==version), the patch series and the schema module. adopted_pin "" (the role's
# venv_keep_adopted: false) or any difference rebuilds it from the lock.
ADOPTED_FOR = ("flavour", "adopted_pin", "patch_series_hash", "adopted_schema_module")
# the fact's keys of an adoption that the role's provenance step keeps (venv_build returns them as "adopted")
ADOPTED_KEEP = ("method", "source", "recipe_hash", "adopted_from", "adopted_time", "adopted_pin",
                "adopted_schema_module")


def adopted_kept(fact: dict, digest: str, expected: dict) -> str:
    """"" when the adopted venv is kept, else why it is rebuilt."""
    if not expected.get("adopted_pin"):
        return "an adopted venv is rebuilt from the lock (adopted venvs are not kept: venv_keep_adopted is off)"
    differs = [f"{k} {fact.get(k)!r} (now {expected.get(k)!r})" for k in ADOPTED_FOR if fact.get(k) != expected.get(k)]
    if differs:
        return f"the adopted venv (from {fact.get('adopted_from')}) was verified for another " + ", ".join(differs)
    if fact.get("content_hash") != digest:
        return (f"the adopted venv's content {digest[:12]} differs from the recorded "
                f"{str(fact.get('content_hash'))[:12]} (files changed since its adoption)")
    return ""


def _run(argv: list[str], env: dict, what: str, timeout: int) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what}: timed out after {timeout}s: {' '.join(argv)}") from exc
    if out.returncode != 0:
        tail = (out.stdout + out.stderr).strip()[-3000:]
        raise BuildError(f"{what} failed (rc={out.returncode}): {' '.join(argv)}\n{tail}")
    return out.stdout


def build(live: str, python: str, lock: str, local_packages: list[str], patch_dir: str,
          patches: list[str], pip_args: list[str], import_names: list[str], env: dict | None = None,
          timeout: int = 3600, schema_module: str = "", clone_source: str = "", lock_entries: int = -1,
          patch_strip: int = 1, wheelhouse: str = "", system_site_packages: bool = False,
          site_dirs: list[str] | tuple = (), pip_check_exempt: list[str] | tuple = ()) -> dict:
    """Build the stage for live: the lock (hash-checked, no dependency resolution, wheels only), then the local
    packages and clone_source (a checked-out fork's package directory) with --no-deps --no-build-isolation (their
    build backend is the lock's), pip check, patches applied, imports checked, flag schema extracted (unless
    schema_module is ""). No byte-code is written here (pip --no-compile, PYTHONDONTWRITEBYTECODE): venv_commit
    compiles the stage before the swap. lock_entries 0 (an empty lock) skips the lock step. The live path is
    not touched (except that an empty directory is made there as the bind-mount point when no venv exists yet).
    wheelhouse: every pip step gets --no-index --find-links <wheelhouse> (the hashes still apply).
    system_site_packages: python -m venv --system-site-packages; site_dirs: the image's site directories appended
    by a .pth (SITE_DIRS_PTH). pip_check_exempt: requirement names whose pip check lines are tolerated (pip_check.py)."""
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
        _run(in_namespace(p["stage"], p["live"], [python, "-m", "venv",
                                                  *(["--system-site-packages"] if system_site_packages else []),
                                                  p["live"]]), env, "python -m venv", 600)
        steps.append("venv")
        # every locked package goes into the venv even where the image has the same one: pip must not skip it as
        # "already satisfied" by an image site dir (its console scripts, e.g. ninja's, which FlashInfer's JIT runs
        # from PATH, would be missing from the venv's bin: H200 rehearsal). The image's dirs are joined after.
        pip = [os.path.join(p["live"], "bin", "python"), "-m", "pip", "install", "--no-input", "--no-compile",
               *(["--ignore-installed"] if system_site_packages else []), *pip_args, *wheelhouse_pip_args(wheelhouse)]
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
        if site_dirs:
            with open(os.path.join(site_packages(p["stage"]), SITE_DIRS_PTH), "w", encoding="utf-8") as fh:
                fh.write("".join(d + "\n" for d in site_dirs))
        # every installed distribution's requirements are met: a local package or fork needing something the lock
        # does not hold (they were installed with --no-deps) fails here, named by pip
        tolerated = pip_check(p["stage"], env, pip_check_exempt)
        steps.append("pip_check")
        patched = (apply_series(site_packages(p["stage"]), patch_dir, patches, strip=patch_strip) if patches
                   else {"applied": []})
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
    return {"stage": p["stage"], "steps": steps, "patches_applied": patched["applied"], "flag_schema": schema,
            "pip_check_tolerated": tolerated}


def pip_check(stage: str, env: dict, exempt: list[str] | tuple = ()) -> list[str]:
    """pip check of the stage; BuildError on a line about a requirement outside exempt. Returns the tolerated lines."""
    argv = [os.path.join(stage, "bin", "python"), "-m", "pip", "check"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=300)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"pip check: timed out after 300s: {' '.join(argv)}") from exc
    failing, tolerated = unexempted(out.stdout + out.stderr, exempt)
    if out.returncode != 0 and (failing or not tolerated):
        tail = "\n".join(failing)[-3000:] or (out.stdout + out.stderr).strip()[-3000:]
        raise BuildError(f"pip check (a requirement of an installed package is not in the lock) failed "
                         f"(rc={out.returncode}): {' '.join(argv)}\n{tail}")
    return tolerated


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
                    clone_timeout: int = CLONE_TIMEOUT, patch_packages: list[str] | tuple = (),
                    adopted_pin: str = "", wheelhouse: str = "", system_site_packages: bool = False,
                    site_dirs: list[str] | tuple = (), pip_check_exempt: list[str] | tuple = ()) -> dict:
    """What the venv_build module does: decide, then (unless check mode) build the stage. clone_repo given: the
    clone route (fetch clone_commit into clone_dir, install <clone_dir>/<clone_subdir>; no patch series).
    adopted_pin (dist==version the flavour pins): an adopted venv still verified for it is kept (adopted_kept)."""
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
        form = series_form(patch_dir, patches, patch_packages)  # mixed forms, paths outside the package: refused here
        if clone and patches:
            raise BuildError(f"the clone route builds the fork as it is at {clone_commit}: the patch series in "
                             f"{patch_dir} ({', '.join(patches)}) does not apply to it (the fork carries its patches)")
        bad_dirs = [d for d in site_dirs if not os.path.isabs(d) or os.path.normpath(d) != d]
        if bad_dirs:
            raise BuildError(f"site_dirs must be absolute, normalised paths: {', '.join(bad_dirs)}")
        image = {"system_site_packages": bool(system_site_packages), "site_dirs": list(site_dirs),
                 "pip_check_exempt": list(pip_check_exempt)}
        parts = recipe(flavour, python, lock, local_packages, patch_dir, patches, pip_args, schema_module,
                       clone=clone or None, image=image)
        adopted = {"flavour": flavour, "adopted_pin": "" if clone else adopted_pin,
                   "patch_series_hash": parts["patch_series_hash"], "adopted_schema_module": schema_module}
        ok, reason, live = up_to_date(path, fact_path, parts["recipe_hash"], adopted)
        result = {"built": not ok, "reason": reason, "recipe": parts, "live_digest": live.get("digest", ""),
                  "patches": patches, "stage": "", "patches_applied": [], "steps": [], "flag_schema": {},
                  "patch_form": form["form"]}
        if clone:
            result["clone"] = clone
            if not ok and check_mode:
                result["reason"] = f"check mode: {reason}{would_fetch}"
        if ok and reason.startswith("adopted venv"):  # configure keeps the adoption's record in the fact
            fact = read_json(fact_path) or {}
            result["adopted"] = {k: fact[k] for k in ADOPTED_KEEP if k in fact}
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
                            lock_entries=len(parsed["entries"]), patch_strip=form["strip"], wheelhouse=wheelhouse,
                            system_site_packages=system_site_packages, site_dirs=site_dirs,
                            pip_check_exempt=pip_check_exempt))
        if clone:
            result["steps"].insert(0, "fetch")
        return result
    except (PatchError, ManifestError, StageError, venv_lock.LockError, OSError) as exc:
        raise BuildError(str(exc)) from exc
