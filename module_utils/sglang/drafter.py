"""The DFlash drafter's own block size against the block size the server would run, checked before any restart.

Real SGLang 0.5.11 runs DFLASH (and the operator's DDTREE, which drafts DFlash blocks with the same drafter) with
`speculative_num_draft_tokens` as its block size: `--speculative-dflash-block-size` sets it (and must equal
`--speculative-num-draft-tokens` when both are given); with neither given the server reads the drafter's config and
takes its block size, else 16 (sglang/srt/server_args.py ServerArgs._handle_speculative_decoding). The drafter's
block size is `dflash_config.block_size`, else a top-level `block_size`, in its config.json
(sglang/srt/speculative/dflash_utils.py parse_dflash_draft_config). A mismatch is only a log warning there
(sglang/srt/speculative/dflash_worker.py DFlashWorker.__init__: "DFLASH block size mismatch"): the server runs a
drafter with a block it was not made for. Here it is refused before the unit changes.

    expectation(argv, schema)        -> {} (no DFlash drafter) or {algorithm, draft_model_path, block_size, source}
    config_block_size(config)        -> (block size, the key it came from) or (None, None)
    check(path, block_size, source)  -> {config, drafter_block_size, drafter_key, block_size, source}; DrafterError

`expectation` runs on the controller (the rendered argv and the version's flag schema); `check` on the host
(library/sglang_drafter_check.py reads the drafter's config.json where the server will read it).
"""
from __future__ import annotations

import json
import os

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.sglang.speculative import SPEC_FAMILIES, algorithm, flag_candidates

CONFIG_FILE = "config.json"
DRAFTER_FAMILY = "dflash"  # algorithms whose flag family includes it draft DFlash blocks (DFLASH, DDTREE)
SERVER_RULE = "sglang/srt/server_args.py ServerArgs._handle_speculative_decoding"
CONFIG_RULE = "sglang/srt/speculative/dflash_utils.py parse_dflash_draft_config"


class DrafterError(EvidenceError, ValueError):
    default_kind = "drafter"


def drafts_dflash_blocks(algo: str) -> bool:
    return DRAFTER_FAMILY in SPEC_FAMILIES.get(str(algo or "").upper(), ())


def _argv_values(argv, schema) -> dict:
    """{dest: value} of an argv as the version's parser reads it (aliases share a dest; bare switches are True)."""
    out, words, i = {}, [str(w) for w in argv or []], 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        hit = schema.lookup(name) if name.startswith("--") else None
        i += 1
        if hit is None:
            continue
        option = hit[1]
        if option.get("nargs") == 0:
            out[option.get("dest", hit[0])] = True
            continue
        if not eq:
            value = words[i] if i < len(words) else ""
            i += 1
        out[option.get("dest", hit[0])] = value
    return out


def _flags_of(schema, algo: str, key: str) -> list:
    """The version's flags (with their options) a structured key may name, in the order the argv filter asks."""
    found = []
    for flag in flag_candidates(algo, key):
        hit = schema.lookup(flag)
        if hit is not None and all(hit[1] is not f[1] for f in found):
            found.append((flag, hit[1]))
    return found


def expectation(argv, schema) -> dict:
    """What the server would run, read from its argv and its version's flag schema: the drafter's directory and the
    block size with its source. {} when the argv's algorithm drafts no DFlash blocks."""
    values = _argv_values(argv, schema)
    algo = algorithm({"algorithm": values.get("speculative_algorithm")})
    if not drafts_dflash_blocks(algo):
        return {}
    path_flags = _flags_of(schema, algo, "draft_model_path")
    path = next((values[o.get("dest")] for _, o in path_flags if values.get(o.get("dest")) not in (None, "")), "")
    sizing = _flags_of(schema, algo, "block_size") + _flags_of(schema, algo, "num_draft_tokens")
    out = {"algorithm": algo, "draft_model_path": str(path)}
    for flag, option in sizing:
        if values.get(option.get("dest")) not in (None, ""):
            return dict(out, block_size=int(values[option["dest"]]), source=f"{flag} {values[option['dest']]} "
                        "(the server's argv)")
    for flag, option in sizing:
        if option.get("default") is not None:
            return dict(out, block_size=int(option["default"]), source=f"SGLang {schema.version}'s default of {flag} "
                        f"(its flag schema), the profile sets none")
    names = " nor ".join(f for f, _ in sizing) or "no block-size flag"
    return dict(out, block_size=None, source=f"the profile sets neither {names} and SGLang {schema.version}'s flag "
                f"schema defaults them to none, so the server takes the drafter's own block size ({SERVER_RULE})")


