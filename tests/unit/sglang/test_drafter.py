"""The DFlash drafter's own block size against the one the server would run (module_utils/sglang/drafter.py), read
the way real SGLang 0.5.11 reads both: the argv (server_args.py ServerArgs._handle_speculative_decoding) and the
drafter's config.json (speculative/dflash_utils.py parse_dflash_draft_config)."""
import json

import pytest

from ansible.module_utils.sglang import schema as schema_lib
from ansible.module_utils.sglang.drafter import DrafterError, check, config_block_size, expectation
from filter_plugins.sglang import sglang_argv, sglang_drafter_expectation

SERVER = {"model_path": "/srv/models/Kimi-K2.6", "host": "0.0.0.0", "port": 30001, "tp_size": 8, "page_size": 1,
          "attention_backend": "triton"}
DRAFT = "/srv/models/Kimi-K2.6-DFlash"
# what make_dflash_drafter.py (the drafter run on the H200 with real SGLang) and the public drafters carry
REAL_DRAFTER = {"architectures": ["DFlashDraftModel"], "num_target_layers": 30, "block_size": 8,
                "dflash_config": {"block_size": 8, "target_layer_ids": [15], "mask_token": "<|endoftext|>"}}


def drafter_dir(tmp_path, config, name="Kimi-K2.6-DFlash"):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(d)


# ---- what the server would run: the argv and the version's flag schema ---------------------------------------------

