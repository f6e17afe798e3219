"""The provenance fact of the live venv: what it was built from (the recipe's fields), its content hash, its
python and SGLang versions as the venv itself reports them, and its flag schema's sha256 and SGLang version.

Written as JSON (atomic, only when it changes) by the venv_provenance module after a build or a stream; the venv's
own digest record (module_utils/venv/manifest.py) is written with it.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess

from ansible.module_utils.venv.build import SITE_DIRS_PTH
from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.flag_schema import FLAG_SCHEMA_NAME, read_flag_schema
from ansible.module_utils.venv.manifest import is_venv, read_digest, read_json, write_digest


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


def image_packages(venv: str) -> dict:
    """What the venv sees of the host's image, read from the venv itself (built, streamed or adopted alike):
    {"system_site_packages": True} when its pyvenv.cfg says include-system-site-packages = true, and "site_dirs"
    when it has the build's .pth of image site directories (module_utils/venv/build.py SITE_DIRS_PTH). {} for a
    venv that sees only itself (the fact then has neither key, as before these knobs existed)."""
    out: dict = {}
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as fh:
            cfg = dict(line.split("=", 1) for line in fh if "=" in line)
    except OSError:
        cfg = {}
    if {k.strip(): v.strip() for k, v in cfg.items()}.get("include-system-site-packages", "").lower() == "true":
        out["system_site_packages"] = True
    for pth in glob.glob(os.path.join(venv, "lib", "python*", "site-packages", SITE_DIRS_PTH)):
        with open(pth, encoding="utf-8") as fh:
            out["site_dirs"] = [line.strip() for line in fh if line.strip()]
    return out


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
    fact.update(image_packages(path))
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
