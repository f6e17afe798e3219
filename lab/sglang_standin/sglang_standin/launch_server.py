"""`python -m sglang_standin.launch_server <SGLang flags>`: the stand-in's equivalent of
`python -m sglang.launch_server`. Lifecycle and faults: see README.md."""
from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Iterator, Optional
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_standin import __version__, engine, jit_cache, multinode
from sglang_standin import server_args as _server_args
from sglang_standin.server_args import ServerArgs, prepare_server_args

FAULTS = ("none", "crash_loading", "crash_warmup", "bind_then_die", "hang", "hang_warmup", "slow_shutdown", "garbage",
          "crash_shrinking_batch")
# The SGLang version the stand-in emulates (the version of its flag schema); HTTP details differ per version.
SGLANG_VERSION = getattr(_server_args, "SGLANG_VERSION", None) or "0.5.11"


def _version_tuple(v: str) -> tuple:
    out = []
    for piece in v.replace("+", ".").split("."):
        if not piece.isdigit():
            break
        out.append(int(piece))
    return tuple(out)


# /ready: only from 0.5.23 on (0.5.11 answers 404). Open without the key (sglang/srt/utils/auth.py,
# decide_request_auth): paths starting with /health or /metrics, and /ready where it exists.
HAS_READY = _version_tuple(SGLANG_VERSION) >= (0, 5, 23)
OPEN_PREFIXES = ("/health", "/metrics") + (("/ready",) if HAS_READY else ())
WEIGHT_VERSION = "default"
EOS_TOKEN_ID = 2  # what meta_info.finish_reason.matched / matched_stop name when the model stopped by itself
# SGLang's warmup request (http_server._execute_server_warmup): /generate of this prompt, 8 new tokens.
WARMUP_PROMPT = "The capital city of France is"
WARMUP_TOKENS = 8


def token_id(tok: str) -> int:
    """A stable fake vocabulary id for a stand-in token (output_ids)."""
    return int.from_bytes(tok.encode()[:8].ljust(8, b"\0"), "little") % 49152


def spec_shape(args) -> Optional[engine.SpecShape]:
    """The speculative decoding shape of the parsed flags (None without): draft tokens per step from
    --speculative-num-draft-tokens or the DFLASH block size (else the engine's default), DDTREE's budget and topk cap
    (flags of the lab patch series)."""
    if not args.speculative_enabled:
        return None
    return engine.SpecShape.resolve(args.speculative_algorithm,
                                    args.speculative_num_draft_tokens or args.speculative_dflash_block_size,
                                    getattr(args, "speculative_ddtree_budget", None),
                                    getattr(args, "speculative_ddtree_topk_cap", None))


def _resolved_defaults(args) -> dict:
    """Server arguments that real ServerArgs.__post_init__ resolves from the model and the GPU (None on the
    command line, a value in /server_info); the stand-in fills them with plausible values of the same type."""
    spec = spec_shape(args)
    out = {"tokenizer_path": args.model_path, "served_model_name": args.model_path, "device": "cuda",
           "page_size": 1, "random_seed": 42, "chunked_prefill_size": 8192, "cuda_graph_max_bs": 256,
           "cuda_graph_bs": [1, 2, 4, 8, 16, 24, 32, 40, 48], "custom_weight_loader": [], "mm_process_config": {},
           "piecewise_cuda_graph_max_tokens": 8192, "piecewise_cuda_graph_tokens": [4, 8, 16, 32],
           "expert_distribution_recorder_buffer_size": 1000, "speculative_moe_runner_backend": "auto"}
    if spec:
        out.update(speculative_num_steps=1, speculative_eagle_topk=1,
                   speculative_num_draft_tokens=spec.num_draft_tokens, speculative_draft_model_revision="main")
    return out


def _scheduler_resolved(args) -> dict:
    """Fields that only the scheduler's copy (internal_states[0]) has resolved."""
    backend = args.attention_backend or "triton"
    return {"decode_attention_backend": backend, "prefill_attention_backend": backend,
            "pp_max_micro_batch_size": args.max_running_requests or 48}