def config_block_size(config):
    """(block size, key) as SGLang reads a DFlash drafter's config ({CONFIG_RULE}); (None, None) when it has none."""
    if not isinstance(config, dict):
        return None, None
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    if nested.get("block_size") is not None:
        raw, key = nested["block_size"], "dflash_config.block_size"
    elif config.get("block_size") is not None:
        raw, key = config["block_size"], "block_size"
    else:
        return None, None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if value < 1 or isinstance(raw, bool):
        raise DrafterError(f"the drafter's {key} is {raw!r}: SGLang requires a positive integer ({CONFIG_RULE})",
                           kind="drafter_config", key=key, value=repr(raw))
    return value, key


def read_config(path: str) -> tuple:
    """(config.json's path, its parsed content) of the drafter directory; refused naming the path."""
    cfg_path = os.path.join(str(path), CONFIG_FILE)
    try:
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        raise DrafterError(f"the drafter's config {cfg_path} is missing: the speculative profile loads a drafter "
                           "that is not there (run playbooks/models.yml first). Nothing was changed.",
                           kind="drafter_missing", config=cfg_path) from None
    except (OSError, ValueError) as exc:
        raise DrafterError(f"the drafter's config {cfg_path} cannot be read as JSON ({exc}). Nothing was changed.",
                           kind="drafter_unreadable", config=cfg_path) from None
    if not isinstance(config, dict):
        raise DrafterError(f"the drafter's config {cfg_path} is not a JSON object. Nothing was changed.",
                           kind="drafter_unreadable", config=cfg_path)
    return cfg_path, config


def check(path: str, block_size=None, source: str = "") -> dict:
    """The drafter at `path` has the block size the server would run (`block_size` from `source`; None: the server
    takes the drafter's own). Refused (DrafterError) naming both numbers and both sources, or the unreadable file."""
    if not str(path or "").startswith("/"):
        raise DrafterError(f"the drafter path {path!r} is not an absolute directory on the host: its config cannot "
                           "be checked. Nothing was changed.", kind="drafter_missing", config=str(path))
    cfg_path, config = read_config(path)
    drafter, key = config_block_size(config)
    evidence = {"config": cfg_path, "drafter_block_size": drafter, "drafter_key": key, "source": source}
    if drafter is None:
        raise DrafterError(f"the drafter's config {cfg_path} carries no block size (dflash_config.block_size or "
                           f"block_size, read by {CONFIG_RULE}): the server would run it with "
                           f"{block_size if block_size is not None else 16} ({source or 'SGLang fallback 16'}) "
                           "unchecked. Nothing was changed.", kind="drafter_config", **evidence)
    if block_size is not None and int(block_size) != drafter:
        raise DrafterError(f"block size mismatch: the server would run block size {int(block_size)} ({source}) but "
                           f"the drafter at {path} is made for {drafter} ({cfg_path}: {key}). SGLang only logs "
                           "this and drafts wrong-sized blocks; set the profile's block_size to the drafter's or load "
                           "the drafter made for it. Nothing was changed.",
                           kind="drafter_mismatch", block_size=int(block_size), **evidence)
    return dict(evidence, block_size=drafter if block_size is None else int(block_size))
