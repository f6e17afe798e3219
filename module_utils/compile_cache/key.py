# -*- coding: utf-8 -*-
"""The compile-cache key: everything that invalidates the JIT caches, canonical JSON -> sha256 (stdlib only; runs
on the targets and the controller).

The key (cache_key) is the GPU model and compute capability, driver, CUDA, SGLang version and patch-series hash,
torch version, the venv's content digest, tp and ep sizes, and the server argv minus the few flags that cannot
change kernels (NON_KERNEL_FLAGS). first_difference names the first field two key documents disagree on.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import json

from ansible.module_utils.compile_cache.error import CompileCacheError

FORMAT = 1
KEY_FIELDS = ("gpu_name", "compute_capability", "driver_version", "cuda_version", "sglang_version",
              "patch_series_hash", "torch_version", "venv_digest", "tp_size", "ep_size", "kernel_flags")
INT_FIELDS = ("tp_size", "ep_size")
# Flags that cannot change which kernels are compiled or how: where the server listens, who may call it, how it
# logs and names itself, its chat/tool/reasoning text formats, its place in a multi-node group. Small and
# conservative on purpose: a flag missing here only costs a cache miss, a wrong entry would install kernels built
# for another configuration. Every flag named here exists in every committed schema (schemas/sglang/*.json;
# tests/unit/compile_cache/test_cache_key.py checks it).
NON_KERNEL_FLAGS = frozenset((
    "--host", "--port", "--api-key", "--admin-api-key", "--served-model-name",
    "--log-level", "--log-level-http", "--log-requests", "--log-requests-level", "--decode-log-interval",
    "--enable-metrics", "--watchdog-timeout",
    "--chat-template", "--tool-call-parser", "--reasoning-parser",
    # a multi-node group's ranks run the same shards' shapes: where rank 0 is and which rank this is are networking
    "--node-rank", "--dist-init-addr", "--nccl-init-addr",
))
TP_FLAGS = ("--tensor-parallel-size", "--tp-size")
EP_FLAGS = ("--expert-parallel-size", "--ep-size", "--ep")


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def split_argv(argv) -> list:
    """[[flag, [values...]], ...] in argv order: a token starting with `--` opens a flag (`--f=v` carries its value),
    the tokens up to the next such token are its values. A token before any flag is kept as ["", [token]]."""
    out = []
    for tok in [str(t) for t in (argv or [])]:
        if tok.startswith("--"):
            name, sep, value = tok.partition("=")
            out.append([name, [value] if sep else []])
        elif out:
            out[-1][1].append(tok)
        else:
            out.append(["", [tok]])
    return out


def kernel_flags(argv) -> list:
    """The argv's flags that may change kernels, canonical: NON_KERNEL_FLAGS and the tp/ep flags (their own key
    fields) dropped, sorted by flag name (a repeated flag keeps its occurrences in argv order)."""
    pairs = [p for p in split_argv(argv) if p[0] not in NON_KERNEL_FLAGS and p[0] not in TP_FLAGS + EP_FLAGS]
    return [[name, values] for name, values in sorted(pairs, key=lambda p: p[0])]


def parallel_sizes(argv) -> tuple:
    """(tp_size, ep_size) from the argv (the last occurrence wins, like argparse); 1 when absent."""
    tp = ep = 1
    for name, values in split_argv(argv):
        if name in TP_FLAGS and values:
            tp = int(values[-1])
        elif name in EP_FLAGS and values:
            ep = int(values[-1])
    return tp, ep


def key_doc(facts: dict) -> dict:
    """The normalised key document: every KEY_FIELDS entry (strings stripped, sizes int, kernel_flags canonical)
    plus the format. A missing or unknown field is a CompileCacheError (a key must never be silently partial)."""
    facts = dict(facts or {})
    missing = [f for f in KEY_FIELDS if f not in facts]
    unknown = sorted(set(facts) - set(KEY_FIELDS) - {"format"})
    if missing or unknown:
        raise CompileCacheError(f"cache key facts: missing {missing}, unknown {unknown}")
    doc = {"format": FORMAT}
    for f in KEY_FIELDS:
        v = facts[f]
        if f in INT_FIELDS:
            try:
                doc[f] = int(v)
            except (TypeError, ValueError):
                raise CompileCacheError(f"cache key fact {f}={v!r} is not an integer")
        elif f == "kernel_flags":
            if not isinstance(v, (list, tuple)) or not all(
                    isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[1], (list, tuple)) for p in v):
                raise CompileCacheError("cache key fact kernel_flags must be [[flag, [values]], ...] (kernel_flags())")
            doc[f] = [[str(p[0]), [str(x) for x in p[1]]] for p in sorted(v, key=lambda p: str(p[0]))]
        else:
            doc[f] = "" if v is None else str(v).strip()
    return doc


def cache_key(facts: dict) -> tuple:
    """(hex, doc): sha256 of the canonical JSON of key_doc(facts), and that document."""
    doc = key_doc(facts)
    return hashlib.sha256(canonical(doc)).hexdigest(), doc


def first_difference(have: dict, bundle: dict):
    """(field, have value, bundle value) of the first key field (format first, then KEY_FIELDS order) that differs,
    or None when the documents agree on every field."""
    have, bundle = have or {}, bundle if isinstance(bundle, dict) else {}
    for f in ("format",) + KEY_FIELDS:
        if have.get(f) != bundle.get(f):
            return f, have.get(f), bundle.get(f)
    return None
