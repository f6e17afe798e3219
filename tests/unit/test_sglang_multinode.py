"""module_utils/multinode/plan.py and its modules (sglang_group_ready, sglang_net_preflight).

Pure parts against recorded `ip` outputs; the group's readiness against fake rank HTTP servers on 127.0.0.1 (rank 0's
unit scripted, its HTTP real); the dist-init handshake between real sockets on 127.0.0.1. Every wait is on an event
with a bound, never a sleep.
"""
import ast
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.multinode import plan as mn
from ansible.module_utils.sglang import ready as sglang_ready
from ansible.module_utils.systemd.unit import UnitState
from tests.helpers.ansible_module import module_command

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- real `ip` outputs (iproute2 6.1, Debian 12)
ROUTE_VIA = "8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \n    cache \n"
ROUTE_DIRECT = "10.213.151.5 dev lab-2fec97 src 10.213.151.1 uid 0 \n    cache \n"
ROUTE_LOCAL = "local 192.0.2.2 dev lo src 192.0.2.2 uid 0 \n    cache <local> \n"
ROUTE_LOOPBACK = "local 127.0.0.2 dev lo src 127.0.0.1 uid 0 \n    cache <local> \n"
ROUTE6_VIA = "2606:4700::1111 from :: via fd00::1 dev eth0 src fd00::2 metric 1024 pref medium\n"
ROUTE6_DIRECT = "fd00::5 from :: dev eth0 proto kernel src fd00::2 metric 256 pref medium\n"
ROUTE6_LOCAL = "local fd00::2 from :: dev lo table local proto kernel src fd00::2 metric 0 pref medium\n"
ROUTE_JSON = ('[{"dst":"8.8.8.8","gateway":"192.0.2.1","dev":"eth0","prefsrc":"192.0.2.2","flags":[],"uid":0,'
              '"cache":[]}]\n')
