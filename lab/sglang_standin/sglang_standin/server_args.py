"""Stand-in for `sglang.srt.server_args`: the CLI flags SGLang accepts (the subset this project renders, plus
their common neighbours), parsed with argparse exactly like the real server, so an unknown or malformed flag
exits 2 with argparse's message. `prepare_server_args(argv)` is the preflight entry point, as upstream.

The flag set is the union of upstream 0.5.23 (DFLASH: --speculative-draft-window-size) and the patched
0.5.11 DDTree build of the hand deployment (--speculative-dflash-draft-window-size, --speculative-ddtree-*).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Optional

ATTENTION_BACKENDS = [
    "triton", "flashinfer", "fa3", "fa4", "torch_native", "flashmla", "cutlass_mla", "trtllm_mla", "trtllm_mha",
    "aiter", "wave", "intel_amx", "ascend", "dual_chunk_flash_attn",
]
GRAMMAR_BACKENDS = ["xgrammar", "outlines", "llguidance", "none"]
TREE_VERIFY_PAGED_BACKENDS = ("flashinfer", "fa3", "triton")


@dataclasses.dataclass
class ServerArgs:
    model_path: str
    tokenizer_path: Optional[str] = None
    served_model_name: Optional[str] = None
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: Optional[str] = None
    trust_remote_code: bool = False
    dtype: str = "auto"
    quantization: Optional[str] = None
    kv_cache_dtype: str = "auto"
    context_length: Optional[int] = None
    mem_fraction_static: Optional[float] = None
    max_running_requests: Optional[int] = None
    max_total_tokens: Optional[int] = None
    chunked_prefill_size: Optional[int] = None
    page_size: int = 1
    num_continuous_decode_steps: int = 1
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: Optional[str] = None
    attention_backend: Optional[str] = None
    grammar_backend: Optional[str] = None
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: Optional[int] = None
    enable_dp_attention: bool = False
    enable_metrics: bool = False
    log_level: str = "info"
    random_seed: Optional[int] = None
    watchdog_timeout: float = 300
    moe_a2a_backend: str = "none"
    speculative_algorithm: Optional[str] = None
    speculative_draft_model_path: Optional[str] = None
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_draft_window_size: Optional[int] = None
    speculative_dflash_draft_window_size: Optional[int] = None
    speculative_ddtree_budget: Optional[int] = None
    speculative_ddtree_topk_cap: Optional[int] = None
    speculative_ddtree_debug_metrics: bool = False

    def __post_init__(self):
        """Semantic checks SGLang does after parsing (ServerArgs.__post_init__ / check_server_args)."""
        if self.mem_fraction_static is not None and not 0 < self.mem_fraction_static < 1:
            raise ValueError(f"mem_fraction_static must be in (0, 1), got {self.mem_fraction_static}")
        if (self.tp_size * self.pp_size) % self.nnodes != 0:
            raise ValueError("tp_size * pp_size must be divisible by the number of nodes")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} must be smaller than nnodes {self.nnodes}")
        algo = (self.speculative_algorithm or "NONE").upper()
        if algo == "NEXTN":
            self.speculative_algorithm = algo = "EAGLE"
        if algo in ("DFLASH", "DDTREE"):
            if not self.speculative_draft_model_path:
                raise ValueError(f"{algo} speculative decoding requires --speculative-draft-model-path")
            if self.pp_size != 1:
                raise ValueError(f"{algo} speculative decoding requires pp_size == 1")
            block = self.speculative_num_draft_tokens
            window = self.speculative_draft_window_size or self.speculative_dflash_draft_window_size
            if block is not None and window is not None and window < block:
                raise ValueError(f"draft window size ({window}) must be >= the DFlash block size ({block})")
        if algo == "DDTREE":
            if (self.attention_backend or "triton") != "triton":
                raise ValueError("DDTREE requires --attention-backend triton")
            if self.page_size != 1:
                raise ValueError("DDTREE requires --page-size 1")
            if (self.speculative_ddtree_topk_cap is not None and self.speculative_ddtree_budget is not None
                    and self.speculative_ddtree_topk_cap > self.speculative_ddtree_budget):
                raise ValueError("--speculative-ddtree-topk-cap must not exceed --speculative-ddtree-budget")
        if (self.speculative_eagle_topk or 1) > 1 and self.page_size > 1:
            if (self.attention_backend or "flashinfer") not in TREE_VERIFY_PAGED_BACKENDS:
                raise ValueError("tree verification (topk > 1) with page_size > 1 needs flashinfer, fa3 or triton")
        if self.model_path and os.environ.get("SGLANG_STANDIN_REQUIRE_MODEL_PATH") == "1":
            if not os.path.exists(self.model_path):
                raise ValueError(f"model path {self.model_path} does not exist")

    @property
    def speculative_enabled(self) -> bool:
        return (self.speculative_algorithm or "NONE").upper() not in ("NONE", "")

    @property
    def model_id(self) -> str:
        return self.served_model_name or self.model_path

    def redacted(self) -> dict:
        return dataclasses.asdict(self)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launch_server.py")
    a = parser.add_argument
    a("--model-path", "--model", dest="model_path", type=str, required=True,
      help="The path of the model weights (local folder or Hugging Face repo id).")
    a("--tokenizer-path", type=str)
    a("--served-model-name", type=str)
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--api-key", type=str)
    a("--trust-remote-code", action="store_true")
    a("--dtype", type=str, default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    a("--quantization", type=str)
    a("--kv-cache-dtype", type=str, default="auto")
    a("--context-length", type=int)
    a("--mem-fraction-static", type=float)
    a("--max-running-requests", type=int)
    a("--max-total-tokens", type=int)
    a("--chunked-prefill-size", type=int)
    a("--page-size", type=int, default=1)
    a("--num-continuous-decode-steps", type=int, default=1)
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    a("--nnodes", type=int, default=1)
    a("--node-rank", type=int, default=0)
    a("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", type=str)
    a("--attention-backend", type=str, choices=ATTENTION_BACKENDS)
    a("--grammar-backend", type=str, choices=GRAMMAR_BACKENDS)
    a("--disable-cuda-graph", action="store_true")
    a("--cuda-graph-max-bs", type=int)
    a("--enable-dp-attention", action="store_true")
    a("--enable-metrics", action="store_true")
    a("--log-level", type=str, default="info")
    a("--random-seed", type=int)
    a("--watchdog-timeout", type=float, default=300)
    a("--moe-a2a-backend", type=str, default="none", choices=["none", "deepep", "mooncake", "ascend_fuseep"])
    a("--speculative-algorithm", type=str)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", type=str)
    a("--speculative-num-steps", type=int)
    a("--speculative-eagle-topk", type=int)
    a("--speculative-num-draft-tokens", "--speculative-dflash-block-size", dest="speculative_num_draft_tokens",
      type=int)
    a("--speculative-draft-window-size", type=int)
    # Patched 0.5.11 DDTree build only (the hand deployment's flags).
    a("--speculative-dflash-draft-window-size", type=int)
    a("--speculative-ddtree-budget", type=int)
    a("--speculative-ddtree-topk-cap", type=int)
    a("--speculative-ddtree-debug-metrics", action="store_true")
    return parser


def prepare_server_args(argv: list[str]) -> ServerArgs:
    """Parse argv like SGLang: argparse errors exit 2, semantic errors raise ValueError."""
    ns = make_parser().parse_args(argv)
    return ServerArgs(**vars(ns))
