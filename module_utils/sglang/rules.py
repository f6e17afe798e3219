"""Static validation of an SGLang service config, as data: each rule is (id, reason, source, check).

Evaluated on the controller at play start, before any host changes (filter `sglang_validate`), so a bad
profile fails with every broken rule listed at once. `check(ctx)` returns None when the rule holds, or a short
detail string naming the offending values. Rules marked `overridable` are known crashes (not impossibilities):
listing their id in `sglang_service_validation_overrides` accepts the risk explicitly.

ctx keys: server, speculative (dicts), argv (list or None) / argv_error, sglang_version, flag_problems (what the
version's flag schema refuses in argv: module_utils/sglang/schema.check_argv), group_names, host_group, gpu_cc,
gpu_count, api_key_set, model_uses_mla, env (dict), overrides (list of rule ids). No rule names a flag's spelling or
its choices: those come from the schema of the version the host runs.
"""
from __future__ import annotations

import ipaddress

FACTS = "shared/FACTS.md"
LOOPBACK_NAMES = ("localhost",)
PCIE_NCCL_KEYS = ("NCCL_P2P_LEVEL", "NCCL_PROTO", "NCCL_ALGO", "NCCL_MIN_NCHANNELS", "NCCL_IB_DISABLE")
MLA_CRASH_MAX_RUNNING = 256


def _num(value):
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value):
    n = _num(value)
    return int(n) if n is not None and n == int(n) else None


def _algo(ctx) -> str:
    return str(ctx["speculative"].get("algorithm") or "NONE").upper()


def _cuda_graphs(ctx) -> bool:
    return not bool(ctx["server"].get("disable_cuda_graph"))


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------- checks (None = holds, str = detail)
def c_host_group(ctx):
    groups = set(ctx.get("group_names") or [])
    member = sorted(groups & {"nvlink", "pcie"})
    if len(member) != 1:
        return f"host groups {sorted(groups)} contain {member or 'neither nvlink nor pcie'}"
    if ctx.get("host_group") and ctx["host_group"] != member[0]:
        return f"deploy_host_group={ctx['host_group']!r} but the host is in group {member[0]!r}"
    return None


def c_argv(ctx):
    return ctx.get("argv_error") if ctx.get("argv") is None else None


def c_flags_in_schema(ctx):
    bad = [p for p in ctx.get("flag_problems") or () if p.get("problem") != "deprecated"]
    return "; ".join(p["detail"] for p in bad) or None


def c_model_path(ctx):
    path = str(ctx["server"].get("model_path") or "")
    return None if path.startswith("/") else f"model_path={path!r}"


def c_port(ctx):
    port = _int(ctx["server"].get("port"))
    return None if port is not None and 1 <= port <= 65535 else f"port={ctx['server'].get('port')!r}"


def c_mem_fraction(ctx):
    value = ctx["server"].get("mem_fraction_static")
    if value is None:
        return None
    n = _num(value)
    return None if n is not None and 0 < n < 1 else f"mem_fraction_static={value!r}"


def c_positive_ints(ctx):
    bad = []
    for key in ("tp_size", "pp_size", "dp_size", "ep_size", "nnodes", "context_length", "max_running_requests",
                "page_size", "num_continuous_decode_steps"):
        value = ctx["server"].get(key)
        if value is not None and (_int(value) is None or _int(value) < 1):
            bad.append(f"{key}={value!r}")
    return ", ".join(bad) or None


def c_nnodes_divides(ctx):
    s = ctx["server"]
    tp, pp, nn = _int(s.get("tp_size") or 1), _int(s.get("pp_size") or 1), _int(s.get("nnodes") or 1)
    if None in (tp, pp, nn) or nn < 1:
        return None  # c_positive_ints reports it
    return None if (tp * pp) % nn == 0 else f"tp_size*pp_size={tp * pp} is not divisible by nnodes={nn}"


