"""module_utils/sglang/speculative.py: the one home of speculative key <-> flag <-> summary naming.

The summary the sweep records from a structured config (the sglang_spec_summary filter) and the one the report reads
back from the server's argv must agree for every algorithm: the argv is rendered by the real filter with a real
flag schema, so a flag renamed in a version breaks here, not in a report."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ansible.module_utils.sglang import speculative as spec
from filter_plugins import sglang as f

ROOT = Path(__file__).resolve().parents[3]
SERVER = {"model_path": "/m", "port": 30001, "page_size": 1, "attention_backend": "triton"}
CONFIGS = [
    ({"algorithm": "DDTREE", "draft_model_path": "/d", "block_size": 8, "draft_window_size": 2048, "budget": 8,
      "topk_cap": 4}, "ddtree"),
    ({"algorithm": "DDTREE", "draft_model_path": "/d", "block_size": 16, "budget": 32, "topk_cap": 8}, "ddtree"),
    ({"algorithm": "DFLASH", "draft_model_path": "/d", "block_size": 8}, "0.5.11"),
    ({"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3, "eagle_topk": 4, "num_draft_tokens": 8},
     "0.5.11"),
    ({"algorithm": "NONE", "budget": 16}, "0.5.11"),
    (None, "0.5.11"),
]


@pytest.mark.parametrize("speculative, version", CONFIGS)
@pytest.mark.parametrize("cuda_graph", [True, False])
def test_the_argv_read_back_gives_the_summary_of_the_config(speculative, version, cuda_graph, ddtree_schema):
    server = dict(SERVER, disable_cuda_graph=not cuda_graph)
    schema = ddtree_schema if version == "ddtree" else version
    argv = f.sglang_argv(server, speculative, None, schema)
    from_config = f.sglang_spec_summary(speculative, server)
    assert spec.summary_from_argv(argv) == from_config
    assert from_config["cuda_graph"] is cuda_graph and tuple(from_config) == spec.SUMMARY_KEYS


def test_summary_values():
    assert spec.summary_from_config(CONFIGS[0][0]) == {"algorithm": "DDTREE", "budget": 8, "topk": 4,
                                                       "block_size": 8, "cuda_graph": True}
    assert spec.summary_from_config({"algorithm": "eagle", "eagle_topk": 4, "num_draft_tokens": 8})["topk"] == 4
    assert spec.summary_from_config({"algorithm": "NONE", "budget": 16})["budget"] is None
    assert spec.summary_from_argv(["--speculative-algorithm=DFLASH", "--speculative-dflash-block-size=16"]) == {
        "algorithm": "DFLASH", "budget": None, "topk": None, "block_size": 16, "cuda_graph": True}
    assert spec.summary_from_argv([]) == {} and spec.summary_from_argv(None) == {}


def test_canonical_keys_and_candidates():
    assert spec.canonical_key("--speculative-ddtree-topk-cap") == "topk_cap"
    assert spec.canonical_key("speculative_eagle_topk") == "topk"
    assert spec.canonical_key("--speculative-num-draft-tokens") == "num_draft_tokens"
    assert spec.flag_candidates("DDTREE", "speculative_budget") == [
        "--speculative-budget", "--speculative-ddtree-budget", "--speculative-dflash-budget"]


def test_no_second_copy_of_the_speculative_naming():
    """The family table and any flag -> summary-key table live in module_utils/sglang/speculative.py only."""
    files = subprocess.run(["git", "ls-files", "*.py", "*.yml", "*.j2"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    home = "module_utils/sglang/speculative.py"
    flag_key = re.compile(r"""["']--speculative-[a-z-]+["']\s*:""")
    family = re.compile(r"""["']DDTREE["']\s*:\s*\(""")
    summary_jinja = re.compile(r"topk_cap\s*\|\s*default\(")
    old_report = '{"--speculative-algorithm": "algorithm", "--speculative-ddtree-budget": "budget"}'
    old_sweep = "topk: \"{{ spec.topk_cap | default(spec.eagle_topk | default(none)) }}\""
    assert flag_key.search(old_report) and summary_jinja.search(old_sweep)  # the copies this test once caught
    copies = [p for p in files if p != home and not p.startswith("tests/") and
              any(r.search((ROOT / p).read_text(errors="replace")) for r in (flag_key, family, summary_jinja))]
    assert copies == [], f"speculative naming copied outside {home}: {copies}"
