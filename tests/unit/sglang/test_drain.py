"""module_utils/sglang/drain: the drain of a worker judged from /v1/loads answers shaped as SGLang 0.5.11 gives them,
and the stand-in's /v1/loads counting its running and waiting requests live."""
import json
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402
from ansible.module_utils.sglang.drain import Drain, DrainError, LOADS_PATH, in_flight  # noqa: E402


def loads(*ranks):
    return {"timestamp": "2026-12-02T00:00:00+00:00", "version": "0.5.11", "dp_rank_count": len(ranks),
            "loads": [{"dp_rank": i, "num_running_reqs": r, "num_waiting_reqs": w, "num_total_reqs": r + w}
                      for i, (r, w) in enumerate(ranks)],
            "aggregate": {"total_reqs": sum(r + w for r, w in ranks)}}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def scripted(answers, clock):
    """http(): the next scripted answer each call; an int status, a dict body, or a network error string."""
    seq = list(answers)

    def http(url, path, method="GET", payload=None, api_key=None, timeout=5.0):
        assert path == LOADS_PATH and api_key == "k"
        a = seq.pop(0) if len(seq) > 1 else seq[0]
        if isinstance(a, str):
            return sglang_http.Response(error=a)
        if isinstance(a, int):
            return sglang_http.Response(status=a, body=b"{}")
        return sglang_http.Response(status=200, body=json.dumps(a).encode())
    return http


def drain(answers, **kw):
    clock = Clock()
    return Drain("http://h:1", api_key="k", http=scripted(answers, clock), clock=clock, sleep=clock.sleep,
                 interval=0.5, **kw)


def test_in_flight_sums_running_and_waiting_over_dp_ranks():
    assert in_flight(loads((3, 1), (2, 0))) == (5, 1)
    with pytest.raises(ValueError):
        in_flight({"loads": [{"num_running_reqs": 1}]})
    with pytest.raises(ValueError):
        in_flight({"status": "ok"})


def test_drained_only_after_zero_held_for_quiet_for():
    d = drain([loads((2, 1)), loads((1, 0)), loads((0, 0)), loads((1, 0)), loads((0, 0))], quiet_for=1.0)
    out = d.wait()
    # zero at 1.0 s, a straggler at 1.5 s resets the quiet window, zero again from 2.0 s, quiet at 3.0 s
    assert out["first_zero_s"] == 1.0 and out["waited_s"] == 3.0 and out["peak"] == 3


def test_a_server_still_busy_at_the_bound_fails_with_the_series():
    d = drain([loads((4, 2))], timeout=5.0)
    with pytest.raises(DrainError) as err:
        d.wait()
    assert err.value.kind == "timeout" and "still had requests in flight after 5s" in err.value.message
    assert err.value.evidence["samples"][-1][1:] == [4, 2]


def test_a_server_that_stops_answering_is_down_not_drained():
    d = drain([loads((1, 0)), "refused"], down_after=3.0)
    with pytest.raises(DrainError) as err:
        d.wait()
    assert err.value.kind == "down" and "refused" in err.value.message


@pytest.mark.parametrize("status,kind", [(404, "unsupported"), (401, "unauthorized")])
def test_no_loads_endpoint_or_a_wrong_key_fails_at_once(status, kind):
    d = drain([status])
    with pytest.raises(DrainError) as err:
        d.wait()
    assert err.value.kind == kind and len(d.samples) == 0


