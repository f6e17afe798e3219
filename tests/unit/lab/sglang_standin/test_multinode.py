"""The stand-in's multi-node group, held to real SGLang 0.5.11 (tests/fixtures/real_sglang/multinode-0.5.11.md):
node 0 waits at the dist-init port for every node (nothing listens on any --port meanwhile), ranks >= 1 serve only the
dummy /ping, /health, /health_generate, a lost member ends the group (exit -9, the lost rank named), wrong joins are
refused. Several stand-in processes on 127.0.0.1; every wait is for a log line or an exit, bounded."""
import signal
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from sglang_standin import multinode  # noqa: E402
from sglang_standin.local import LocalServer, free_port  # noqa: E402

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402

FAST = {"SGLANG_STANDIN_LOAD_S": "0.2", "SGLANG_STANDIN_WARMUP_S": "0.2", "SGLANG_STANDIN_HEALTH_S": "0.05",
        "SGLANG_STANDIN_COMPILE_S": "0", "SGLANG_STANDIN_DIST_TIMEOUT_S": "15", "SGLANG_STANDIN_DIST_LOST_S": "5"}
KEY = "k-multinode"
WAIT = 15.0  # bound on any single wait for a log line or an exit


@pytest.fixture
def group(tmp_path):
    """start(rank, ...) -> a started LocalServer of one node of a group on 127.0.0.1; all stopped at the end."""
    dist_port = free_port()
    started = []

    def start(rank, nnodes=2, tp=2, env=None, extra=()):
        args = ["--model-path", "/srv/models/m", "--host", "127.0.0.1", "--tp-size", str(tp), "--nnodes", str(nnodes),
                "--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist_port}", "--api-key", KEY, *extra]
        srv = LocalServer(args, env=dict(FAST, HOME=str(tmp_path / f"home{len(started)}"), **(env or {})))
        started.append(srv.start())
        return srv

    start.dist_port = dist_port
    yield start
    for srv in started:
        if srv.proc and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(timeout=10)


def get(srv, path, key=None, method="GET"):
    return sglang_http.call(srv.url, path, method=method, payload={} if method == "POST" else None, api_key=key,
                            timeout=5)


def test_group_forms_only_when_every_node_joined_and_a_killed_rank_ends_it(group):
    r0 = group(0, nnodes=3, tp=3)
    r0.wait_for_line("waits at port", WAIT)
    # real: rank 0's HTTP server starts only after its schedulers are ready, i.e. after the group formed
    assert get(r0, "/health").error == "refused"
    r1 = group(1, nnodes=3, tp=3)
    r0.wait_for_line("node rank 1 joined", WAIT)
    r1.wait_for_line("joined node rank 0", WAIT)
    assert get(r0, "/health").error == "refused"  # 2 of 3 nodes: still forming
    assert get(r1, "/health").error == "refused"  # rank 1's dummy server comes only after the group formed
    r2 = group(2, nnodes=3, tp=3)
    r0.wait_for_line("fired up", WAIT)
    for member in (r1, r2):
        member.wait_for_line("Dummy health check server started", WAIT)
    assert get(r0, "/health").status == 200
    assert get(r0, "/v1/models", key=KEY).status == 200
    assert any("Init torch distributed ends" in line for line in r0.lines)
    # the order of real 0.5.11: the group forms before the weights load
    text = "\n".join(r0.lines)
    assert text.index("Init torch distributed ends") < text.index("Load weight begin")

    killed_at = time.monotonic()
    r1.proc.kill()
    assert r0.wait_exit(WAIT) == -signal.SIGKILL  # real: SIGQUIT -> kill_process_tree -> SIGKILL of itself
    assert r0.exited_at - killed_at < float(FAST["SGLANG_STANDIN_DIST_LOST_S"])  # EOF, not the silence bound
    log0 = "\n".join(r0.lines)
    assert "Connection closed by peer" in log0 and "lost node rank 1" in log0
    assert multinode.RUNNING_SIGQUIT in log0  # rank 0 was serving: the tokenizer manager's handler
    assert r2.wait_exit(WAIT) == -signal.SIGKILL  # and rank 0's death takes the rest of the group down
    log2 = "\n".join(r2.lines)
    assert "lost node rank 0" in log2 and multinode.LAUNCH_SIGQUIT in log2


