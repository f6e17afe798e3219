"""Stand-in for `sglang.srt.server_args`: the CLI of the SGLang version it emulates, built from that version's flag
schema (schema.json, extracted from the real parser: schemas/sglang/ at the repo root), parsed with argparse like the
real server, so an unknown or malformed flag exits 2 with argparse's message. `prepare_server_args(argv)` is the
preflight entry point, as upstream; `make_parser()` is what the schema extractor reads back.

Semantic checks (`ServerArgs.__post_init__`) follow the emulated version's own (0.5.11's DFLASH checks and its
context-length check, copied from its source); flags that argparse accepts and the real validation accepts too
(mem_fraction_static 1.5, tp 1 with nnodes 2) are accepted here as well: the controller's static rules refuse those.

A patch series can extend the parser the way the operator's DDTree series extends the real one: when the module
`sglang_standin.server_args_patch` exists (the lab patch series adds it), its `add_args(parser)` and `check(args)`
run after the schema's flags and checks.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from sglang_standin import jit_cache

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
SGLANG_VERSION = SCHEMA["sglang_version"]
# argparse dests that the real ServerArgs.from_cli_args renames (0.5.11: tensor_parallel_size -> tp_size, ...).
FIELD_OF_DEST = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                 "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size",
                 "attention_context_parallel_size": "attn_cp_size", "moe_data_parallel_size": "moe_dp_size"}

# Importing the real parser writes JIT caches under HOME (Triton's driver helper, FlashInfer's workspace): so does this.
jit_cache.at_import()

try:  # added by a patch series (lab: roles/venv/files/patches/lab), absent in a plain install
    from sglang_standin import server_args_patch as _patch
except ImportError:
    _patch = None


def _human_int(text: str) -> int:
    text = str(text).strip().lower()
    for suffix, mult in (("k", 10 ** 3), ("m", 10 ** 6), ("g", 10 ** 9)):
        if text.endswith(suffix):
            return int(float(text[:-1]) * mult)
    return int(text)


TYPES = {"int": int, "float": float, "str": str, "json": json.loads, "human_readable_int": _human_int,
         "nullable_str": lambda s: None if str(s).lower() in ("none", "null", "") else s}


def _add(parser: argparse.ArgumentParser, opt: dict) -> None:
    flags = [f for f in opt["flags"] if f.startswith("-")]
    kw = {"dest": opt["dest"], "default": opt.get("default"), "help": opt.get("help") or None}
    action, nargs = opt.get("action") or "store", opt.get("nargs")
    if action == "BooleanOptionalAction":
        kw["action"] = argparse.BooleanOptionalAction
        flags = [f for f in flags if not f.startswith("--no-")]
    elif action in ("store_true", "store_false", "count"):
        kw["action"] = action
    elif nargs == 0:  # custom flag-only actions (DeprecatedStoreTrueAction, DeprecatedAction without a value)
        kw["action"] = "store_true"
    else:
        if action == "append":
            kw["action"] = "append"
        if nargs is not None:
            kw["nargs"] = nargs
        kw["type"] = TYPES.get(opt.get("type") or "str", str)
        if opt.get("choices"):
            kw["choices"] = opt["choices"]
        if opt.get("required"):
            kw["required"] = True
    parser.add_argument(*flags, **kw)


def make_parser(schema: dict | None = None) -> argparse.ArgumentParser:
    """The emulated version's parser (or that of another schema: the conformance tests hold the parser built from
    each committed schema to that version's recorded verdicts)."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    for opt in sorted((schema or SCHEMA)["options"].values(), key=lambda o: o.get("order", 0)):
        _add(parser, opt)
    if _patch is not None and schema is None:
        _patch.add_args(parser)
    return parser