ROUTE_V6_NEXTHOP = "10.9.0.7 via inet6 fe80::1 dev ens1f0 src 10.9.0.2 uid 0 \n    cache \n"  # RFC 5549 form
ADDRS = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever
4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever preferred_lft forever
4: eth0    inet6 fd00::2/64 scope global nodad \\       valid_lft forever preferred_lft forever
4: eth0    inet6 fe80::fc:ff:fe00:1/64 scope link \\       valid_lft forever preferred_lft forever
524: lab-2fec97    inet 10.213.151.1/24 scope global lab-2fec97\\       valid_lft forever preferred_lft forever
"""


# ================================================================ group_plan
def test_plan_follows_inventory_order_and_names_rank0_address():
    plan = mn.group_plan(["b300-02", {"name": "b300-01", "address": "10.0.0.11"}], 5000, 16, 1)
    assert list(plan) == ["b300-02", "b300-01"]  # inventory order, not sorted
    assert plan["b300-02"] == {"node_rank": 0, "nnodes": 2, "dist_init_addr": "b300-02:5000"}
    assert plan["b300-01"] == {"node_rank": 1, "nnodes": 2, "dist_init_addr": "b300-02:5000"}
    plan = mn.group_plan([{"name": "a", "address": "fd00::2"}, {"name": "b", "address": "fd00::3"}], "5000", 8, 2)
    assert plan["b"]["dist_init_addr"] == "[fd00::2]:5000" and plan["a"]["nnodes"] == 2
    assert mn.group_plan(["solo"], 65535, 8, 1)["solo"] == {"node_rank": 0, "nnodes": 1,
                                                             "dist_init_addr": "solo:65535"}


@pytest.mark.parametrize("ranks, port, tp, pp, words", [
    ([], 5000, 8, 1, ["empty"]),
    (["a", "b", "a"], 5000, 6, 1, ["duplicate", "'a'", "ranks 0 and 2"]),
    ([{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.1"}], 5000, 8, 1,
     ["duplicate", "'b' (rank 1) and 'a' (rank 0)", "10.0.0.1"]),
    (["Node-A.example.", {"name": "b", "address": "node-a.example"}], 5000, 8, 1, ["duplicate"]),
    ([{"name": "a", "address": "fd00::2"}, {"name": "b", "address": "fd00:0::2"}], 5000, 8, 1, ["duplicate"]),
    (["a", "b", "c"], 5000, 8, 1, ["tp=8", "pp=1", "nnodes=3", "not divisible"]),
    (["a", "b", "c"], 5000, 4, 2, ["tp=4", "pp=2", "nnodes=3"]),
    (["a", "b"], 0, 8, 1, ["dist_init_port=0", "1..65535"]),
    (["a", "b"], 65536, 8, 1, ["dist_init_port=65536"]),
    (["a", "b"], "50x", 8, 1, ["dist_init_port='50x'"]),
    (["a", "b"], True, 8, 1, ["dist_init_port=True"]),
    (["a", "b"], 5000, 0, 1, ["tp=0"]),
    (["a", "b"], 5000, 8, 1.5, ["pp=1.5"]),
    (["a", ""], 5000, 8, 1, ["rank 1", "empty"]),
])
def test_plan_refusals_name_the_values(ranks, port, tp, pp, words):
    with pytest.raises(mn.MultinodeError) as err:
        mn.group_plan(ranks, port, tp, pp)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_plan_divisible_cases_pass():
    assert mn.group_plan(["a", "b", "c", "d"], 5000, 8, 2)["d"]["node_rank"] == 3
    assert mn.group_plan(["a", "b", "c"], 5000, 3, 2)["c"]["nnodes"] == 3


@pytest.mark.parametrize("ranks, port, tp, pp, http_port, words", [
    (["a", "b"], 5000, 3, 1, 30001, ["tp=3 x pp=1 = 3 GPUs is not divisible by nnodes=2"]),
    (["a", "b"], 5000, 8, 1, 5000, ["dist_init_port=5000 is also the server's --port"]),
    (["a", "a"], 5000, 8, 1, None, ["duplicate host 'a'"]),
    ([], 5000, 8, 1, None, ["empty serving group"]),
])
def test_plan_problems_are_messages_not_exceptions(ranks, port, tp, pp, http_port, words):
    problems = mn.plan_problems(ranks, port, tp, pp, http_port)
    assert len(problems) == 1 and all(w in problems[0] for w in words), problems


def test_plan_problems_empty_for_a_good_group():
    assert mn.plan_problems(["a", "b"], 5000, 8, 1, 30001) == [] and mn.plan_problems(["a", "b"], "5000", 16, 1) == []


def test_rank_facts_read_driver_cuda_and_venv_hash(tmp_path):
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}')
    (tmp_path / "digest").write_text("abc123\n")
    sys_version = tmp_path / "sys-version"
    sys_version.write_text("580.95.05\n")
    proc_version = tmp_path / "proc-version"  # the /proc/driver/nvidia/version form (real text of a 580 driver)
    proc_version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                            "(dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:55:41 UTC 2025\nGCC version:  gcc 12\n")
    facts = mn.rank_facts(str(tmp_path / "cuda"), str(tmp_path / "digest"), True, driver_files=(str(sys_version),))
    assert facts == {"driver": "580.95.05", "cuda": "13.0.2", "venv_hash": "abc123"}
    assert mn.rank_facts("", "", True, driver_files=(str(tmp_path / "none"), str(proc_version)))["driver"] == \
        "580.95.05"
    (tmp_path / "cuda" / "version.json").unlink()
    (tmp_path / "cuda" / "version.txt").write_text("CUDA Version 12.8.1\n")
    assert mn.rank_facts(str(tmp_path / "cuda"), "", True, driver_files=())["cuda"] == "12.8.1"
    # missing: "" on a host that declares GPUs (consistency() refuses it), "none" on one that declares none
    assert mn.rank_facts(str(tmp_path / "nope"), str(tmp_path / "nope"), True, driver_files=()) == {
        "driver": "", "cuda": "", "venv_hash": ""}
    assert mn.rank_facts(str(tmp_path / "nope"), str(tmp_path / "digest"), False, driver_files=()) == {
        "driver": "none", "cuda": "none", "venv_hash": "abc123"}
    assert mn.consistency({"r0": mn.rank_facts("", "", True, driver_files=()),
                           "r1": mn.rank_facts("", "", True, driver_files=())})[0]["detail"] == \
        "driver differs across ranks: missing on r0, r1"


# ================================================================ routes
@pytest.mark.parametrize("text, dev, src, via, kind", [
    (ROUTE_VIA, "eth0", "192.0.2.2", "192.0.2.1", "unicast"),
    (ROUTE_DIRECT, "lab-2fec97", "10.213.151.1", "", "unicast"),
    (ROUTE_LOCAL, "lo", "192.0.2.2", "", "local"),
    (ROUTE6_VIA, "eth0", "fd00::2", "fd00::1", "unicast"),
    (ROUTE6_DIRECT, "eth0", "fd00::2", "", "unicast"),
    (ROUTE6_LOCAL, "lo", "fd00::2", "", "local"),
    (ROUTE_JSON, "eth0", "192.0.2.2", "192.0.2.1", "unicast"),
    (ROUTE_V6_NEXTHOP, "ens1f0", "10.9.0.2", "fe80::1", "unicast"),
])
def test_parse_route_get_real_outputs(text, dev, src, via, kind):
    r = mn.parse_route_get(text)
    assert (r["dev"], r["src"], r["via"], r["type"]) == (dev, src, via, kind)


def test_route_interface_remote_local_and_loopback():
    assert mn.route_interface(ROUTE_VIA) == "eth0"
    assert mn.route_interface(ROUTE_DIRECT) == "lab-2fec97"
    assert mn.route_interface(ROUTE6_VIA) == "eth0"
    # rank 0 itself: the route says lo, the other ranks reach it on the interface carrying its address
    assert mn.route_interface(ROUTE_LOCAL, ADDRS) == "eth0"
    assert mn.route_interface(ROUTE6_LOCAL, ADDRS) == "eth0"
    assert mn.route_interface(ROUTE_LOOPBACK) == "lo"  # a group on one host
    with pytest.raises(mn.MultinodeError, match="ip -o addr show"):
        mn.route_interface(ROUTE_LOCAL)
    with pytest.raises(mn.MultinodeError, match="no interface of this host carries 192.0.2.2"):
        mn.route_interface(ROUTE_LOCAL, ADDRS.replace("192.0.2.2/24", "192.0.2.3/24"))
    with pytest.raises(mn.MultinodeError, match="Network is unreachable"):
        mn.route_interface("RTNETLINK answers: Network is unreachable\n")
    with pytest.raises(mn.MultinodeError, match="no usable route"):
        mn.route_interface("unreachable 10.9.9.9 table main uid 0\n    cache\n")
    with pytest.raises(mn.MultinodeError, match="empty"):
        mn.route_interface("")


def test_route_to_runs_ip_and_reads_the_addresses_on_rank0():
    calls = []
    outputs = {("ip", "route", "get", "192.0.2.2"): ROUTE_LOCAL, ("ip", "-o", "addr", "show"): ADDRS,
               ("ip", "route", "get", "8.8.8.8"): ROUTE_VIA}

    def run(argv, timeout=15.0):
        calls.append(tuple(argv))
        return 0, outputs[tuple(argv)], ""

    r0 = mn.route_to("192.0.2.2", run=run)
    assert (r0["interface"], r0["src"], r0["route_type"]) == ("eth0", "192.0.2.2", "local")
    r1 = mn.route_to("8.8.8.8", run=run)
    assert (r1["interface"], r1["src"], r1["via"]) == ("eth0", "192.0.2.2", "192.0.2.1")
    assert calls == [("ip", "route", "get", "192.0.2.2"), ("ip", "-o", "addr", "show"), ("ip", "route", "get",
                                                                                           "8.8.8.8")]
    with pytest.raises(mn.MultinodeError, match="rc=2.*unreachable"):
        mn.route_to("10.9.9.9", run=lambda argv, timeout=15.0: (2, "", "RTNETLINK answers: Network is unreachable"))


def test_socket_env_and_ifname_checks():
    assert mn.socket_env("eth0") == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert mn.nccl_ifname_matches("=eth0", "eth0") and not mn.nccl_ifname_matches("=eth0", "eth01")
    assert mn.nccl_ifname_matches("eth", "eth01") and mn.nccl_ifname_matches("ib,eth", "eth0")
    assert not mn.nccl_ifname_matches("^eth", "eth0") and mn.nccl_ifname_matches("^docker,lo", "eth0")
    assert not mn.nccl_ifname_matches("^=eth0", "eth0") and mn.nccl_ifname_matches("^=eth0", "eth01")
    assert mn.nccl_ifname_matches("eth0:5000", "eth0")
    assert mn.socket_ifname_problems({}, "eth0") == []
    assert mn.socket_ifname_problems({"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}, "eth0") == []
    problems = mn.socket_ifname_problems({"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "eth1,eth2"}, "eth0")
    assert len(problems) == 2 and "NCCL_SOCKET_IFNAME=ib" in problems[0] and "GLOO_SOCKET_IFNAME" in problems[1]


# ================================================================ consistency
def test_consistency_names_the_ranks_that_differ():
    same = {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "ab" * 32}
    assert mn.consistency({"r0": same, "r1": dict(same)}) == []
    assert mn.consistency({"r0": same}) == []
    out = mn.consistency({"r0": same, "r1": dict(same, driver="575.57.08"), "r2": dict(same, venv_hash="")})
    assert [m["key"] for m in out] == ["driver", "venv_hash"]
    assert "'580.95.05' on r0, r2" in out[0]["detail"] and "'575.57.08' on r1" in out[0]["detail"]
    assert out[0]["values"] == {"r0": "580.95.05", "r1": "575.57.08", "r2": "580.95.05"}
    assert "missing on r2" in out[1]["detail"]
    out = mn.consistency({"r0": {}, "r1": {}})
    assert [m["key"] for m in out] == list(mn.RANK_FACT_KEYS)  # nothing to compare is not a match


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
    ranks = [mn.RankSpec("b300-02", "http://10.0.0.12:30001", 1), mn.RankSpec("b300-03", "http://[fd00::13]:30001", 2)]
    assert mn.lost_rank(["Load weight begin.", GLOO_CLOSED], ranks) == (ranks[0], GLOO_CLOSED)
    assert mn.lost_rank([GLOO_RESET], ranks) == (ranks[1], GLOO_RESET)
    assert mn.lost_rank(["sglang[1]: Received sigquit from a child process."], ranks) == (None, "")
    assert mn.lost_rank([GLOO_CLOSED.replace("10.0.0.12", "10.0.0.99")], ranks) == (None, "")  # not a rank's address
    local = [mn.RankSpec("r1", "http://127.0.0.1:1", 1), mn.RankSpec("r2", "http://127.0.0.1:2", 2)]
    assert mn.lost_rank([GLOO_CLOSED.replace("10.0.0.12", "127.0.0.1")], local) == (None, "")  # ambiguous address
    assert mn.lost_rank([STANDIN_LOST], local) == (local[1], STANDIN_LOST)


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
    specs = [r if isinstance(r, mn.RankSpec) else mn.RankSpec(f"r{i + 1}", r.url, i + 1) for i, r in enumerate(ranks)]
    return mn.GroupOptions(ready=opts, ranks=specs, rank0_name="r0", rank_dead_after=dead_after, settle=settle)


class Run:
    """wait_group in a thread; `events` records the group's own events (rank0_ready, settling)."""

    def __init__(self, g, probe):
        self.events = {"rank0_ready": threading.Event(), "settling": threading.Event()}
        self.result = self.error = None
        self.ended_at = None
        self.done = threading.Event()

        def target():
            try:
                self.result = mn.wait_group(g, probe=probe, on_event=lambda name, d: self.events[name].set())
            except mn.GroupError as exc:
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
    run = Run(gopts(r0, [mn.RankSpec("r1", f"http://127.0.0.1:{closed}", 1)], timeout=1.0), Rank0Unit().probe())
    assert run.done.wait(8)
    err = run.error
    assert err.kind == "timeout" and err.rank == "r1" and err.phase == "waiting for ranks"
    assert "never answered" in err.message and "refused" in err.message
    assert run.events["rank0_ready"].is_set()


