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


def test_nvlink_profile_reproduces_the_hand_deployed_command_line():
    assert f.sglang_argv(B300_SERVER, B300_SPEC) == HAND_DEPLOYED_B300


def test_none_algorithm_emits_no_speculative_flags():
    argv = f.sglang_argv(B300_SERVER, {"algorithm": "NONE", "budget": 16})
    assert not [a for a in argv if a.startswith("--speculative")]


def test_dflash_uses_upstream_window_flag():
    argv = f.sglang_argv({"model_path": "/m"}, {"algorithm": "dflash", "draft_model_path": "/d", "block_size": 8,
                                                 "draft_window_size": 16})
    assert argv[argv.index("--speculative-algorithm") + 1] == "DFLASH"
    assert "--speculative-draft-window-size" in argv and "--speculative-dflash-draft-window-size" not in argv


def test_eagle3_flags():
    argv = f.sglang_argv({"model_path": "/m"}, {"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3,
                                                 "eagle_topk": 1, "num_draft_tokens": 4})
    assert argv[-6:] == ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                         "--speculative-num-draft-tokens", "4"]


def test_bool_flags_only_when_true_and_none_values_dropped():
    argv = f.sglang_argv({"model_path": "/m", "disable_cuda_graph": True, "trust_remote_code": False,
                          "context_length": None, "tokenizer_path": ""})
    assert argv == ["--model-path", "/m", "--disable-cuda-graph"]


def test_unknown_algorithm_and_api_key_are_refused():
    with pytest.raises(f.SGLangConfigError):
        f.sglang_argv({"model_path": "/m"}, {"algorithm": "MEDUSA"})
    with pytest.raises(f.SGLangConfigError, match="vault"):
        f.sglang_argv({"model_path": "/m", "api_key": "k"})


def test_extra_args_are_appended():
    argv = f.sglang_argv({"model_path": "/m"}, None, {"enable-metrics": True, "cuda_graph_max_bs": 16})
    assert argv == ["--model-path", "/m", "--enable-metrics", "--cuda-graph-max-bs", "16"]


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
    assert {"sglang_argv", "sglang_exec_args", "sglang_environment", "sglang_validate"} <= set(
        f.FilterModule().filters())