def loads_answer(state, args) -> dict:
    """GET /v1/loads as SGLang 0.5.11 answers it (sglang/srt/entrypoints/v1_loads.py; recorded from the real server in
    tests/fixtures/real_sglang/loads/): one entry per DP rank (one here), counted live by the scheduler, and the
    aggregate over ranks; the same keys at every level as the recording of include=core (tests/unit/test_sglang_drain.py
    compares them). Deliberate differences: `include` is not read (real SGLang adds the memory, disaggregation and
    queues sections without it or with include=all; nothing here reads them), and the token figures (num_used_tokens,
    token_usage, cache_hit_rate, utilization) are fixed placeholders: the stand-in has no KV cache to count."""
    with state.timing.lock:
        running, waiting = state.timing.running, state.timing.waiting
    load = {"num_running_reqs": running, "num_waiting_reqs": waiting, "num_used_tokens": 0,
            "num_total_tokens": 0, "max_total_num_tokens": 1281809, "token_usage": 0.0,
            "gen_throughput": round(state.timing.throughput(), 2), "cache_hit_rate": 0.0, "utilization": 0.0,
            "max_running_requests": args.max_running_requests or 48, "num_total_reqs": running + waiting}
    return {"timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": __version__,
            "dp_rank_count": 1, "loads": [load],
            "aggregate": {"total_running_reqs": running, "total_waiting_reqs": waiting, "total_reqs": running + waiting,
                          "total_used_tokens": 0, "total_tokens": 0, "avg_token_usage": 0.0,
                          "avg_throughput": load["gen_throughput"], "avg_utilization": 0.0}}


def server_args_dict(args) -> dict:
    """`dataclasses.asdict(server_args)` as real SGLang returns it: every field, api_key included, resolved
    defaults filled; dests that are no ServerArgs field (--config, deprecated flag-only actions) left out."""
    schema = getattr(_server_args, "SCHEMA", None) or {}
    dropped = {"config"} | {d for d, o in (schema.get("options") or {}).items()
                            if o.get("action") == "DeprecatedAction"}
    out = {k: v for k, v in args.redacted().items() if k not in dropped}
    for k, v in _resolved_defaults(args).items():
        if out.get(k) is None:
            out[k] = v
    return out


