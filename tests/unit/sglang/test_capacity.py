"""The KV cache pool check (module_utils/sglang/capacity.py, library/sglang_capacity.py): real 0.5.11's /server_info
(recorded on the H200) passes; the same server with the 284-token pool the H200 gave a DFLASH server started beside
two others fails with both sizes and what to look at; a floor from the setting, 0 = report only; an unreadable or
keyless /server_info fails with the server's answer."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ansible.module_utils.sglang import capacity

REAL = json.loads((Path(__file__).resolve().parents[2] / "fixtures/real_sglang/0.5.11/plain.json").read_text())
INFO = REAL["bodies"]["/server_info"]["body"]


def test_the_recorded_real_server_passes():
    out = capacity.judge(INFO)
    assert out["ok"] and (out["pool_tokens"], out["max_input_tokens"]) == (1930503, 8186)
    assert out["floor"] == 8186 and out["floor_from"] == "the server's max_req_input_len"


def test_a_pool_smaller_than_one_longest_request_fails_with_the_evidence():
    out = capacity.judge(dict(INFO, max_total_num_tokens=284))
    assert not out["ok"]
    assert "holds 284 tokens, fewer than 8186 (the server's max_req_input_len)" in out["why"]
    assert "another process on the GPU" in out["why"] and "--mem-fraction-static" in out["why"]


@pytest.mark.parametrize("floor,ok", [(2_000_000, False), (1_000_000, True), (0, True)])
def test_a_floor_from_the_setting(floor, ok):
    out = capacity.judge(INFO, floor)
    assert out["ok"] is ok and out["floor"] == floor and out["floor_from"] == "the setting"


def test_no_pool_size_is_a_failed_check_not_a_pass():
    assert "no max_total_num_tokens" in capacity.judge({"max_req_input_len": 8186})["why"]
    assert "no max_req_input_len" in capacity.judge({"max_total_num_tokens": 5})["why"]
    assert not capacity.judge(None)["ok"]


class _Server:
    def __init__(self, status, body):
        outer = self
        self.auth = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.auth.append(self.headers.get("Authorization"))
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()


def test_check_reads_server_info_with_the_key_and_reports_a_refusal():
    server = _Server(200, dict(INFO, max_total_num_tokens=284))
    try:
        out = capacity.check(server.url, api_key="k")
        assert not out["ok"] and out["pool_tokens"] == 284 and server.auth == ["Bearer k"]
    finally:
        server.close()
    server = _Server(401, {"error": "Unauthorized"})
    try:
        out = capacity.check(server.url)
        assert not out["ok"] and "GET /server_info: HTTP 401" in out["why"]
    finally:
        server.close()
    server = _Server(200, b"not json")
    try:
        assert "did not answer JSON" in capacity.check(server.url)["why"]
    finally:
        server.close()
