"""module_utils/sglang_preflight.py: the installed parser (here the stand-in's) judges the argv."""
import os
import sys
from pathlib import Path

from filter_plugins.sglang import sglang_argv
from module_utils import sglang_preflight as pf

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT / "lab" / "sglang_standin")}
MODULE = "sglang_standin.server_args"


def check(argv, **kw):
    return pf.check(sys.executable, MODULE, argv, env=ENV, timeout=60, **kw)


def test_profile_argv_accepted():
    argv = sglang_argv({"model_path": "/srv/models/K", "port": 30001, "host": "0.0.0.0", "tp_size": 8,
                        "attention_backend": "triton", "page_size": 1, "trust_remote_code": True},
                       {"algorithm": "DDTREE", "draft_model_path": "/srv/models/d", "block_size": 8,
                        "draft_window_size": 2048, "budget": 8, "topk_cap": 4, "debug_metrics": True})
    out = check(argv, with_api_key=True)
    assert out == {"accepted": True, "rc": 0, "message": ""}


def test_unknown_flag_rejected_with_argparse_message():
    out = check(["--model-path", "/m", "--speculative-ddtree-bugdet", "8"])
    assert not out["accepted"] and out["rc"] == 2
    assert out["message"].startswith("launch_server.py: error: unrecognized arguments: --speculative-ddtree-bugdet")


def test_semantic_rejection_names_the_exception():
    out = check(["--model-path", "/m", "--mem-fraction-static", "1.5"])
    assert not out["accepted"] and out["rc"] == 1 and out["message"].startswith("ValueError: mem_fraction_static")


def test_missing_python_and_missing_module():
    assert pf.check("/nonexistent/python", MODULE, [])["rc"] == 127
    out = pf.check(sys.executable, "sglang.srt.server_args_nope", ["--model-path", "/m"], env=ENV, timeout=60)
    assert not out["accepted"] and "ModuleNotFoundError" in out["message"]


def test_api_key_placeholder_never_the_secret():
    cmd = pf.command("/py", MODULE, ["--model-path", "/m"], with_api_key=True)
    assert cmd[-2:] == ["--api-key", pf.API_KEY_PLACEHOLDER]


def test_timeout_reported(tmp_path):
    slow = tmp_path / "slowparser.py"
    slow.write_text("import time\ndef prepare_server_args(argv):\n    time.sleep(30)\n")
    out = pf.check(sys.executable, "slowparser", [], env={"PYTHONPATH": str(tmp_path)}, timeout=1)
    assert out["rc"] == 124 and "within 1s" in out["message"]
    assert os.path.exists(slow)
