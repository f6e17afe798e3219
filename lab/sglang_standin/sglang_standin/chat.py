"""POST /v1/chat/completions as real SGLang 0.5.11 answers it, parsers included: the model's output (chat_model.py)
goes through the reasoning parser (--reasoning-parser: reasoning.py) and the tool-call parser (--tool-call-parser
kimi_k2: tool_parser.py) the way sglang/srt/entrypoints/openai/serving_chat.py runs them:

- not streamed (`_build_chat_response`): message {role, content (None when empty), reasoning_content (None when
  empty), tool_calls}; with a parsed call finish_reason "tool_calls" and matched_stop None (`_process_tool_calls`).
- streamed (`_generate_chat_stream`): a role chunk; per increment a reasoning chunk (delta {reasoning_content}) and
  either content chunks or, with tools, the tool parser's chunks (pydantic-shaped: every delta field, tool_calls with
  id functions.NAME:IDX and the name first, then argument pieces with id and name None); then the finish chunk
  ("tool_calls" when a call was streamed and the generation stopped; matched_stop kept), then usage.
- tool_choice "required" or a named function with --grammar-backend none: 400, the scheduler's abort
  (constrained/grammar_manager.py `process_req_with_grammar`; kimi_k2 supports structural tags, so real SGLang
  asks for one).

ChatRoutes is a mixin of the request handler (http_handler.Handler) like completions.GenerationRoutes."""
from __future__ import annotations

import time
import uuid

from sglang_standin import chat_model, engine, reasoning, tool_parser
from sglang_standin.api_version import EOS_TOKEN_ID, WEIGHT_VERSION
from sglang_standin.decoding import plan_decode

GRAMMAR_NONE = ("Grammar-based generation (json_schema, regex, ebnf, structural_tag) is not supported when the server "
                "is launched with --grammar-backend none")


def _tool_call(tid, index, name, arguments) -> dict:
    return {"id": tid, "index": index, "type": "function", "function": {"name": name, "arguments": arguments}}


class ChatRoutes:
    """POST /v1/chat/completions (do_POST of the handler routes here)."""

    def _parsers(self, body: dict) -> tuple:
        """(the reasoning parser's name or "", whether the tool-call parser runs on this request)."""
        rp = (self.args.reasoning_parser or "") if body.get("separate_reasoning", True) else ""
        tools_on = bool(body.get("tools")) and body.get("tool_choice", "auto") != "none"
        return rp, tools_on and self.args.tool_call_parser == "kimi_k2"

    def _chat(self, body: dict):
        if not self._model_check(body):
            return None
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
        choice = body.get("tool_choice", "auto")
        if (body.get("tools") and (choice == "required" or isinstance(choice, dict)) and self.args.tool_call_parser
                and (self.args.grammar_backend or "") == "none"):
            return self._send(400, {"object": "error", "message": GRAMMAR_NONE, "type": "BadRequestError",
                                    "param": None, "code": 400})
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 128)
        toks, stopped = chat_model.tokens_for(self.args, body, prompt, max_tokens, self.state.fault)
        rp, tools_on = self._parsers(body)
        ctk = body.get("chat_template_kwargs")
        ptoks = engine.count_prompt_tokens(prompt)
        usage = {"prompt_tokens": ptoks, "total_tokens": ptoks + len(toks), "completion_tokens": len(toks),
                 "prompt_tokens_details": None,
                 "reasoning_tokens": reasoning.reasoning_tokens(self.args.reasoning_parser or "", ctk, toks)}
        head = {"id": uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                "model": self.args.model_id}
        finish = "stop" if stopped else "length"
        decode = plan_decode(self.state.spec, prompt, toks, stopped=stopped)
        history = tool_parser.history_calls(messages)
        if body.get("stream"):
            return self._chat_stream(body, dict(head, object="chat.completion.chunk"), decode, ptoks, rp, tools_on,
                                     finish, usage, history)
        text = "".join(t for group in self.state.generate(decode, ptoks) for t in group)
        thought = ""
        if rp in reasoning.THINK_PARSERS:
            force = reasoning.force_reasoning(rp, ctk)
            thought, text = reasoning.Detector(rp, force, stream_reasoning=False).detect_and_parse(text)
        calls, matched = None, EOS_TOKEN_ID if stopped else None
        if tools_on and tool_parser.BOT in text:
            finish, matched = ("tool_calls", None) if finish == "stop" else (finish, matched)
            text, found = tool_parser.parse_whole(text)
            calls = [_tool_call(tool_parser.call_id(name, idx, history), idx, name, args) for idx, name, args in found]
        message = {"role": "assistant", "content": text or None, "reasoning_content": thought or None,
                   "tool_calls": calls}
        return self._send(200, {**head, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                     "finish_reason": finish, "matched_stop": matched}],
                                "usage": usage, "metadata": {"weight_version": WEIGHT_VERSION}})

    def _fast(self, head: dict, delta: dict, finish=None, matched=None) -> None:
        """serving_chat._fast_sse_content: the delta keeps reasoning_content always and drops role/content at None."""
        delta = {"reasoning_content": delta.get("reasoning_content"),
                 **{k: v for k, v in delta.items() if k != "reasoning_content" and v is not None}}
        self._chunk({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                          "matched_stop": matched}]})

    def _full(self, head: dict, content=None, tool_calls=None) -> None:
        """A ChatCompletionStreamResponse as pydantic dumps it (the tool parser's chunks): every field."""
        delta = {"role": None, "content": content, "reasoning_content": None, "tool_calls": tool_calls}
        self._chunk({**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None,
                                          "matched_stop": None}], "usage": None})

    def _chat_stream(self, body, head, decode, ptoks, rp, tools_on, finish, usage, history):
        self._start_stream()
        self._fast(head, {"role": "assistant", "content": ""})
        ctk = body.get("chat_template_kwargs")
        thinker = (reasoning.Detector(rp, reasoning.force_reasoning(rp, ctk), body.get("stream_reasoning", True))
                   if rp in reasoning.THINK_PARSERS else None)
        detector = tool_parser.StreamDetector() if tools_on else None
        called = False
        last = len(decode.groups) - 1
        for i, group in enumerate(self.state.generate(decode, ptoks)):
            delta = "".join(group)
            if thinker is not None:
                thought, delta = thinker.parse_streaming_increment(delta)
                if thought:
                    self._fast(head, {"reasoning_content": thought})
            if detector is None:
                if delta:
                    self._fast(head, {"content": delta})
                continue
            normal, calls = detector.parse_streaming_increment(delta)
            if normal:
                self._full(head, content=normal)
            for index, name, args in calls:
                called = True
                tid = tool_parser.call_id(name, index, history) if name else None
                self._full(head, tool_calls=[_tool_call(tid, index, name, args)])
            rest = detector.unstreamed_args() if i == last else None
            if rest:
                self._full(head, tool_calls=[_tool_call(None, rest[0], None, rest[1])])
        matched = EOS_TOKEN_ID if finish == "stop" else None
        self._fast(head, {}, "tool_calls" if called and finish == "stop" else finish, matched)
        if (body.get("stream_options") or {}).get("include_usage"):
            self._chunk({**head, "choices": [], "usage": usage})
        return self._end_stream()
