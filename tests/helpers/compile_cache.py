"""What the compile-cache tests share (tests/unit/compile_cache/): a server argv, a host's key facts, a fake venv and
a service home holding compile caches."""
from __future__ import annotations

import os
from pathlib import Path

from ansible.module_utils.compile_cache.key import kernel_flags, parallel_sizes

ROOT = Path(__file__).resolve().parents[2]
DIRS = [".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang"]
ARGV = ["--model-path", "/srv/models/Kimi-K2.6", "--host", "0.0.0.0", "--port", "30001", "--tp-size", "8",
        "--attention-backend", "triton", "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8",
        "--served-model-name", "kimi", "--log-level", "info", "--trust-remote-code"]


def facts(**over) -> dict:
    """An H200 host's key facts for ARGV, with `over` replacing some."""
    tp, ep = parallel_sizes(ARGV)
    base = {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "driver_version": "580.159.04",
            "cuda_version": "13.0.88", "sglang_version": "0.5.11", "patch_series_hash": "ab" * 32,
            "torch_version": "2.11.0+cu130", "venv_digest": "cd" * 32, "tp_size": tp, "ep_size": ep,
            "kernel_flags": kernel_flags(ARGV)}
    base.update(over)
    return base


def fake_venv(tmp_path: Path) -> Path:
    """A venv with sglang and torch dist-info (and an unrelated one) and its content digest file."""
    venv = tmp_path / "venv"
    for name, version in (("sglang", "0.5.11"), ("torch", "2.11.0+cu130"), ("six", "1.17.0")):
        d = venv / "lib" / "python3.12" / "site-packages" / f"{name}-{version}.dist-info"
        d.mkdir(parents=True)
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\nVersion: 9\n")
    (venv / ".sglang-venv-digest").write_text("cd" * 32 + "\n")
    return venv


def make_home(root: Path) -> Path:
    """A service home with caches under DIRS, a file outside them and a symlink inside one."""
    home = root / "home"
    files = {
        ".triton/cache/ABC/_fwd_kernel.cubin": b"\x7fELF" + b"k" * 3000,
        ".triton/cache/ABC/_fwd_kernel.json": b'{"name": "_fwd_kernel"}',
        ".cache/flashinfer/0.6.8.post1/90a/cached_ops/norm/norm.so": b"so" * 500,
        ".cache/flashinfer/0.6.8.post1/90a/cached_ops/tmp/norm.lock": b"",
        ".cache/tvm-ffi/k_1234/k.so": b"tvm",
        ".cache/huggingface/token": b"not a compile cache",
    }
    for rel, data in files.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (1700000000.25, 1700000000.25))
    (home / ".triton/cache/ABC/_fwd_kernel.cubin").chmod(0o755)
    (home / ".cache/tvm-ffi/link.so").symlink_to("/etc/passwd")
    return home
