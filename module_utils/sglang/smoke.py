"""Known-answer smoke test of an SGLang server through its OpenAI-compatible API (stdlib only).

Each prompt is sent at temperature 0; its answer must match `expect` (a case-insensitive regex) and must not
be degenerate (empty, U+FFFD replacement characters, repetition loops). One streamed generation measures
decode tok/s and TTFT; `/server_info` gives the speculative accept length.

Reasoning models: with --reasoning-parser SGLang puts the thinking in `reasoning_content` and the answer in `content`
(srt/entrypoints/openai/serving_chat.py `_build_chat_response`, and `_generate_chat_stream` for the streamed
deltas), so both are read. Where the model's chat template has a switch to answer without thinking
(chat_template.py), every request passes it in `chat_template_kwargs`; where it has none, a server that runs a
reasoning parser gives each request `thinking_tokens` more. A model that only thinks until the budget runs out fails
with exactly that, apart from an empty answer. With --tool-call-parser one more request checks tool calling
(smoke_tool.py).
"""
from __future__ import annotations

import re

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.sglang import smoke_tool
from ansible.module_utils.sglang.chat_reply import chat, thinking_only
from ansible.module_utils.sglang.degenerate import degenerate

DEFAULT_PROMPTS = (
    {"prompt": "What is the capital of France? Answer with one word.", "expect": r"\bParis\b"},
    {"prompt": "What is 17 + 25? Answer with only the number.", "expect": r"\b42\b"},
    {"prompt": "Repeat exactly: blue harbour lantern", "expect": r"blue harbour lantern"},
)
THROUGHPUT_PROMPT = "Write a short story about a lighthouse keeper and a storm."


def chat_once(base_url: str, model: str, prompt: str, api_key: str | None, max_tokens: int, timeout: float):
    """(the answer's content, None) or (None, what went wrong)."""
    reply, error = chat(base_url, model, [{"role": "user", "content": prompt}], api_key, max_tokens, timeout)
    return (reply["content"], None) if reply else (None, error)


def budget(max_tokens: int, reasoning_parser: str, template_kwargs: dict, thinking_tokens: int) -> int:
    """Tokens one request may take: the answer's, plus the thinking budget where the server separates reasoning and
    the template has no switch to answer without thinking."""
    return max_tokens + (thinking_tokens if reasoning_parser and not template_kwargs else 0)


def _verdict(item: dict, reply: dict | None, error: str | None, tokens: int) -> str:
    if error:
        return f"request failed: {error}"
    thinking = thinking_only(reply["content"], reply["reasoning"], reply["finish_reason"], tokens)
    if thinking:
        return thinking
    if degenerate(reply["content"]) and not item.get("allow_degenerate"):
        return degenerate(reply["content"])
    if item.get("expect") and not re.search(item["expect"], reply["content"], re.IGNORECASE):
        return f"answer does not match {item['expect']!r}"
    return "ok"


def run(base_url: str, model: str, api_key: str | None = None, prompts=DEFAULT_PROMPTS, max_tokens: int = 32,
        throughput_tokens: int = 128, timeout: float = 120.0, min_tok_s: float = 0.0, reasoning_parser: str = "",
        tool_call_parser: str = "", template_kwargs: dict | None = None, thinking_tokens: int = 1024) -> dict:
    """Returns {"ok", "failures": [...], "answers": [...], "tok_s", "ttft_s", "accept_length", "tool_call"}.
    template_kwargs: chat_template_kwargs every request carries (the template's switch to answer without thinking)."""
    template_kwargs = dict(template_kwargs or {})
    extra = {"chat_template_kwargs": template_kwargs} if template_kwargs else {}
    answers, failures = [], []
    for item in prompts:
        tokens = budget(int(item.get("max_tokens", max_tokens)), reasoning_parser, template_kwargs, thinking_tokens)
        reply, error = chat(base_url, model, [{"role": "user", "content": item["prompt"]}], api_key, tokens, timeout,
                            extra)
        text = reply["content"] if reply else None
        entry = {"prompt": item["prompt"], "expect": item.get("expect", ""), "output": text, "error": error,
                 "reasoning_chars": len(reply["reasoning"]) if reply else 0,
                 "finish_reason": reply["finish_reason"] if reply else None, "max_tokens": tokens}
        entry["verdict"] = _verdict(item, reply, error, tokens)
        answers.append(entry)
        if entry["verdict"] != "ok":
            # the verdict first and the answer cut: a looping answer of a thinking budget runs to thousands of
            # characters, and whoever shortens the message (a sweep's reason) must still see why
            failures.append(f"{entry['verdict']}: {item['prompt']!r} -> {text if text is None else text[:200]!r}")

    result = {"answers": answers, "tok_s": None, "ttft_s": None, "completion_tokens": None, "accept_length": None,
              "throughput_output": None, "tool_call": None}
    if throughput_tokens > 0:
        st = sglang_http.stream(base_url, "/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": THROUGHPUT_PROMPT}], "temperature": 0,
            "max_tokens": throughput_tokens, "stream_options": {"include_usage": True}, **extra}, api_key=api_key,
            timeout=timeout)
        # A thinking model may spend the whole budget thinking: its streamed reasoning is decode output all the same.
        streamed = st.reasoning + st.text
        result["throughput_output"] = streamed[:500]
        if st.error:
            failures.append(f"streamed generation failed: {st.error}")
        else:
            tokens = (st.usage or {}).get("completion_tokens") or st.chunks
            decode_time = st.elapsed - (st.ttft or 0.0)
            result.update(completion_tokens=tokens, ttft_s=round(st.ttft or 0.0, 4),
                          tok_s=round((tokens - 1) / decode_time, 2) if tokens > 1 and decode_time > 0 else None)
            why = degenerate(streamed)
            if why:
                failures.append(f"streamed generation is degenerate: {why}: {streamed[:200]!r}")
            if min_tok_s and (result["tok_s"] or 0) < min_tok_s:
                failures.append(f"decode speed {result['tok_s']} tok/s below the minimum {min_tok_s}")
    if tool_call_parser:
        tokens = budget(smoke_tool.TOOL_TOKENS, reasoning_parser, template_kwargs, thinking_tokens)
        result["tool_call"] = smoke_tool.check(base_url, model, api_key, tokens, timeout, extra)
        if result["tool_call"]["verdict"] != "ok":
            failures.append(f"tool call ({tool_call_parser}): {result['tool_call']['verdict']}")
    info = sglang_http.call(base_url, "/server_info", api_key=api_key, timeout=timeout)
    if info.ok:
        try:
            result["accept_length"] = sglang_http.accept_length(info.json())
        except ValueError:
            pass
    result["failures"] = failures
    result["ok"] = not failures
    return result