def test_join_bounds_rank0_alone_and_a_rank_without_rank0(group, tmp_path):
    bound = 1.5
    t0 = time.monotonic()
    r0 = group(0, env={"SGLANG_STANDIN_DIST_TIMEOUT_S": str(bound)})
    lonely = LocalServer(["--model-path", "/m", "--host", "127.0.0.1", "--tp-size", "2", "--nnodes", "2",
                          "--node-rank", "1", "--dist-init-addr", f"127.0.0.1:{free_port()}"],
                         env=dict(FAST, HOME=str(tmp_path / "lonely"), SGLANG_STANDIN_DIST_TIMEOUT_S=str(bound)))
    with lonely:
        r0.wait_for_line("waits at port", WAIT)
        waiting_seen = time.monotonic()
        lonely.wait_for_line("cannot be initialized to connect", WAIT)
        assert get(r0, "/health").error == "refused" and get(lonely, "/health").error == "refused"
        assert r0.wait_exit(WAIT) == -signal.SIGKILL
        assert lonely.wait_exit(WAIT) == -signal.SIGKILL
    assert r0.exited_at - t0 >= bound  # it waited the whole bound...
    assert r0.exited_at - waiting_seen < bound + 5  # ...and not much longer
    log0 = "\n".join(r0.lines)
    assert "waiting for clients. 1/2 clients joined." in log0 and "node ranks [1] never joined" in log0
    assert multinode.LAUNCH_SIGQUIT in log0
    assert "The client socket has timed out after 1500ms while trying to connect to" in "\n".join(lonely.lines)


def test_a_rank_beyond_nnodes_is_refused_and_rank0_keeps_waiting(group):
    r0 = group(0)
    r0.wait_for_line("waits at port", WAIT)
    bad = group(2)
    assert bad.wait_exit(WAIT) == -signal.SIGKILL
    assert "rank < size. 2 vs 2" in "\n".join(bad.lines)
    assert "refused a join: node rank 2" in r0.wait_for_line("refused a join", WAIT)
    assert r0.proc.poll() is None  # real: the bad rank fails alone; node 0 still waits for rank 1
    group(1)
    r0.wait_for_line("fired up", WAIT)
    assert get(r0, "/health").status == 200


@pytest.mark.parametrize("case", ["duplicate", "mismatch"])
def test_a_duplicate_rank_or_a_mismatched_shape_ends_the_group_on_both_sides(group, case):
    r0 = group(0, nnodes=3, tp=3)
    r0.wait_for_line("waits at port", WAIT)
    first = group(1, nnodes=3, tp=3)
    r0.wait_for_line("node rank 1 joined", WAIT)
    second = group(1, nnodes=3, tp=3) if case == "duplicate" else group(2, nnodes=3, tp=6)
    needle = "joined twice" if case == "duplicate" else "every node must be started with the same"
    for srv in (r0, first, second):
        assert srv.wait_exit(WAIT) == -signal.SIGKILL, srv.lines
        assert needle in "\n".join(srv.lines), srv.lines
    assert "the group cannot form" in "\n".join(r0.lines)


def test_ranks_above_0_serve_only_the_dummy_routes_and_die_of_sigterm(group):
    r0 = group(0)
    r1 = group(1)
    r0.wait_for_line("fired up", WAIT)
    r1.wait_for_line("Dummy health check server started", WAIT)
    for path in ("/ping", "/health", "/health_generate"):  # open: the dummy server has no API-key middleware
        resp = get(r1, path)
        assert (resp.status, resp.body) == (200, b""), path
    for path in ("/v1/models", "/server_info", "/metrics", "/ready"):
        resp = get(r1, path, key=KEY)
        assert (resp.status, resp.json()) == (404, {"detail": "Not Found"}), path
    assert get(r1, "/generate", key=KEY, method="POST").status == 404
    assert get(r0, "/ping").status == 401  # rank 0's full API keeps its key check
    assert not any("Uvicorn running" in line or "fired up" in line for line in r1.lines)

    r1.proc.terminate()  # real ranks >= 1 install no SIGTERM handler
    assert r1.wait_exit(WAIT) == -signal.SIGTERM
    assert r0.wait_exit(WAIT) == -signal.SIGKILL
    assert "lost node rank 1" in "\n".join(r0.lines)


def test_a_frozen_rank_is_lost_after_the_silence_bound(group):
    lost_s = 1.0
    env = {"SGLANG_STANDIN_DIST_LOST_S": str(lost_s)}
    r0, r1 = group(0, env=env), group(1, env=env)
    r0.wait_for_line("fired up", WAIT)
    r1.wait_for_line("Dummy health check server started", WAIT)
    frozen_at = time.monotonic()
    r1.proc.send_signal(signal.SIGSTOP)  # alive but silent: no EOF, only the heartbeat's absence tells
    try:
        assert r0.wait_exit(WAIT) == -signal.SIGKILL
    finally:
        r1.proc.send_signal(signal.SIGCONT)
    # silence counts from the last heartbeat heard, at most a heartbeat (lost_s / 5) before the freeze
    assert lost_s * 0.8 - 0.05 <= r0.exited_at - frozen_at < lost_s + 5
    assert "Timed out waiting 1000ms for recv operation to complete (stand-in: lost node rank 1)" in "\n".join(r0.lines)
    assert r1.wait_exit(WAIT) == -signal.SIGKILL  # thawed, it finds node 0 gone
