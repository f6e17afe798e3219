"""module_utils/router/client + library/sglang_router_ready: against recorded smg 1.13.0 answers and the real router.

The recorded half serves tests/fixtures/router/smg-1.13.0/routes/*.json from a loopback fake, scene by scene.
The real half runs the router binary at $SGLANG_ROUTER_BIN (a venv's `smg`, e.g. `pip install smg==1.13.0`) in
front of two SGLang stand-ins on 127.0.0.1; it is skipped, with the reason, when that binary is absent.
"""
import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "router" / "smg-1.13.0"
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402
from ansible.module_utils.router.client import RouterClient, RouterError, parse_worker_requests  # noqa: E402
from tests.helpers.ansible_module import module_command

KEY = "router-test-key"  # the key the recording used, router and workers alike
W1, W2 = "http://127.0.0.1:1", "http://127.0.0.1:2"


def route(step):
    rec = json.loads((FIX / "routes" / f"{step}.json").read_text())
    text = json.dumps(rec["body"]).replace("{worker1}", W1).replace("{worker2}", W2)
    rec["body"] = json.loads(text)
    return rec


class FakeRouter:
    """Answers (method, path) from a scene {(method, path): recorded route}; /workers/<uuid> by prefix.
    Auth as recorded (auth_matrix.json): /workers, /get_loads, /generate need the key, the rest is open."""

    def __init__(self, scene, api_key=KEY):
        self.scene, self.api_key, self.seen, self.on_request = dict(scene), api_key, [], None
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"null") if n else None
                fake.seen.append((method, self.path, body))
                if fake.on_request:
                    fake.on_request(fake, method, self.path)
                rec = fake.scene.get((method, self.path)) or next(
                    (r for (m, p), r in fake.scene.items() if m == method and p.endswith("/*")
                     and self.path.startswith(p[:-1])), None)
                guarded = self.path.startswith(("/workers", "/get_loads", "/generate"))
                if guarded and fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    rec = {"status": 401, "body": {"error": {"message": "Missing API key", "code": "invalid_api_key"}}}
                if rec is None:
                    rec = {"status": 404, "body": {"error": "no such route in this scene"}}
                data = rec["body"] if isinstance(rec["body"], str) else json.dumps(rec["body"])
                self.send_response(rec["status"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data.encode())))
                self.end_headers()
                self.wfile.write(data.encode())

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

            def do_DELETE(self):
                self._answer("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def scene(state):
    """The router's answers in one recorded state: ready, one_down, all_down, recovered."""
    live = route("liveness_ready")
    ready = {"ready": "readiness_ready", "one_down": "readiness_one_down", "all_down": "readiness_all_down",
             "recovered": "readiness_recovered"}[state]
    workers = {"ready": "workers_ready", "one_down": "workers_one_down", "all_down": "workers_all_down",
               "recovered": "workers_recovered"}[state]
    return {("GET", "/liveness"): live, ("GET", "/readiness"): route(ready), ("GET", "/workers"): route(workers)}


@pytest.fixture
def fake():
    made = []

    def make(state, api_key=KEY):
        f = FakeRouter(scene(state), api_key)
        made.append(f)
        return f
    yield make
    for f in made:
        f.close()


# --- recorded answers ------------------------------------------------------------------------------------------

def test_workers_are_normalised_from_the_recorded_answer(fake):
    f = fake("one_down")
    ws = {w["url"]: w for w in RouterClient(f.url, KEY).workers()}
    assert set(ws) == {W1, W2}
    assert ws[W1]["healthy"] is True and ws[W1]["status"] == "ready"
    assert ws[W2]["healthy"] is False and ws[W2]["status"] == "not_ready"
    assert re.fullmatch(r"[0-9a-f-]{36}", ws[W2]["id"])


def test_readiness_counts_and_names_the_unhealthy_worker(fake):
    c = RouterClient(fake("one_down").url, KEY)
    assert c.readiness(min_healthy=1)["ok"]
    look = c.readiness(min_healthy=2, expected=[W1, W2 + "/"])
    assert not look["ok"] and look["healthy"] == [W1] and look["expected_unhealthy"] == [W2]
    assert any("unhealthy: " + W2 + " (not_ready)" in w for w in look["why"]), look["why"]
    assert look["health"]["healthy_workers"] == 1 and look["health"]["total_workers"] == 2


def test_all_workers_down_is_not_ready_although_health_says_ok(fake):
    assert route("health_all_down")["status"] == 200  # the router's /health is liveness only
    c = RouterClient(fake("all_down").url, KEY, sleep=lambda s: None)
    with pytest.raises(RouterError) as exc:
        c.wait_ready(min_healthy=1, timeout=0.2, interval=0.01)
    ev = exc.value.evidence
    assert exc.value.kind == "timeout" and ev["healthy"] == []
    assert sorted(ev["unhealthy"]) == [f"{W1} (not_ready)", f"{W2} (failed)"]
    assert ev["health"]["http"] == 503 and ev["health"]["reason"] == "insufficient healthy workers"
    assert any(a["path"] == "/readiness" and a["status"] == 503 for a in ev["answers"])


def test_wait_ready_returns_at_the_poll_after_the_worker_recovers(fake):
    f = fake("all_down")
    polls = {"n": 0}

    def recover_after_three_looks(fk, method, path):  # the event: the 3rd /readiness look finds it recovered
        if path == "/readiness":
            polls["n"] += 1
            if polls["n"] == 3:
                fk.scene.update(scene("recovered"))
    f.on_request = recover_after_three_looks
    look = RouterClient(f.url, KEY, sleep=lambda s: None).wait_ready(1, timeout=10, expected=[W2], interval=0.01)
    # recorded: worker2 restarted on its address came back by itself; worker1 (killed, not restarted) did not
    assert look["ok"] and look["polls"] == 3 and look["healthy"] == [W2] and look["unhealthy"] == [f"{W1} (not_ready)"]


def test_expected_worker_not_listed_is_named_missing(fake):
    look = RouterClient(fake("ready").url, KEY).readiness(1, expected=[W1, "http://127.0.0.1:3"])
    assert not look["ok"] and look["missing"] == ["http://127.0.0.1:3"]


def test_wrong_key_is_reported_not_taken_for_zero_workers(fake):
    look = RouterClient(fake("ready").url, "wrong").readiness(1)
    assert not look["ok"] and any("401" in w for w in look["why"]), look["why"]
    assert look["health"]["ready"]  # /readiness is open: the router itself is fine


def test_add_and_remove_speak_the_recorded_protocol(fake):
    f = fake("ready")
    f.scene[("POST", "/workers")] = route("add_worker")
    f.scene[("DELETE", "/workers/*")] = route("delete_worker")
    c = RouterClient(f.url, KEY)
    added = c.add_worker(W2 + "/", worker_api_key="wkey")
    assert added["status"] == 202 and added["worker_id"] == route("add_worker")["body"]["worker_id"]
    assert f.seen[-1] == ("POST", "/workers", {"url": W2, "api_key": "wkey"})
    removed = c.remove_worker(W2)
    wid = {w["url"]: w["id"] for w in c.workers()}[W2]
    assert removed["worker_id"] == wid and ("DELETE", f"/workers/{wid}", None) in f.seen
    f.scene[("POST", "/workers")] = route("add_worker_duplicate")
    with pytest.raises(RouterError) as exc:
        c.add_worker(W2)
    assert exc.value.kind == "conflict" and "already in progress" in exc.value.message
    with pytest.raises(RouterError) as exc:
        c.remove_worker("http://127.0.0.1:9")
    assert exc.value.kind == "not_found"


def test_per_worker_counters_from_the_recorded_metrics():
    text = (FIX / "metrics_after_generate.txt").read_text().replace("{worker1}", W1).replace("{worker2}", W2)
    assert parse_worker_requests(text) == {W1: 2.0, W2: 0.0}


def test_module_docs_match_the_argument_spec():
    src = (ROOT / "library" / "sglang_router_ready.py").read_text()
    docs = {t.targets[0].id: yaml.safe_load(t.value.value) for t in ast.parse(src).body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES",
                                                                                  "RETURN")}
    assert docs["DOCUMENTATION"]["module"] == "sglang_router_ready" and docs["EXAMPLES"][0]["name"]
    spec = set(re.findall(r"^\s{12}([a-z_]+)=dict\(", src, re.M))
    assert spec == set(docs["DOCUMENTATION"]["options"])
    assert docs["DOCUMENTATION"]["options"]["api_key"]["no_log"] and "no_log=True" in src
    assert all(isinstance(r["description"], str) for r in docs["RETURN"].values())


