"""What the stand-in's "model" writes for a chat request when the server runs Kimi K2's parsers: Kimi K2.6's markup.

With a reasoning parser the model thinks first: `<think>`, SGLANG_STANDIN_THINK_TOKENS (default 24) tokens of
thought, `</think>`, then the answer; unless the request's chat_template_kwargs turn thinking off the way Kimi K2's
template does (`thinking: false` renders an empty think block into the prompt, so the model answers at once: real
SGLang's kimi_k2 parser then expects no reasoning, serving_chat.py `_get_reasoning_from_request`). Offered tools (and
tool_choice not "none"), it answers with one call in Kimi's tool-call section instead
(`functions.NAME:0`, JSON arguments built from the function's parameters and the prompt). Fault think_forever: the
thought never ends (no `</think>`, whatever the switch says) until max_tokens. Special tokens are one token each, as
in Kimi's vocabulary. Without a reasoning parser the stand-in's model never thinks (the recordings of real SGLang it
is held to were made with a model that does not)."""
from __future__ import annotations

import hashlib
import json
import re
from typing import Optional

from sglang_standin import engine
from sglang_standin.logs import env_float
from sglang_standin.reasoning import THINK_END, THINK_PARSERS, THINK_START, require_reasoning
from sglang_standin.tool_parser import ARG_BEGIN, BOT, CALL_BEGIN, CALL_END, EOT

DEFAULT_THINK_TOKENS = 24
_WORD = re.compile(r"[A-Za-z]+")


def thinks(args, body: dict) -> bool:
    """Whether the model thinks for this request: a `<think>` reasoning parser and the template's switch not off."""
    parser = args.reasoning_parser or ""
    return parser in THINK_PARSERS and require_reasoning(parser, body.get("chat_template_kwargs"))


def chosen_tool(body: dict) -> Optional[dict]:
    """The function the model calls: the named one of tool_choice, else the first offered; None without tools or
    with tool_choice "none"."""
    tools = [t.get("function") or {} for t in body.get("tools") or [] if isinstance(t, dict)]
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((t for t in tools if t.get("name") == name), tools[0])
    return tools[0]


def tool_arguments(function: dict, prompt: str) -> dict:
    """Arguments for the function's properties from the prompt: strings a capitalised word not starting a sentence
    (a city in "weather in Paris"), numbers the first number, booleans true."""
    props = ((function.get("parameters") or {}).get("properties") or {})
    words = [m.group() for m in _WORD.finditer(prompt) if m.group()[0].isupper()
             and prompt[:m.start()].rstrip()[-1:] not in ("", ".", "?", "!")]
    numbers = re.findall(r"-?\d+(?:\.\d+)?", prompt)
    out = {}
    for name, schema in props.items():
        kind = (schema or {}).get("type")
        if kind == "string":
            out[name] = words[0] if words else "unknown"
        elif kind in ("integer", "number"):
            out[name] = (int if kind == "integer" else float)(float(numbers[0])) if numbers else 1
        elif kind == "boolean":
            out[name] = True
    return out


def call_markup(function: dict, prompt: str) -> list:
    """One call in Kimi K2's tool-call section, as tokens."""
    args = json.dumps(tool_arguments(function, prompt), ensure_ascii=False)
    return ([BOT, CALL_BEGIN, f"functions.{function.get('name', '')}:0", ARG_BEGIN] + re.findall(r"\s*\S+", args)
            + [CALL_END, EOT])


def thought(prompt: str, n: int) -> list:
    """n tokens of thought: the question, then pseudo-text seeded by it (never a known answer)."""
    words = ["The", " user", " asks:"] + [" " + w for w in prompt.split()[:12]]
    seed = "thought " + hashlib.sha256(prompt.encode()).hexdigest()
    return (words + [" " + t.lstrip() for t in engine.tokens_for(seed, max(1, n))])[:n]


def tokens_for(args, body: dict, prompt: str, max_tokens: int, fault: str) -> tuple:
    """(the generated tokens, whether the model stopped by itself) for a chat request."""
    max_tokens = max(1, int(max_tokens))
    out: list = []
    if fault == "think_forever" and (args.reasoning_parser or "") in THINK_PARSERS:
        return ([THINK_START] + thought(prompt, max_tokens))[:max_tokens], False
    if thinks(args, body):
        out = [THINK_START] + thought(prompt, int(env_float("SGLANG_STANDIN_THINK_TOKENS", DEFAULT_THINK_TOKENS)))
        out.append(THINK_END)
    function = chosen_tool(body)
    if function is not None:
        out += call_markup(function, prompt)
        stopped = True
    else:
        answer = engine.tokens_for(prompt, max_tokens, garbage=fault == "garbage", wrong=fault == "wrong_text")
        out += answer
        stopped = len(answer) < max_tokens
    if len(out) > max_tokens:
        return out[:max_tokens], False
    return out, stopped
