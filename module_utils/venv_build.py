"""Build a venv from a pinned requirements file (+ local packages) and a patch series, into the stage.

The venv's scripts carry its absolute path in their shebangs, so it must be built AT the live path. To keep
the live venv untouched until the swap, every build step runs in a private mount namespace where the stage
directory is bind-mounted over the live path (``unshare --mount``): inside, pip sees /opt/sglang/venv; the
bytes land in <parent>/.venv.stage. Nothing outside the namespace sees the half-built venv.

Whether a build is needed at all: the recipe hash (flavour, python, requirements text, local package trees,
patch series) is stored in the provenance fact with the content hash of the venv it produced. Same recipe
and the live venv still has that content hash -> nothing to do. A changed file in the live venv (content
hash differs) or a changed recipe -> rebuild.

The flag schema of the venv (``<venv>/sglang-flag-schema.json``) is extracted at build time from the venv's own
argparse parser, after the patch series (module_utils/sglang_schema_extract.py, run by the stage's python), so it is
venv content: in the manifest and the content hash, streamed with the venv, and always that venv's own flags.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile

try:
    from ansible.module_utils.venv_manifest import ManifestError, is_venv, read_json, scan, summary
    from ansible.module_utils.venv_patch import PatchError, apply_series, read_series, series_hash, site_packages
    from ansible.module_utils.venv_stage import StageError, paths, recover
except ImportError:
    from module_utils.venv_manifest import ManifestError, is_venv, read_json, scan, summary  # noqa: F401
    from module_utils.venv_patch import PatchError, apply_series, read_series, series_hash, site_packages  # noqa
    from module_utils.venv_stage import StageError, paths, recover  # noqa: F401

SKIP_IN_TREE_HASH = ("__pycache__", "build", "dist", ".git", ".pytest_cache")
# The venv's flag schema, written into the venv itself (part of its content) by the "flag_schema" build step.
FLAG_SCHEMA_NAME = "sglang-flag-schema.json"
FLAG_SCHEMA_TIMEOUT = 300  # seconds: importing a real server_args (torch, transformers) takes 10-60 s cold


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
        try:
            from ansible.module_utils import sglang_schema_extract as mod
        except ImportError:
            from module_utils import sglang_schema_extract as mod  # type: ignore[no-redef]
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    return mod


def extractor_source() -> str:
    """Source text of module_utils/sglang_schema_extract.py, also from inside an AnsiballZ payload (zipimport)."""
    try:
        return inspect.getsource(_extractor())
    except (OSError, TypeError, ImportError) as exc:
        raise BuildError(f"cannot read the flag schema extractor's source: {exc}") from exc


def recipe(flavour: str, python: str, requirements: str, local_packages: list[str], patch_dir: str,
           patches: list[str], pip_args: list[str], schema_module: str = "") -> dict:
    with open(requirements, "rb") as fh:
        req = fh.read()
    parts = {
        "flavour": flavour,
        "python": python_version(python),
        "requirements": hashlib.sha256(req).hexdigest(),
        "local_packages": {os.path.basename(os.path.normpath(p)): tree_hash(p) for p in local_packages},
        "patch_series_hash": series_hash(patch_dir, patches),
        "pip_args": list(pip_args),
    }
    if schema_module:  # absent when no schema is extracted: such a recipe hashes as it did before the step existed
        parts["flag_schema"] = {"module": schema_module, "format": _extractor().SCHEMA_FORMAT}
    parts["recipe_hash"] = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return parts


def up_to_date(live: str, fact_path: str, recipe_hash: str) -> tuple[bool, str, dict]:
    """(live venv matches recipe and its recorded content, reason, live summary)."""
    if not is_venv(live):
        return False, f"no venv at {live}", {}
    fact = read_json(fact_path) or {}
    info = summary(scan(live))
    if fact.get("recipe_hash") != recipe_hash:
        return False, ("recipe changed (requirements, local packages, patches, python, flavour or flag schema "
                       "module)"), info
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


def build(live: str, python: str, requirements: str, local_packages: list[str], patch_dir: str,
          patches: list[str], pip_args: list[str], import_names: list[str], env: dict | None = None,
          timeout: int = 3600, schema_module: str = "") -> dict:
    """Build the stage for live; patches applied, imports checked, flag schema extracted (unless schema_module
    is ""). The live path is not touched (except that an empty directory is made there as the bind-mount point
    when no venv exists yet)."""
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
        pip = [os.path.join(p["live"], "bin", "python"), "-m", "pip", "install", "--no-input", *pip_args]
        _run(in_namespace(p["stage"], p["live"], [*pip, "-r", requirements]), env, "pip install -r", timeout)
        steps.append("requirements")
        if local_packages:
            # a local tree is copied by pip into a temporary build dir; --no-build-isolation uses the venv's own
            # setuptools, so no build backend is downloaded
            _run(in_namespace(p["stage"], p["live"], [*pip, "--no-build-isolation", *local_packages]), env,
                 "pip install (local packages)", timeout)
            steps.append("local_packages")
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


def build_if_needed(path: str, python: str, flavour: str, requirements: str, local_packages: list[str],
                    patch_dir: str, require_patches: bool, pip_args: list[str], import_names: list[str],
                    fact_path: str, timeout: int = 3600, check_mode: bool = False, schema_module: str = "") -> dict:
    """What the venv_build module does: decide, then (unless check mode) build the stage."""
    try:
        if check_mode and not (os.path.isfile(requirements) and os.path.isdir(patch_dir)):
            # the copy tasks before this one did not run for real: report the build that would happen
            return {"built": True, "reason": "check mode: build inputs are not on the host yet", "recipe": {},
                    "live_digest": "", "patches": [], "stage": "", "patches_applied": [], "steps": [],
                    "flag_schema": {}}
        if not os.path.isfile(requirements):
            raise BuildError(f"requirements file {requirements} does not exist")
        missing = [d for d in local_packages if not os.path.isfile(os.path.join(d, "pyproject.toml"))
                   and not os.path.isfile(os.path.join(d, "setup.py"))]
        if missing:
            raise BuildError(f"local package(s) without pyproject.toml or setup.py: {', '.join(missing)}")
        patches = read_series(patch_dir, require=require_patches)
        parts = recipe(flavour, python, requirements, local_packages, patch_dir, patches, pip_args, schema_module)
        ok, reason, live = up_to_date(path, fact_path, parts["recipe_hash"])
        result = {"built": not ok, "reason": reason, "recipe": parts, "live_digest": live.get("digest", ""),
                  "patches": patches, "stage": "", "patches_applied": [], "steps": [], "flag_schema": {}}
        if ok or check_mode:
            return result
        result.update(build(path, python, requirements, local_packages, patch_dir, patches, pip_args,
                            import_names, timeout=timeout, schema_module=schema_module))
        return result
    except (PatchError, ManifestError, StageError, OSError) as exc:
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
        return write_fact(fact_path, fact, check_mode), fact
    except OSError as exc:
        raise BuildError(f"cannot write {fact_path}: {exc}") from exc