def c_multinode(ctx):
    s = ctx["server"]
    nn, rank = _int(s.get("nnodes") or 1) or 1, _int(s.get("node_rank") or 0)
    if rank is None or rank < 0 or rank >= nn:
        return f"node_rank={s.get('node_rank')!r} with nnodes={nn}"
    if nn > 1 and not s.get("dist_init_addr"):
        return f"nnodes={nn} without dist_init_addr"
    return None


def c_gpu_count(ctx):
    s, gpus = ctx["server"], _int(ctx.get("gpu_count") or 0) or 0
    if gpus <= 0:
        return None  # lab hosts declare no GPU
    per_node = (_int(s.get("tp_size") or 1) or 1) * (_int(s.get("pp_size") or 1) or 1) // max(
        1, _int(s.get("nnodes") or 1) or 1)
    return None if per_node <= gpus else f"tp*pp/nnodes={per_node} GPUs per node but the host has {gpus}"


def c_api_key(ctx):
    host = str(ctx["server"].get("host") or "127.0.0.1")
    if _is_loopback(host) or ctx.get("api_key_set"):
        return None
    return f"host={host!r} and no API key (vault_sglang_service_api_key)"


def c_ddtree_triton(ctx):
    if _algo(ctx) != "DDTREE":
        return None
    backend = ctx["server"].get("attention_backend")
    return None if backend == "triton" else f"attention_backend={backend!r}"


# MLA attention backends that run only with their own KV page size: SGLang 0.5.11 rewrites another page_size with a
# warning (server_args.py ServerArgs._handle_attention_backend_compatibility: flashmla -> 64, cutlass_mla -> 128,
# trtllm_mla -> 64 unless 32 or 64), so the unit's page_size would not be the server's (DDTree's page 1 included).
MLA_BACKEND_PAGE_SIZES = {"flashmla": (64,), "cutlass_mla": (128,), "trtllm_mla": (32, 64)}


def _backends(ctx):
    s = ctx["server"]
    return [(k, s.get(k)) for k in ("attention_backend", "decode_attention_backend") if s.get(k)]


def c_mla_backend_page_size(ctx):
    page = ctx["server"].get("page_size")
    for key, backend in _backends(ctx):
        sizes = MLA_BACKEND_PAGE_SIZES.get(backend)
        if sizes and page is not None and _int(page) not in sizes:
            return (f"{key}={backend} runs with page_size {' or '.join(map(str, sizes))} only; SGLang would replace "
                    f"page_size={page!r} at start")
    return None


def c_trtllm_mla_blackwell(ctx):
    # 0.5.11 raises ValueError("TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x)") at start
    cc = str(ctx.get("gpu_cc") or "")
    if not cc or not any(b == "trtllm_mla" for _, b in _backends(ctx)):
        return None
    major = _int(cc.split(".")[0])
    return None if major is not None and major >= 10 else f"trtllm_mla on compute capability {cc} (needs 10.x or 12.x)"


def c_ddtree_page_size(ctx):
    if _algo(ctx) != "DDTREE":
        return None
    page = _int(ctx["server"].get("page_size") or 1)
    return None if page == 1 else f"page_size={ctx['server'].get('page_size')!r}"


def c_ddtree_topk_cap(ctx):
    if _algo(ctx) != "DDTREE":
        return None
    spec = ctx["speculative"]
    cap, budget = _int(spec.get("topk_cap")), _int(spec.get("budget"))
    if cap is None or budget is None:
        return f"budget={spec.get('budget')!r} topk_cap={spec.get('topk_cap')!r} (both required integers)"
    return None if 1 <= cap <= budget else f"topk_cap={cap} budget={budget}"


def c_draft_model(ctx):
    # NGRAM drafts from the tokens already seen (SGLang's n-gram cache), not from a model: real 0.5.11 served it with
    # no draft path on the H200 (spec_campaign.py), and the rehearsal's sweep was refused here before this.
    if _algo(ctx) in ("NONE", "NGRAM"):
        return None
    path = str(ctx["speculative"].get("draft_model_path") or "")
    return None if path.startswith("/") else f"{_algo(ctx)} with draft_model_path={path!r}"


