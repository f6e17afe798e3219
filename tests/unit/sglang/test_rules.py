"""Static validation rules (module_utils/sglang/rules.py via the sglang_validate filter): one case per row."""
import copy

import pytest

from filter_plugins.sglang import sglang_validate, sglang_violations_text
from ansible.module_utils.sglang import rules as sglang_rules

SERVER = {
    "model_path": "/srv/models/Kimi-K2.6", "port": 30001, "host": "127.0.0.1", "tp_size": 8, "pp_size": 1,
    "mem_fraction_static": 0.88, "context_length": 32768, "max_running_requests": 128, "page_size": 1,
    "num_continuous_decode_steps": 8, "attention_backend": "triton", "trust_remote_code": True,
    "grammar_backend": "none", "disable_cuda_graph": False,
}
SPEC = {"algorithm": "DDTREE", "draft_model_path": "/srv/models/drafter", "block_size": 8,
        "draft_window_size": 2048, "budget": 8, "topk_cap": 4, "debug_metrics": True}
NO_DDTREE = {"budget": None, "topk_cap": None, "debug_metrics": None}
NO_DFLASH = dict(NO_DDTREE, block_size=None, draft_window_size=None)
CTX = {"group_names": ["b300", "nvlink"], "host_group": "nvlink", "gpu_cc": "10.3", "gpu_count": 8,
       "api_key_set": False, "model_uses_mla": True, "env": {"OMP_NUM_THREADS": "16"}, "overrides": []}


@pytest.fixture(autouse=True)
def _ddtree_schema(ddtree_schema):
    """Every case validates against the schema of the DDTree-patched build (the lab stand-in's, extracted)."""
    CTX["schema"] = ddtree_schema
    yield
    CTX.pop("schema", None)


def violations(server=None, spec=None, ctx=None):
    s, p, c = copy.deepcopy(SERVER), copy.deepcopy(SPEC), copy.deepcopy(CTX)
    s.update(server or {})
    p.update(spec or {})
    c.update(ctx or {})
    return sorted({v["rule"] for v in sglang_validate(s, p, c)})


def test_baseline_profile_is_clean():
    assert violations() == []


