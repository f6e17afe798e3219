"""Shared pytest setup: the repo root is importable (module_utils, lab, bench, reporting...)."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# One import name for the repository's module_utils in tests too: ansible.module_utils.<package>.<module>, as on the
# hosts (AnsiballZ) and in the filter plugins.
import local_module_utils  # noqa: E402

local_module_utils.install()
# The controller venv's tools (ansible-playbook, molecule) come first, whoever started pytest.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
# The SGLang stand-in writes a compile cache under its HOME on a cold start, as real SGLang does
# (lab/sglang_standin/sglang_standin/jit_cache.py); stand-ins that tests start here keep it out of the runner's home.
_JIT_TMP = __import__("tempfile").mkdtemp(prefix="standin-jit-")
__import__("atexit").register(__import__("shutil").rmtree, _JIT_TMP, True)
for _var, _sub in (("TRITON_CACHE_DIR", "triton"), ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
                   ("TVM_FFI_CACHE_DIR", "tvm-ffi"), ("SGLANG_CACHE_DIR", "sglang")):
    os.environ.setdefault(_var, os.path.join(_JIT_TMP, _sub))


import json  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def standin_ddtree_root(tmp_path_factory):
    """PYTHONPATH root of the stand-in with the lab patch series applied: the DDTree-patched build a lab venv has."""
    sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
    from sglang_standin.local import patched_root
    return patched_root(tmp_path_factory.mktemp("standin-ddtree"))


@pytest.fixture(scope="session")
def ddtree_schema(standin_ddtree_root):
    """The flag schema extracted from that build, as the venv role extracts it on a lab host (a dict)."""
    out = subprocess.run([sys.executable, str(ROOT / "module_utils" / "sglang" / "schema_extract.py"),
                          "--module", "sglang_standin.server_args"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(standin_ddtree_root)}, timeout=120)
    return json.loads(out.stdout)