def test_the_block_size_flag_of_the_argv_is_the_servers():
    argv = sglang_argv(SERVER, {"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 8}, {}, "0.5.11")
    exp = sglang_drafter_expectation(argv, "0.5.11")
    assert exp == {"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 8,
                   "source": "--speculative-dflash-block-size 8 (the server's argv)"}
    # num_draft_tokens is the same number for DFLASH (0.5.11 requires them equal when both are set)
    argv = sglang_argv(SERVER, {"algorithm": "DFLASH", "draft_model_path": DRAFT, "num_draft_tokens": 4}, {}, "0.5.23")
    assert sglang_drafter_expectation(argv, "0.5.23")["block_size"] == 4
    assert "--speculative-num-draft-tokens 4" in sglang_drafter_expectation(argv, "0.5.23")["source"]
    # extra_args are the argv too, in either spelling of the draft path
    argv = sglang_argv(SERVER, {"algorithm": "DFLASH"}, {"speculative-draft-model": DRAFT,
                                                         "speculative-dflash-block-size": 16}, "0.5.11")
    exp = sglang_drafter_expectation(argv, "0.5.11")
    assert (exp["draft_model_path"], exp["block_size"]) == (DRAFT, 16)


def test_ddtree_drafts_dflash_blocks_and_is_checked_on_the_patched_schema(ddtree_schema):
    spec = {"algorithm": "DDTREE", "draft_model_path": DRAFT, "block_size": 8, "budget": 8, "topk_cap": 4}
    argv = sglang_argv(SERVER, spec, {}, ddtree_schema)
    exp = sglang_drafter_expectation(argv, ddtree_schema)
    assert (exp["algorithm"], exp["draft_model_path"], exp["block_size"]) == ("DDTREE", DRAFT, 8)


def test_no_dflash_drafter_nothing_to_check():
    assert sglang_drafter_expectation(sglang_argv(SERVER, {"algorithm": "NONE"}, {}, "0.5.11"), "0.5.11") == {}
    eagle = sglang_argv(SERVER, {"algorithm": "EAGLE3", "draft_model_path": "/srv/models/e", "num_steps": 3}, {},
                        "0.5.11")
    assert sglang_drafter_expectation(eagle, "0.5.11") == {}


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_unset_block_size_is_the_versions_default_from_its_committed_schema(version):
    """Neither flag set: the committed schema's defaults of both are none, so the server takes the drafter's own
    block size (server_args.py ServerArgs._handle_speculative_decoding: parse_dflash_draft_config, else 16)."""
    schema = schema_lib.load(version)
    assert schema.options["speculative_dflash_block_size"]["default"] is None
    assert schema.options["speculative_num_draft_tokens"]["default"] is None
    exp = expectation(sglang_argv(SERVER, {"algorithm": "DFLASH", "draft_model_path": DRAFT}, {}, version), schema)
    assert exp["block_size"] is None
    assert f"SGLang {version}'s flag schema defaults them to none" in exp["source"]
    assert "--speculative-dflash-block-size nor --speculative-num-draft-tokens" in exp["source"]
    assert "ServerArgs._handle_speculative_decoding" in exp["source"]


def test_a_version_whose_schema_has_a_default_applies_it():
    data = json.loads(json.dumps(schema_lib.load("0.5.11").data))
    data["options"]["speculative_dflash_block_size"]["default"] = 16
    schema = schema_lib.from_dict(data)
    exp = expectation(sglang_argv(SERVER, {"algorithm": "DFLASH", "draft_model_path": DRAFT}, {}, "0.5.11"), schema)
    assert exp["block_size"] == 16
    assert exp["source"] == ("SGLang 0.5.11's default of --speculative-dflash-block-size (its flag schema), the "
                             "profile sets none")


# ---- the drafter's own block size, from its config.json ------------------------------------------------------------

def test_config_block_size_reads_where_sglang_reads():
    assert config_block_size(REAL_DRAFTER) == (8, "dflash_config.block_size")
    assert config_block_size({"block_size": 16}) == (16, "block_size")                 # older checkpoints: top-level
    assert config_block_size({"block_size": 16, "dflash_config": {"block_size": 4}}) == (4, "dflash_config.block_size")
    assert config_block_size({"architectures": ["X"]}) == (None, None)
    for bad in (0, -1, "x", True):
        with pytest.raises(DrafterError, match="requires a positive integer"):
            config_block_size({"dflash_config": {"block_size": bad}})


def test_match_passes(tmp_path):
    path = drafter_dir(tmp_path, REAL_DRAFTER)
    out = check(path, 8, "--speculative-dflash-block-size 8 (the server's argv)")
    assert out == {"config": f"{path}/config.json", "drafter_block_size": 8, "drafter_key": "dflash_config.block_size",
                   "block_size": 8, "source": "--speculative-dflash-block-size 8 (the server's argv)"}


def test_mismatch_is_refused_with_both_numbers_and_both_sources(tmp_path):
    path = drafter_dir(tmp_path, dict(REAL_DRAFTER, block_size=16, dflash_config={"block_size": 16}))
    with pytest.raises(DrafterError) as err:
        check(path, 8, "--speculative-dflash-block-size 8 (the server's argv)")
    msg = err.value.message
    assert "the server would run block size 8 (--speculative-dflash-block-size 8 (the server's argv))" in msg
    assert f"the drafter at {path} is made for 16 ({path}/config.json: dflash_config.block_size)" in msg
    assert err.value.kind == "drafter_mismatch" and err.value.evidence["drafter_block_size"] == 16


def test_default_applied_takes_the_drafters_own(tmp_path):
    path = drafter_dir(tmp_path, {"block_size": 16})
    out = check(path, None, "the profile sets neither ...")
    assert (out["block_size"], out["drafter_block_size"], out["drafter_key"]) == (16, 16, "block_size")


@pytest.mark.parametrize("content,kind,needle", [
    (None, "drafter_missing", "is missing"),
    ("{not json", "drafter_unreadable", "cannot be read as JSON"),
    ("[8]", "drafter_unreadable", "is not a JSON object"),
    ({"architectures": ["TestForCausalLM"]}, "drafter_config", "carries no block size"),
])
def test_missing_unreadable_or_blockless_config_is_refused_with_the_path(tmp_path, content, kind, needle):
    if content is None:
        path = str(tmp_path / "Kimi-K2.6-DFlash")
    else:
        path = drafter_dir(tmp_path, content)
    with pytest.raises(DrafterError) as err:
        check(path, 8, "src")
    assert err.value.kind == kind and needle in err.value.message
    assert f"{path}/config.json" in err.value.message and err.value.evidence["config"] == f"{path}/config.json"


def test_a_relative_or_hub_path_is_refused():
    with pytest.raises(DrafterError, match="not an absolute directory"):
        check("z-lab/Kimi-K2.6-DFlash", 8, "src")