def test_restarted_rank_old_answers_never_count(fakes):
    r0 = fakes()
    old = fakes()  # the old process keeps answering: never seen down, so never counted
    run = Run(gopts(r0, [mn.RankSpec("r1", old.url, 1, restarted=True)], timeout=1.0), Rank0Unit().probe())
    assert run.done.wait(8)
    assert run.error.kind == "timeout" and run.error.rank == "r1"
    assert run.error.evidence["ranks"][0]["checks"] >= 2 and not run.error.evidence["ranks"][0]["answered"]
    bounced = fakes(health=lambda n: 200 if n == 1 or n >= 4 else 503)  # old up, down, then the new one
    run = Run(gopts(r0, [mn.RankSpec("r1", bounced.url, 1, restarted=True)], settle=0.2), Rank0Unit().probe())
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


# ================================================================ the dist-init handshake
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_listener_and_connectors_handshake_and_end_early(tmp_path):
    port = free_port()
    refused_once = threading.Event()
    results = {}

    def connector(name, **kw):
        results[name] = mn.connect("127.0.0.1", port, token="run7", name=name, attempts=200, interval=0.02, **kw)

    # r1 starts before the listener: its refused attempts are the retries
    t1 = threading.Thread(target=connector, args=("r1",), kwargs={"on_attempt": lambda n, why: refused_once.set()})
    t1.start()
    assert refused_once.wait(5)
    listening = threading.Event()
    t2 = threading.Thread(target=lambda: listening.wait(5) and connector("r2"))
    t2.start()
    out = mn.listen("127.0.0.1", port, seconds=20, token="run7", name="r0", expected_peers=["r1", "r2"],
                    on_listening=listening.set)
    t1.join(5)
    t2.join(5)
    assert out["state"] == "listened" and out["missing"] == [] and out["seconds"] < 10  # early, not after 20 s
    assert sorted(p["name"] for p in out["peers"]) == ["r1", "r2"]
    assert all(p["address"] == "127.0.0.1" for p in out["peers"])
    assert results["r1"]["reach"] == "handshake" and results["r1"]["peer"] == "r0" and results["r1"]["attempts"] >= 2
    assert "refused" in results["r1"]["errors"][0]
    assert results["r2"]["reach"] == "handshake"


