"""module_utils/multinode/group_ready.py: the readiness of a serving group against fake rank HTTP servers on 127.0.0.1
(rank 0's unit scripted, its HTTP real), and which rank rank 0's journal says it lost. Every wait is on an event with
a bound, never a sleep."""
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible.module_utils.multinode.group_ready import GroupError, GroupOptions, RankSpec, lost_rank, wait_group
from ansible.module_utils.sglang import ready as sglang_ready
from ansible.module_utils.systemd.unit import UnitState


# ================================================================ which rank rank 0 lost (its journal)
# gloo's lines as measured (tests/fixtures/real_sglang/multinode-0.5.11.md) and the stand-in's extra note
GLOO_CLOSED = ("sglang[311]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
               "peer [10.0.0.12]:60117. This is typically caused by a remote worker crashing.")
GLOO_RESET = ("sglang[311]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
              "[fd00::13]:23472: Connection reset by peer. This is typically caused by a remote worker hanging")
STANDIN_LOST = ("sglang[77]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
                "peer [127.0.0.1]:41000. This is typically caused by a remote worker crashing. (stand-in: lost node "
                "rank 2)")


def test_lost_rank_reads_gloo_lines_and_the_standins_note():
    ranks = [RankSpec("b300-02", "http://10.0.0.12:30001", 1), RankSpec("b300-03", "http://[fd00::13]:30001", 2)]
    assert lost_rank(["Load weight begin.", GLOO_CLOSED], ranks) == (ranks[0], GLOO_CLOSED)
    assert lost_rank([GLOO_RESET], ranks) == (ranks[1], GLOO_RESET)
    assert lost_rank(["sglang[1]: Received sigquit from a child process."], ranks) == (None, "")
    assert lost_rank([GLOO_CLOSED.replace("10.0.0.12", "10.0.0.99")], ranks) == (None, "")  # not a rank's address
    local = [RankSpec("r1", "http://127.0.0.1:1", 1), RankSpec("r2", "http://127.0.0.1:2", 2)]
    assert lost_rank([GLOO_CLOSED.replace("10.0.0.12", "127.0.0.1")], local) == (None, "")  # ambiguous address
    assert lost_rank([STANDIN_LOST], local) == (local[1], STANDIN_LOST)


# ================================================================ fake ranks (real HTTP on 127.0.0.1)
class FakeRank:
    """A rank's HTTP: /health answers `health` (a status, or a callable n -> status); /v1/models lists 'm'.
    `ok` is set once a /health got a 200; kill() closes the listener (connection refused from then on)."""

    def __init__(self, health=200):
        self.health, self.ok, self.n = health, threading.Event(), 0
        rank = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/health":
                    rank.n += 1
                    status = rank.health(rank.n) if callable(rank.health) else rank.health
                    body = b""
                elif self.path == "/v1/models":
                    status, body = 200, b'{"data": [{"id": "m"}]}'
                else:
                    status, body = 404, b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                if self.path == "/health" and status == 200:
                    rank.ok.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.alive = True

    def kill(self):
        if self.alive:
            self.alive = False
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def fakes():
    made = []

    def make(health=200):
        made.append(FakeRank(health))
        return made[-1]

    yield make
    for f in made:
        f.kill()


JOURNAL = ["sglang[200]: [2026-01-01] Scheduler hit an exception: NCCL error",
           "systemd[1]: sglang.service: Main process exited, code=exited, status=1/FAILURE",
           "systemd[1]: sglang.service: Failed with result 'exit-code'."]


def unit(inv="inv-new", active="active", sub="running", pid=200):
    return UnitState(unit="sglang.service", load_state="loaded", active_state=active, sub_state=sub, main_pid=pid,
                     invocation_id=inv, result="success" if active == "active" else "exit-code",
                     control_group="/system.slice/sglang.service")


class Rank0Unit:
    """Rank 0's unit, scripted: `state` is what systemctl show says now."""

    def __init__(self):
        self.state = unit()
        self.journal = JOURNAL
        self.journal_calls = []

    def probe(self):
        return sglang_ready.Probe(show=lambda name: self.state, systemctl=lambda action, name, no_block=True: None,
                                  journal=lambda name, inv, n: self.journal_calls.append(inv) or self.journal)