def c_draft_window(ctx):
    if _algo(ctx) not in ("DFLASH", "DDTREE"):
        return None
    spec = ctx["speculative"]
    block, window = _int(spec.get("block_size")), _int(spec.get("draft_window_size"))
    # Both are optional (SGLang reads the block size from the drafter's config, the window defaults to none);
    # given together, the window must hold a block (0.5.11's own check, which the preflight runs too).
    if block is None or window is None:
        return None
    return None if window >= block else f"draft_window_size={window} < block_size={block}"


def c_dflash_pp(ctx):
    if _algo(ctx) not in ("DFLASH", "DDTREE"):
        return None
    pp = _int(ctx["server"].get("pp_size") or 1)
    return None if pp == 1 else f"pp_size={pp}"


def c_eagle_params(ctx):
    if _algo(ctx) not in ("EAGLE", "EAGLE3"):
        return None
    spec = ctx["speculative"]
    missing = [k for k in ("num_steps", "eagle_topk", "num_draft_tokens") if _int(spec.get(k)) is None]
    return f"missing {missing}" if missing else None


def c_tree_verify_paged(ctx):
    s, spec = ctx["server"], ctx["speculative"]
    topk = _int(spec.get("eagle_topk") or 1) or 1
    page = _int(s.get("page_size") or 1) or 1
    if _algo(ctx) in ("EAGLE", "EAGLE3") and topk > 1 and page > 1:
        backend = s.get("attention_backend")
        if backend not in ("flashinfer", "fa3", "triton"):
            return f"eagle_topk={topk} page_size={page} attention_backend={backend!r}"
    return None


def c_sm103_budget_graphs(ctx):
    if _algo(ctx) != "DDTREE" or str(ctx.get("gpu_cc") or "") != "10.3" or not _cuda_graphs(ctx):
        return None
    budget = _int(ctx["speculative"].get("budget"))
    return f"budget={budget} with CUDA graphs on sm_103" if budget is not None and budget > 8 else None


def c_mla_max_running(ctx):
    mrr = _int(ctx["server"].get("max_running_requests"))
    if ctx.get("model_uses_mla") and mrr is not None and mrr >= MLA_CRASH_MAX_RUNNING:
        return f"max_running_requests={mrr} with an MLA model"
    return None


def c_nccl_pcie_on_nvlink(ctx):
    if ctx.get("host_group") != "nvlink":
        return None
    found = sorted(k for k in (ctx.get("env") or {}) if k in PCIE_NCCL_KEYS)
    return f"nvlink host sets {found}" if found else None


def c_overrides_known(ctx):
    unknown = sorted(set(ctx.get("overrides") or []) - OVERRIDABLE)
    return f"cannot override {unknown}; overridable rules: {sorted(OVERRIDABLE)}" if unknown else None


