"""Per-version SGLang flag schemas (schemas/sglang/*.json, extracted from the real parsers), the argv check that
reads them, and the two scripts that run in a venv (extractor, parser verdicts), tried on the lab stand-in.

The committed schemas come from the real 0.5.11 and 0.5.23 wheels; these tests need none of those venvs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible.module_utils.sglang import schema as S

ROOT = Path(__file__).resolve().parents[3]
EXTRACT = ROOT / "module_utils" / "sglang" / "schema_extract.py"
VERDICTS = ROOT / "module_utils" / "sglang" / "parser_verdicts.py"
STANDIN = ROOT / "lab" / "sglang_standin"
STANDIN_MODULE = "sglang_standin.server_args"


@pytest.fixture(scope="module")
def v11():
    return S.load("0.5.11")


@pytest.fixture(scope="module")
def v23():
    return S.load("0.5.23")


def _run(script, *args, pythonpath=STANDIN, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _standin():
    sys.path.insert(0, str(STANDIN))
    try:
        import sglang_standin
        from sglang_standin import server_args
    finally:
        sys.path.remove(str(STANDIN))
    return sglang_standin, server_args


def _standin_version():
    """The rule the extractor follows: the module's SGLANG_VERSION, else the stand-in's own __version__."""
    package, module = _standin()
    return getattr(module, "SGLANG_VERSION", None) or package.__version__


def _problem(problems, flag):
    hits = [p for p in problems if p["flag"] == flag]
    assert len(hits) == 1, problems
    return hits[0]


# --- the committed schemas -------------------------------------------------------------------------------------

def test_available_and_versions(v11, v23):
    assert {"0.5.11", "0.5.23"} <= set(S.available())
    assert v11.version == "0.5.11" and v23.version == "0.5.23"
    for schema, dist_version in ((v11, "0.5.11"), (v23, "0.5.23")):
        source = schema.data["source"]
        assert source["distribution"] == "sglang" and source["version"] == dist_version
        assert "sglang/srt/server_args.py" in source["files_sha256"]
        assert all(len(h) == 64 for h in source["files_sha256"].values())
    assert any(p.startswith("sglang/srt/arg_groups/") for p in v23.data["source"]["files_sha256"])
    # the whole surface, not a hand-picked subset
    assert len(v11.options) > 300 and len(v23.options) > 450


def test_load_missing_version_names_it_and_the_available_ones():
    with pytest.raises(S.SchemaError) as err:
        S.load("9.9.9")
    assert "9.9.9" in str(err.value) and "0.5.11" in str(err.value) and "0.5.23" in str(err.value)


def test_files_are_canonical_json(v11, v23):
    for version in ("0.5.11", "0.5.23"):
        text = (Path(S.SCHEMA_DIR) / f"{version}.json").read_text(encoding="utf-8")
        assert text == json.dumps(json.loads(text), sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_0_5_11_flags(v11):
    assert v11.lookup("--speculative-dflash-draft-window-size")[0] == "speculative_dflash_draft_window_size"
    assert v11.lookup("--speculative-draft-window-size") is None
    assert v11.lookup("--cuda-graph-max-bs") is not None
    choices = v11.choices("--speculative-algorithm")
    assert "DFLASH" in choices and "EAGLE" in choices and "DDTREE" not in choices
    assert v11.lookup("--speculative-ddtree-budget") is None
    assert v11.lookup("--model")[0] == "model_path" and v11.flag_of("model_path") == "--model-path"
    assert v11.options["model_path"]["required"] is True
    assert v11.is_bool("--trust-remote-code") and not v11.is_bool("--tp-size")
    # 0.5.11 registers --tensor-parallel-size first, on its own dest (from_cli_args renames it to tp_size)
    assert v11.lookup("--tp-size")[0] == "tensor_parallel_size"
    assert v11.flag_of("tensor_parallel_size") == "--tensor-parallel-size"
    assert v11.options["tensor_parallel_size"]["type"] == "int"


def test_0_5_23_flags(v23):
    assert v23.lookup("--speculative-draft-window-size=8")[0] == "speculative_draft_window_size"
    assert v23.lookup("--speculative-dflash-draft-window-size") is None
    assert v23.lookup("--cuda-graph-max-bs") is None
    assert v23.lookup("--cuda-graph-max-bs-decode") is not None
    assert v23.lookup("--speculative-ddtree-budget") is None
    assert v23.choices("--speculative-algorithm") is None  # 0.5.23 checks the algorithm after argparse
    assert v23.lookup("--tp-size")[0] == "tp_size" and v23.flag_of("tp_size") == "--tp-size"


def test_deprecations_as_the_parsers_mark_them(v11, v23):
    dcg = v23.lookup("--disable-cuda-graph")[1]
    assert dcg["action"] == "DeprecatedStoreTrueAction" and dcg["deprecated"] and not dcg["removed"]
    assert dcg["deprecated_by"] == "--cuda-graph-backend-decode"
    assert "{decode,prefill}" in dcg["deprecation"]
    assert v23.lookup("--enable-dp-attention")[1]["deprecated_by"] == "--attn-dp-size"
    assert v23.lookup("--grpc-mode")[1]["deprecated_by"] == "--smg-grpc-mode"  # from the help text
    # 0.5.11 spells the same flags without deprecation
    assert not v11.lookup("--disable-cuda-graph")[1]["deprecated"]
    hybrid = v11.lookup("--hybrid-kvcache-ratio")[1]
    assert hybrid["removed"] and hybrid["deprecated_by"] == "--swa-full-tokens-ratio"
    stream = v11.lookup("--stream-output")[1]
    assert stream["dest"] == "incremental_streaming_output" and stream["deprecated_by"] == "--incremental-streaming-output"
    # the dest's canonical flag is the live one, not the old spelling sharing it
    assert v11.flag_of("incremental_streaming_output") == "--incremental-streaming-output"
    assert not v11.lookup("--tp-size")[1]["deprecated"]


# --- check_argv ----------------------------------------------------------------------------------------------

def test_window_size_spellings_cross(v11, v23):
    p = _problem(S.check_argv(v11, ["--model-path", "m", "--speculative-draft-window-size", "8"], [v23]),
                 "--speculative-draft-window-size")
    assert p["problem"] == "unknown" and p["version"] == "0.5.11"
    assert p["replacement"] == "--speculative-dflash-draft-window-size"
    assert "0.5.11" in p["detail"] and "--speculative-draft-window-size" in p["detail"]
    assert "--speculative-dflash-draft-window-size" in p["detail"]
    p = _problem(S.check_argv(v23, ["--speculative-dflash-draft-window-size=8"], [v11]),
                 "--speculative-dflash-draft-window-size")
    assert p["problem"] == "unknown" and p["replacement"] == "--speculative-draft-window-size"


M = ["--model-path", "/m"]


def test_missing_required_model_path(v11):
    [p] = S.check_argv(v11, ["--port", "1"])
    assert (p["flag"], p["problem"]) == ("--model-path", "missing_required")
    assert "requires --model-path/--model" in p["detail"]


def test_cuda_graph_max_bs_on_0_5_23(v11, v23):
    problems = S.check_argv(v23, M + ["--cuda-graph-max-bs", "16", "--tp-size", "2"], [v11])
    assert len(problems) == 1  # "16" was taken as the flag's value, --tp-size parsed normally
    p = problems[0]
    assert p["problem"] == "unknown" and p["replacement"] == "--cuda-graph-max-bs-decode"
    assert "--cuda-graph-max-bs-prefill" in p["detail"] and "0.5.23" in p["detail"]
    assert S.check_argv(v11, M + ["--cuda-graph-max-bs", "16"], [v23]) == []


@pytest.mark.parametrize("flag", ["--speculative-ddtree-budget", "--speculative-ddtree-topk-cap",
                                  "--speculative-ddtree-debug-metrics"])
def test_ddtree_flags_have_no_replacement(v11, v23, flag):
    for schema, other in ((v11, v23), (v23, v11)):
        p = _problem(S.check_argv(schema, [flag, "8"] if "debug" not in flag else [flag], [other]), flag)
        assert p["problem"] == "unknown" and p["replacement"] is None
        assert flag in p["detail"] and schema.version in p["detail"]


def test_ddtree_algorithm_is_an_invalid_choice_on_0_5_11(v11, v23):
    p = _problem(S.check_argv(v11, ["--speculative-algorithm", "DDTREE"], [v23]), "--speculative-algorithm")
    assert p["problem"] == "invalid_choice" and "DDTREE" in p["detail"]
    assert S.check_argv(v11, M + ["--speculative-algorithm", "DFLASH"]) == []


def test_deprecated_removed_and_value_problems(v11, v23):
    p = _problem(S.check_argv(v23, ["--disable-cuda-graph"]), "--disable-cuda-graph")
    assert p["problem"] == "deprecated" and p["replacement"] == "--cuda-graph-backend-decode"
    p = _problem(S.check_argv(v11, ["--hybrid-kvcache-ratio"]), "--hybrid-kvcache-ratio")
    assert p["problem"] == "removed" and p["replacement"] == "--swa-full-tokens-ratio"
    kinds = {p["flag"]: p["problem"] for p in S.check_argv(v11, M + ["--tp-size", "two", "--dtype", "int3",
                                                                 "--trust-remote-code=1", "--port"])}
    assert kinds == {"--tp-size": "bad_type", "--dtype": "invalid_choice", "--trust-remote-code": "bad_type",
                     "--port": "missing_value"}
    assert _problem(S.check_argv(v11, ["--port", "--tp-size", "1"]), "--port")["problem"] == "missing_value"
    assert _problem(S.check_argv(v11, ["stray"]), "stray")["problem"] == "unknown"


def test_a_good_argv_passes(v11, v23):
    argv = ["--model-path", "/m", "--tp-size", "2", "--mem-fraction-static", "0.8", "--trust-remote-code",
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--host=0.0.0.0"]
    assert S.check_argv(v11, argv, [v23]) == []
    assert S.check_argv(v23, argv, [v11]) == []


def test_without_other_versions_no_replacement_is_invented(v11):
    p = _problem(S.check_argv(v11, ["--speculative-draft-window-size", "8"]), "--speculative-draft-window-size")
    assert p["replacement"] is None


def test_from_dict_and_lookup_forms():
    schema = S.from_dict({"schema_format": 1, "sglang_version": "1.0", "options": {
        "a_b": {"dest": "a_b", "flags": ["--a-b", "--ab"], "nargs": "+", "type": "int", "choices": None},
        "x": {"dest": "x", "flags": ["--x"], "nargs": 0, "type": None, "choices": None}}})
    assert schema.lookup("--ab=3")[0] == "a_b" and schema.flag_of("a_b") == "--a-b"
    assert S.check_argv(schema, ["--a-b", "1", "2", "--x"]) == []
    assert _problem(S.check_argv(schema, ["--a-b", "--x"]), "--a-b")["problem"] == "missing_value"
    assert _problem(S.check_argv(schema, ["--a-b", "1", "z"]), "--a-b")["problem"] == "bad_type"
    with pytest.raises(S.SchemaError):
        S.from_dict({"schema_format": 2, "sglang_version": "1", "options": {}})


# --- the scripts, on the lab stand-in -----------------------------------------------------------------------

def test_extractor_on_the_standin_matches_its_parser(tmp_path):
    out = tmp_path / "standin.json"
    res = _run(EXTRACT, "--module", STANDIN_MODULE, "--out", str(out))
    assert res.returncode == 0, res.stderr
    schema = S.from_dict(json.loads(out.read_text()))
    assert schema.version == _standin_version()
    parser = _standin()[1].make_parser()
    want = {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}
    assert len(want) > 10 and schema.flags == want
    for action in parser._actions:
        if action.dest == "help":
            continue
        key, option = schema.lookup(action.option_strings[0])
        assert option["dest"] == action.dest and set(option["flags"]) == set(action.option_strings)
        assert option["nargs"] == action.nargs and option["required"] == action.required
        if action.choices is None:
            assert option["choices"] is None
        else:
            assert sorted(map(str, option["choices"])) == sorted(map(str, action.choices))
        if isinstance(action.default, (int, float, str)) and action.default is not None:
            assert option["default"] == action.default
        assert (option["nargs"] == 0) == schema.is_bool(action.option_strings[0])
    # deterministic: a second run is the same bytes
    again = _run(EXTRACT, "--module", STANDIN_MODULE)
    assert again.returncode == 0 and again.stdout == out.read_text()


def test_extractor_reads_deprecations_and_sglang_version(tmp_path):
    pkg = tmp_path / "fakesg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (pkg / "server_args.py").write_text(textwrap.dedent('''
        import argparse, os
        SGLANG_VERSION = "7.7.7"
        SEEN_CUDA = os.environ.get("CUDA_VISIBLE_DEVICES")
        class DeprecatedStoreTrueAction(argparse.Action):
            def __init__(self, option_strings, dest, new_flag=None, nargs=0, **kw):
                self.new_flag = new_flag
                super().__init__(option_strings, dest, nargs=nargs, **kw)
        class DeprecatedAction(argparse.Action):
            def __init__(self, option_strings, dest, nargs=0, **kw):
                super().__init__(option_strings, dest, nargs=nargs, **kw)
        class ServerArgs:
            @staticmethod
            def add_cli_args(p):
                assert p.prog == "sglang serve"
                p.add_argument("--new-x", type=int, choices={3, 1, 2})
                p.add_argument("--old-x", dest="new_x", action=DeprecatedStoreTrueAction, new_flag="--new-x")
                p.add_argument("--gone", action=DeprecatedAction, help="Note: --gone is deprecated now.")
                p.add_argument("--legacy", action="store_true", help="(Deprecated, use --new-x) old.")
                p.add_argument("--cfg", type=__import__("json").loads, default=object())
                p.add_argument("--seen-cuda", default=SEEN_CUDA)
    '''))
    res = _run(EXTRACT, "--module", "fakesg.server_args", pythonpath=tmp_path,
               env_extra={"CUDA_VISIBLE_DEVICES": "0"})
    assert res.returncode == 0, res.stderr
    schema = S.from_dict(json.loads(res.stdout))
    assert schema.version == "7.7.7"
    assert schema.options["seen_cuda"]["default"] == ""  # emptied before the import
    assert schema.options["new_x"]["choices"] == [1, 2, 3] and not schema.options["new_x"]["deprecated"]
    old = schema.lookup("--old-x")[1]
    assert old["dest"] == "new_x" and old["deprecated"] and old["deprecated_by"] == "--new-x" and not old["removed"]
    gone = schema.lookup("--gone")[1]
    assert gone["removed"] and gone["deprecated_by"] is None
    assert schema.lookup("--legacy")[1]["deprecated_by"] == "--new-x"
    assert schema.options["cfg"]["type"] == "json" and " at 0x" not in schema.options["cfg"]["default"]
    assert "fakesg/server_args.py" in schema.data["source"]["files_sha256"]


def test_verdicts_on_the_standin(tmp_path):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({
        "good": ["--model-path", "m", "--tp-size", "2", "--speculative-algorithm", "DFLASH"],
        "unknown": ["--model-path", "m", "--no-such-flag", "1"],
        "bad_int": ["--model-path", "m", "--tp-size", "two"],
    }))
    out = tmp_path / "verdicts.json"
    res = _run(VERDICTS, "--module", STANDIN_MODULE, "--corpus", str(corpus), "--out", str(out))
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["sglang_version"] == _standin_version()
    v = data["verdicts"]
    assert v["good"] == {"accepted": True, "rc": 0, "message": ""}
    assert v["unknown"] == {"accepted": False, "rc": 2, "message": "unrecognized arguments: --no-such-flag 1"}
    assert v["bad_int"]["rc"] == 2 and "invalid int value: 'two'" in v["bad_int"]["message"]
