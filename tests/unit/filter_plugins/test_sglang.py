"""filter_plugins/sglang.py: structured config -> argv, ExecStart quoting, environment lines."""
import shlex

import pytest

from filter_plugins import sglang as f

HAND_DEPLOYED_B300 = (
    "--model-path /root/models/Kimi-K2.6 --port 30001 --host 0.0.0.0 --tp-size 8 --mem-fraction-static 0.88 "
    "--context-length 32768 --max-running-requests 128 --page-size 1 --num-continuous-decode-steps 8 "
    "--attention-backend triton --trust-remote-code --grammar-backend none --speculative-algorithm DDTREE "
    "--speculative-draft-model-path /root/models/Kimi-K2.6-DFlash-tmp-long --speculative-dflash-block-size 8 "
    "--speculative-dflash-draft-window-size 2048 --speculative-ddtree-budget 8 --speculative-ddtree-topk-cap 4 "
    "--speculative-ddtree-debug-metrics"
).split()

B300_SERVER = {
    "model_path": "/root/models/Kimi-K2.6", "port": 30001, "host": "0.0.0.0", "tp_size": 8,
    "mem_fraction_static": 0.88, "context_length": 32768, "max_running_requests": 128, "page_size": 1,
    "num_continuous_decode_steps": 8, "attention_backend": "triton", "trust_remote_code": True,
    "grammar_backend": "none", "disable_cuda_graph": False, "served_model_name": None,
}
B300_SPEC = {
    "algorithm": "DDTREE", "draft_model_path": "/root/models/Kimi-K2.6-DFlash-tmp-long", "block_size": 8,
    "draft_window_size": 2048, "budget": 8, "topk_cap": 4, "debug_metrics": True,
}


def pairs(argv):
    """(flag, value-or-None) pairs: argv order is the parser's, so compare what is said, not where."""
    out, i = [], 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append((argv[i], argv[i + 1]))
            i += 2
        else:
            out.append((argv[i], None))
            i += 1
    return sorted(out)


def test_nvlink_profile_reproduces_the_hand_deployed_command_line(ddtree_schema):
    assert pairs(f.sglang_argv(B300_SERVER, B300_SPEC, None, ddtree_schema)) == pairs(HAND_DEPLOYED_B300)


def test_argv_follows_the_parsers_own_order(ddtree_schema):
    argv = f.sglang_argv(B300_SERVER, B300_SPEC, None, ddtree_schema)
    flags = [a for a in argv if a.startswith("--")]
    orders = [ddtree_schema["options"][f.flag_schema(ddtree_schema).lookup(x)[0]]["order"] for x in flags]
    assert orders == sorted(orders)


def test_none_algorithm_emits_no_speculative_flags():
    argv = f.sglang_argv(B300_SERVER, {"algorithm": "NONE", "budget": 16}, None, "0.5.11")
    assert not [a for a in argv if a.startswith("--speculative")]


@pytest.mark.parametrize("version,window_flag", [("0.5.11", "--speculative-dflash-draft-window-size"),
                                                 ("0.5.23", "--speculative-draft-window-size")])
def test_dflash_window_flag_is_the_installed_versions_spelling(version, window_flag):
    argv = f.sglang_argv({"model_path": "/m"}, {"algorithm": "dflash", "draft_model_path": "/d", "block_size": 8,
                                                 "draft_window_size": 16}, None, version)
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    assert argv[argv.index(window_flag) + 1] == "16"
    assert ("--speculative-draft-window-size" in argv) != ("--speculative-dflash-draft-window-size" in argv)


def test_eagle3_flags():
    argv = f.sglang_argv({"model_path": "/m"}, {"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3,
                                                 "eagle_topk": 1, "num_draft_tokens": 4}, None, "0.5.23")
    assert pairs(argv)[-4:] == [("--speculative-draft-model-path", "/d"), ("--speculative-eagle-topk", "1"),
                                ("--speculative-num-draft-tokens", "4"), ("--speculative-num-steps", "3")]


def test_bool_flags_only_when_true_and_none_values_dropped():
    argv = f.sglang_argv({"model_path": "/m", "disable_cuda_graph": True, "trust_remote_code": False,
                          "context_length": None, "tokenizer_path": ""}, None, None, "0.5.11")
    assert argv == ["--model-path", "/m", "--disable-cuda-graph"]


def test_unknown_algorithm_and_api_key_are_refused():
    with pytest.raises(f.SGLangConfigError, match="MEDUSA.*not a choice of SGLang 0.5.11"):
        f.sglang_argv({"model_path": "/m"}, {"algorithm": "MEDUSA"}, None, "0.5.11")
    with pytest.raises(f.SGLangConfigError, match="vault"):
        f.sglang_argv({"model_path": "/m", "api_key": "k"}, None, None, "0.5.11")


def test_no_schema_no_argv():
    with pytest.raises(f.SGLangConfigError, match="no SGLang flag schema given"):
        f.sglang_argv({"model_path": "/m"})
    with pytest.raises(f.SGLangConfigError, match="no SGLang flag schema for version 9.9.9"):
        f.sglang_argv({"model_path": "/m"}, None, None, "9.9.9")


def test_schema_given_as_version_dict_or_base64_of_the_hosts_file(ddtree_schema):
    import base64
    import json
    text = base64.b64encode(json.dumps(ddtree_schema).encode()).decode()
    by_b64 = f.sglang_argv(B300_SERVER, B300_SPEC, None, "b64:" + text)
    assert by_b64 == f.sglang_argv(B300_SERVER, B300_SPEC, None, ddtree_schema)


def test_extra_args_are_appended():
    argv = f.sglang_argv({"model_path": "/m"}, None, {"enable-metrics": True, "cuda_graph_max_bs": 16}, "0.5.11")
    assert argv == ["--model-path", "/m", "--enable-metrics", "--cuda-graph-max-bs", "16"]


