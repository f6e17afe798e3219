"""The SGLang stand-in (lab/sglang_standin): CLI like argparse, lifecycle from FACTS, API, faults. Loopback only."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from sglang_standin import engine  # noqa: E402
from sglang_standin.local import LocalServer  # noqa: E402
from sglang_standin.server_args import prepare_server_args  # noqa: E402

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402

FAST = {"SGLANG_STANDIN_LOAD_S": "0.3", "SGLANG_STANDIN_WARMUP_S": "0.3"}
BASE = ["--model-path", "/srv/models/Kimi-K2.6", "--host", "127.0.0.1"]
DDTREE = ["--attention-backend", "triton", "--page-size", "1", "--speculative-algorithm", "DDTREE",
          "--speculative-draft-model-path", "/srv/models/drafter", "--speculative-dflash-block-size", "8",
          "--speculative-dflash-draft-window-size", "2048", "--speculative-ddtree-budget", "8",
          "--speculative-ddtree-topk-cap", "4", "--speculative-ddtree-debug-metrics"]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/srv/models/drafter",
          "--speculative-dflash-block-size", "8"]


def run_cli(args, env=None):
    srv = LocalServer(args, env=dict(FAST, **(env or {})))
    return subprocess.run(srv.cmd, env=srv.env, capture_output=True, text=True, timeout=30)


def test_unknown_flag_exits_2_like_argparse():
    proc = run_cli(BASE + ["--speculative-ddtree-bugdet", "8"])
    assert proc.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --speculative-ddtree-bugdet 8" in proc.stderr
    assert proc.stderr.startswith("usage: sglang serve")


def test_the_parser_is_the_emulated_versions_and_ddtree_comes_only_from_the_patch_series(standin_ddtree_root):
    proc = run_cli(BASE + DDTREE)  # plain 0.5.11, as real SGLang 0.5.11 answered on the H200
    assert proc.returncode == 2 and "argument --speculative-algorithm: invalid choice: 'DDTREE'" in proc.stderr
    code = ("import sys\nfrom sglang_standin.server_args import prepare_server_args\n"
            "a = prepare_server_args(sys.argv[1:])\nprint(a.speculative_ddtree_budget, a.speculative_num_draft_tokens)")
    env = {"PYTHONPATH": str(standin_ddtree_root)}
    ok = subprocess.run([sys.executable, "-c", code] + BASE + DDTREE, capture_output=True, text=True, timeout=30,
                        env=env)
    assert ok.stdout.split() == ["8", "8"], ok.stderr
    bad = subprocess.run([sys.executable, "-c", code] + BASE + DDTREE[2:] + ["--attention-backend", "fa3"],
                         capture_output=True, text=True, timeout=30, env=env)
    assert bad.returncode == 1 and "DDTREE requires --attention-backend triton" in bad.stderr


def test_bad_choice_and_missing_model_path_exit_2():
    assert run_cli(BASE + ["--attention-backend", "magic"]).returncode == 2
    assert "required: --model-path" in run_cli(["--port", "1"]).stderr


def test_prepare_server_args_semantic_check_raises():
    with pytest.raises(ValueError, match="window_size=4, block_size=8"):
        prepare_server_args(BASE + DFLASH + ["--speculative-dflash-draft-window-size", "4"])
    with pytest.raises(SystemExit) as exc:
        prepare_server_args(BASE + ["--nope"])
    assert exc.value.code == 2
    args = prepare_server_args(BASE + DFLASH)
    assert args.speculative_num_draft_tokens == 8 and args.max_running_requests == 48 and args.tp_size == 1


def test_lifecycle_refused_then_503_then_200(standin_ddtree_root):
    with LocalServer(BASE + DDTREE, env=dict(FAST, SGLANG_STANDIN_LOAD_S="0.6"), package_root=standin_ddtree_root) as srv:
        srv.wait_for_line("Load weight begin")
        assert sglang_http.call(srv.url, "/health").error == "refused"
        srv.wait_for_line("Uvicorn running")
        for path in ("/health", "/health_generate"):
            assert sglang_http.call(srv.url, path).status == 503, path
        assert sglang_http.call(srv.url, "/ready").status == 404  # 0.5.11 has no /ready (recorded on the H200)
        for path in ("/v1/models", "/model_info", "/server_info"):
            assert sglang_http.call(srv.url, path).status == 200, path
        assert sglang_http.accept_length(sglang_http.call(srv.url, "/server_info").json()) is None  # none decoded
        srv.wait_for_line("The server is fired up and ready to roll!")
        assert sglang_http.call(srv.url, "/health").status == 200
        assert sglang_http.model_ids(sglang_http.call(srv.url, "/v1/models")) == ["/srv/models/Kimi-K2.6"]
        info = sglang_http.call(srv.url, "/server_info").json()
        warmup = engine.SpecShape.resolve("DDTREE", 8, 8, 4).schedule(8, engine.text_class(
            "The capital city of France is"))  # SGLang's warmup request: 8 tokens, counted once ready
        assert sglang_http.accept_length(info) == pytest.approx(sum(warmup) / len(warmup))
        assert info["speculative_algorithm"] == "DDTREE"


@pytest.fixture(scope="module")
def ready_server():
    with LocalServer(BASE + ["--api-key", "k-123", "--served-model-name", "kimi"], env=FAST) as srv:
        srv.wait_for_line("fired up")
        yield srv


def test_api_key_protects_all_but_health(ready_server):
    url = ready_server.url
    assert sglang_http.call(url, "/v1/models").status == 401
    assert sglang_http.call(url, "/health").status == 200
    assert sglang_http.call(url, "/metrics").status == 200
    assert sglang_http.model_ids(sglang_http.call(url, "/v1/models", api_key="k-123")) == ["kimi"]


def test_known_answers_chat_completions_generate(ready_server):
    url, key = ready_server.url, "k-123"
    chat = sglang_http.call(url, "/v1/chat/completions", "POST", {
        "model": "kimi", "temperature": 0, "messages": [{"role": "user", "content": "What is 17 + 25?"}]},
        api_key=key).json()
    assert chat["choices"][0]["message"]["content"] == "42"
    comp = sglang_http.call(url, "/v1/completions", "POST", {"prompt": "The capital of Japan is", "max_tokens": 4},
                            api_key=key).json()
    assert comp["choices"][0]["text"] == "Tokyo"
    gen = sglang_http.call(url, "/generate", "POST", {"text": "Repeat: a b c", "sampling_params": {
        "max_new_tokens": 8}}, api_key=key).json()
    assert gen["text"] == "a b c" and gen["meta_info"]["completion_tokens"] == 3
    wrong = sglang_http.call(url, "/v1/chat/completions", "POST", {"model": "other", "messages": []}, api_key=key)
    assert wrong.status == 404


def test_streaming_is_deterministic_and_counts_tokens(ready_server):
    payload = {"model": "kimi", "messages": [{"role": "user", "content": "tell a story"}], "max_tokens": 20,
               "stream_options": {"include_usage": True}}
    a = sglang_http.stream(ready_server.url, "/v1/chat/completions", payload, api_key="k-123")
    b = sglang_http.stream(ready_server.url, "/v1/chat/completions", payload, api_key="k-123")
    assert not a.error and a.text == b.text and a.chunks == 20 and a.usage["completion_tokens"] == 20
    assert a.ttft is not None and a.ttft < a.elapsed
    c = sglang_http.stream(ready_server.url, "/v1/completions", {"prompt": "x", "max_tokens": 5}, api_key="k-123")
    assert c.chunks == 5


def test_generate_stream(ready_server):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", ready_server.port, timeout=10)
    conn.request("POST", "/generate", body=json.dumps({"text": "hi", "stream": True, "sampling_params": {
        "max_new_tokens": 4}}), headers={"Authorization": "Bearer k-123", "Content-Type": "application/json"})
    body = conn.getresponse().read().decode()
    events = [json.loads(ln[6:]) for ln in body.splitlines() if ln.startswith("data: {")]
    assert events[-1]["meta_info"]["completion_tokens"] == 4 and events[-1]["meta_info"]["finish_reason"]


def test_token_id_prompts_count_one_token_per_id(ready_server):
    ids = list(range(100, 1124))
    gen = sglang_http.call(ready_server.url, "/generate", "POST", {"input_ids": ids, "sampling_params": {
        "max_new_tokens": 2}}, api_key="k-123").json()
    assert gen["meta_info"]["prompt_tokens"] == 1024
    comp = sglang_http.call(ready_server.url, "/v1/completions", "POST", {"prompt": ids[:60], "max_tokens": 2},
                            api_key="k-123").json()
    assert comp["usage"]["prompt_tokens"] == 60
    assert engine.prompt_of([[1, 2, 3]]) == ("1 2 3", 3) and engine.prompt_of(["a b", "c"]) == ("a b", 2)


def test_engine_known_answers_and_pseudo_text():
    assert engine.answer("What is the capital of France? Answer with one word.") == "Paris"
    assert engine.answer("What is 6 x 7") == "42"
    assert engine.answer("Repeat exactly: blue harbour lantern") == "blue harbour lantern"
    toks = engine.tokens_for("anything", 50)
    assert len(toks) == 50 and toks == engine.tokens_for("anything", 50)
    assert "\ufffd" in "".join(engine.tokens_for("x", 5, garbage=True))


@pytest.mark.parametrize("fault,needle", [
    ("crash_loading", "crash_loading"),
    ("bind_then_die", "bind_then_die"),
    ("crash_warmup", "crash_warmup"),
])
def test_crash_faults_exit_nonzero_with_a_traceback(fault, needle):
    with LocalServer(BASE, env=dict(FAST, SGLANG_STANDIN_FAULT=fault)) as srv:
        assert srv.wait_exit() == 1
        log = "\n".join(srv.lines)
        assert needle in log and "Traceback" in log
        assert ("Uvicorn running" in log) == (fault != "crash_loading")
        assert "fired up" not in log


def test_sm103_budget_over_8_with_cuda_graphs_crashes(standin_ddtree_root):
    args = BASE + [a if a != "8" or i != DDTREE.index("--speculative-ddtree-budget") + 1 else "16"
                   for i, a in enumerate(DDTREE)]
    with LocalServer(args, env=dict(FAST, SGLANG_STANDIN_GPU_CC="10.3"), package_root=standin_ddtree_root) as srv:
        assert srv.wait_exit() == 1
        assert "illegal memory access" in "\n".join(srv.lines)
    with LocalServer(args + ["--disable-cuda-graph"], env=dict(FAST, SGLANG_STANDIN_GPU_CC="10.3"),
                     package_root=standin_ddtree_root) as srv:
        srv.wait_for_line("fired up")


def test_hang_never_listens_and_stops_on_sigterm():
    with LocalServer(BASE, env=dict(FAST, SGLANG_STANDIN_FAULT="hang")) as srv:
        srv.wait_for_line("hanging")
        assert sglang_http.call(srv.url, "/health").error == "refused"
        srv.stop()
        assert srv.proc.returncode == 0


def test_hang_warmup_stays_503():
    with LocalServer(BASE, env=dict(FAST, SGLANG_STANDIN_FAULT="hang_warmup")) as srv:
        srv.wait_for_line("hanging")
        assert sglang_http.call(srv.url, "/health").status == 503


def test_slow_shutdown_keeps_answering_after_sigterm():
    with LocalServer(BASE, env=dict(FAST, SGLANG_STANDIN_FAULT="slow_shutdown", SGLANG_STANDIN_SHUTDOWN_S="1")) as srv:
        srv.wait_for_line("fired up")
        srv.proc.terminate()
        srv.wait_for_line("still answering")
        # as recorded from real SGLang: /health says 503 at once, the rest still answers while it drains
        assert sglang_http.call(srv.url, "/health").status == 503
        assert sglang_http.call(srv.url, "/v1/models").status == 200
        assert srv.wait_exit() == -signal.SIGKILL  # real SGLang kills itself after the drain


def test_garbage_output():
    with LocalServer(BASE, env=dict(FAST, SGLANG_STANDIN_FAULT="garbage")) as srv:
        srv.wait_for_line("fired up")
        out = sglang_http.call(srv.url, "/v1/chat/completions", "POST", {"messages": [
            {"role": "user", "content": "What is the capital of France?"}], "max_tokens": 10}).json()
        assert out["choices"][0]["message"]["content"].startswith("\ufffd the the")


def test_stdlib_build_backend_makes_an_installable_wheel(tmp_path):
    import zipfile
    sys.path.insert(0, str(ROOT / "lab" / "sglang_standin" / "build_backend"))
    import standin_build
    name = standin_build.build_wheel(str(tmp_path))
    assert standin_build.get_requires_for_build_wheel() == []
    with zipfile.ZipFile(tmp_path / name) as zf:
        names = set(zf.namelist())
        record = zf.read(f"{standin_build._dist_info()}/RECORD").decode()
    assert "sglang_standin/launch_server.py" in names and "sglang_standin/server_args.py" in names
    assert all(n in record for n in names)
    assert name.startswith("sglang_standin-0.5.11") and name.endswith("-py3-none-any.whl")
    assert "sglang_standin/schema.json" in names  # the emulated version's flag schema travels in the wheel
