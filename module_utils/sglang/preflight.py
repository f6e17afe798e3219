"""Target-side preflight: the installed SGLang's own validation judges a new argv, without touching a GPU.

Runs `<venv python> -c <SNIPPET> <module> <device facts JSON> <argv...>` in a subprocess that cannot see the GPUs
(CUDA_VISIBLE_DEVICES="" and NVIDIA_VISIBLE_DEVICES=void are forced), at low CPU priority, so the running server is
never disturbed. The snippet runs what the version's launcher runs before it loads weights:

* `prepare_server_args(argv)`: argparse, then `ServerArgs.__post_init__` (0.5.11: every semantic check, reading the
  model's and the drafter's config.json; 0.5.23: an empty __post_init__),
* `server_args.resolve_once()` where it exists (0.5.23: the resolution pipeline that holds the semantic checks),
* `server_args.check_server_args()` (both versions: parallel-size and other assertions the engine makes).

Many of those checks depend on the GPU (compute capability, memory, count), and asking torch would initialise CUDA
(measured on an H200 with 0.5.11: a context on GPU 0 and 17-26 s per call, next to the live server). Instead the
snippet hands torch.cuda the host's real GPU facts, read from `nvidia-smi` (NVML: no CUDA context) by this module:
is_available, device_count, get_device_capability, get_device_name, get_device_properties, mem_get_info. Anything
that really tries to use a GPU fails, because none is visible: the preflight can refuse, never take a GPU.

argparse rejections exit 2 with the parser's message on stderr; semantic checks raise (exit 1). Nothing is started,
written or restarted. Stdlib only.

The subprocess gets a scratch home of its own (a private temporary directory, removed afterwards) with every cache
variable pointed into it: importing the real SGLang writes JIT caches under HOME even with no GPU visible (measured on
an H200, SGLang 0.5.11, run as root with the service's HOME: `$HOME/.cache/flashinfer/0.6.8.post1/90a/` and
`$HOME/.triton/cache/<hash>/cuda_utils...so`, owned by root, in the home the service user must write them to).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.gpu.nvidia_smi import query_gpus

OK_MARKER = "SGLANG_PREFLIGHT_ACCEPTED"
# Placeholder put in place of the real key: the preflight checks the flag is accepted, never sees the secret.
API_KEY_PLACEHOLDER = "preflight-placeholder-key"
# The environment that hides every GPU from CUDA (and from a container runtime's hook).
NO_GPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "void", "HIP_VISIBLE_DEVICES": ""}
# Where each cache the parser's import may write lands, relative to the scratch home (read in the real sources):
# HOME: os.path.expanduser("~") in SGLang 0.5.11 srt/environ.py (SGLANG_CACHE_DIR, SGLANG_DG_CACHE_DIR defaults),
#   srt/layers/deep_gemm_wrapper/compile_utils.py (DG_JIT_CACHE_DIR), srt/distributed/device_communicators/
#   custom_all_reduce_utils.py (~/.cache/sglang); FlashInfer's jit/env.py (Path.home()/.cache/flashinfer);
#   Triton's ~/.triton; apache-tvm-ffi's ~/.cache/tvm-ffi; the CUDA driver's ~/.nv/ComputeCache.
# The variables that move them (each overrides a value the service's environment may set to its own home):
SCRATCH_CACHE_ENV = {
    "XDG_CACHE_HOME": ".cache",                  # torch (hub, extensions), SGLang's multimodal_gen/envs.py
    "TRITON_HOME": ".",                          # Triton: ~/.triton (cache, dump, override)
    "TRITON_CACHE_DIR": ".triton/cache",         # Triton kernels; srt/compilation/compiler_interface.py sets it too
    "FLASHINFER_WORKSPACE_BASE": ".",            # FlashInfer: <base>/.cache/flashinfer/<version>/<arch>
    "TVM_FFI_CACHE_DIR": ".cache/tvm-ffi",       # sgl-kernel's JIT kernels built through apache-tvm-ffi
    "SGLANG_CACHE_DIR": ".cache/sglang",         # srt/environ.py Envs.SGLANG_CACHE_DIR
    "SGLANG_DG_CACHE_DIR": ".cache/deep_gemm",   # srt/environ.py; compile_utils.py copies it to DG_JIT_CACHE_DIR
    "DG_JIT_CACHE_DIR": ".cache/deep_gemm",      # DeepGEMM itself
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # torch inductor (default /tmp/torchinductor_<user>)
    "TORCH_EXTENSIONS_DIR": ".cache/torch_extensions",
    "CUDA_CACHE_PATH": ".nv/ComputeCache",       # the CUDA driver's PTX JIT cache
}


def scratch_env(home: str) -> dict:
    """HOME and every cache variable of SCRATCH_CACHE_ENV inside `home`."""
    env = {"HOME": home}
    env.update({k: os.path.normpath(os.path.join(home, v)) for k, v in SCRATCH_CACHE_ENV.items()})
    return env

SNIPPET = r'''
import importlib, json, os, sys, types
module, facts = sys.argv[1], json.loads(sys.argv[2])
argv = sys.argv[3:]
assert os.environ.get("CUDA_VISIBLE_DEVICES") == "", "preflight must run with no visible GPU"
if facts.get("gpus"):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        gpus = facts["gpus"]
        def _gpu(device=None):
            if device is None or isinstance(device, str):
                i = 0
            elif isinstance(device, int):
                i = device
            else:
                i = getattr(device, "index", None) or 0
            return gpus[min(i, len(gpus) - 1)]
        def _props(device=None):
            g = _gpu(device)
            major, minor = (int(x) for x in g["compute_cap"].split("."))
            return types.SimpleNamespace(name=g["name"], major=major, minor=minor,
                                         total_memory=int(g["memory_mib"]) << 20,
                                         multi_processor_count=int(g.get("sm_count") or 0),
                                         gcnArchName="", uuid=g.get("uuid", ""))
        c = torch.cuda
        c.is_available = lambda: True
        c.device_count = lambda: len(gpus)
        c.current_device = lambda: 0
        c.get_device_properties = _props
        c.get_device_capability = lambda device=None: (_props(device).major, _props(device).minor)
        c.get_device_name = lambda device=None: _props(device).name
        c.mem_get_info = lambda device=None: (_props(device).total_memory, _props(device).total_memory)
        c.set_device = lambda device: None
mod = importlib.import_module(module)
print(MARK + "-STEP prepare_server_args", flush=True)
server_args = mod.prepare_server_args(argv)
for step in ("resolve_once", "check_server_args"):
    fn = getattr(server_args, step, None)
    if callable(fn):
        print(MARK + "-STEP " + step, flush=True)
        fn()
print(MARK, flush=True)
'''.replace("MARK", repr(OK_MARKER))


def read_gpus(nvidia_smi: str = "nvidia-smi", run=subprocess.run, timeout: float = 60) -> list[dict]:
    """The host's GPUs from `nvidia-smi --query-gpu` (gpu/nvidia_smi.py's query_gpus; NVML: opens no CUDA context);
    [] on a host without one. NvidiaSmiError when it is there but fails, NvidiaSmiParseError when it answers in
    another format."""
    gpus = query_gpus(nvidia_smi, run, timeout)
    return gpus if gpus is not None else []


def device_facts(gpus: list[dict], visible: str | None) -> dict:
    """The GPUs the service will see: nvidia-smi rows (parse_query_gpu), narrowed to its CUDA_VISIBLE_DEVICES."""
    rows = [{"index": g.get("index"), "name": g.get("name") or "", "memory_mib": int(g.get("memory_total_mib") or 0),
             "compute_cap": str(g.get("compute_capability") or "0.0"), "uuid": g.get("uuid") or ""} for g in gpus]
    if visible is not None and str(visible).strip() != "":
        wanted = [v.strip() for v in str(visible).split(",") if v.strip()]
        rows = [r for r in rows if str(r["index"]) in wanted or r["uuid"] in wanted]
    return {"gpus": rows}


def command(python: str, module: str, argv: list[str], facts: dict | None = None,
            with_api_key: bool = False) -> list[str]:
    argv = [str(a) for a in argv]
    if with_api_key:
        argv += ["--api-key", API_KEY_PLACEHOLDER]
    return [python, "-c", SNIPPET, module, json.dumps(facts or {"gpus": []})] + argv


def check(python: str, module: str, argv: list[str], facts: dict | None = None, with_api_key: bool = False,
          timeout: float = 300.0, env: dict | None = None, run=subprocess.run) -> dict:
    """{"accepted": bool, "rc": int, "message": str (the complaint, or ""), "steps": [validation steps started]}"""
    cmd = command(python, module, argv, facts, with_api_key)
    scratch = tempfile.mkdtemp(prefix="sglang-preflight-home-")  # 0700, this process's user's
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.update(scratch_env(scratch))
    full_env.update(NO_GPU_ENV)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=scratch,
                   preexec_fn=lambda: os.nice(10))
    except FileNotFoundError:
        return {"accepted": False, "rc": 127, "message": f"{python} not found (is the venv installed?)", "steps": []}
    except subprocess.TimeoutExpired:
        return {"accepted": False, "rc": 124, "message": f"the parser did not answer within {timeout:.0f}s",
                "steps": []}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = proc.stdout.splitlines()
    steps = [ln.split(" ", 1)[1] for ln in lines if ln.startswith(OK_MARKER + "-STEP ")]
    accepted = proc.returncode == 0 and OK_MARKER in lines
    message = "" if accepted else summarize(proc.stderr or proc.stdout)
    if not accepted and steps:
        message = f"refused in {steps[-1]}: {message}"
    return {"accepted": accepted, "rc": proc.returncode, "message": message, "steps": steps}


def summarize(stderr: str, max_lines: int = 12) -> str:
    """The useful end of a complaint: argparse's 'error:' line, or the exception line of a traceback."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error: " in ln or ln.startswith((
        "ValueError", "AssertionError", "ModuleNotFoundError", "ImportError", "TypeError", "RuntimeError",
        "KeyError", "NotImplementedError", "Exception"))]
    head = errors[-1] if errors else (lines[-1] if lines else "(no output)")
    tail = "\n".join(lines[-max_lines:])
    return head if head == tail else f"{head}\n--- parser output (last lines) ---\n{tail}"
