"""The venv's flag schema (``<venv>/sglang-flag-schema.json``): extracted at build time from the venv's own parser.

The schema is extracted after the patch series from the venv's own argparse parser by
module_utils/sglang/schema_extract.py, whose source is run by the stage's python inside the build's namespace
(module_utils/venv/namespace.py), so it is venv content: in the manifest and the content hash, streamed with the venv,
and always that venv's own flags. read_flag_schema is how the build and the provenance fact read it back.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.namespace import in_namespace
from ansible.module_utils.shipping.source import SourceError, module_source

# The venv's flag schema, written into the venv itself (part of its content) by the "flag_schema" build step.
FLAG_SCHEMA_NAME = "sglang-flag-schema.json"
FLAG_SCHEMA_TIMEOUT = 300  # seconds: importing a real server_args (torch, transformers) takes 10-60 s cold


def extractor():
    """The schema extractor module (module_utils/sglang/schema_extract.py), imported lazily: its import empties
    CUDA_VISIBLE_DEVICES in the importing process, undone here."""
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
        return module_source(extractor())
    except (SourceError, ImportError) as exc:
        raise BuildError(f"cannot read the flag schema extractor's source: {exc}") from exc


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


def run_extractor(python: str, out: str, schema_module: str, env: dict, timeout: int = FLAG_SCHEMA_TIMEOUT,
                  wrap=None) -> None:
    """Run the extractor's source (copied to a private temp file) with python on schema_module, writing out:
    -I (no user site, no PYTHON* variables, not the cwd) and -B (no byte-code in the venv). wrap(argv), when given,
    returns the argv that really runs (the build's namespace). BuildError with the extractor's stderr tail."""
    source = extractor_source()
    tmp = tempfile.mkdtemp(prefix="sglang-schema-extract.")
    try:
        script = os.path.join(tmp, "sglang_schema_extract.py")
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(source)
        os.chmod(tmp, 0o755)  # readable by the namespace's python, whatever umask the module runs under
        os.chmod(script, 0o644)
        argv = [python, "-I", "-B", script, "--module", schema_module, "--out", out]
        run_env = dict(env, CUDA_VISIBLE_DEVICES="")  # the extractor never sees a GPU
        full = wrap(argv) if wrap else argv
        try:
            run = subprocess.run(full, capture_output=True, text=True, check=False, env=run_env, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            partial = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            raise BuildError(f"flag schema: extracting {schema_module} timed out after {timeout}s\n"
                             f"{partial.strip()[-3000:]}".rstrip()) from exc
        if run.returncode != 0:
            tail = (run.stderr or run.stdout).strip()[-3000:]
            raise BuildError(f"flag schema: extracting the parser of {schema_module} from the venv failed "
                             f"(rc={run.returncode}):\n{tail}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def usable_schema(target: str, schema_module: str) -> dict:
    """read_flag_schema of target, BuildError unless it has options and an SGLang version."""
    info = read_flag_schema(target)
    if not info.get("options") or not info.get("sglang_version"):
        raise BuildError(f"flag schema: {schema_module} gave no usable schema ({target}: {info or 'missing'})")
    os.chmod(target, 0o644)
    return info


def extract_flag_schema(stage: str, live: str, schema_module: str, env: dict,
                        timeout: int = FLAG_SCHEMA_TIMEOUT) -> dict:
    """Write <venv>/sglang-flag-schema.json from the venv's own parser. Runs the stage's python in the namespace
    (it sees itself at the live path, as it will run)."""
    run_extractor(os.path.join(live, "bin", "python"), os.path.join(live, FLAG_SCHEMA_NAME), schema_module, env,
                  timeout, wrap=lambda argv: in_namespace(stage, live, argv))
    info = usable_schema(os.path.join(stage, FLAG_SCHEMA_NAME), schema_module)
    return dict(info, module=schema_module, path=os.path.join(live, FLAG_SCHEMA_NAME))