# The three static refusals issue 13 asks for: each names the version, the flag and the replacement if any.
def test_ddtree_flags_on_the_upstream_flavour_are_refused_naming_each():
    problems = f.flag_problems(B300_SERVER, B300_SPEC, None, "0.5.23")
    assert sorted(p["flag"] for p in problems) == ["--speculative-ddtree-budget", "--speculative-ddtree-debug-metrics",
                                                   "--speculative-ddtree-topk-cap"]
    assert all(p["version"] == "0.5.23" and p["problem"] == "unknown" and p["replacement"] is None for p in problems)
    assert "--speculative-ddtree-budget is not a flag of SGLang 0.5.23" in problems[0]["detail"] + problems[1][
        "detail"] + problems[2]["detail"]


def test_ddtree_on_plain_0511_is_an_invalid_choice():
    problems = f.flag_problems(B300_SERVER, B300_SPEC, None, "0.5.11")
    assert {(p["flag"], p["problem"]) for p in problems} >= {("--speculative-algorithm", "invalid_choice"),
                                                             ("--speculative-ddtree-budget", "unknown")}


def test_0523_window_spelling_on_0511_names_the_replacement():
    [p] = f.flag_problems({"model_path": "/m"}, None, {"--speculative-draft-window-size": 2048}, "0.5.11")
    assert (p["flag"], p["version"], p["replacement"]) == (
        "--speculative-draft-window-size", "0.5.11", "--speculative-dflash-draft-window-size")
    assert "SGLang 0.5.23 spelling" in p["detail"]


def test_cuda_graph_max_bs_on_0523_is_refused_with_the_split_flags():
    [p] = f.flag_problems({"model_path": "/m", "cuda_graph_max_bs": 16}, None, None, "0.5.23")
    assert (p["flag"], p["version"], p["problem"]) == ("--cuda-graph-max-bs", "0.5.23", "unknown")
    assert "--cuda-graph-max-bs-decode" in p["detail"] and "--cuda-graph-max-bs-prefill" in p["detail"]
    with pytest.raises(f.SGLangConfigError, match="--cuda-graph-max-bs is not a flag of SGLang 0.5.23"):
        f.sglang_argv({"model_path": "/m", "cuda_graph_max_bs": 16}, None, None, "0.5.23")


def test_deprecated_flag_is_reported_but_still_rendered():
    argv = f.sglang_argv({"model_path": "/m", "disable_cuda_graph": True}, None, None, "0.5.23")
    assert "--disable-cuda-graph" in argv
    [p] = f.flag_problems({"model_path": "/m", "disable_cuda_graph": True}, None, None, "0.5.23")
    assert p["problem"] == "deprecated" and p["replacement"] == "--cuda-graph-backend-decode"


@pytest.mark.parametrize("word,quoted", [
    ("/srv/models/Kimi", "/srv/models/Kimi"),
    ("50%", "50%%"),
    ("a b", '"a b"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("$HOME", "\"$$HOME\""),
])
def test_exec_args_quoting_for_systemd(word, quoted):
    assert f.sglang_exec_args([word]) == quoted


def test_exec_args_round_trip_through_shell_style_split():
    argv = ["--model-path", "/srv/my models/x", "--served-model-name", 'k"2']
    assert shlex.split(f.sglang_exec_args(argv)) == argv


def test_environment_lines_sorted_and_quoted():
    lines = f.sglang_environment({"PATH": "/a:/b", "B": "x y", "A": "50%"})
    assert lines == ['"A=50%%"', '"B=x y"', '"PATH=/a:/b"']
    with pytest.raises(f.SGLangConfigError):
        f.sglang_environment({"BAD-NAME": "1"})


@pytest.mark.parametrize("host,url", [("0.0.0.0", "http://127.0.0.1:30001"), ("127.0.0.1", "http://127.0.0.1:30001"),
                                      ("10.0.0.5", "http://10.0.0.5:30001"), ("::1", "http://[::1]:30001")])
def test_probe_url(host, url):
    assert f.sglang_probe_url({"host": host, "port": 30001}) == url


def test_model_id_prefers_served_name():
    assert f.sglang_model_id({"model_path": "/m", "served_model_name": "kimi"}) == "kimi"
    assert f.sglang_model_id({"model_path": "/m"}) == "/m"


def test_filter_module_exports():
    assert {"sglang_argv", "sglang_flag_problems", "sglang_exec_args", "sglang_environment", "sglang_validate"} <= set(
        f.FilterModule().filters())


def test_flag_value_is_what_the_argv_gives_the_flag():
    server = {"model_path": "/srv/models/Kimi-K2.6", "tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2",
              "trust_remote_code": True}
    argv = f.sglang_argv(server, None, {"--reasoning-parser": "qwen3"}, "0.5.11")
    assert argv[argv.index("--tool-call-parser") + 1] == "kimi_k2"
    assert f.sglang_flag_value(server, "--tool-call-parser") == "kimi_k2"
    # an extra arg comes later in the argv, so the parser keeps it (either spelling of its key)
    assert f.sglang_flag_value(server, "--reasoning-parser", {"--reasoning-parser": "qwen3"}) == "qwen3"
    assert f.sglang_flag_value(server, "--reasoning-parser", {"reasoning_parser": "qwen3"}) == "qwen3"
    assert f.sglang_flag_value(server, "--model-path") == "/srv/models/Kimi-K2.6"
    assert f.sglang_flag_value({"model_path": "/m"}, "--tool-call-parser") == ""
    assert f.sglang_flag_value({"tool_call_parser": None}, "--tool-call-parser", None) == ""