RULES = (
    # id, reason, source, check, overridable
    ("host_group", "a host must be in exactly one of the nvlink and pcie groups (the profile decides the unit)",
     "issue 4; inventory groups", c_host_group, False),
    ("argv_buildable", "the structured config must map to SGLang flags", "filter_plugins/sglang.py", c_argv, False),
    ("flags_in_schema", "every flag must exist, with a valid value, in the SGLang version the host runs",
     "schemas/sglang/<version>.json (the real parser)", c_flags_in_schema, False),
    ("model_path_absolute", "model_path must be an absolute path on the host", "role defaults", c_model_path, False),
    ("port_range", "port must be an integer in 1..65535", "TCP", c_port, False),
    ("mem_fraction_range", "mem_fraction_static must be in (0, 1)", f"{FACTS}; SGLang ServerArgs",
     c_mem_fraction, False),
    ("positive_ints", "sizes and counts must be positive integers", "SGLang ServerArgs", c_positive_ints, False),
    ("nnodes_divides", "tp_size * pp_size must be divisible by nnodes", f"{FACTS} multi-node", c_nnodes_divides, False),
    ("multinode_addr", "node_rank must be < nnodes, and nnodes > 1 needs dist_init_addr", f"{FACTS} multi-node",
     c_multinode, False),
    ("gpu_count", "tp*pp per node must not exceed the host's GPU count", "deploy_gpu_count", c_gpu_count, False),
    ("api_key_off_loopback", "a non-loopback bind address needs an API key from vault", "issue 4", c_api_key, False),
    ("ddtree_triton", "DDTREE needs attention_backend triton", f"{FACTS}; DDTree patches", c_ddtree_triton, False),
    ("ddtree_page_size", "DDTREE needs page_size 1", f"{FACTS}; DDTree patches", c_ddtree_page_size, False),
    ("mla_backend_page_size", "flashmla, cutlass_mla and trtllm_mla run only with their own page_size (64, 128, 32|64)",
     "SGLang 0.5.11 server_args.py _handle_attention_backend_compatibility", c_mla_backend_page_size, False),
    ("trtllm_mla_blackwell", "trtllm_mla runs only on Blackwell (sm_100/sm_12x): SGLang refuses it at start elsewhere",
     "SGLang 0.5.11 server_args.py _handle_attention_backend_compatibility", c_trtllm_mla_blackwell, False),
    ("ddtree_topk_cap", "DDTREE topk_cap must be between 1 and budget", "issue 4", c_ddtree_topk_cap, False),
    ("draft_model_path", "speculative decoding with a draft model (all but NGRAM) needs an absolute draft_model_path",
     f"{FACTS} DFLASH", c_draft_model, False),
    ("draft_window", "draft_window_size must be >= block_size when both are set", "SGLang 0.5.11 server_args.py",
     c_draft_window, False),
    ("dflash_pp1", "DFLASH/DDTREE need pp_size 1", f"{FACTS} DFLASH", c_dflash_pp, False),
    ("eagle_params", "EAGLE needs num_steps, eagle_topk and num_draft_tokens", "SGLang docs", c_eagle_params, False),
    ("tree_verify_paged", "tree verify (topk > 1) with page_size > 1 only on flashinfer, fa3 or triton", FACTS,
     c_tree_verify_paged, False),
    ("sm103_budget_cuda_graphs", "DDTREE budget > 8 with CUDA graphs on sm_103 crashed or gave garbage",
     f"{FACTS} results on B300", c_sm103_budget_graphs, True),
    ("mla_max_running_256", "max_running_requests >= 256 with an MLA model crashed (CUBLAS, MLA batched GEMM)",
     f"{FACTS} results on B300", c_mla_max_running, True),
    ("no_pcie_nccl_on_nvlink", "PCIe NCCL tuning must not be applied on NVLink hosts", f"{FACTS} hand deployment",
     c_nccl_pcie_on_nvlink, False),
    ("overrides_known", "only known-crash rules can be overridden", "sglang_service_validation_overrides",
     c_overrides_known, False),
)
OVERRIDABLE = frozenset(r[0] for r in RULES if r[4])


def evaluate(ctx: dict) -> list[dict]:
    """Every broken rule: [{"rule", "reason", "source", "detail", "overridable"}], overridden ones removed."""
    ctx = dict(ctx)
    ctx.setdefault("server", {})
    ctx.setdefault("speculative", {})
    ctx.setdefault("flag_problems", [])
    ctx.setdefault("argv", [])
    overrides = set(ctx.get("overrides") or [])
    out = []
    for rule_id, reason, source, check, overridable in RULES:
        try:
            detail = check(ctx)
        except Exception as exc:  # a rule must never crash the play with a traceback
            detail = f"rule could not be evaluated: {type(exc).__name__}: {exc}"
        if detail is None or (overridable and rule_id in overrides):
            continue
        out.append({"rule": rule_id, "reason": reason, "source": source, "detail": detail,
                    "overridable": overridable})
    return out


def rules_table() -> list[dict]:
    """The rules as plain data (for documentation and reports)."""
    return [{"rule": r[0], "reason": r[1], "source": r[2], "overridable": r[4]} for r in RULES]
