"""One chat completion as the smoke reads it (stdlib only): the answer (`content`), the thinking SGLang separates
with --reasoning-parser (`reasoning_content`), the tool calls it parses with --tool-call-parser (`tool_calls`) and the
finish reason, as real 0.5.11 fills them (srt/entrypoints/openai/serving_chat.py `_build_chat_response`: content and
reasoning_content None when empty, finish_reason "tool_calls" once a call was parsed from a stopped generation);
and the verdict on a reply that thought but never answered."""
from __future__ import annotations

from ansible.module_utils.sglang import api as sglang_http


def reply_of(body: dict) -> dict:
    """{content, reasoning, tool_calls, finish_reason} of a non-streamed chat completion's first choice."""
    choice = body["choices"][0]
    message = choice["message"]
    return {"content": message.get("content") or "", "reasoning": message.get("reasoning_content") or "",
            "tool_calls": message.get("tool_calls") or [], "finish_reason": choice.get("finish_reason")}


def chat(base_url: str, model: str, messages: list, api_key: str | None, max_tokens: int, timeout: float,
         extra: dict | None = None):
    """(reply_of(...), None) or (None, what went wrong)."""
    payload = {"model": model, "messages": messages, "temperature": 0, "max_tokens": max_tokens, **(extra or {})}
    resp = sglang_http.call(base_url, "/v1/chat/completions", "POST", payload, api_key=api_key, timeout=timeout)
    if not resp.ok:
        return None, resp.describe()
    try:
        return reply_of(resp.json()), None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        return None, f"unexpected reply {resp.body[:200]!r}: {exc}"


def thinking_only(content: str, reasoning: str, finish_reason, max_tokens: int) -> str | None:
    """The verdict on a reply whose content is empty while its reasoning_content is not (None otherwise)."""
    if content.strip() or not reasoning.strip():
        return None
    if finish_reason == "length":
        return (f"the model was still thinking when max_tokens={max_tokens} ran out: reasoning_content "
                f"{len(reasoning)} chars, content empty")
    return (f"the model stopped after thinking without an answer (finish_reason {finish_reason!r}): "
            f"reasoning_content {len(reasoning)} chars, content empty")
