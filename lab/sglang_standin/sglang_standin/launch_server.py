"""`python -m sglang_standin.launch_server <SGLang flags>`: the stand-in's equivalent of
`python -m sglang.launch_server`. Lifecycle and faults: see README.md."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from typing import Optional
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_standin import __version__, engine
from sglang_standin.server_args import ServerArgs, prepare_server_args

FAULTS = ("none", "crash_loading", "crash_warmup", "bind_then_die", "hang", "hang_warmup", "slow_shutdown", "garbage")
OPEN_PATHS = ("/health", "/health_generate", "/ready", "/metrics")


def log(msg: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", flush=True)


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        log(f"ignoring {name}={raw!r}: not a number")
        return default


class State:
    def __init__(self, args: ServerArgs):
        self.args = args
        self.ready = False
        self.stopping = False
        self.fault = os.environ.get("SGLANG_STANDIN_FAULT", "none") or "none"
        if self.fault not in FAULTS:
            raise SystemExit(f"SGLANG_STANDIN_FAULT={self.fault!r} is not one of {', '.join(FAULTS)}")
        default_accept = 4.48 if args.speculative_enabled else None
        raw_accept = os.environ.get("SGLANG_STANDIN_ACCEPT_LENGTH", "")
        self.accept_length = float(raw_accept) if raw_accept else default_accept
        self.timing = engine.Timing(
            ttft_ms=env_float("SGLANG_STANDIN_TTFT_MS", 40.0),
            itl_ms=env_float("SGLANG_STANDIN_ITL_MS", 8.0),
            itl_slope_ms=env_float("SGLANG_STANDIN_ITL_SLOPE_MS", 0.05),
            prefill_us_per_token=env_float("SGLANG_STANDIN_PREFILL_US_PER_TOKEN", 20.0),
            max_running=args.max_running_requests or 256,
        )
        self.created = int(time.time())


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

        def _authorized(self, path: str) -> bool:
            if not args.api_key or path in OPEN_PATHS:
                return True
            return self.headers.get("Authorization", "") == f"Bearer {args.api_key}"

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
                return self._error(401, "Unauthorized")
            if path in ("/health", "/health_generate", "/ready"):
                if args.node_rank >= 1 or state.ready:
                    return self._send(200, b"", "text/plain")
                return self._send(503, b"", "text/plain")
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": args.model_id, "object": "model", "created": state.created, "owned_by": "sglang",
                    "root": args.model_path, "max_model_len": args.context_length or 32768}]})
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, {"model_path": args.model_path, "tokenizer_path": args.tokenizer_path or
                                        args.model_path, "is_generation": True, "preferred_sampling_params": None,
                                        "weight_version": "default", "has_image_understanding": False,
                                        "has_audio_understanding": False, "model_type": "standin"})
            if path in ("/server_info", "/get_server_info"):
                info = {k: v for k, v in args.redacted().items() if k != "api_key"}
                info.update({"version": __version__, "standin": True, "internal_states": [{
                    "avg_spec_accept_length": state.accept_length,
                    "last_gen_throughput": round(state.timing.throughput(), 3),
                    "num_running_reqs": state.timing.running}]})
                return self._send(200, info)
            if path == "/metrics":
                return self._send(200, (
                    f"sglang:num_running_reqs {state.timing.running}\n"
                    f"sglang:generation_tokens_total {state.timing.generated}\n"), "text/plain")
            return self._error(404, f"Not Found: {path}")

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            if not self._authorized(path):
                return self._error(401, "Unauthorized")
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
            return self._error(404, f"Not Found: {path}")

        def _model_check(self, body) -> bool:
            model = body.get("model")
            if model not in (None, "", "default", args.model_id, args.model_path):
                self._error(404, f"The model `{model}` does not exist.")
                return False
            return True

        def _complete(self, body, prompt: str, chat: bool, ptoks: Optional[int] = None):
            if not self._model_check(body):
                return None
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 128)
            toks = engine.tokens_for(prompt, max_tokens, garbage=state.fault == "garbage")
            ptoks = ptoks if ptoks is not None else engine.count_prompt_tokens(prompt)
            rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
            obj = "chat.completion" if chat else "text_completion"
            finish = "length" if len(toks) >= max_tokens else "stop"
            usage = {"prompt_tokens": ptoks, "completion_tokens": len(toks), "total_tokens": ptoks + len(toks)}
            if body.get("stream"):
                self._start_stream()
                for tok in state.timing.stream(toks, ptoks):
                    choice = {"index": 0, "finish_reason": None, "logprobs": None}
                    if chat:
                        choice["delta"] = {"role": "assistant", "content": tok}
                    else:
                        choice["text"] = tok
                    self._chunk({"id": rid, "object": obj + ".chunk", "created": int(time.time()),
                                 "model": args.model_id, "choices": [choice]})
                last = {"index": 0, "finish_reason": finish, "logprobs": None}
                last["delta" if chat else "text"] = {} if chat else ""
                final = {"id": rid, "object": obj + ".chunk", "created": int(time.time()), "model": args.model_id,
                         "choices": [last]}
                if (body.get("stream_options") or {}).get("include_usage"):
                    final["usage"] = usage
                self._chunk(final)
                return self._end_stream()
            text = "".join(state.timing.stream(toks, ptoks))
            choice = {"index": 0, "finish_reason": finish, "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return self._send(200, {"id": rid, "object": obj, "created": int(time.time()), "model": args.model_id,
                                    "choices": [choice], "usage": usage})

        def _generate(self, body):
            # SGLang takes either text or input_ids (what bench clients send, so the input length is exact).
            text_in, ptoks = engine.prompt_of(body["input_ids"] if body.get("input_ids") else body.get("text", ""))
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens") or 128)
            toks = engine.tokens_for(text_in, max_new, garbage=state.fault == "garbage")
            rid = uuid.uuid4().hex
            started = time.monotonic()
            meta = {"id": rid, "prompt_tokens": ptoks, "completion_tokens": 0, "cached_tokens": 0,
                    "finish_reason": None}
            if state.accept_length:
                meta["spec_accept_length"] = state.accept_length
            if body.get("stream"):
                self._start_stream()
                out = ""
                for tok in state.timing.stream(toks, ptoks):
                    out += tok
                    meta["completion_tokens"] += 1
                    self._chunk({"text": out, "meta_info": dict(meta)})
                meta["finish_reason"] = {"type": "length" if len(toks) >= max_new else "stop"}
                meta["e2e_latency"] = time.monotonic() - started
                self._chunk({"text": out, "meta_info": meta})
                return self._end_stream()
            out = "".join(state.timing.stream(toks, ptoks))
            meta.update(completion_tokens=len(toks), e2e_latency=time.monotonic() - started,
                        finish_reason={"type": "length" if len(toks) >= max_new else "stop"})
            return self._send(200, {"text": out, "meta_info": meta})

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024


def crash(where: str, detail: str) -> None:
    log(f"Scheduler hit an exception: Traceback (most recent call last):\n  File \"standin/{where}.py\", line 1\n"
        f"RuntimeError: {detail}")
    log("Received sigquit from a child process. It usually means the child failed.")
    os._exit(1)


def hang(reason: str, stop: threading.Event) -> None:
    """Never progress; only a signal ends it (exit 0, like a clean stop)."""
    log(f"stand-in fault: hanging ({reason})")
    stop.wait()
    log("stand-in stopped while hanging")
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    state = State(args)
    log(f"server_args={args!r}")
    load_s = env_float("SGLANG_STANDIN_LOAD_S", 2.0)
    warmup_s = env_float("SGLANG_STANDIN_WARMUP_S", 1.0)

    stop = threading.Event()

    def on_term(signum, _frame):
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

    log(f"Load weight begin. model_path={args.model_path} tp_size={args.tp_size}")
    if state.fault == "crash_loading":
        stop.wait(load_s / 2)
        crash("model_runner", "CUDA out of memory while loading weights (stand-in fault crash_loading)")
    if state.fault == "hang":
        hang("while loading weights", stop)
    if stop.wait(load_s):
        return 0
    log("Load weight end.")
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

    httpd = Server((args.host, args.port), make_handler(state))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    if args.node_rank >= 1:
        log("Non-zero node rank: serving a dummy /health only.")
    else:
        log("Start of warmup: /health answers 503 until it finishes.")
        if state.fault == "crash_warmup":
            stop.wait(warmup_s / 2)
            crash("warmup", "illegal memory access during the warmup request (stand-in fault crash_warmup)")
        if state.fault == "hang_warmup":
            hang("during warmup, /health stays 503", stop)
        if not stop.wait(warmup_s):
            state.ready = True
            log("The server is fired up and ready to roll!")
    stop.wait()
    httpd.shutdown()
    httpd.server_close()
    log("stand-in stopped")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as exc:
        traceback.print_exc()
        log(f"invalid server arguments: {exc}")
        sys.exit(1)
