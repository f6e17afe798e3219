"""The stand-in's port of real SGLang 0.5.11's kimi_k2 reasoning and tool-call parsers (reasoning.py, tool_parser.py)
and its chat replies with them (chat.py, chat_model.py), held to tests/fixtures/real_sglang/chat_parsers-0.5.11.json
(the real answers and shapes, derived from the source)."""
import http.client
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
from sglang_standin import reasoning, tool_parser  # noqa: E402
from sglang_standin.local import LocalServer  # noqa: E402

REAL = json.loads((ROOT / "tests/fixtures/real_sglang/chat_parsers-0.5.11.json").read_text())
FAST = {"SGLANG_STANDIN_LOAD_S": "0.2", "SGLANG_STANDIN_WARMUP_S": "0.2", "SGLANG_STANDIN_THINK_TOKENS": "6"}
PARSERS = ["--reasoning-parser", "kimi_k2", "--tool-call-parser", "kimi_k2", "--grammar-backend", "none"]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("case", REAL["reasoning_whole"], ids=lambda c: c["text"][:24])
def test_reasoning_whole_as_real(case):
    got = reasoning.Detector("kimi_k2", case["force"], stream_reasoning=False).detect_and_parse(case["text"])
    assert got == (case["reasoning"], case["content"])


@pytest.mark.parametrize("case", REAL["reasoning_stream"], ids=lambda c: "|".join(c["increments"])[:24])
def test_reasoning_stream_as_real(case):
    det = reasoning.Detector("kimi_k2", case["force"])
    assert [list(det.parse_streaming_increment(i)) for i in case["increments"]] == case["out"]


@pytest.mark.parametrize("case", REAL["tools_whole"], ids=lambda c: c["text"][:24])
def test_tool_calls_whole_as_real(case):
    content, calls = tool_parser.parse_whole(case["text"])
    assert content == case["content"] and [list(c) for c in calls] == case["calls"]


@pytest.mark.parametrize("case", REAL["tools_stream"], ids=lambda c: "|".join(c["increments"])[:24])
def test_tool_calls_stream_as_real(case):
    det = tool_parser.StreamDetector()
    out = [[normal, [list(c) for c in calls]] for normal, calls in map(det.parse_streaming_increment,
                                                                       case["increments"])]
    assert out == case["out"] and det.unstreamed_args() == case["unstreamed"]


def test_force_reasoning_follows_the_kimi_template_switch():
    assert reasoning.force_reasoning("kimi_k2", None) and reasoning.force_reasoning("kimi_k2", {"thinking": True})
    assert not reasoning.force_reasoning("kimi_k2", {"thinking": False})
    assert not reasoning.force_reasoning("qwen3", {"enable_thinking": False})


def test_history_counts_earlier_calls_into_the_id():
    messages = [{"role": "assistant", "tool_calls": [{}, {}]}, {"role": "user", "content": "x"}]
    assert tool_parser.call_id("f", 0, tool_parser.history_calls(messages)) == "functions.f:2"


def _post(srv, body):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(dict(body, model="/m")),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    if not body.get("stream"):
        return resp.status, json.loads(raw)
    return resp.status, [json.loads(line[5:]) for line in raw.splitlines()
                         if line.startswith("data:") and "[DONE]" not in line]


@pytest.fixture(scope="module")
def kimi():
    with LocalServer(["--model-path", "/m"] + PARSERS, env=FAST) as srv:
        srv.wait_for_line("fired up")
        yield srv


def test_reply_thinks_then_answers(kimi):
    shape = REAL["reply"]
    status, body = _post(kimi, {"messages": ASK, "max_tokens": 64})
    choice = body["choices"][0]
    assert status == 200 and list(choice["message"]) == shape["message_keys"]
    assert choice["message"]["content"] == "Paris" and choice["message"]["reasoning_content"].startswith("The user")
    assert choice["message"]["tool_calls"] is None and choice["finish_reason"] == "stop"
    assert body["usage"]["reasoning_tokens"] == 8  # <think>, 6 of thought, </think>


def test_switch_off_answers_without_thinking(kimi):
    _, body = _post(kimi, {"messages": ASK, "max_tokens": 64, "chat_template_kwargs": {"thinking": False}})
    message = body["choices"][0]["message"]
    assert message["content"] == "Paris" and message["reasoning_content"] is REAL["reply"]["empty_reasoning_content"]


def test_budget_spent_thinking_leaves_content_empty(kimi):
    _, body = _post(kimi, {"messages": ASK, "max_tokens": 4})
    choice = body["choices"][0]
    assert choice["message"]["content"] is REAL["reply"]["empty_content"] and choice["finish_reason"] == "length"
    assert choice["message"]["reasoning_content"]


