"""The one home of how speculative-decoding settings are named: structured keys, SGLang flags, and the short summary
{algorithm, budget, topk, block_size, cuda_graph} that the sweep records and the report prints.

- A structured key (`budget`, `topk_cap`, `eagle_topk`, `speculative_block_size` ...) names the flag
  `--speculative-<key>` or, under the algorithm's family, `--speculative-<family>-<key>` (flag_candidates); which of
  those a version has is the version's flag schema's answer (filter_plugins/sglang.py asks it).
- The summary reads the same table both ways: from the structured config the sweep applies (summary_from_config,
  the `sglang_spec_summary` filter) and from a running server's argv (summary_from_argv, the report's fallback when
  a plain bench has no sweep outcome).
"""
from __future__ import annotations

# Speculative keys are looked up as --speculative-<key>, then under the algorithm family's infix.
SPEC_FAMILIES = {"DFLASH": ("dflash",), "DDTREE": ("ddtree", "dflash"), "EAGLE": ("eagle",), "EAGLE3": ("eagle",),
                 "NEXTN": ("eagle",), "STANDALONE": ("eagle",), "NGRAM": ("ngram",)}
FAMILIES = tuple(sorted({f for fams in SPEC_FAMILIES.values() for f in fams}))

# summary key -> the canonical structured keys that set it, the first present wins
SUMMARY_SOURCES = {
    "budget": ("budget",),
    "topk": ("topk_cap", "topk"),
    "block_size": ("block_size", "num_draft_tokens"),
}
SUMMARY_KEYS = ("algorithm",) + tuple(SUMMARY_SOURCES) + ("cuda_graph",)


def algorithm(speculative) -> str:
    """The algorithm of a structured speculative config, upper case; NONE when unset."""
    return str((speculative or {}).get("algorithm") or "NONE").upper()


def flag_candidates(algo: str, key: str) -> list:
    """Flags a structured key may name, in the order a schema is asked: plain, then each family's spelling."""
    key = key[len("speculative_"):] if key.startswith("speculative_") else key
    name = key.replace("_", "-")
    return [f"--speculative-{name}"] + [f"--speculative-{fam}-{name}" for fam in SPEC_FAMILIES.get(algo, ())]


def canonical_key(name: str) -> str:
    """`--speculative-ddtree-topk-cap`, `speculative_eagle_topk`, `topk_cap` -> the key without prefix or family:
    `topk_cap`, `topk`, `topk_cap`."""
    key = name[2:] if name.startswith("--") else name
    key = key.replace("-", "_")
    key = key[len("speculative_"):] if key.startswith("speculative_") else key
    for fam in FAMILIES:
        if key.startswith(fam + "_"):
            return key[len(fam) + 1:]
    return key


def _number(value):
    text = str(value)
    return int(text) if text.isdigit() else value


def _summary(values: dict, algo: str, cuda_graph: bool) -> dict:
    out = {"algorithm": algo}
    for short, sources in SUMMARY_SOURCES.items():
        found = next((values[k] for k in sources if values.get(k) not in (None, "")), None)
        out[short] = None if algo == "NONE" else found
    out["cuda_graph"] = cuda_graph
    return out


def summary_from_config(speculative, server=None) -> dict:
    """The summary of what a structured config runs: autoregressive (NONE) reports no budget/topk/block."""
    spec = speculative or {}
    values = {canonical_key(k): _number(v) for k, v in spec.items()}
    disabled = (server or {}).get("disable_cuda_graph", False)
    disabled = disabled is True or str(disabled).lower() in ("true", "yes", "1")
    return _summary(values, algorithm(spec), not disabled)


def summary_from_argv(flags) -> dict:
    """The summary read back from a server's argv (`--flag value` or `--flag=value`); {} for no argv."""
    if not flags:
        return {}
    flags = [str(f) for f in flags]
    values = {}
    for i, arg in enumerate(flags):
        name, eq, value = arg.partition("=")
        if not name.startswith("--speculative-"):
            continue
        value = value if eq else (flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else "")
        values[canonical_key(name)] = _number(value)
    algo = str(values.pop("algorithm", "") or "NONE").upper()
    return _summary(values, algo, "--disable-cuda-graph" not in flags)
