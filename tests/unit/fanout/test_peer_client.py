"""The fleet peer client of module_utils/fanout/peer_unit.py (peer_url, file_url, peer_health, peer_index): URLs,
no proxy and no redirect, and every failure (HTTP status, not JSON, not an index, refused, timed out) a PeerError."""
from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from ansible.module_utils.fanout import peer_unit as mp

TOKEN = "fleet-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_peer_url_brackets_ipv6():
    assert mp.peer_url("10.0.0.5", 8095) == "http://10.0.0.5:8095"
    assert mp.peer_url("fd00:0::1", 8095) == "http://[fd00::1]:8095"
    assert mp.file_url("http://h:1/", "m 1", "sub/a b.bin") == "http://h:1/files/m%201/sub/a%20b.bin"


# -- the client against a canned server --------------------------------------------------------------------------------

class Canned(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answers = {}

    def do_GET(self):
        code, headers, body = self.answers.get(self.path, (404, {}, b"{}"))
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def canned():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1], Canned.answers
    srv.shutdown()
    srv.server_close()


def test_client_failures_are_peer_errors(canned, monkeypatch):
    url, answers = canned
    good = json.dumps({"model": "m1", "files": {}, "progress": None, "active": 0, "revision": "r"}).encode()
    answers.update({
        "/health": (200, {}, b'{"ok": true, "models": ["m1"], "pid": 9}'),
        "/index/m1": (200, {}, good),
        "/index/garbage": (200, {}, b"<html>not json"),
        "/index/list": (200, {}, b"[1, 2]"),
        "/index/other": (200, {}, good),
        "/index/gone": (404, {"X-Error-Code": "UnknownModel"}, b"{}"),
        "/index/moved": (302, {"Location": url + "/index/m1"}, b""),
    })
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")  # a dead proxy: the client must not use it
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert mp.peer_health(url, TOKEN)["pid"] == 9
    assert mp.peer_index(url, "m1", TOKEN)["revision"] == "r"
    for model, text in (("garbage", "not JSON"), ("list", "not an object"), ("other", "not an index of other"),
                        ("gone", "HTTP 404 (UnknownModel)"), ("moved", "HTTP 302")):
        with pytest.raises(mp.PeerError) as err:
            mp.peer_index(url, model, TOKEN)
        assert text in str(err.value), model
    closed = free_port()
    with pytest.raises(mp.PeerError) as err:
        mp.peer_health("http://127.0.0.1:%d" % closed, TOKEN)
    assert "refused" in str(err.value).lower()


def test_client_timeout_is_a_peer_error():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections in the kernel, never answers
    try:
        t0 = time.monotonic()
        with pytest.raises(mp.PeerError) as err:
            mp.peer_index("http://127.0.0.1:%d" % silent.getsockname()[1], "m1", TOKEN, timeout=0.3)
        assert time.monotonic() - t0 < 10 and "timed out" in str(err.value)
    finally:
        silent.close()