def test_listener_reports_missing_peers_after_its_window():
    out = mn.listen("127.0.0.1", free_port(), seconds=0.3, token="t", name="r0", expected_peers=["r1"])
    assert out["state"] == "listened" and out["missing"] == ["r1"] and out["peers"] == []
    assert 0.3 <= out["seconds"] < 2


def test_port_held_by_the_running_server_is_reported_distinctly_and_only_connected_to():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))  # a wildcard listener, as the running server's
    server.listen(4)
    port = server.getsockname()[1]
    try:
        out = mn.listen("127.0.0.1", port, seconds=5, token="t", name="r0", expected_peers=["r1"])
        assert out["state"] == "in_use" and os.getpid() in [h["pid"] for h in out["holders"]]
        assert out["seconds"] < 1
        assert mn.port_state(port)["in_use"] and not mn.port_state(free_port())["in_use"]
        got = {}

        def accept():
            conn, _ = server.accept()
            conn.settimeout(5)
            got["bytes"] = conn.recv(100)  # b"" once the connector closed without sending anything
            conn.close()

        t = threading.Thread(target=accept)
        t.start()
        res = mn.connect("127.0.0.1", port, token="t", name="r1", attempts=1, read_timeout=0.3)
        t.join(5)
        assert res["reach"] == "connected" and res["attempts"] == 1 and res["answer"] == ""
        assert got["bytes"] == b""  # the running server's listener saw a connect, no bytes
    finally:
        server.close()


