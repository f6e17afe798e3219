"""The stand-in's HTTP server and request handler: answer plumbing (JSON, plain text, server-sent events), the API
key middleware, /health and /ready through the lifecycle, and the routing of every path to its answer
(introspection.py: what describes the server; completions.py: what generates)."""
from __future__ import annotations

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_standin import __version__, engine
from sglang_standin.api_version import HAS_READY, OPEN_PREFIXES
from sglang_standin.chat import ChatRoutes
from sglang_standin.completions import GenerationRoutes
from sglang_standin.introspection import loads_answer, model_info_answer, models_answer, server_info_answer
from sglang_standin.logs import log
from sglang_standin.server_args import ServerArgs
from sglang_standin.serving_state import State

ROUTES = frozenset({"/health", "/health_generate", "/ping", "/v1/models", "/model_info", "/get_model_info",
                    "/server_info", "/get_server_info", "/v1/loads", "/metrics", "/v1/chat/completions",
                    "/v1/completions", "/generate"} | ({"/ready"} if HAS_READY else set()))


class Handler(GenerationRoutes, ChatRoutes, BaseHTTPRequestHandler):
    """The stand-in's HTTP API; make_handler(state) gives the subclass bound to one server's state."""

    state: State
    args: ServerArgs

    protocol_version = "HTTP/1.1"
    server_version = "sglang-standin/" + __version__

    def log_message(self, fmt, *a):  # keep the journal readable: one short line per request
        if os.environ.get("SGLANG_STANDIN_ACCESS_LOG") == "1":
            log("http " + fmt % a)

    # ---- plumbing
    def send_response(self, code, message=None):
        """Counts the answer in sglang:http_responses_total as its status line goes out (before the body: a client
        that saw the answer finds it counted)."""
        if getattr(self, "_route_key", None):
            self.state.metrics.http_respond(*self._route_key, code)
        super().send_response(code, message)

    def _counted(self, method: str, route) -> None:
        """One request through `route`, counted in the sglang:http_* series when its path is a route (real SGLang's
        instrumentation labels routes; an unknown path has no series)."""
        path = self.path.split("?", 1)[0]
        self._route_key = (path, method) if path in ROUTES else None
        if self._route_key is None:
            return route()
        self.state.metrics.http_start(path, method)
        try:
            route()
        finally:
            self.state.metrics.http_end(path, method)

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
        if not self.args.api_key or path.startswith(OPEN_PREFIXES):
            return True
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token == self.args.api_key

    def _unauthorized(self) -> None:
        self._send(401, {"error": "Unauthorized"})

    def _health(self, path: str) -> None:
        """/health and /health_generate: 503 at once while starting or shutting down; once ready, a real
        one-token generation that answers after >= 1 s (the handler polls for it once a second)."""
        if self.args.node_rank >= 1:
            return self._send(200, b"", "text/plain")
        if self.state.stopping:
            log("Health check request received during shutdown. Returning 503.")
            return self._send(503, b"", "text/plain")
        if not self.state.ready:
            return self._send(503, b"", "text/plain")
        end = time.monotonic() + self.state.health_s
        while time.monotonic() < end:  # the generation; a SIGTERM meanwhile turns it into the drain's 503
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))
            if self.state.stopping:
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
        self._counted("GET", self._route_get)

    def do_POST(self):
        self._counted("POST", self._route_post)

    def _route_get(self):
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return self._unauthorized()
        if path in ("/health", "/health_generate"):
            return self._health(path)
        if path == "/ready" and HAS_READY:
            ok = (self.args.node_rank >= 1 or self.state.ready) and not self.state.stopping
            return self._send(200 if ok else 503, b"", "text/plain")
        if path == "/ping":  # SageMaker's health check: the HTTP server is up
            return self._send(200, b"", "text/plain")
        if path == "/v1/models":
            return self._send(200, models_answer(self.state, self.args))
        if path in ("/model_info", "/get_model_info"):
            return self._send(200, model_info_answer(self.args))
        if path in ("/server_info", "/get_server_info"):
            return self._send(200, server_info_answer(self.state, self.args))
        if path == "/v1/loads":
            return self._send(200, loads_answer(self.state, self.args))
        if path == "/metrics":
            return self._send(200, self.state.metrics.text(), "text/plain; version=0.0.4; charset=utf-8")
        return self._not_found()

    def _route_post(self):
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            return self._unauthorized()
        try:
            body = self._json_body()
        except ValueError as exc:
            return self._error(400, f"invalid JSON body: {exc}")
        if path == "/v1/chat/completions":
            return self._chat(body)
        if path == "/v1/completions":
            prompt, ptoks = engine.prompt_of(body.get("prompt", ""))
            return self._complete(body, prompt, ptoks=ptoks)
        if path == "/generate":
            return self._generate(body)
        return self._not_found()


def make_handler(state: State) -> type:
    """The handler class of one server: Handler bound to its state and server arguments."""
    return type("Handler", (Handler,), {"state": state, "args": state.args})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        """A client that hung up mid-answer (a health probe dropped by an exiting watcher) is not a server error."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)
