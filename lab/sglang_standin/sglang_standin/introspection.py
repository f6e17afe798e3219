"""The answers of the endpoints that describe the server rather than generate: /v1/models, /model_info,
/server_info (every server argument, resolved defaults filled, and the scheduler's internal state), /v1/loads and
with real SGLang 0.5.11's fields (/metrics: metrics.py)."""
from __future__ import annotations

import datetime

from sglang_standin import __version__
from sglang_standin import server_args as _server_args
from sglang_standin.api_version import WEIGHT_VERSION
from sglang_standin.decoding import spec_shape
from sglang_standin.metrics import MAX_TOTAL_NUM_TOKENS


def _resolved_defaults(args) -> dict:
    """Server arguments that real ServerArgs.__post_init__ resolves from the model and the GPU (None on the
    command line, a value in /server_info); the stand-in fills them with plausible values of the same type."""
    spec = spec_shape(args)
    out = {"tokenizer_path": args.model_path, "served_model_name": args.model_path, "device": "cuda",
           "page_size": 1, "random_seed": 42, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256,
           "cuda_graph_bs": [1, 2, 4, 8, 16, 24, 32, 40, 48], "custom_weight_loader": [], "mm_process_config": {},
           "piecewise_cuda_graph_max_tokens": 8192, "piecewise_cuda_graph_tokens": [4, 8, 16, 32],
           "expert_distribution_recorder_buffer_size": 1000, "speculative_moe_runner_backend": "auto"}
    if spec:
        out.update(speculative_num_steps=1, speculative_eagle_topk=1,
                   speculative_num_draft_tokens=spec.num_draft_tokens, speculative_draft_model_revision="main")
    return out


def _scheduler_resolved(args) -> dict:
    """Fields that only the scheduler's copy (internal_states[0]) has resolved."""
    backend = args.attention_backend or "triton"
    return {"decode_attention_backend": backend, "prefill_attention_backend": backend,
            "pp_max_micro_batch_size": args.max_running_requests or 48}


def loads_answer(state, args) -> dict:
    """GET /v1/loads as SGLang 0.5.11 answers it (sglang/srt/entrypoints/v1_loads.py; recorded from the real server in
    tests/fixtures/real_sglang/loads/): one entry per DP rank (one here), counted live by the scheduler, and the
    aggregate over ranks; the same keys at every level as the recording of include=core (tests/unit/sglang/test_drain.py
    compares them). Deliberate differences: `include` is not read (real SGLang adds the memory, disaggregation and
    queues sections without it or with include=all; nothing here reads them), and the token figures (num_used_tokens,
    token_usage, cache_hit_rate, utilization) are fixed placeholders: the stand-in has no KV cache to count."""
    with state.timing.lock:
        running, waiting = state.timing.running, state.timing.waiting
    load = {"num_running_reqs": running, "num_waiting_reqs": waiting, "num_used_tokens": 0,
            "num_total_tokens": 0, "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS, "token_usage": 0.0,
            "gen_throughput": round(state.timing.throughput(), 2), "cache_hit_rate": 0.0, "utilization": 0.0,
            "max_running_requests": args.max_running_requests or 48, "num_total_reqs": running + waiting}
    return {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": __version__,
            "dp_rank_count": 1, "loads": [load],
            "aggregate": {"total_running_reqs": running, "total_waiting_reqs": waiting, "total_reqs": running + waiting,
                          "total_used_tokens": 0, "total_tokens": 0, "avg_token_usage": 0.0,
                          "avg_throughput": load["gen_throughput"], "avg_utilization": 0.0}}


def server_args_dict(args) -> dict:
    """`dataclasses.asdict(server_args)` as real SGLang returns it: every field, api_key included, resolved
    defaults filled; dests that are no ServerArgs field (--config, deprecated flag-only actions) left out."""
    schema = getattr(_server_args, "SCHEMA", None) or {}
    dropped = {"config"} | {d for d, o in (schema.get("options") or {}).items()
                            if o.get("action") == "DeprecatedAction"}
    out = {k: v for k, v in args.redacted().items() if k not in dropped}
    for k, v in _resolved_defaults(args).items():
        if out.get(k) is None:
            out[k] = v
    return out


def models_answer(state, args) -> dict:
    """GET /v1/models: the one served model."""
    return {"object": "list", "data": [{
        "id": args.model_id, "object": "model", "created": state.created, "owned_by": "sglang",
        "root": args.model_id, "parent": None, "max_model_len": args.context_length or 32768}]}


def model_info_answer(args) -> dict:
    """GET /model_info (and /get_model_info)."""
    return {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or
            args.model_path, "is_generation": True, "preferred_sampling_params": None,
            "weight_version": WEIGHT_VERSION, "has_image_understanding": False,
            "has_audio_understanding": False, "model_type": "standin",
            "architectures": ["StandinForCausalLM"]}


def server_info_answer(state, args) -> dict:
    """GET /server_info (and /get_server_info). Like the real one: every server argument (api_key included: the
    project must redact it), the scheduler's figures, and internal_states[0] = the server arguments again plus the
    scheduler's state; avg_spec_accept_length only with speculative decoding."""
    sargs = server_args_dict(args)
    # The KV pool: real SGLang caps what it profiled at --max-total-tokens (server_args.py max_total_tokens), which is
    # how the lab makes a pool too small to serve (the H200 got 284 tokens from memory another process held).
    tokens = min(MAX_TOTAL_NUM_TOKENS, args.max_total_tokens) if getattr(args, "max_total_tokens", None) \
        else MAX_TOTAL_NUM_TOKENS
    internal = dict(sargs)
    for k, v in _scheduler_resolved(args).items():
        if internal.get(k) is None:
            internal[k] = v
    internal.update({"_mx_config_cache": {}, "_quantization_explicitly_unset": False,
                     "effective_max_running_requests_per_dp": args.max_running_requests or 48,
                     "enable_grpc": False, "grpc_port": args.port + 10000,
                     "last_gen_throughput": round(state.timing.throughput(), 3),
                     "memory_usage": {"weight": 0.27, "kvcache": 27.5, "token_capacity": tokens,
                                      "graph": 0.13}, "use_mla_backend": False})
    avg = state.avg_accept_length()
    if avg is not None:
        internal["avg_spec_accept_length"] = avg
    info = dict(sargs)
    info.update({"status": "ready" if state.ready else "starting", "max_total_num_tokens": tokens,
                 "max_req_input_len": (args.context_length or 8192) - 6,
                 "internal_states": [internal], "version": __version__})
    return info