CASES = [
    # (id, server changes, speculative changes, context changes, expected broken rules)
    ("ddtree needs triton", {"attention_backend": "flashinfer"}, {}, {}, ["ddtree_triton"]),
    ("ddtree needs page size 1", {"page_size": 16}, {}, {}, ["ddtree_page_size"]),
    ("topk cap above budget", {}, {"topk_cap": 9}, {}, ["ddtree_topk_cap"]),
    ("topk cap equal budget ok", {}, {"topk_cap": 8}, {}, []),
    ("topk cap missing", {}, {"topk_cap": None}, {}, ["ddtree_topk_cap"]),
    ("window below block", {}, {"draft_window_size": 4}, {}, ["draft_window"]),
    ("window equal block ok", {}, {"draft_window_size": 8}, {}, []),
    ("budget 16 graphs sm_103 refused", {}, {"budget": 16}, {}, ["sm103_budget_cuda_graphs"]),
    ("budget 16 graphs sm_103 overridden", {}, {"budget": 16}, {"overrides": ["sm103_budget_cuda_graphs"]}, []),
    ("budget 16 without graphs ok", {"disable_cuda_graph": True}, {"budget": 16}, {}, []),
    ("budget 16 on sm_120 ok", {}, {"budget": 16}, {"gpu_cc": "12.0", "group_names": ["pcie"],
                                                    "host_group": "pcie"}, []),
    ("tp x pp not divisible by nnodes", {"tp_size": 8, "nnodes": 3, "node_rank": 0, "dist_init_addr": "h:5000"}, {},
     {}, ["nnodes_divides"]),
    ("two nodes need dist addr", {"nnodes": 2}, {}, {}, ["multinode_addr"]),
    ("node rank out of range", {"nnodes": 2, "node_rank": 2, "dist_init_addr": "h:5000"}, {}, {}, ["multinode_addr"]),
    ("mem fraction 1.0", {"mem_fraction_static": 1.0}, {}, {}, ["mem_fraction_range"]),
    ("mem fraction 0", {"mem_fraction_static": 0}, {}, {}, ["mem_fraction_range"]),
    ("mem fraction string", {"mem_fraction_static": "lots"}, {}, {}, ["mem_fraction_range", "flags_in_schema"]),
    ("mrr 256 with MLA flagged", {"max_running_requests": 256}, {}, {}, ["mla_max_running_256"]),
    ("mrr 256 with MLA overridden", {"max_running_requests": 256}, {}, {"overrides": ["mla_max_running_256"]}, []),
    ("mrr 256 without MLA ok", {"max_running_requests": 256}, {}, {"model_uses_mla": False}, []),
    ("host in neither group", {}, {}, {"group_names": ["lab"], "host_group": ""}, ["host_group"]),
    ("host in both groups", {}, {}, {"group_names": ["nvlink", "pcie"]}, ["host_group"]),
    ("group var disagrees with inventory", {}, {}, {"host_group": "pcie"}, ["host_group"]),
    ("public bind without key", {"host": "0.0.0.0"}, {}, {}, ["api_key_off_loopback"]),
    ("public bind with key ok", {"host": "0.0.0.0"}, {}, {"api_key_set": True}, []),
    ("ipv6 loopback without key ok", {"host": "::1"}, {}, {}, []),
    ("unknown server key (typo)", {"mem_fraction_statc": 0.8}, {}, {}, ["flags_in_schema"]),
    ("unknown speculative key", {}, {"bugdet": 8}, {}, ["flags_in_schema"]),
    ("unknown algorithm", {}, {"algorithm": "MEDUSA"}, {}, ["flags_in_schema"]),
    ("ddtree flags on the upstream version", {}, {}, {"schema": "0.5.23"}, ["flags_in_schema"]),
    ("ddtree on plain 0.5.11", {}, {}, {"schema": "0.5.11"}, ["flags_in_schema"]),
    ("no schema at all", {}, {}, {"schema": None}, ["argv_buildable"]),
    ("relative model path", {"model_path": "models/x"}, {}, {}, ["model_path_absolute"]),
    ("port out of range", {"port": 70000}, {}, {}, ["port_range"]),
    ("negative tp", {"tp_size": -1}, {}, {}, ["positive_ints"]),
    ("tp above gpu count", {"tp_size": 16}, {}, {}, ["gpu_count"]),
    ("lab host without gpus ok", {"tp_size": 16}, {}, {"gpu_count": 0}, []),
    ("draft model missing", {}, {"draft_model_path": ""}, {}, ["draft_model_path"]),
    # the H200 rehearsal's sweep (NGRAM with draft_model_path null) was refused by this rule; real 0.5.11 serves it
    ("NGRAM needs no draft model", {}, {"algorithm": "NGRAM", "draft_model_path": "", **NO_DFLASH}, {}, []),
    ("DFLASH still needs one", {}, {"algorithm": "DFLASH", "draft_model_path": "", **NO_DDTREE}, {},
     ["draft_model_path"]),
    ("dflash pp 2", {"pp_size": 2, "tp_size": 4}, {"algorithm": "DFLASH", **NO_DDTREE}, {}, ["dflash_pp1"]),
    ("ddtree-only key on DFLASH", {}, {"algorithm": "DFLASH"}, {}, ["flags_in_schema"]),
    ("eagle3 missing params", {}, {"algorithm": "EAGLE3", "budget": None, "topk_cap": None, "block_size": None,
                                   "draft_window_size": None, "debug_metrics": None}, {}, ["eagle_params"]),
    ("eagle tree verify paged needs backend",
     {"page_size": 16, "attention_backend": "torch_native"},
     {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 4, "num_draft_tokens": 8, **NO_DFLASH}, {},
     ["tree_verify_paged"]),
    ("eagle tree verify paged on flashinfer ok", {"page_size": 16, "attention_backend": "flashinfer"},
     {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 4, "num_draft_tokens": 8, **NO_DFLASH}, {}, []),
    ("pcie NCCL tuning on nvlink", {}, {}, {"env": {"NCCL_P2P_LEVEL": "5"}}, ["no_pcie_nccl_on_nvlink"]),
    ("pcie NCCL tuning on pcie ok", {}, {}, {"env": {"NCCL_P2P_LEVEL": "5"}, "group_names": ["pcie"],
                                             "host_group": "pcie", "gpu_cc": "12.0"}, []),
    ("bad grammar backend", {"grammar_backend": "regex"}, {}, {}, ["flags_in_schema"]),
    ("override of a hard rule refused", {}, {}, {"overrides": ["ddtree_triton"]}, ["overrides_known"]),
    ("flashmla forces page 64 (MLA, NONE)", {"attention_backend": "flashmla", "page_size": 1}, {"algorithm": "NONE"},
     {}, ["mla_backend_page_size"]),
    ("flashmla with page 64 ok", {"attention_backend": "flashmla", "page_size": 64}, {"algorithm": "NONE"}, {}, []),
    ("cutlass_mla decode backend forces 128", {"decode_attention_backend": "cutlass_mla", "page_size": 64},
     {"algorithm": "NONE"}, {}, ["mla_backend_page_size"]),
    ("trtllm_mla page 32 on sm_103 ok", {"attention_backend": "trtllm_mla", "page_size": 32}, {"algorithm": "NONE"},
     {}, []),
    ("trtllm_mla on an H200 refused", {"attention_backend": "trtllm_mla", "page_size": 64}, {"algorithm": "NONE"},
     {"gpu_cc": "9.0", "gpu_count": 8}, ["trtllm_mla_blackwell"]),
    ("trtllm_mla with ddtree: triton and page 1 broken too", {"attention_backend": "trtllm_mla"}, {}, {},
     ["ddtree_triton", "mla_backend_page_size"]),
    ("algorithm NONE ignores ddtree rules", {"attention_backend": "flashinfer", "page_size": 16},
     {"algorithm": "NONE"}, {}, []),
]


@pytest.mark.parametrize("name,server,spec,ctx,expected", CASES, ids=[c[0] for c in CASES])
def test_rule(name, server, spec, ctx, expected):
    assert violations(server, spec, ctx) == sorted(expected)


def test_at_least_twenty_cases_and_every_rule_exercised():
    assert len(CASES) >= 20
    hit = {r for case in CASES for r in case[4]}
    assert hit == {r["rule"] for r in sglang_rules.rules_table()}


def test_violation_is_data_with_reason_and_source():
    found = sglang_validate(dict(SERVER, attention_backend="fa3"), SPEC, CTX)
    assert found == [{"rule": "ddtree_triton", "reason": "DDTREE needs attention_backend triton",
                      "source": "shared/FACTS.md; DDTree patches", "detail": "attention_backend='fa3'",
                      "overridable": False}]
    assert "[ddtree_triton]" in sglang_violations_text(found)


def test_all_problems_reported_at_once():
    assert len(violations({"page_size": 4, "attention_backend": "fa3", "mem_fraction_static": 2}, {"topk_cap": 99})) == 4


def test_a_crashing_rule_is_reported_not_raised():
    assert sglang_rules.evaluate({"server": {"port": object()}, "speculative": {}})  # never raises
