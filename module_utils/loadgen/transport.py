# -*- coding: utf-8 -*-
"""A small, fast asyncio HTTP/1.1 client for streaming (SSE) benchmark requests (stdlib only).

Why not urllib/http.client: the load harness must drive >= 25k streamed tokens/s from one core, so it
uses an asyncio.Protocol (no coroutine per chunk): each data_received() call is stamped once with
time.perf_counter() and parsed incrementally (chunked transfer encoding or Content-Length, then
Server-Sent Events split on blank lines). One HttpConnection per worker, kept alive between requests.

stream_post() calls on_event(payload_bytes, timestamp) for every `data:` line except `[DONE]`.
Non-200 answers raise HttpError with the status and the start of the body (evidence, not a guess).

Outside the timed phase, the blocking side of the bench's HTTP is here too: get_status() (the status a GET answers,
for the serving check) and get_json() (/v1/models, /server_info), both without any proxy.
"""
from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.evidence.error import EvidenceError


class HttpError(EvidenceError):
    """An HTTP answer other than 200, or a broken stream."""


def split_url(base_url):
    """'http://127.0.0.1:30001' -> ('127.0.0.1', 30001). Only plain http (the bench talks to localhost)."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("base_url must be http://host:port, got %r" % (base_url,))
    return parts.hostname, parts.port or 80


class _StreamProtocol(asyncio.Protocol):
    def __init__(self):
        self.transport = None
        self.closed = False
        self._reset()

    def _reset(self):
        self.buf = bytearray()
        self.sse = bytearray()
        self.state = "idle"
        self.status = 0
        self.headers = {}
        self.remaining = 0
        self.keep_alive = True
        self.error_body = bytearray()
        self.on_event = None
        self.done = None

    # asyncio callbacks -------------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self.done is not None and not self.done.done():
            if self.state == "eof" and self.status:
                self._finish_events(time.perf_counter(), final=True)
                self._complete()
            else:
                self.done.set_exception(HttpError("connection closed in state %s: %s" % (self.state, exc)))

    def data_received(self, data):
        if self.done is None or self.done.done():
            return
        now = time.perf_counter()
        self.buf += data
        try:
            self._parse(now)
            if not self.done.done() and self.state != "idle":
                self._finish_events(now)
        except Exception as exc:  # a malformed answer fails this request, never the event loop
            if not self.done.done():
                self.done.set_exception(HttpError("malformed response: %s" % (exc,)))
            self.transport.close()

    # request -----------------------------------------------------------------------------------
    def start(self, request_bytes, on_event):
        self._reset()
        self.on_event = on_event
        self.state = "head"
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request_bytes)
        return self.done

    # parsing -----------------------------------------------------------------------------------
    def _parse(self, now):
        buf = self.buf
        while True:
            state = self.state
            if state == "head":
                idx = buf.find(b"\r\n\r\n")
                if idx < 0:
                    return
                head = bytes(buf[:idx]).decode("latin-1").split("\r\n")
                del buf[:idx + 4]
                status_line = head[0].split(" ", 2)
                self.status = int(status_line[1])
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    self.headers[name.strip().lower()] = value.strip()
                conn = self.headers.get("connection", "").lower()
                self.keep_alive = conn != "close"
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    self.state = "size"
                elif "content-length" in self.headers:
                    self.remaining = int(self.headers["content-length"])
                    self.state = "length"
                    if self.remaining == 0:
                        self._finish_events(now, final=True)
                        return self._complete()
                else:
                    self.keep_alive = False
                    self.state = "eof"
            elif state == "size":
                idx = buf.find(b"\r\n")
                if idx < 0:
                    return
                size = int(bytes(buf[:idx]).split(b";", 1)[0].strip() or b"0", 16)
                del buf[:idx + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.remaining = size
                    self.state = "data"
            elif state == "data":
                take = min(self.remaining, len(buf))
                if take == 0:
                    return
                self._body(buf[:take])
                del buf[:take]
                self.remaining -= take
                if self.remaining:
                    return
                self.state = "crlf"
            elif state == "crlf":
                if len(buf) < 2:
                    return
                del buf[:2]
                self.state = "size"
            elif state == "trailer":
                idx = buf.find(b"\r\n")
                if idx < 0:
                    return
                line = buf[:idx]
                del buf[:idx + 2]
                if not line:
                    self._finish_events(now, final=True)
                    return self._complete()
            elif state == "length":
                take = min(self.remaining, len(buf))
                self._body(buf[:take])
                del buf[:take]
                self.remaining -= take
                if self.remaining == 0:
                    self._finish_events(now, final=True)
                    return self._complete()
                return
            elif state == "eof":
                self._body(buf)
                del buf[:]
                return
            else:
                return

    def _body(self, chunk):
        if self.status == 200:
            self.sse += chunk
        elif len(self.error_body) < 2000:
            self.error_body += chunk[:2000]

    def _finish_events(self, now, final=False):
        if self.status != 200:
            return
        sse = self.sse
        while True:
            idx = sse.find(b"\n\n")
            if idx < 0:
                if final and sse.strip():
                    idx = len(sse)
                else:
                    break
            event = bytes(sse[:idx])
            del sse[:idx + 2]
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload and payload != b"[DONE]":
                        self.on_event(payload, now)
            if not sse:
                break

    def _complete(self):
        self.state = "idle"
        if self.done.done():
            return
        if self.status != 200:
            body = bytes(self.error_body[:500]).decode("utf-8", "replace")
            self.done.set_exception(HttpError("HTTP %d: %s" % (self.status, body)))
        else:
            self.done.set_result(self.status)
        if not self.keep_alive:
            self.transport.close()


class HttpConnection:
    """One kept-alive connection to host:port; reconnects when the server closed it."""

    def __init__(self, host, port, connect_timeout=10.0):
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.protocol = None

    async def connect(self):
        """Open the connection now (outside any timed region); later requests reuse it."""
        return await self._ensure()

    async def _ensure(self):
        if self.protocol is None or self.protocol.closed or self.protocol.transport.is_closing():
            loop = asyncio.get_running_loop()
            _, self.protocol = await asyncio.wait_for(
                loop.create_connection(_StreamProtocol, self.host, self.port), self.connect_timeout)
        return self.protocol

    async def stream_post(self, path, body, on_event, headers=None, timeout=None):
        """POST body (bytes) to path; on_event(payload, t) per SSE data line. Raises HttpError/TimeoutError."""
        proto = await self._ensure()
        lines = ["POST %s HTTP/1.1" % path, "Host: %s:%d" % (self.host, self.port),
                 "Content-Type: application/json", "Accept: text/event-stream",
                 "Content-Length: %d" % len(body)]
        for name, value in (headers or {}).items():
            lines.append("%s: %s" % (name, value))
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        done = proto.start(request, on_event)
        try:
            if timeout:
                await asyncio.wait_for(done, timeout)
            else:
                await done
        except BaseException:
            # A request that did not finish leaves the connection in an unknown state: drop it.
            self.close()
            raise

    def close(self):
        if self.protocol is not None and self.protocol.transport is not None:
            self.protocol.transport.close()
        self.protocol = None


def _opener():
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_status(base_url, path, timeout=5.0):
    """Blocking GET's HTTP status, an error status included (404, 503 ...). OSError (URLError) or ValueError when
    nothing answered."""
    try:
        with _opener().open(base_url.rstrip("/") + path, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def get_json(base_url, path, timeout=5.0, api_key=None):
    """Blocking GET returning parsed JSON, or None on any error (used outside the timed phase)."""
    request = urllib.request.Request(base_url.rstrip("/") + path)
    if api_key:
        request.add_header("Authorization", "Bearer %s" % api_key)
    try:
        with _opener().open(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError, urllib.error.URLError):
        return None