def log(msg: str) -> None:
    """Like real SGLang's logging: on stderr (uvicorn's access lines are real SGLang's only stdout)."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        log(f"ignoring {name}={raw!r}: not a number")
        return default


@dataclass
class Decode:
    """How one request decodes: the visible tokens per forward (the prefill token, then one group per verify step)
    and the speculative verify steps (tokens each, bonus included; empty without speculative decoding)."""
    groups: list
    steps: list


def plan_decode(spec: Optional[engine.SpecShape], text: str, toks: list, stopped: bool) -> Decode:
    """The decode of toks for a prompt. A request that stopped by itself also decoded its EOS token (real SGLang
    counts it; the stand-in's answers leave it out): the schedule covers it, hidden at the end of the last step."""
    if spec is None:
        return Decode([[t] for t in toks], [])
    steps = spec.schedule(len(toks) + int(stopped), engine.text_class(text))
    sizes = [1] + steps
    if stopped:
        sizes[-1] -= 1
    groups, at = [], 0
    for size in sizes:
        if size:
            groups.append(toks[at:at + size])
            at += size
    return Decode(groups, steps)


def spec_figures(spec: Optional[engine.SpecShape], completion_tokens: int, steps: list) -> dict:
    """meta_info spec_* of a finished request (real: only when it had a verify step and drafts were proposed)."""
    proposed = len(steps) * spec.drafts_per_step if spec else 0
    if not steps or not proposed:
        return {}
    accepted = sum(steps) - len(steps)
    return {"spec_accept_rate": accepted / proposed, "spec_accept_length": completion_tokens / len(steps),
            "spec_accepted_drafts": accepted, "spec_proposed_drafts": proposed, "spec_verify_ct": len(steps)}


class State:
    def __init__(self, args: ServerArgs):
        self.args = args
        self.ready = False
        self.stopping = False
        self.fault = os.environ.get("SGLANG_STANDIN_FAULT", "none") or "none"
        if self.fault not in FAULTS:
            raise SystemExit(f"SGLANG_STANDIN_FAULT={self.fault!r} is not one of {', '.join(FAULTS)}")
        self.spec = spec_shape(args)
        try:  # the acceptance model's knobs, checked once at start-up
            engine.accept_probabilities()
            engine.forced_accept_length()
        except ValueError as exc:
            raise SystemExit(f"stand-in acceptance model: {exc}") from None
        self.timing = engine.Timing(
            ttft_ms=env_float("SGLANG_STANDIN_TTFT_MS", 40.0),
            itl_ms=env_float("SGLANG_STANDIN_ITL_MS", 8.0),
            itl_slope_ms=env_float("SGLANG_STANDIN_ITL_SLOPE_MS", 0.05),
            prefill_us_per_token=env_float("SGLANG_STANDIN_PREFILL_US_PER_TOKEN", 20.0),
            max_running=args.max_running_requests or 256,
            verify_width=self.spec.verify_width if self.spec else 0,
            draft_cost=env_float("SGLANG_STANDIN_DRAFT_COST", 0.3),
            on_shrink=self._shrinking_batch_fault if self.fault == "crash_shrinking_batch" else None,
        )
        # The scheduler's lifetime speculative totals (tokens of the verify steps, verify steps).
        self.spec_tokens = 0
        self.spec_steps = 0
        self.created = int(time.time())
        self.health_s = env_float("SGLANG_STANDIN_HEALTH_S", 1.0)
        self.drain_s = env_float("SGLANG_STANDIN_DRAIN_S", 0.5)
        # SGLang's warmup request ("The capital city of France is") is in the radix cache before any request.
        self.seen_prompts: list = ["The capital city of France is".split()]
        self.lock = threading.Lock()

    def _shrinking_batch_fault(self, peak: int, running: int) -> None:
        """Fault crash_shrinking_batch: with speculative decoding and CUDA graphs, the server dies replaying the graph
        of batch size 1 once a batch of at least SGLANG_STANDIN_CRASH_BATCH (default 8) requests has shrunk to one
        (the known crash pattern of CUDA-graph replay in speculative decoding; smaller batches never trigger it)."""
        if (running == 1 and self.spec and not self.args.disable_cuda_graph
                and peak >= int(env_float("SGLANG_STANDIN_CRASH_BATCH", 8))):
            crash("cuda_graph_runner", f"CUDA error: an illegal memory access was encountered replaying the CUDA "
                                       f"graph of batch size 1 after the batch shrank from {peak} (stand-in fault "
                                       f"crash_shrinking_batch)")

    def cached_prefix(self, text: str, ptoks: int) -> int:
        """The radix cache: prompt tokens shared with an earlier prompt (at most all but the last one)."""
        words = text.split()
        with self.lock:
            best = 0
            for seen in self.seen_prompts:
                n = 0
                for a, b in zip(seen, words):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.seen_prompts.append(words)
            del self.seen_prompts[:-256]
        return max(0, min(best, ptoks - 1))

    def generate(self, decode: Decode, prompt_tokens: int) -> Iterator[list]:
        """Yield the decode's token groups at the configured pace; its steps count in the spec totals before the
        last group goes out (a client that saw its request finish finds it in /server_info)."""
        last = len(decode.groups) - 1
        for i, group in enumerate(self.timing.stream(decode.groups, prompt_tokens)):
            if i == last:
                self.count_steps(decode.steps)
            yield group

    def count_steps(self, steps: list) -> None:
        with self.lock:
            self.spec_tokens += sum(steps)
            self.spec_steps += len(steps)

    def avg_accept_length(self) -> Optional[float]:
        """internal_states[0].avg_spec_accept_length: verify-step tokens over verify steps since start (the
        warmup included), None before any; like the scheduler's spec_total_num_accepted_tokens / _forward_ct."""
        with self.lock:
            return self.spec_tokens / self.spec_steps if self.spec and self.spec_steps else None

    def warmed_up(self) -> None:
        """Count SGLang's warmup request (WARMUP_TOKENS of WARMUP_PROMPT, no early stop), then serve."""
        if self.spec:
            self.count_steps(self.spec.schedule(WARMUP_TOKENS, engine.text_class(WARMUP_PROMPT)))
        self.ready = True


def make_handler(state: State):
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "sglang-standin/" + __version__

        def log_message(self, fmt, *a):  # keep the journal readable: one short line per request
            if os.environ.get("SGLANG_STANDIN_ACCESS_LOG") == "1":
                log("http " + fmt % a)

        # ---- plumbing
        def _send(self, status: int, body, ctype: str = "application/json") -> None:
            data = body if isinstance(body, bytes) else (json.dumps(body) if ctype == "application/json"
                                                           else str(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"object": "error", "message": message, "code": status})

        def _not_found(self) -> None:  # FastAPI's answer for a route that does not exist
            self._send(404, {"detail": "Not Found"})

        def _authorized(self, path: str) -> bool:
            """Real SGLang: the key middleware runs before routing (an unknown path answers 401 without the key,
            404 with it); the scheme is case-insensitive; /health*, /metrics* (and /ready on 0.5.23) are open."""
            if not args.api_key or path.startswith(OPEN_PREFIXES):
                return True
            scheme, _, token = self.headers.get("Authorization", "").partition(" ")
            return scheme.lower() == "bearer" and token == args.api_key

        def _unauthorized(self) -> None:
            self._send(401, {"error": "Unauthorized"})

        def _health(self, path: str) -> None:
            """/health and /health_generate: 503 at once while starting or shutting down; once ready, a real
            one-token generation that answers after >= 1 s (the handler polls for it once a second)."""
            if args.node_rank >= 1:
                return self._send(200, b"", "text/plain")
            if state.stopping:
                log("Health check request received during shutdown. Returning 503.")
                return self._send(503, b"", "text/plain")
            if not state.ready:
                return self._send(503, b"", "text/plain")
            end = time.monotonic() + state.health_s
            while time.monotonic() < end:  # the generation; a SIGTERM meanwhile turns it into the drain's 503
                time.sleep(min(0.05, max(0.0, end - time.monotonic())))
                if state.stopping:
                    return self._send(503, b"", "text/plain")
            return self._send(200, b"", "text/plain")

        def _json_body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw or b"{}")

        def _start_stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

        def _chunk(self, payload) -> None:
            data = ("data: " + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def _end_stream(self) -> None:
            self._chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        # ---- routes
        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return self._unauthorized()
            if path in ("/health", "/health_generate"):
                return self._health(path)
            if path == "/ready" and HAS_READY:
                ok = (args.node_rank >= 1 or state.ready) and not state.stopping
                return self._send(200 if ok else 503, b"", "text/plain")
            if path == "/ping":  # SageMaker's health check: the HTTP server is up
                return self._send(200, b"", "text/plain")
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": args.model_id, "object": "model", "created": state.created, "owned_by": "sglang",
                    "root": args.model_id, "parent": None, "max_model_len": args.context_length or 32768}]})
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or
                                        args.model_path, "is_generation": True, "preferred_sampling_params": None,
                                        "weight_version": "default", "has_image_understanding": False,
                                        "has_audio_understanding": False, "model_type": "standin",
                                        "architectures": ["StandinForCausalLM"]})
            if path in ("/server_info", "/get_server_info"):
                # Like the real one: every server argument (api_key included: the project must redact it), the
                # scheduler's figures, and internal_states[0] = the server arguments again plus the scheduler's
                # state; avg_spec_accept_length only with speculative decoding.
                sargs = server_args_dict(args)
                tokens = 1281809
                internal = dict(sargs)
                for k, v in _scheduler_resolved(args).items():
                    if internal.get(k) is None:
                        internal[k] = v
                internal.update({"_mx_config_cache": {}, "_quantization_explicitly_unset": False,
                                 "effective_max_running_requests_per_dp": args.max_running_requests or 48,
                                 "enable_grpc": False, "grpc_port": args.port + 10000,
                                 "last_gen_throughput": round(state.timing.throughput(), 3),
                                 "memory_usage": {"weight": 0.27, "kvcache": 27.5, "token_capacity": tokens,
                                                  "graph": 0.13}, "use_mla_backend": False})
                avg = state.avg_accept_length()
                if avg is not None:
                    internal["avg_spec_accept_length"] = avg
                info = dict(sargs)
                info.update({"status": "ready" if state.ready else "starting", "max_total_num_tokens": tokens,
                             "max_req_input_len": (args.context_length or 8192) - 6,
                             "internal_states": [internal], "version": __version__})
                return self._send(200, info)
            if path == "/v1/loads":
                return self._send(200, loads_answer(state, args))
            if path == "/metrics":
                return self._send(200, (
                    f"sglang:num_running_reqs {state.timing.running}\n"
                    f"sglang:generation_tokens_total {state.timing.generated}\n"), "text/plain")
            return self._not_found()

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return self._unauthorized()
            try:
                body = self._json_body()
            except ValueError as exc:
                return self._error(400, f"invalid JSON body: {exc}")
            if path == "/v1/chat/completions":
                messages = body.get("messages") or []
                prompt = "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
                return self._complete(body, prompt, chat=True)
            if path == "/v1/completions":
                prompt, ptoks = engine.prompt_of(body.get("prompt", ""))
                return self._complete(body, prompt, chat=False, ptoks=ptoks)
            if path == "/generate":
                return self._generate(body)
            return self._not_found()

        def _model_check(self, body) -> bool:
            model = body.get("model")
            if model not in (None, "", "default", args.model_id, args.model_path):
                self._error(404, f"The model `{model}` does not exist.")
                return False
            return True

        def _complete(self, body, prompt: str, chat: bool, ptoks: Optional[int] = None):
            """OpenAI completions / chat completions with real 0.5.11's fields (matched_stop, reasoning_content,
            tool_calls, usage.reasoning_tokens, metadata.weight_version; streamed: a role chunk first for chat, the
            finish reason on the last token's chunk (chat: an empty delta), then a usage chunk with no choices)."""
            if not self._model_check(body):
                return None
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 128)
            toks = engine.tokens_for(prompt, max_tokens, garbage=state.fault == "garbage")
            ptoks = ptoks if ptoks is not None else engine.count_prompt_tokens(prompt)
            rid = uuid.uuid4().hex
            obj = "chat.completion" if chat else "text_completion"
            finish = "length" if len(toks) >= max_tokens else "stop"
            decode = plan_decode(state.spec, prompt, toks, stopped=finish == "stop")
            matched = EOS_TOKEN_ID if finish == "stop" else None
            created = int(time.time())
            head = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created, "model": args.model_id}
            if body.get("stream"):
                self._start_stream()
                if chat:
                    self._chunk({**head, "choices": [{"index": 0, "delta": {
                        "reasoning_content": None, "role": "assistant", "content": ""}, "logprobs": None,
                        "finish_reason": None, "matched_stop": None}]})
                for i, group in enumerate(state.generate(decode, ptoks)):
                    last, tok = i == len(decode.groups) - 1, "".join(group)
                    if chat:
                        self._chunk({**head, "choices": [{"index": 0, "delta": {"reasoning_content": None,
                                                                                "content": tok}, "logprobs": None,
                                                          "finish_reason": None, "matched_stop": None}]})
                    else:
                        self._chunk({**head, "choices": [{"index": 0, "text": tok, "logprobs": None,
                                                          "finish_reason": finish if last else None,
                                                          "matched_stop": matched if last else None}],
                                     "usage": None})
                if chat:
                    self._chunk({**head, "choices": [{"index": 0, "delta": {"reasoning_content": None},
                                                      "logprobs": None, "finish_reason": finish,
                                                      "matched_stop": matched}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    usage = {"prompt_tokens": ptoks, "total_tokens": ptoks + len(toks),
                             "completion_tokens": len(toks)}
                    if chat:
                        usage["prompt_tokens_details"] = None
                    usage["reasoning_tokens"] = 0
                    self._chunk({**head, "choices": [], "usage": usage})
                return self._end_stream()
            text = "".join(t for group in state.generate(decode, ptoks) for t in group)
            choice: dict = {"index": 0}
            if chat:
                choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None,
                                     "tool_calls": None}
            else:
                choice["text"] = text
            choice.update(logprobs=None, finish_reason=finish, matched_stop=matched)
            usage = {"prompt_tokens": ptoks, "total_tokens": ptoks + len(toks), "completion_tokens": len(toks),
                     "prompt_tokens_details": None, "reasoning_tokens": 0}
            return self._send(200, {**head, "object": obj, "choices": [choice], "usage": usage,
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
            toks = engine.tokens_for(text_in, max_new, garbage=state.fault == "garbage")
            rid = uuid.uuid4().hex
            started = time.monotonic()
            cached = state.cached_prefix(text_in, ptoks)
            meta = {"id": rid, "finish_reason": None, "prompt_tokens": ptoks, "weight_version": WEIGHT_VERSION,
                    "total_retractions": 0, "reasoning_tokens": 0, "completion_tokens": 0, "cached_tokens": cached,
                    "cached_tokens_details": {"device": cached, "host": 0} if cached else None, "dp_rank": None}
            stopped = len(toks) < max_new
            finish = {"type": "stop", "matched": EOS_TOKEN_ID} if stopped else {"type": "length", "length": max_new}
            decode = plan_decode(state.spec, text_in, toks, stopped)

            def finished(m: dict) -> dict:
                m = dict(m, finish_reason=finish, e2e_latency=time.monotonic() - started)
                m.update(spec_figures(state.spec, len(toks), decode.steps))
                return m

            if body.get("stream"):
                self._start_stream()
                out, ids = "", []
                for i, group in enumerate(state.generate(decode, ptoks)):
                    out += "".join(group)
                    ids += [token_id(t) for t in group]
                    m = dict(meta, completion_tokens=len(ids))
                    if i == len(decode.groups) - 1:
                        m = finished(m)
                    if i == 0:
                        m["response_sent_to_client_ts"] = time.time()
                    self._chunk({"text": out, "output_ids": list(ids), "meta_info": m})
                return self._end_stream()
            out = "".join(t for group in state.generate(decode, ptoks) for t in group)
            m = finished(dict(meta, completion_tokens=len(toks)))
            m["response_sent_to_client_ts"] = time.time()
            return self._send(200, {"text": out, "output_ids": [token_id(t) for t in toks], "meta_info": m})

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        """A client that hung up mid-answer (a health probe dropped by an exiting watcher) is not a server error."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def crash(where: str, detail: str) -> None:
    log(f"Scheduler hit an exception: Traceback (most recent call last):\n  File \"standin/{where}.py\", line 1\n"
        f"RuntimeError: {detail}")
    log("Received sigquit from a child process. It usually means the child failed.")
    os._exit(1)


def wait_for_stop(stop: threading.Event, state: Optional[State] = None) -> None:
    """Wait for the stop event in short slices. A bare stop.wait() can miss SIGTERM for good: when the kernel
    delivers the signal to another thread (a request handler sleeping), the main thread's futex wait is not
    interrupted, so Python never runs on_term (seen in ~1 of 5 recordings, launcher or not).

    With state, after a SIGTERM the server keeps listening for state.drain_s (SGLANG_STANDIN_DRAIN_S) while
    /health* answer 503 and the rest answers: real 0.5.11's sigterm_watchdog notices the signal on its next
    5-second tick (recorded: 2.7 s and 3.1 s of /health 503 and /v1/models 200 before the listener went)."""
    while not stop.wait(0.2):
        pass
    if state is not None and state.stopping and state.drain_s > 0:
        time.sleep(state.drain_s)


def hang(reason: str, stop: threading.Event) -> None:
    """Never progress; only a signal ends it (exit 0, like a clean stop)."""
    log(f"stand-in fault: hanging ({reason})")
    wait_for_stop(stop)
    log("stand-in stopped while hanging")
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    state = State(args)
    args.check_server_args()  # real: Engine._launch_subprocesses, before the server_args line
    log(f"server_args={args!r}")
    load_s = env_float("SGLANG_STANDIN_LOAD_S", 2.0)
    warmup_s = env_float("SGLANG_STANDIN_WARMUP_S", 1.0)

    stop = threading.Event()

    def on_term(signum, _frame):
        if signum == signal.SIGTERM and (args.node_rank or 0) >= 1:
            # real ranks >= 1 install no SIGTERM handler (no tokenizer manager): the process dies of the signal
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if signum == signal.SIGTERM:  # real 0.5.11 (SignalHandler.sigterm_handler, an asyncio handler: no args)
            log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        else:
            log(f"Received signal {signum}; shutting down")
        state.stopping = True
        if state.fault == "slow_shutdown":
            delay = env_float("SGLANG_STANDIN_SHUTDOWN_S", 10.0)
            log(f"stand-in fault: slow shutdown, still answering for {delay:.1f}s")
            threading.Timer(delay, stop.set).start()
        else:
            stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    # Multi-node (multinode.py): the group forms before the weights load (real: init_torch_distributed in
    # ModelRunner.__init__); nothing listens on --port meanwhile; a member lost later ends this node (exit -9).
    http_up = threading.Event()
    if multinode.is_multinode(args):
        try:
            group = multinode.Group(args, log, stop)
            group.on_lost = lambda err: multinode.die(err, log, running=http_up.is_set())
            if not group.form():
                return 0
        except ValueError as exc:  # a malformed --dist-init-addr (real: NetworkAddress.parse in the scheduler)
            multinode.die(multinode.GroupError("ValueError", str(exc)), log)
        except multinode.GroupError as exc:
            multinode.die(exc, log)
    log(f"Load weight begin. model_path={args.model_path} tp_size={args.tp_size}")
    if state.fault == "crash_loading":
        stop.wait(load_s / 2)
        crash("model_runner", "CUDA out of memory while loading weights (stand-in fault crash_loading)")
    if state.fault == "hang":
        hang("while loading weights", stop)
    if stop.wait(load_s):
        return 0
    log("Load weight end.")
    # real SGLang JIT-compiles its kernels into HOME here (during CUDA graph capture): a warm cache skips that
    if jit_cache.warm_up(args, env_float("SGLANG_STANDIN_COMPILE_S", 2.0), stop.wait, log):
        return 0
    spec_budget = args.speculative_ddtree_budget or 0
    if not args.disable_cuda_graph:
        log("Capture cuda graph begin. This can take up to several minutes.")
        if (os.environ.get("SGLANG_STANDIN_GPU_CC") == "10.3" and spec_budget > 8
                and (args.speculative_algorithm or "").upper() == "DDTREE"):
            crash("cuda_graph_runner", f"CUDA error: an illegal memory access was encountered (sm_103, DDTree "
                                       f"budget {spec_budget} > 8 with CUDA graphs; stand-in fault)")
        log("Capture cuda graph end.")

    if state.fault == "bind_then_die":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(16)
        log(f"Uvicorn running on http://{args.host}:{args.port}")
        time.sleep(min(0.5, warmup_s))
        crash("tokenizer_manager", "detokenizer died right after bind (stand-in fault bind_then_die)")

    if (args.node_rank or 0) >= 1:  # real ranks >= 1: no API, a dummy /ping, /health, /health_generate only
        httpd = multinode.dummy_health_server(args.host, args.port, bool(args.enable_metrics), log)
    else:
        httpd = Server((args.host, args.port), make_handler(state))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        http_up.set()
    if (args.node_rank or 0) == 0:
        log("Start of warmup: /health answers 503 until it finishes.")
        if state.fault == "crash_warmup":
            stop.wait(warmup_s / 2)
            crash("warmup", "illegal memory access during the warmup request (stand-in fault crash_warmup)")
        if state.fault == "hang_warmup":
            hang("during warmup, /health stays 503", stop)
        if not stop.wait(warmup_s):
            state.warmed_up()
            log("The server is fired up and ready to roll!")
    wait_for_stop(stop, state)
    httpd.shutdown()
    httpd.server_close()
    # Real 0.5.11 (TokenizerManager.sigterm_watchdog): drain, then kill_process_tree(os.getpid(),
    # include_parent=True) SIGKILLs the tree and itself: exit status -9 even after a clean drain.
    logged_at = 0.0
    while True:
        remain_num_req = state.timing.running
        if remain_num_req == 0 or time.monotonic() - logged_at >= 5:
            logged_at = time.monotonic()
            remaining_rids = [f"standin-{i}" for i in range(remain_num_req)]
            log(f"Gracefully exiting... Remaining number of requests {remain_num_req}. "
                f"Remaining requests {remaining_rids=}.")
        if remain_num_req == 0:
            break
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGKILL)
    return 0  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as exc:
        traceback.print_exc()
        log(f"invalid server arguments: {exc}")
        sys.exit(1)
