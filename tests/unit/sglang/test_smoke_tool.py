"""module_utils/sglang/smoke_tool.py: the verdict on the tool-call request's reply (the stand-in's real-shaped replies
are in test_smoke.py)."""
import pytest

from ansible.module_utils.sglang import smoke_tool as st


def reply(calls, content="", reasoning="", finish="tool_calls"):
    return {"content": content, "reasoning": reasoning, "tool_calls": calls, "finish_reason": finish}


def call(name="get_weather", arguments='{"city": "Paris"}'):
    return {"id": f"functions.{name}:0", "index": 0, "type": "function",
            "function": {"name": name, "arguments": arguments}}


def test_a_good_call_passes():
    assert st.verdict(reply([call()]), 128) == "ok"


@pytest.mark.parametrize("calls,content,want", [
    ([], "It is sunny.", "no tool_calls in the reply (finish_reason 'tool_calls', content 'It is sunny.')"),
    ([call(name="get_time")], "", "a tool call names 'get_time', not 'get_weather'"),
    ([call(arguments='{"city": ')], "", "the arguments of get_weather do not parse as JSON"),
    ([call(arguments='["Paris"]')], "", "the arguments of get_weather are not a JSON object: '[\"Paris\"]'"),
    ([call(arguments='{"town": "Paris"}')], "", "the arguments of get_weather lack city"),
    ([call(arguments=None)], "", "the arguments of get_weather are not a JSON object: None"),
])
def test_failures_name_what_came_back(calls, content, want):
    assert want in st.verdict(reply(calls, content), 128)


def test_thinking_only_is_named():
    got = st.verdict(reply([], reasoning="x" * 50, finish="length"), 1152)
    assert got == "the model was still thinking when max_tokens=1152 ran out: reasoning_content 50 chars, content empty"


def test_a_call_out_of_reasoning_passes_though_content_is_empty():
    assert st.verdict(reply([call()], reasoning="let me call it"), 128) == "ok"
