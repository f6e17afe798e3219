"""The stand-in's compile cache: what real SGLang's JIT does to its HOME on a cold start, in miniature (lab only).

Real SGLang 0.5.11 on an H200 (tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json) wrote, under a fresh
HOME, `.triton/cache` (Triton kernels), `.cache/flashinfer` (FlashInfer ops), `.cache/tvm-ffi` (sgl-kernel's JIT
kernels) and `.cache/sglang` (torch_compile_cache), and a HOME seeded with them was ready sooner: the kernels were
not compiled again. The stand-in writes a few small files under the same four directories (below them, names of
its own: nothing a real Triton or FlashInfer would ever load) and sleeps SGLANG_STANDIN_COMPILE_S (default 2 s)
times the fraction of its kernels that were missing or different. The files' names and bytes depend on the
configuration (attention backend, speculative settings, page size, tp, CUDA graphs, model), like content-addressed
Triton entries: another configuration's cache is a miss. The same cache directory variables as the real libraries
move them (TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE, TVM_FFI_CACHE_DIR, SGLANG_CACHE_DIR).

Like the real one, importing the parser already writes under HOME (at_import: Triton's driver helper, FlashInfer's
workspace), whoever imports it: run as root with the service's HOME, that is what left root-owned files there.
"""
from __future__ import annotations

import hashlib
import json
import os

from sglang_standin import __version__

TRITON_KERNELS = ("_fwd_kernel", "_fwd_kernel_stage2", "get_num_kv_splits_triton", "write_req_to_token_pool_triton")
TVM_KERNELS = ("activation", "kvcache", "fused_rope")
CONFIG_FIELDS = ("model_path", "attention_backend", "speculative_algorithm", "speculative_ddtree_budget",
                 "speculative_ddtree_topk_cap", "speculative_dflash_block_size", "speculative_num_draft_tokens",
                 "page_size", "tp_size", "ep_size", "disable_cuda_graph", "cuda_graph_max_bs", "dtype")


def config_hash(args) -> str:
    conf = {f: getattr(args, f, None) for f in CONFIG_FIELDS}
    conf["standin"] = __version__
    return hashlib.sha256(json.dumps(conf, sort_keys=True, default=str).encode()).hexdigest()


def roots(home: str) -> dict:
    env = os.environ.get
    return {
        "triton": env("TRITON_CACHE_DIR") or os.path.join(home, ".triton", "cache"),
        "flashinfer": os.path.join(env("FLASHINFER_WORKSPACE_BASE") or home, ".cache", "flashinfer"),
        "tvm": env("TVM_FFI_CACHE_DIR") or os.path.join(home, ".cache", "tvm-ffi"),
        "sglang": env("SGLANG_CACHE_DIR") or os.path.join(home, ".cache", "sglang"),
    }


def entries(args, home: str) -> list:
    """[(path, bytes)]: every file a cold start of this configuration writes."""
    h = config_hash(args)
    r = roots(home)
    out = []

    def blob(kind: str, name: str, size: int = 2048, config: str = h) -> bytes:
        head = json.dumps({"standin_kernel": name, "kind": kind, "config": config}, sort_keys=True).encode() + b"\n"
        seed = hashlib.sha256(head).digest()
        return head + (seed * (size // len(seed) + 1))[:size]

    for k in TRITON_KERNELS:
        d = os.path.join(r["triton"], hashlib.sha256(f"{k}:{h}".encode()).hexdigest()[:52].upper())
        out.append((os.path.join(d, f"{k}.json"), blob("triton-json", k, 256)))
        out.append((os.path.join(d, f"{k}.cubin"), blob("triton-cubin", k)))
    # FlashInfer's ops depend on its version and the GPU only (its path says so): the same for every configuration
    out.append((os.path.join(r["flashinfer"], "standin", "cached_ops", "norm", "norm.so"),
                blob("flashinfer", "norm", config="")))
    for k in TVM_KERNELS:
        name = f"standin_jit_{k}"
        out.append((os.path.join(r["tvm"], f"{name}_{h[:16]}", f"{name}.so"), blob("tvm-ffi", k)))
    out.append((os.path.join(r["sglang"], "torch_compile_cache", "standin", "rank_0_0", "backbone",
                             f"computation_graph_{h[:16]}.py"), blob("sglang", "backbone", 512)))
    return out


def _same(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read() == data
    except OSError:
        return False


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def import_time_entries(home: str) -> list:
    """[(path, bytes or None for a directory)]: what importing the parser writes under HOME before any server starts.
    Real SGLang 0.5.11 did so with no GPU visible (measured on an H200: the target preflight, run as root with the
    service's HOME, created `$HOME/.cache/flashinfer/0.6.8.post1/90a/` and `$HOME/.triton/cache/<hash>/cuda_utils...so`:
    FlashInfer's versioned workspace and Triton's compiled driver helper)."""
    r = roots(home)
    helper = hashlib.sha256(f"cuda_utils:{__version__}".encode()).hexdigest()[:52].upper()
    return [(os.path.join(r["flashinfer"], "standin", __version__, "workspace"), None),
            (os.path.join(r["triton"], helper, "cuda_utils.standin.so"),
             json.dumps({"standin_kernel": "cuda_utils", "kind": "triton-driver"}).encode() + b"\n")]


def at_import() -> None:
    """Write import_time_entries under HOME where missing, as the real import does (the stand-in parser's import
    calls it: the preflight, the schema extractor and the server alike); an unwritable HOME is left alone."""
    try:
        for path, data in import_time_entries(os.path.expanduser("~")):
            if data is None:
                os.makedirs(path, exist_ok=True)
            elif not _same(path, data):
                _write(path, data)
    except OSError:
        pass


def warm_up(args, compile_s: float, wait, log) -> bool:
    """Compile what the cache lacks: wait(seconds) sleeps (returns True when the server is told to stop meanwhile);
    the missing files are written after the simulated compile. Returns True when stopped."""
    home = os.path.expanduser("~")
    todo = [(p, b) for p, b in entries(args, home) if not _same(p, b)]
    total = len(entries(args, home))
    if not todo:
        log(f"stand-in JIT: all {total} kernels found in the compile cache under {home}")
        return False
    seconds = max(0.0, compile_s) * len(todo) / total
    log(f"stand-in JIT: {len(todo)} of {total} kernels not in the compile cache under {home}; compiling "
        f"({seconds:.1f} s)")
    if wait(seconds):
        return True
    try:
        for path, data in todo:
            _write(path, data)
    except OSError as exc:  # an unwritable HOME: served anyway, cold again next time (as real JIT caches behave)
        log(f"stand-in JIT: could not write the compile cache under {home}: {exc}")
    return False