def test_tool_call_reply_as_real(kimi):
    shape = REAL["reply"]
    _, body = _post(kimi, {"messages": WEATHER, "max_tokens": 64, "tools": [TOOL]})
    choice = body["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert list(call) == shape["tool_call_keys"] and list(call["function"]) == shape["function_keys"]
    assert call["id"] == "functions.get_weather:0" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert choice["finish_reason"] == shape["finish_reason_with_call"]
    assert choice["matched_stop"] is shape["matched_stop_with_call"]


def test_required_tool_choice_with_grammar_none_is_refused_as_real(kimi):
    status, body = _post(kimi, {"messages": WEATHER, "tools": [TOOL], "tool_choice": "required"})
    want = REAL["reply"]["required_with_grammar_none"]
    assert status == want["status"] and body == want["body"]


def test_streamed_deltas_as_real(kimi):
    shape = REAL["reply"]
    _, chunks = _post(kimi, {"messages": WEATHER, "max_tokens": 64, "tools": [TOOL], "stream": True})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == shape["stream_role_delta"]
    thinking = [d for d in deltas if d.get("reasoning_content")]
    assert thinking and all(list(d) == shape["stream_reasoning_delta_keys"] for d in thinking)
    calls = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("tool_calls")]
    assert all(list(c) == shape["stream_tool_chunk_keys"] for c in calls)
    assert all(list(c["choices"][0]["delta"]) == shape["stream_tool_delta_keys"] for c in calls)
    first, rest = calls[0]["choices"][0]["delta"]["tool_calls"][0], calls[1:]
    assert first["id"] == "functions.get_weather:0" and first["function"] == {"name": "get_weather", "arguments": ""}
    args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] for c in rest)
    assert json.loads(args) == {"city": "Paris"}
    assert all(c["choices"][0]["delta"]["tool_calls"][0]["id"] is None for c in rest)
    last = chunks[-1]["choices"][0]
    assert last["delta"] == shape["stream_finish_delta"] and last["finish_reason"] == "tool_calls"


def test_streamed_answer_after_thinking(kimi):
    _, chunks = _post(kimi, {"messages": ASK, "max_tokens": 64, "stream": True})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    content = [d for d in deltas[1:] if d.get("content")]
    assert "".join(d["content"] for d in content) == "Paris"
    assert all(list(d) == REAL["reply"]["stream_content_delta_keys"] for d in content)
    assert all(list(c) == REAL["reply"]["stream_fast_chunk_keys"] for c in chunks if c["choices"])


def test_without_parsers_no_thinking_and_the_markup_stays_in_content():
    with LocalServer(["--model-path", "/m"], env=FAST) as srv:
        srv.wait_for_line("fired up")
        _, plain = _post(srv, {"messages": ASK, "max_tokens": 64})
        _, tools = _post(srv, {"messages": WEATHER, "max_tokens": 64, "tools": [TOOL]})
    assert plain["choices"][0]["message"]["content"] == "Paris"
    assert plain["choices"][0]["message"]["reasoning_content"] is None
    assert tool_parser.BOT in tools["choices"][0]["message"]["content"]
    assert tools["choices"][0]["message"]["tool_calls"] is None


def test_think_forever_fault_never_ends_thinking():
    with LocalServer(["--model-path", "/m"] + PARSERS, env=dict(FAST, SGLANG_STANDIN_FAULT="think_forever")) as srv:
        srv.wait_for_line("fired up")
        _, body = _post(srv, {"messages": ASK, "max_tokens": 50, "chat_template_kwargs": {"thinking": False}})
    choice = body["choices"][0]
    assert choice["message"]["content"] is None and choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 50 and len(choice["message"]["reasoning_content"]) > 100


def test_the_fixtures_parser_answers_are_real_0511s_as_recorded_on_the_h200():
    """chat_parsers-0.5.11.recorded.json: record_chat_parsers.py ran real 0.5.11's ReasoningParser("kimi_k2") and
    FunctionCallParser(tools, "kimi_k2") on the H200 over this fixture's inputs. Their answers are the fixture's, so the
    tests above hold the stand-in's port to the real parsers, not to a reading of them."""
    recorded = json.loads((ROOT / "tests/fixtures/real_sglang/chat_parsers-0.5.11.recorded.json").read_text())
    assert recorded["sglang_version"] == "0.5.11"
    for section in ("reasoning_whole", "reasoning_stream", "tools_whole", "tools_stream"):
        assert recorded[section] == REAL[section], section
