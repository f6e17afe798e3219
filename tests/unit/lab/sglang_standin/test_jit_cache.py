"""lab/sglang_standin/sglang_standin/jit_cache.py at import: like real SGLang 0.5.11 (the H200 preflight created
`$HOME/.cache/flashinfer/0.6.8.post1/90a/` and `$HOME/.triton/cache/<hash>/cuda_utils...so`), importing the stand-in's
parser writes under HOME, so the lab shows what a preflight with the service's HOME did, and that the preflight's
scratch home (module_utils/sglang/preflight.py) keeps the service's home clean."""
import os
import subprocess
import sys
from pathlib import Path

from ansible.module_utils.sglang import preflight as pf

ROOT = Path(__file__).resolve().parents[4]
STANDIN = str(ROOT / "lab" / "sglang_standin")
CACHE_VARS = ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR", "TRITON_HOME",
              "XDG_CACHE_HOME")


def env_with_home(home):
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARS}
    return dict(env, HOME=str(home), PYTHONPATH=STANDIN)


def files_under(home: Path) -> set:
    return {str(p.relative_to(home)) for p in home.rglob("*")} if home.exists() else set()


def test_importing_the_parser_writes_under_home_like_the_real_one(tmp_path):
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", "import sglang_standin.server_args"], env=env_with_home(home), check=True,
                   timeout=60)
    written = files_under(home)
    assert any(p.startswith(".cache/flashinfer/standin/") and p.endswith("/workspace") for p in written), written
    assert any(p.startswith(".triton/cache/") and p.endswith("/cuda_utils.standin.so") for p in written), written
    # a second import finds them and changes nothing; an unwritable HOME does not stop the import
    before = {p: (home / p).stat().st_mtime_ns for p in written}
    subprocess.run([sys.executable, "-c", "import sglang_standin.server_args"], env=env_with_home(home), check=True,
                   timeout=60)
    assert {p: (home / p).stat().st_mtime_ns for p in files_under(home)} == before
    subprocess.run([sys.executable, "-c", "import sglang_standin.server_args"], env=env_with_home("/proc/nowhere"),
                   check=True, timeout=60)


def test_the_preflight_with_the_services_home_leaves_nothing_there(tmp_path):
    home = tmp_path / "var-lib-sglang"
    out = pf.check(sys.executable, "sglang_standin.server_args", ["--model-path", "/srv/models/m"], timeout=60,
                   env={"PYTHONPATH": STANDIN, "HOME": str(home), "TRITON_CACHE_DIR": str(home / ".triton/cache")})
    assert out["accepted"], out
    assert not home.exists()