def test_connector_gives_up_after_bounded_attempts():
    port = free_port()
    seen = []
    with pytest.raises(mn.MultinodeError) as err:
        mn.connect("127.0.0.1", port, attempts=3, interval=0.01, on_attempt=lambda n, why: seen.append(n))
    assert seen == [1, 2, 3] and err.value.evidence["attempts"] == 3
    assert f"127.0.0.1:{port} unreachable after 3 attempts" in err.value.message and "refused" in err.value.message


def test_connector_refuses_another_runs_listener():
    port = free_port()
    listening = threading.Event()
    t = threading.Thread(target=mn.listen, args=("127.0.0.1", port, 1.0), kwargs={
        "token": "old-run", "name": "r0", "expected_peers": ["never"], "on_listening": listening.set})
    t.start()
    assert listening.wait(5)
    with pytest.raises(mn.MultinodeError, match="another preflight's token"):
        mn.connect("127.0.0.1", port, token="new-run", name="r1", attempts=1)
    t.join(5)


def test_listening_on_another_hosts_address_is_refused():
    with pytest.raises(mn.MultinodeError, match="not an address of this host"):
        mn.listen("203.0.113.7", free_port(), seconds=1)


# ================================================================ the modules
def _docs(name):
    src = (ROOT / "library" / f"{name}.py").read_text()
    docs = {t.targets[0].id: yaml.safe_load(t.value.value) for t in ast.parse(src).body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    return src, docs


@pytest.mark.parametrize("name", ["sglang_group_ready", "sglang_net_preflight"])
def test_module_docs_parse_and_match_argument_spec(name):
    src, docs = _docs(name)
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == name and all(isinstance(d, str) for d in doc["description"])
    assert docs["EXAMPLES"][0]["name"] and all(isinstance(r["description"], str) for r in docs["RETURN"].values())
    spec = set(re.findall(r"^\s{12}([a-z_0-9]+)=dict\(", src, re.M))
    assert spec == set(doc["options"]), (spec, set(doc["options"]))


def test_group_ready_example_reads_the_named_ranks_journal():
    _src, docs = _docs("sglang_group_ready")
    rescue = docs["EXAMPLES"][0]["rescue"][0]
    assert rescue["delegate_to"] == "{{ group.failed_rank }}" and "journalctl -u sglang.service -n 80" in \
        rescue["ansible.builtin.command"]


def start_module(name, args, tmp_path, check=False):
    argfile = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    return subprocess.Popen(module_command(name, argfile),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def finish(proc):
    out, err = proc.communicate(timeout=30)
    assert out, err
    return json.loads(out)


needs_ip = pytest.mark.skipif(shutil.which("ip") is None and not os.path.exists("/sbin/ip"), reason="no iproute2")


@needs_ip
def test_net_preflight_module_rank0_and_rank1_on_loopback(tmp_path):
    port = free_port()
    common = {"rank0_address": "127.0.0.1", "dist_init_port": port, "token": "run9"}
    rank0 = start_module("sglang_net_preflight", dict(common, listen=True, name="r0", expected_peers=["r1"],
                                                      listen_seconds=20), tmp_path)
    rank1 = start_module("sglang_net_preflight", dict(common, name="r1", retry_interval=0.05, connect_attempts=300),
                         tmp_path)
    a, b = finish(rank0), finish(rank1)
    assert not a.get("failed") and not b.get("failed"), (a.get("msg"), b.get("msg"))
    assert a["reach"] == "listened" and [p["name"] for p in a["peers"]] == ["r1"] and a["seconds"] < 15
    assert a["port_in_use"] is False and a["interface"] == "lo" and a["address"] == "127.0.0.1"
    assert b["reach"] == "handshake" and b["socket_env"] == {"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert not a["changed"] and not b["changed"] and b["problems"] == []
    assert set(a["facts"]) == {"driver", "cuda", "venv_hash"}


@needs_ip
def test_net_preflight_module_reports_this_hosts_facts(tmp_path):
    (tmp_path / "digest").write_text("d1\n")
    out = finish(start_module("sglang_net_preflight", {
        "rank0_address": "127.0.0.1", "dist_init_port": free_port(), "cuda_home": str(tmp_path / "no-cuda"),
        "venv_digest_path": str(tmp_path / "digest"), "gpus_expected": False}, tmp_path, check=True))
    assert not out.get("failed"), out.get("msg")
    assert out["facts"]["venv_hash"] == "d1" and out["facts"]["cuda"] == "none"
    assert out["facts"]["driver"] == (out["facts"]["driver"] if os.path.exists("/sys/module/nvidia/version")
                                      else "none")


@needs_ip
def test_net_preflight_module_check_mode_reads_only_and_reports_every_problem(tmp_path):
    port = free_port()
    facts = {"r0": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "a"},
             "r1": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "b"}}
    out = finish(start_module("sglang_net_preflight", {
        "rank0_address": "127.0.0.1", "dist_init_port": port, "listen": True, "expected_peers": ["r1"],
        "environment": {"NCCL_SOCKET_IFNAME": "eth0"}, "rank_facts": facts}, tmp_path, check=True))
    assert out["failed"] and out["reach"] == "skipped" and out["interface"] == "lo"
    assert len(out["problems"]) == 2 and "NCCL_SOCKET_IFNAME=eth0" in out["msg"]
    assert "venv_hash differs across ranks: 'a' on r0; 'b' on r1" in out["msg"]
    assert out["mismatches"][0]["key"] == "venv_hash" and out["port_in_use"] is False
    ok = finish(start_module("sglang_net_preflight", {"rank0_address": "127.0.0.1", "dist_init_port": port},
                             tmp_path, check=True))
    assert not ok.get("failed") and ok["reach"] == "skipped" and ok["attempts"] == 0  # no connect in check mode


def test_group_ready_module_refuses_bad_ranks_before_touching_systemd(tmp_path):
    out = finish(start_module("sglang_group_ready", {
        "name": "sglang.service", "url": "http://127.0.0.1:1", "ranks": [
            {"name": "r1", "url": "http://127.0.0.1:2"}, {"name": "r1", "url": "http://127.0.0.1:3"}]}, tmp_path))
    assert out["failed"] and "rank 'r1' is listed twice" in out["msg"]
    out = finish(start_module("sglang_group_ready", {
        "name": "sglang.service", "url": "http://127.0.0.1:1", "rank_dead_after": 0,
        "ranks": [{"name": "r1", "url": "http://127.0.0.1:2"}]}, tmp_path))
    assert out["failed"] and "rank_dead_after" in out["msg"]