def gopts(rank0, ranks, timeout=10.0, settle=30.0, dead_after=2.0):
    opts = sglang_ready.Options(unit="sglang.service", base_url=rank0.url, model_id="m", timeout=timeout, poll=0.05,
                                check_listener_owner=False, journal_wait=0.2, http_timeout=1.0)
    specs = [r if isinstance(r, RankSpec) else RankSpec(f"r{i + 1}", r.url, i + 1) for i, r in enumerate(ranks)]
    return GroupOptions(ready=opts, ranks=specs, rank0_name="r0", rank_dead_after=dead_after, settle=settle)


class Run:
    """wait_group in a thread; `events` records the group's own events (rank0_ready, settling)."""

    def __init__(self, g, probe):
        self.events = {"rank0_ready": threading.Event(), "settling": threading.Event()}
        self.result = self.error = None
        self.ended_at = None
        self.done = threading.Event()

        def target():
            try:
                self.result = wait_group(g, probe=probe, on_event=lambda name, d: self.events[name].set())
            except GroupError as exc:
                self.error = exc
            finally:
                self.ended_at = time.monotonic()
                self.done.set()

        self.started_at = time.monotonic()
        threading.Thread(target=target, daemon=True).start()


def test_group_ready_then_settles_with_every_rank_answering(fakes):
    r0, r1, r2 = fakes(), fakes(), fakes()
    u = Rank0Unit()
    run = Run(gopts(r0, [r1, r2], settle=0.5), u.probe())
    assert run.done.wait(10)
    assert run.error is None, run.error and run.error.message
    out = run.result
    assert out["pid"] == 200 and out["invocation_id"] == "inv-new" and out["settle_s"] >= 0.5
    assert [(r["name"], r["node_rank"], r["answered"]) for r in out["ranks"]] == [
        ("r0", 0, True), ("r1", 1, True), ("r2", 2, True)]
    assert all(r["oks"] >= 1 for r in out["ranks"]) and out["group_ready_s"] <= out["time_to_ready"] + 1.0


def test_killed_rank1_fails_the_group_within_3s_naming_it(fakes):
    r0, r1, r2 = fakes(), fakes(), fakes()
    run = Run(gopts(r0, [r1, r2]), Rank0Unit().probe())
    assert run.events["settling"].wait(10), "the group never got to its settle window"
    killed_at = time.monotonic()
    r1.kill()
    assert run.done.wait(6)
    err = run.error
    assert err is not None and err.kind == "rank_dead" and err.rank == "r1" and err.node_rank == 1
    took = run.ended_at - killed_at
    assert 1.5 <= took <= 3.0, took  # waited rank_dead_after (2 s) of silence, and no more than 3 s
    assert err.phase == "settling" and "rank 1 (r1" in err.message and "journalctl -u sglang.service -n 80 on r1" in \
        err.message
    by_name = {r["name"]: r for r in err.evidence["ranks"]}
    assert by_name["r1"]["last_ok_ago_s"] >= 2.0 and by_name["r2"]["last_ok_ago_s"] < 1.0
    assert err.evidence["detect_s"] >= 2.0 and err.evidence["journal"] == []  # rank 1's journal is the controller's
    # the verdict's wall-clock time, what a caller compares with when the rank died (time.time() of the kill)
    assert abs(err.evidence["failed_at"] - (time.time() - (time.monotonic() - run.ended_at))) < 0.5


def test_rank_dying_while_rank0_still_loads_fails_fast_naming_it(fakes):
    r0, r1, r2 = fakes(health=503), fakes(), fakes()  # rank 0 warming up forever
    run = Run(gopts(r0, [r1, r2], timeout=20), Rank0Unit().probe())
    assert r2.ok.wait(5)
    killed_at = time.monotonic()
    r2.kill()
    assert run.done.wait(6)
    assert run.error.kind == "rank_dead" and run.error.rank == "r2" and run.error.phase == "rank 0 starting"
    assert run.ended_at - killed_at <= 3.0
    assert not run.events["rank0_ready"].is_set()


