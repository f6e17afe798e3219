"""Minimal stdlib HTTP client for an SGLang server (runs on the target: no requests, no aiohttp).

`call()` never raises for network errors: it returns a Response whose `error` says what happened
("refused", "timeout", "reset", ...) so readiness code can name the phase it is in.
"""
from __future__ import annotations

import errno
import http.client
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class Response:
    status: int = 0
    body: bytes = b""
    error: str = ""
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 200

    def json(self):
        return json.loads(self.body.decode("utf-8", "replace") or "null")

    def describe(self) -> str:
        if self.error:
            return self.error
        return f"HTTP {self.status} {self.body[:200].decode('utf-8', 'replace')!r}"


def _split(base_url: str):
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL {base_url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


def _classify(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return "refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)):
        return "reset"
    return f"{type(exc).__name__}: {exc}"


def _connect(base_url: str, timeout: float):
    scheme, host, port, prefix = _split(base_url)
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    return cls(host, port, timeout=timeout), prefix


def _headers(api_key: str | None, body: bool) -> dict:
    headers = {"Accept": "application/json"}
    if body:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def call(base_url: str, path: str, method: str = "GET", payload=None, api_key: str | None = None,
         timeout: float = 5.0) -> Response:
    started = time.monotonic()
    conn, prefix = _connect(base_url, timeout)
    data = json.dumps(payload).encode() if payload is not None else None
    try:
        conn.request(method, prefix + path, body=data, headers=_headers(api_key, data is not None))
        resp = conn.getresponse()
        body = resp.read()
        return Response(status=resp.status, body=body, elapsed=time.monotonic() - started)
    except (OSError, http.client.HTTPException) as exc:
        return Response(error=_classify(exc), elapsed=time.monotonic() - started)
    finally:
        conn.close()


@dataclass
class StreamResult:
    """text: the answer (delta.content, or a completion's text); reasoning: delta.reasoning_content, which SGLang
    streams apart when it runs a reasoning parser (srt/entrypoints/openai/serving_chat.py `_generate_chat_stream`);
    chunks: the chunks that carried either; finish_reason: the last one a choice gave."""
    text: str = ""
    reasoning: str = ""
    chunks: int = 0
    finish_reason: str | None = None
    ttft: float | None = None
    elapsed: float = 0.0
    usage: dict | None = None
    error: str = ""
    status: int = 0


def stream(base_url: str, path: str, payload: dict, api_key: str | None = None, timeout: float = 60.0) -> StreamResult:
    """POST with stream=true and read the SSE reply: text and reasoning (concatenated deltas), TTFT (the first chunk
    of either), usage, finish reason."""
    out = StreamResult()
    started = time.monotonic()
    conn, prefix = _connect(base_url, timeout)
    payload = dict(payload, stream=True)
    try:
        conn.request("POST", prefix + path, body=json.dumps(payload).encode(), headers=_headers(api_key, True))
        resp = conn.getresponse()
        out.status = resp.status
        if resp.status != 200:
            out.error = f"HTTP {resp.status} {resp.read()[:300].decode('utf-8', 'replace')!r}"
            return out
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                out.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content") or choice.get("text") or ""
                thought = delta.get("reasoning_content") or ""
                if piece or thought:
                    if out.ttft is None:
                        out.ttft = time.monotonic() - started
                    out.text += piece
                    out.reasoning += thought
                    out.chunks += 1
                out.finish_reason = choice.get("finish_reason") or out.finish_reason
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out.error = _classify(exc) if not isinstance(exc, ValueError) else f"bad SSE data: {exc}"
    finally:
        out.elapsed = time.monotonic() - started
        conn.close()
    return out


def model_ids(resp: Response) -> list[str]:
    try:
        return [str(m.get("id")) for m in (resp.json() or {}).get("data", [])]
    except (ValueError, AttributeError):
        return []


def accept_length(server_info: dict) -> float | None:
    """`/server_info` -> internal_states[0].avg_spec_accept_length (None when absent)."""
    try:
        value = (server_info.get("internal_states") or [{}])[0].get("avg_spec_accept_length")
        return float(value) if value is not None else None
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
