"""The smoke's tool-call check, for a server run with --tool-call-parser (stdlib only).

One request offers one simple function and asks a question only it answers; the reply must carry `tool_calls` whose
function is that one and whose `arguments` parse as a JSON object holding its required parameters. tool_choice is
"auto": "required" (or a named function) makes real SGLang 0.5.11 constrain the output with a structural tag
(srt/function_call/function_call_parser.py `get_structure_constraint`), which a server run with --grammar-backend none
(the shipped profiles) refuses with HTTP 400 (srt/constrained/grammar_manager.py `process_req_with_grammar`).
"""
from __future__ import annotations

import json

from ansible.module_utils.sglang.chat_reply import chat, thinking_only

TOOL_NAME = "get_weather"
TOOL = {"type": "function", "function": {
    "name": TOOL_NAME, "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city's name"}},
                   "required": ["city"]}}}
PROMPT = f"What is the weather in Paris right now? Call the {TOOL_NAME} tool to find out."
# Tokens of the answer (one call with a short argument object; the thinking budget comes on top).
TOOL_TOKENS = 128


def verdict(reply: dict, max_tokens: int) -> str:
    """"ok", or what is wrong with the reply's tool calls (naming what came back)."""
    thinking = thinking_only(reply["content"], reply["reasoning"], reply["finish_reason"], max_tokens)
    if thinking and not reply["tool_calls"]:
        return thinking
    calls = reply["tool_calls"]
    if not calls:
        return (f"no tool_calls in the reply (finish_reason {reply['finish_reason']!r}, content "
                f"{reply['content'][:200]!r})")
    for call in calls:
        function = (call or {}).get("function") or {}
        name, arguments = function.get("name"), function.get("arguments")
        if name != TOOL_NAME:
            return f"a tool call names {name!r}, not {TOOL_NAME!r}: {call!r}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else None
        except ValueError as exc:
            return f"the arguments of {name} do not parse as JSON ({exc}): {arguments!r}"
        if not isinstance(parsed, dict):
            return f"the arguments of {name} are not a JSON object: {arguments!r}"
        missing = [k for k in TOOL["function"]["parameters"]["required"] if k not in parsed]
        if missing:
            return f"the arguments of {name} lack {', '.join(missing)}: {arguments!r}"
    return "ok"


def check(base_url: str, model: str, api_key: str | None, max_tokens: int, timeout: float,
          extra: dict | None = None) -> dict:
    """{prompt, tool_calls, finish_reason, content, reasoning_chars, max_tokens, verdict}."""
    reply, error = chat(base_url, model, [{"role": "user", "content": PROMPT}], api_key, max_tokens, timeout,
                        dict(extra or {}, tools=[TOOL], tool_choice="auto"))
    out = {"prompt": PROMPT, "max_tokens": max_tokens, "tool_calls": None, "finish_reason": None, "content": None,
           "reasoning_chars": 0}
    if error:
        return dict(out, verdict=f"request failed: {error}")
    out.update(tool_calls=reply["tool_calls"], finish_reason=reply["finish_reason"], content=reply["content"],
               reasoning_chars=len(reply["reasoning"]))
    return dict(out, verdict=verdict(reply, max_tokens))
