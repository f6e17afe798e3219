"""module_utils/sglang/chat_reply.py: a chat reply's content, reasoning_content, tool_calls and finish reason."""
from ansible.module_utils.sglang import chat_reply as cr
from ansible.module_utils.sglang.degenerate import degenerate

# The reply real 0.5.11 gives with --reasoning-parser kimi_k2 when the budget ran out while thinking
# (serving_chat._build_chat_response: content None when empty; tests/fixtures/real_sglang/chat_parsers-0.5.11.json).
THINKING_ONLY = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                      "reasoning_content": "The user asks for the capital",
                                                      "tool_calls": None},
                              "finish_reason": "length", "matched_stop": None}]}


def test_reply_of_reads_both():
    got = cr.reply_of(THINKING_ONLY)
    assert got == {"content": "", "reasoning": "The user asks for the capital", "tool_calls": [],
                   "finish_reason": "length"}


def test_old_content_only_read_says_empty_and_the_new_verdict_names_the_thinking():
    old = THINKING_ONLY["choices"][0]["message"]["content"] or ""
    assert degenerate(old) == "empty output"
    got = cr.reply_of(THINKING_ONLY)
    assert cr.thinking_only(got["content"], got["reasoning"], got["finish_reason"], 32) == (
        "the model was still thinking when max_tokens=32 ran out: reasoning_content 29 chars, content empty")


def test_thinking_then_stop_without_answer_is_named_apart():
    assert cr.thinking_only("", "hmm", "stop", 64).startswith("the model stopped after thinking without an answer")


def test_an_answer_or_no_reasoning_is_no_thinking_verdict():
    assert cr.thinking_only("Paris", "hmm", "stop", 64) is None
    assert cr.thinking_only("", "", "stop", 64) is None
