"""The generation endpoints, as real SGLang 0.5.11 answers them: OpenAI's /v1/completions (its /v1/chat/completions:
chat.py) and SGLang's own /generate, streamed (server-sent events, one chunk per token or verify step) or not.

GenerationRoutes is a mixin of the request handler (http_handler.Handler): it uses the handler's state and args and
its answer plumbing (_send, _error, _start_stream, _chunk, _end_stream)."""
from __future__ import annotations

import time
import uuid
from typing import Optional

from sglang_standin import engine
from sglang_standin.api_version import EOS_TOKEN_ID, WEIGHT_VERSION
from sglang_standin.decoding import plan_decode, spec_figures, token_id


class GenerationRoutes:
    """POST /v1/completions and /generate (do_POST of the handler routes here)."""

    def _model_check(self, body) -> bool:
        model = body.get("model")
        if model not in (None, "", "default", self.args.model_id, self.args.model_path):
            self._error(404, f"The model `{model}` does not exist.")
            return False
        return True

    def _complete(self, body, prompt: str, ptoks: Optional[int] = None):
        """OpenAI /v1/completions with real 0.5.11's fields (matched_stop, usage.reasoning_tokens,
        metadata.weight_version; streamed: the finish reason on the last token's chunk, then a usage chunk with no
        choices). /v1/chat/completions: chat.py."""
        if not self._model_check(body):
            return None
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 128)
        toks = engine.tokens_for(prompt, max_tokens, garbage=self.state.fault == "garbage",
                                 wrong=self.state.fault == "wrong_text")
        ptoks = ptoks if ptoks is not None else engine.count_prompt_tokens(prompt)
        rid = uuid.uuid4().hex
        finish = "length" if len(toks) >= max_tokens else "stop"
        decode = plan_decode(self.state.spec, prompt, toks, stopped=finish == "stop")
        matched = EOS_TOKEN_ID if finish == "stop" else None
        head = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": self.args.model_id}
        if body.get("stream"):
            self._start_stream()
            for i, group in enumerate(self.state.generate(decode, ptoks)):
                last = i == len(decode.groups) - 1
                self._chunk({**head, "choices": [{"index": 0, "text": "".join(group), "logprobs": None,
                                                  "finish_reason": finish if last else None,
                                                  "matched_stop": matched if last else None}],
                             "usage": None})
            if (body.get("stream_options") or {}).get("include_usage"):
                self._chunk({**head, "choices": [], "usage": {"prompt_tokens": ptoks, "total_tokens": ptoks + len(toks),
                                                              "completion_tokens": len(toks), "reasoning_tokens": 0}})
            return self._end_stream()
        text = "".join(t for group in self.state.generate(decode, ptoks) for t in group)
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        usage = {"prompt_tokens": ptoks, "total_tokens": ptoks + len(toks), "completion_tokens": len(toks),
                 "prompt_tokens_details": None, "reasoning_tokens": 0}
        return self._send(200, {**head, "choices": [choice], "usage": usage,
                                "metadata": {"weight_version": WEIGHT_VERSION}})

    def _generate(self, body):
        """/generate like real 0.5.11: text and output_ids (cumulative when streamed), meta_info with the
        radix-cache figures, finish_reason {type, length|matched}; the first chunk (or the answer) carries
        response_sent_to_client_ts, the finished one e2e_latency and, with speculative decoding, the spec_*
        figures."""
        # SGLang takes either text or input_ids (what bench clients send, so the input length is exact).
        text_in, ptoks = engine.prompt_of(body["input_ids"] if body.get("input_ids") else body.get("text", ""))
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens") or 128)
        toks = engine.tokens_for(text_in, max_new, garbage=self.state.fault == "garbage",
                                 wrong=self.state.fault == "wrong_text")
        rid = uuid.uuid4().hex
        started = time.monotonic()
        cached = self.state.cached_prefix(text_in, ptoks)
        meta = {"id": rid, "finish_reason": None, "prompt_tokens": ptoks, "weight_version": WEIGHT_VERSION,
                "total_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 0, "cached_tokens": cached,
                "cached_tokens_details": {"device": cached, "host": 0} if cached else None, "dp_rank": None}
        stopped = len(toks) < max_new
        finish = {"type": "stop", "matched": EOS_TOKEN_ID} if stopped else {"type": "length", "length": max_new}
        decode = plan_decode(self.state.spec, text_in, toks, stopped)

        def finished(m: dict) -> dict:
            m = dict(m, finish_reason=finish, e2e_latency=time.monotonic() - started)
            m.update(spec_figures(self.state.spec, len(toks), decode.steps))
            return m

        if body.get("stream"):
            self._start_stream()
            out, ids = "", []
            for i, group in enumerate(self.state.generate(decode, ptoks, cached)):
                out += "".join(group)
                ids += [token_id(t) for t in group]
                m = dict(meta, completion_tokens=len(ids))
                if i == len(decode.groups) - 1:
                    m = finished(m)
                if i == 0:
                    m["response_sent_to_client_ts"] = time.time()
                self._chunk({"text": out, "output_ids": list(ids), "meta_info": m})
            return self._end_stream()
        out = "".join(t for group in self.state.generate(decode, ptoks, cached) for t in group)
        m = finished(dict(meta, completion_tokens=len(toks)))
        m["response_sent_to_client_ts"] = time.time()
        return self._send(200, {"text": out, "output_ids": [token_id(t) for t in toks], "meta_info": m})
