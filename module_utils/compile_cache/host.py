# -*- coding: utf-8 -*-
"""The compile-cache key's facts as a host has them (read-only): its GPUs (through gpu/nvidia_smi.py), its CUDA
toolkit, the venv's SGLang and torch versions and content digest, and tp/ep and the kernel flags of the server argv.
"""
from __future__ import absolute_import, division, print_function

import glob
import json
import os
import re

from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.key import kernel_flags, parallel_sizes
from ansible.module_utils.gpu.nvidia_smi import (BINARY, NvidiaSmiError, NvidiaSmiParseError, gpu_identity,
                                                   query_gpus)
from ansible.module_utils.gpu.cuda_toolkit import cuda_version


def _canon_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_versions(venv: str, names=("sglang", "torch")) -> dict:
    """{name: version} of the distributions installed in the venv, read from their dist-info METADATA (no
    interpreter started); "" for a name that is not installed."""
    want = {_canon_dist(n): n for n in names}
    found = {n: "" for n in names}
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "*.dist-info", "METADATA")
    for meta in sorted(glob.glob(pattern)):
        name = version = None
        try:
            with open(meta, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if not line.strip():
                        break
                    if line.startswith("Name:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("Version:"):
                        version = line.split(":", 1)[1].strip()
        except OSError:
            continue
        if name and version and _canon_dist(name) in want:
            found[want[_canon_dist(name)]] = version
    return found


def gpu_facts(nvidia_smi: str = BINARY, runner=None, timeout: float = 60) -> dict:
    """{gpu_name, compute_capability, driver_version} from nvidia-smi (gpu/nvidia_smi.py: query_gpus, gpu_identity;
    several GPUs of different kinds: their distinct values joined with "+", sorted). A host without nvidia-smi (the
    lab) has "" for all three; an nvidia-smi that is there but fails, answers in another format or lists no GPU is
    a CompileCacheError (a key must not pretend the GPU is unknown). runner: subprocess.run or a stand-in."""
    try:
        gpus = query_gpus(nvidia_smi, runner, timeout)
    except (NvidiaSmiError, NvidiaSmiParseError) as exc:
        raise CompileCacheError(str(exc), evidence=exc.evidence)
    if gpus is None:
        return gpu_identity([])
    if not gpus:
        raise CompileCacheError(f"{nvidia_smi} listed no GPU")
    return gpu_identity(gpus)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def host_facts(argv, venv_path: str, venv_digest_path: str, fact_path: str = "", cuda_home: str = "",
               nvidia_smi: str = BINARY, sglang_dist: str = "sglang", runner=None) -> dict:
    """Every KEY_FIELDS fact as this host has it: the GPUs (nvidia-smi), the CUDA toolkit (cuda_home), SGLang's
    version and patch-series hash from the venv role's provenance fact (SGLang's version from the venv's dist-info
    when the fact has none), torch's from the venv's dist-info, the venv's content digest, tp/ep and the kernel
    flags from the server argv."""
    prov = _read_json(fact_path) if fact_path else None
    prov = prov if isinstance(prov, dict) else {}
    dists = dist_versions(venv_path, (sglang_dist, "torch"))
    tp, ep = parallel_sizes(argv)
    facts = dict(gpu_facts(nvidia_smi, runner))
    facts.update({
        "cuda_version": cuda_version(cuda_home),
        "sglang_version": str(prov.get("sglang_version") or dists[sglang_dist]),
        "patch_series_hash": str(prov.get("patch_series_hash") or ""),
        "torch_version": dists["torch"],
        "venv_digest": _read_text(venv_digest_path),
        "tp_size": tp, "ep_size": ep,
        "kernel_flags": kernel_flags(argv),
    })
    return facts
