# -*- coding: utf-8 -*-
"""A compile-cache bundle's paths: the default cache dirs, the manifest's name, which relative paths are safe, which
cache dir a path falls under, symlinks on the way into the home, and a file's sha256.

Real SGLang JIT-compiles kernels into its HOME on a cold start (measured on an H200 with 0.5.11, recorded in
tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json): `.triton/cache` (Triton), `.cache/flashinfer`
(FlashInfer), `.cache/tvm-ffi` (sgl-kernel's JIT kernels), `.cache/sglang` (SGLang's torch_compile_cache). A host
whose HOME is seeded with them skips that compilation. The service role spreads them: the first host of a key that
becomes ready packs them (pack.py), the controller keeps the bundle, the other hosts of that key install it before
their service starts (install.py). Every path in a bundle is one of these dirs relative to the HOME.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import os

from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.record import RECORD_NAME

MANIFEST_NAME = "manifest.json"
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
# what real SGLang 0.5.11 wrote under a fresh HOME on the H200 (the recording), plus the caches its source names
# that a bf16 135M model did not need there (DeepGEMM's FP8 JIT, the CUDA driver's PTX JIT cache)
DEFAULT_DIRS = (".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang", ".cache/deep_gemm",
                ".nv/ComputeCache")


def safe_rel(path: str) -> bool:
    """A relative path with no empty, `.` or `..` part and no NUL or backslash."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path or "\\" in path:
        return False
    parts = path.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def check_dirs(dirs) -> list:
    """The cache directories, validated (relative, safe, none inside another, not the manifest's name) and sorted."""
    out = sorted({str(d).rstrip("/") for d in (dirs or [])})
    for d in out:
        if not safe_rel(d) or d == MANIFEST_NAME or d == RECORD_NAME:
            raise CompileCacheError(f"cache dir {d!r} must be a plain path relative to the home")
    for a in out:
        for b in out:
            if a != b and b.startswith(a + "/"):
                raise CompileCacheError(f"cache dirs {a!r} and {b!r} overlap")
    return out


def containing_dir(path: str, dirs) -> str:
    """The dir of dirs that path is or lies under; "" when none."""
    for d in dirs:
        if path == d or path.startswith(d + "/"):
            return d
    return ""


def symlink_on_path(home: str, rel: str) -> str:
    """"" when every existing component of home/rel below home is a real directory (the last one may be anything
    but a symlink); else the first offending path. The home belongs to the service user: root must never follow a
    link planted there."""
    cur = home
    for part in rel.split("/"):
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            return cur
        if not os.path.lexists(cur):
            return ""
    return ""


def file_sha256(path: str, bufsize: int = 1 << 20) -> str:
    """The sha256 of the file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(bufsize), b""):
            h.update(block)
    return h.hexdigest()