def test_the_standin_counts_running_and_waiting_requests_live(tmp_path):
    """The stand-in with max_running_requests 2 and 4 slow generations (2 s each: the last two wait 2 s for a slot,
    a window 40 polls wide): 2 running + 2 waiting, then 0."""
    import socket
    import subprocess
    import os
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lab" / "sglang_standin"), "SGLANG_STANDIN_LOAD_S": "0",
           "SGLANG_STANDIN_WARMUP_S": "0", "SGLANG_STANDIN_ITL_MS": "20"}
    proc = subprocess.Popen([sys.executable, "-m", "sglang_standin.launch_server", "--model-path", str(tmp_path),
                             "--host", "127.0.0.1", "--port", str(port), "--api-key", "k",
                             "--max-running-requests", "2"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while sglang_http.call(url, "/health").status != 200:
            assert time.monotonic() < deadline and proc.poll() is None, "stand-in did not come up"
            time.sleep(0.1)
        assert sglang_http.call(url, LOADS_PATH).status == 401  # not an open path, as in SGLang
        done = []
        threads = [threading.Thread(target=lambda: done.append(sglang_http.call(
            url, "/generate", "POST", {"text": "hi", "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}},
            api_key="k", timeout=30).status)) for _ in range(4)]
        for t in threads:
            t.start()
        seen = set()
        deadline = time.monotonic() + 20
        while len(done) < 4 and time.monotonic() < deadline:
            seen.add(in_flight(sglang_http.call(url, LOADS_PATH, api_key="k").json()))
            time.sleep(0.05)
        for t in threads:
            t.join(30)
        assert done == [200] * 4
        assert (2, 2) in seen, seen
        assert in_flight(sglang_http.call(url, LOADS_PATH, api_key="k").json()) == (0, 0)
        assert Drain(url, api_key="k", quiet_for=0.2, interval=0.1, timeout=5).wait()["peak"] == 0
    finally:
        proc.terminate()
        proc.wait(10)


REAL = ROOT / "tests" / "fixtures" / "real_sglang" / "loads" / "0.5.11-h200"


def test_the_real_answer_parses_and_the_standin_answers_with_its_keys(tmp_path):
    """/v1/loads?include=core of real 0.5.11 (recorded on the H200): in_flight reads it; the stand-in's answer has the
    same keys at every level (no dp_rank without DP attention: SGLang drops None fields) and the same 401."""
    idle = json.loads((REAL / "idle.json").read_text())
    real = idle["GET /v1/loads?include=core"]["body"]
    assert in_flight(real) == (0, 0)
    assert idle["GET /v1/loads?include=core (no key)"]["status"] == 401
    from sglang_standin.introspection import loads_answer

    class Args:
        max_running_requests = 4

    class State:
        class timing:
            lock = threading.Lock()
            running, waiting = 0, 0

            @staticmethod
            def throughput():
                return 0.0
    mine = loads_answer(State, Args)
    assert set(mine) == set(real)
    assert set(mine["loads"][0]) == set(real["loads"][0])
    assert set(mine["aggregate"]) == set(real["aggregate"])


def test_the_real_drain_timeline_is_judged_drained_only_after_the_last_request():
    """The recorded series (6 streams, 4 running + 2 waiting at the peak, the last done at t_last) replayed: the drain
    is not declared before the last request finished, and is declared once the count held zero for quiet_for."""
    tl = json.loads((REAL / "timeline.json").read_text())
    last_done = max(r["t_closed"] for r in tl["requests"])
    series = [{"loads": [{"num_running_reqs": p["running"], "num_waiting_reqs": p["waiting"]}]} for p in tl["loads"]]
    assert max(p["running"] + p["waiting"] for p in tl["loads"]) == 6
    clock = Clock()
    t0 = tl["loads"][0]["t_sent"]
    times = [p["t_sent"] - t0 for p in tl["loads"]]

    def http(url, path, method="GET", payload=None, api_key=None, timeout=5.0):
        i = max(j for j, t in enumerate(times) if t <= clock.t + 1e-9)  # the newest recorded poll at this time
        return sglang_http.Response(status=200, body=json.dumps(series[i]).encode())
    out = Drain("http://h:1", api_key="k", http=http, clock=clock, sleep=clock.sleep, interval=0.2,
                quiet_for=1.0).wait()
    assert out["first_zero_s"] >= last_done - 0.2 and out["waited_s"] >= last_done + 0.8, (out, last_done)
    assert out["peak"] == 6