class ServerArgs:
    """The parsed flags as attributes (named like the real ServerArgs fields), then the version's checks."""

    def __init__(self, **values):
        for dest, value in values.items():
            setattr(self, FIELD_OF_DEST.get(dest, dest), value)
        self.__post_init__()

    def __getattr__(self, name):  # a flag of another version or of an absent patch: unset, like a default
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def __repr__(self):
        return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items())) + ")"

    def __post_init__(self):
        if (self.dp_size or 1) == 1:  # 0.5.11 _handle_data_parallelism, which runs before the speculative checks
            self.enable_dp_attention = False
            self.enable_dp_lm_head = False
        algo = (self.speculative_algorithm or "").upper()
        if algo == "NEXTN":
            self.speculative_algorithm = algo = "EAGLE"
        if algo == "DFLASH" or (_patch is not None and algo in getattr(_patch, "DFLASH_FAMILY", ())):
            self._check_dflash(algo)
        self._check_context_length()
        if _patch is not None:
            _patch.check(self)

    # 0.5.11 sglang/srt/server_args.py _handle_speculative_decoding, DFLASH branch (messages copied)
    def _check_dflash(self, algo: str) -> None:
        if self.enable_dp_attention:
            raise ValueError(f"Currently {algo} speculative decoding does not support dp attention.")
        if (self.pp_size or 1) != 1:
            raise ValueError(f"Currently {algo} speculative decoding only supports pp_size == 1.")
        if self.speculative_draft_model_path is None:
            raise ValueError(f"{algo} speculative decoding requires setting --speculative-draft-model-path.")
        block = self.speculative_dflash_block_size
        if block is not None:
            if int(block) <= 0:
                raise ValueError(f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}.")
            if self.speculative_num_draft_tokens is not None and int(self.speculative_num_draft_tokens) != int(block):
                raise ValueError(
                    "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
                    "For DFLASH they must match. "
                    f"speculative_num_draft_tokens={self.speculative_num_draft_tokens}, "
                    f"speculative_dflash_block_size={block}.")
            self.speculative_num_draft_tokens = int(block)
        window = self.speculative_dflash_draft_window_size or self.speculative_draft_window_size
        if window is not None:
            if int(window) <= 0:
                raise ValueError(f"DFLASH requires --speculative-dflash-draft-window-size to be positive, got {window}.")
            draft_tokens = int(self.speculative_num_draft_tokens or 16)
            if int(window) < draft_tokens:
                raise ValueError(
                    "DFLASH --speculative-dflash-draft-window-size must be >= --speculative-num-draft-tokens "
                    f"(block_size). window_size={window}, block_size={draft_tokens}.")
        if self.max_running_requests is None:
            self.max_running_requests = 48

    # 0.5.11 sglang/srt/configs/model_config.py: a context length above the model's is refused
    def _check_context_length(self) -> None:
        if not self.context_length or not self.model_path:
            return
        try:
            config = json.loads((Path(self.model_path) / "config.json").read_text())
        except (OSError, ValueError):
            return
        derived = config.get("max_position_embeddings")
        if derived and int(self.context_length) > int(derived) and \
                os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "") not in ("1", "true"):
            raise ValueError(
                f"Warning: User-specified context_length ({self.context_length}) is greater than the derived "
                f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the "
                "derived context_length may differ from max_position_embeddings in the model's config. To allow "
                "overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")

    @property
    def speculative_enabled(self) -> bool:
        return (self.speculative_algorithm or "NONE").upper() not in ("NONE", "")

    @property
    def model_id(self) -> str:
        return self.served_model_name or self.model_path

    def redacted(self) -> dict:
        return dict(vars(self))

    def check_server_args(self) -> None:
        """0.5.11 ServerArgs.check_server_args: the parallel-size assertion the engine makes before loading."""
        nnodes = self.nnodes or 1
        assert (self.tp_size or 1) * (self.pp_size or 1) % nnodes == 0, \
            "tp_size must be divisible by number of nodes"


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse argv like SGLang: argparse errors exit 2, semantic errors raise ValueError."""
    ns = make_parser().parse_args(argv)
    return ServerArgs(**vars(ns))