def test_rank0_not_ready_is_a_bounded_timeout_with_evidence(fakes):
    r0, r1 = fakes(health=503), fakes()
    run = Run(gopts(r0, [r1], timeout=1.0), Rank0Unit().probe())
    assert run.done.wait(8)
    err = run.error
    assert err.kind == "timeout" and err.rank == "r0" and err.node_rank == 0 and err.phase == "warming up"
    assert 1.0 <= run.ended_at - run.started_at <= 3.0
    assert "HTTP 503" in err.message and "stuck" in err.message
    assert err.evidence["ranks"][0]["name"] == "r1" and err.evidence["ranks"][0]["answered"]
    assert [p["phase"] for p in err.evidence["phases"]] == ["starting"]


def test_rank_that_never_answers_times_out_naming_it(fakes):
    r0 = fakes()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    run = Run(gopts(r0, [RankSpec("r1", f"http://127.0.0.1:{closed}", 1)], timeout=1.0), Rank0Unit().probe())
    assert run.done.wait(8)
    err = run.error
    assert err.kind == "timeout" and err.rank == "r1" and err.phase == "waiting for ranks"
    assert "never answered" in err.message and "refused" in err.message
    assert run.events["rank0_ready"].is_set()


def test_restarted_rank_old_answers_never_count(fakes):
    r0 = fakes()
    old = fakes()  # the old process keeps answering: never seen down, so never counted
    run = Run(gopts(r0, [RankSpec("r1", old.url, 1, restarted=True)], timeout=1.0), Rank0Unit().probe())
    assert run.done.wait(8)
    assert run.error.kind == "timeout" and run.error.rank == "r1"
    assert run.error.evidence["ranks"][0]["checks"] >= 2 and not run.error.evidence["ranks"][0]["answered"]
    bounced = fakes(health=lambda n: 200 if n == 1 or n >= 4 else 503)  # old up, down, then the new one
    run = Run(gopts(r0, [RankSpec("r1", bounced.url, 1, restarted=True)], settle=0.2), Rank0Unit().probe())
    assert run.done.wait(8) and run.error is None and run.result["ranks"][1]["answered"]


def test_rank0_unit_dying_in_settle_fails_with_its_journal(fakes):
    r0, r1 = fakes(), fakes()
    u = Rank0Unit()
    run = Run(gopts(r0, [r1]), u.probe())
    assert run.events["settling"].wait(10)
    u.state = unit(active="failed", sub="failed", pid=0)
    assert run.done.wait(3)
    err = run.error
    assert err.kind == "failed" and err.rank == "r0" and err.node_rank == 0 and err.phase == "settling"
    assert err.evidence["unit"]["active_state"] == "failed" and err.evidence["journal"] == JOURNAL
    assert "NCCL error" in err.message and u.journal_calls[-1] == "inv-new"


def test_rank0_going_down_after_losing_a_rank_names_that_rank(fakes):
    """Real groups fall together: rank 2 dies, rank 0 logs gloo's lost-peer line and exits ~0.1 s later. The verdict
    names rank 2 (whose journal the controller reads), with rank 0's unit and journal as the evidence."""
    r0, r1, r2 = fakes(), fakes(), fakes()
    u = Rank0Unit()
    run = Run(gopts(r0, [r1, r2]), u.probe())
    assert run.events["settling"].wait(10)
    journal = ["sglang[77]: Scheduler hit an exception: Traceback (most recent call last):", STANDIN_LOST,
               "sglang[77]: SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
               *JOURNAL[1:]]
    killed_at = time.monotonic()
    r2.kill()
    u.journal = journal
    u.state = unit(active="failed", sub="failed", pid=0)
    assert run.done.wait(4)
    err = run.error
    assert err.kind == "rank_dead" and err.rank == "r2" and err.node_rank == 2 and err.phase == "settling"
    assert run.ended_at - killed_at <= 3.0
    assert err.evidence["lost_line"] == STANDIN_LOST and err.evidence["unit"]["active_state"] == "failed"
    assert "rank 2 (r2" in err.message and "journalctl -u sglang.service -n 80 on r2" in err.message
