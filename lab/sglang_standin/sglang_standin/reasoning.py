"""The reasoning parser of real SGLang 0.5.11, ported for the stand-in: how `--reasoning-parser` splits a chat
generation into `reasoning_content` and `content`, whole (non-streamed) and increment by increment (streamed).

Ported from sglang/srt/parser/reasoning_parser.py (BaseReasoningFormatDetector.detect_and_parse and
.parse_streaming_increment, KimiK2Detector, ReasoningParser.DetectorMap) and
sglang/srt/entrypoints/openai/serving_chat.py (`_get_reasoning_from_request`: whether a request reasons, i.e. the
parser's force_reasoning). Only the `<think>` family the stand-in's model writes is ported (kimi_k2, and the parsers
that share its tokens); another parser name leaves the stand-in's model without thinking."""
from __future__ import annotations

from typing import Optional

THINK_START = "<think>"
THINK_END = "</think>"
KIMI_TOOL_START = "<|tool_calls_section_begin|>"
# Parser name -> the tool start token that interrupts reasoning (None: none), for the `<think>` detectors of the real
# DetectorMap. kimi_k2: KimiK2Detector (tool_start_token <|tool_calls_section_begin|>); qwen3 & co: Qwen3Detector.
THINK_PARSERS = {"kimi_k2": KIMI_TOOL_START, "qwen3": None, "qwen3-thinking": None, "deepseek-v3": None,
                 "mimo": None, "minimax": None, "interns1": None}


def require_reasoning(parser: str, chat_template_kwargs: Optional[dict]) -> bool:
    """serving_chat._get_reasoning_from_request for the ported parsers: kimi_k2 and qwen3/interns1 think unless
    their template switch (thinking / enable_thinking) is False; deepseek-v3 and mimo only when it is True."""
    ctk = chat_template_kwargs or {}
    if parser == "deepseek-v3":
        return ctk.get("thinking") is True
    if parser == "mimo":
        return ctk.get("enable_thinking") is True
    if parser == "kimi_k2":
        return ctk.get("thinking") is not False
    if parser in ("qwen3", "interns1"):
        return ctk.get("enable_thinking") is not False
    return True


def force_reasoning(parser: str, chat_template_kwargs: Optional[dict]) -> bool:
    """ReasoningParser's force_reasoning: the request's (the template's own force pattern never matches Kimi's
    template), and always for qwen3-thinking and minimax."""
    return parser in ("qwen3-thinking", "minimax") or require_reasoning(parser, chat_template_kwargs)


class Detector:
    """BaseReasoningFormatDetector with `<think>` / `</think>` (continue_final_message not ported)."""

    def __init__(self, parser: str, force: bool, stream_reasoning: bool = True):
        self.tool_start_token = THINK_PARSERS.get(parser)
        self._in_reasoning = force
        self.stream_reasoning = stream_reasoning
        self._buffer = ""
        self.stripped_think_start = False

    def detect_and_parse(self, text: str) -> tuple:
        """(reasoning_text, normal_text) of a whole generation."""
        in_reasoning = self._in_reasoning or THINK_START in text
        if not in_reasoning:
            return "", text
        processed = text.replace(THINK_START, "").strip()
        if THINK_END not in processed:
            if self.tool_start_token is not None and self.tool_start_token in processed:
                idx = processed.find(self.tool_start_token)
                return processed[:idx].strip(), processed[idx:]
            return processed, ""  # reasoning truncated before the end token
        reasoning, normal = processed.split(THINK_END, 1)
        return reasoning, normal.strip()

    def parse_streaming_increment(self, new_text: str) -> tuple:
        """(reasoning_text, normal_text) of one streamed increment."""
        self._buffer += new_text
        current = self._buffer
        tokens = [THINK_START, THINK_END] + ([self.tool_start_token] if self.tool_start_token else [])
        if any(t.startswith(current) and t != current for t in tokens):
            return "", ""
        if not self.stripped_think_start and THINK_START in current:
            current = current.replace(THINK_START, "", 1)
            self.stripped_think_start = True
            self._in_reasoning = True
        if self._in_reasoning and THINK_END in current:
            end = current.find(THINK_END)
            self._buffer = ""
            self._in_reasoning = False
            return current[:end].rstrip(), current[end + len(THINK_END):]
        if self._in_reasoning:
            if self.tool_start_token and self.tool_start_token in current:
                idx = current.find(self.tool_start_token)
                self._buffer = ""
                self._in_reasoning = False
                return current[:idx], current[idx:]
            if self.stream_reasoning:
                self._buffer = ""
                return current, ""
            return "", ""
        self._buffer = ""
        return "", current


def reasoning_tokens(parser: str, chat_template_kwargs: Optional[dict], tokens: list) -> int:
    """meta_info reasoning_tokens (Req.update_reasoning_tokens): with a reasoning parser and a request that reasons,
    the tokens up to and including </think>, or all of them while it never came."""
    if not parser or not require_reasoning(parser, chat_template_kwargs):
        return 0
    return tokens.index(THINK_END) + 1 if THINK_END in tokens else len(tokens)
