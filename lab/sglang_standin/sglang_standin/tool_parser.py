"""The kimi_k2 tool-call parser of real SGLang 0.5.11, ported for the stand-in: Kimi K2's tool-call markup

    <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}
    <|tool_call_end|><|tool_calls_section_end|>

turned into OpenAI tool calls, whole and increment by increment. Ported from
sglang/srt/function_call/kimik2_detector.py (KimiK2Detector.detect_and_parse, .parse_streaming_increment),
base_format_detector.py (the streaming state), function_call_parser.py (FunctionCallParser.parse_non_stream: the
text is kept whole when no call parsed) and serving_chat.py (`_process_tool_call_id`: kimi_k2 ids are
functions.NAME:IDX counted over the conversation's earlier calls, `_get_history_tool_calls_cnt`)."""
from __future__ import annotations

import json
import re

BOT = "<|tool_calls_section_begin|>"
EOT = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
SPECIAL = (BOT, EOT, CALL_BEGIN, CALL_END, ARG_BEGIN)

_CALL = re.compile(r"<\|tool_call_begin\|>\s*(?P<tool_call_id>[\w.\-]+:\d+)\s*<\|tool_call_argument_begin\|>\s*"
                   r"(?P<function_arguments>\{.*?\})\s*<\|tool_call_end\|>", re.DOTALL)
_PORTION = re.compile(r"<\|tool_call_begin\|>\s*(?P<tool_call_id>[\w.\-]+:\d+)\s*<\|tool_call_argument_begin\|>\s*"
                      r"(?P<function_arguments>\{.*)", re.DOTALL)
_ID = re.compile(r"^(?:functions\.)?(?P<name>[\w.\-]+):(?P<index>\d+)$")
_CALL_DONE = re.compile(r"<\|tool_call_begin\|>.*?<\|tool_call_end\|>", re.DOTALL)


def _strip_special(text: str) -> str:
    for token in SPECIAL:
        text = text.replace(token, "")
    return text


def _complete_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def history_calls(messages: list) -> int:
    """The tool calls of the conversation's earlier assistant messages (serving_chat._get_history_tool_calls_cnt)."""
    return sum(len(m.get("tool_calls") or []) for m in messages or []
               if isinstance(m, dict) and m.get("role") == "assistant")


def call_id(name: str, index: int, history: int) -> str:
    return f"functions.{name}:{history + index}"


def parse_whole(text: str) -> tuple:
    """(normal text, [(tool_index, name, arguments), ...]); the text unchanged when no call parses."""
    if BOT not in text:
        return text, []
    calls = []
    for function_id, arguments in _CALL.findall(text):
        m = _ID.match(function_id)
        if m:
            calls.append((int(m.group("index")), m.group("name"), arguments))
    return (text[:text.find(BOT)], calls) if calls else (text, [])


class StreamDetector:
    """KimiK2Detector's streaming state: yields (normal_text, [(tool_index, name or None, arguments)])."""

    def __init__(self):
        self._buffer = ""
        self.prev_tool_call_arr: list = []
        self.current_tool_id = -1
        self.current_tool_name_sent = False
        self.streamed_args_for_tool: list = []
        self._last_arguments = ""

    def parse_streaming_increment(self, new_text: str) -> tuple:
        self._buffer += new_text
        current = self._buffer
        if BOT not in current and CALL_BEGIN not in current:
            self._buffer = ""
            return _strip_special(new_text), []
        calls: list = []
        match = _PORTION.search(current)
        if not match:
            return "", calls
        m = _ID.match(match.group("tool_call_id"))
        if not m:
            return "", calls
        name, args = m.group("name"), match.group("function_arguments")
        if self.current_tool_id == -1:
            self.current_tool_id, self.prev_tool_call_arr, self.streamed_args_for_tool = 0, [], [""]
        while len(self.prev_tool_call_arr) <= self.current_tool_id:
            self.prev_tool_call_arr.append({})
        while len(self.streamed_args_for_tool) <= self.current_tool_id:
            self.streamed_args_for_tool.append("")
        if not self.current_tool_name_sent:
            calls.append((self.current_tool_id, name, ""))
            self.current_tool_name_sent = True
            self.prev_tool_call_arr[self.current_tool_id] = {"name": name, "arguments": {}}
            return "", calls
        diff = args[len(self._last_arguments):] if args.startswith(self._last_arguments) else args
        diff = diff.split(CALL_END, 1)[0]
        if diff:
            calls.append((self.current_tool_id, None, diff))
            self._last_arguments += diff
            self.streamed_args_for_tool[self.current_tool_id] += diff
        parsed = args.split(CALL_END, 1)[0]
        if _complete_json(parsed):
            self.prev_tool_call_arr[self.current_tool_id]["arguments"] = json.loads(parsed)
            end = _CALL_DONE.search(current)
            self._buffer = current[end.end():] if end else ""
            self.current_tool_id += 1
            self._last_arguments = ""
            self.current_tool_name_sent = False
        return "", calls

    def unstreamed_args(self) -> tuple:
        """serving_chat._check_for_unstreamed_tool_args: (tool index, the rest of the last call's arguments) or
        None, once the generation finished."""
        if not self.prev_tool_call_arr or not self.streamed_args_for_tool:
            return None
        index = len(self.prev_tool_call_arr) - 1
        if index >= len(self.streamed_args_for_tool):
            return None
        expected = json.dumps(self.prev_tool_call_arr[index].get("arguments", {}), ensure_ascii=False)
        actual = self.streamed_args_for_tool[index]
        rest = expected.replace(actual, "", 1) if actual in expected else ""
        return (index, rest) if rest else None