def run_module(args, tmp_path):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(module_command("sglang_router_ready", argfile),
                          capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(proc.stdout)


def test_module_fails_naming_missing_and_unhealthy_and_hides_the_key(fake, tmp_path):
    f = fake("one_down")
    out = run_module({"url": f.url, "api_key": KEY, "min_healthy_workers": 2, "timeout": 0.3, "interval": 0.05,
                      "expected_workers": [W1, W2, "http://127.0.0.1:3"], "_ansible_check_mode": True}, tmp_path)
    assert out["failed"] and out["missing_workers"] == ["http://127.0.0.1:3"]
    assert out["unhealthy_workers"] == [f"{W2} (not_ready)"] and W2 in out["msg"]
    assert KEY not in json.dumps(out)  # no_log: masked in invocation, absent from the evidence
    ok = run_module({"url": f.url, "api_key": KEY, "min_healthy_workers": 1, "timeout": 5}, tmp_path)
    assert not ok.get("failed") and not ok["changed"] and ok["healthy_workers"] == [W1]
    assert all(m == "GET" for m, _, _ in f.seen)  # read-only


# --- the real router -------------------------------------------------------------------------------------------

def router_bin():
    return os.environ.get("SGLANG_ROUTER_BIN") or shutil.which("smg") or ""


needs_router = pytest.mark.skipif(not os.access(router_bin() or "/nonexistent", os.X_OK),
                                  reason="real router not found: set SGLANG_ROUTER_BIN to a venv's smg "
                                         "(pip install smg==1.13.0); the recorded-answer tests above still ran")


def poll_until(look, done, timeout):
    """Poll look() until done(result) (the event), bounded by timeout; returns the last result either way."""
    deadline = time.monotonic() + timeout
    while True:
        result = look()
        if done(result) or time.monotonic() >= deadline:
            return result
        time.sleep(0.05)


@needs_router
def test_real_router_counts_marks_a_killed_worker_and_takes_it_back(tmp_path):
    from sglang_standin.local import LocalServer, free_port
    fast = {"SGLANG_STANDIN_LOAD_S": "0.1", "SGLANG_STANDIN_WARMUP_S": "0.1", "SGLANG_STANDIN_HEALTH_S": "0.02"}
    wargs = ["--model-path", "/srv/models/m", "--host", "127.0.0.1", "--api-key", KEY]
    w1, w2 = LocalServer(wargs, env=fast).start(), LocalServer(wargs, env=fast).start()
    rport, mport = free_port(), free_port()
    log = open(tmp_path / "router.log", "w")
    router = None
    try:
        w1.wait_for_line("fired up", 30)
        w2.wait_for_line("fired up", 30)
        router = subprocess.Popen(
            [router_bin(), "launch", "--host", "127.0.0.1", "--port", str(rport), "--worker-urls", w1.url, w2.url,
             "--policy", "cache_aware", "--api-key", KEY, "--health-check-interval-secs", "1",
             "--health-failure-threshold", "1", "--health-success-threshold", "1", "--health-check-timeout-secs",
             "1", "--prometheus-host", "127.0.0.1", "--prometheus-port", str(mport),
             "--shutdown-grace-period-secs", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        c = RouterClient(f"http://127.0.0.1:{rport}", KEY, metrics_url=f"http://127.0.0.1:{mport}")
        both = [w1.url, w2.url]
        look = c.wait_ready(2, timeout=30, expected=both, interval=0.1)
        assert look["health"]["healthy_workers"] == 2

        def gen():
            r = sglang_http.call(c.url, "/generate", "POST", {"text": "hi", "sampling_params": {"max_new_tokens": 1}},
                                 api_key=KEY, timeout=10)
            assert r.ok, r.describe()
        before = c.worker_requests()
        routed = c.wait_routed(None, send=gen, baseline=before, timeout=10)
        assert routed["to"] == [routed["url"]] and routed["url"] in both and routed["after"] == routed["before"] + 1
        other = (set(both) - {routed["url"]}).pop()
        with pytest.raises(RouterError) as exc:  # cache_aware keeps the same prompt on the worker that has it
            c.wait_routed(other, send=gen, timeout=0.5, interval=0.05)
        assert exc.value.kind == "timeout" and exc.value.evidence["counters"][other] == before.get(other, 0.0)

        w2.proc.send_signal(signal.SIGKILL)
        w2.wait_exit(10)
        look = poll_until(lambda: c.readiness(2, expected=both), lambda lk: lk["expected_unhealthy"], 10)
        assert look["expected_unhealthy"] == [w2.url] and look["healthy"] == [w1.url]
        assert any(f"unhealthy: {w2.url}" in w for w in look["why"]) and not look["ok"]
        with pytest.raises(RouterError) as exc:
            c.wait_ready(2, timeout=0.5, expected=both, interval=0.1)
        assert exc.value.kind == "timeout" and exc.value.evidence["expected_unhealthy"] == [w2.url]
        assert c.readiness(1, expected=[w1.url])["ok"]

        w2 = LocalServer(wargs, env=fast, port=w2.port).start()  # same address: smg 1.13 probes it again
        w2.wait_for_line("fired up", 30)
        assert c.wait_ready(2, timeout=15, expected=both, interval=0.1)["ok"]

        c.remove_worker(w2.url)  # explicit re-add: remove (drained ~5 s), then add with the workers' key
        c.wait_gone(w2.url, timeout=20, interval=0.1)
        assert c.readiness(1, expected=both)["missing"] == [w2.url]
        c.add_worker(w2.url, worker_api_key=KEY)
        assert c.wait_ready(2, timeout=20, expected=both, interval=0.1)["ok"]
    finally:
        if router is not None:
            router.send_signal(signal.SIGTERM)
            try:
                router.wait(15)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait(5)
        log.close()
        w1.stop()
        w2.stop()
