"""module_utils/multinode/network.py: the network preflight of a serving group. Routes and interfaces against
recorded `ip` outputs; the dist-init handshake between real sockets on 127.0.0.1. Every wait is on an event with a
bound, never a sleep."""
import os
import socket
import threading

import pytest

from ansible.module_utils.multinode.network import (connect, listen, nccl_ifname_matches, parse_route_get, port_state,
                                                    route_interface, route_to, socket_env, socket_ifname_problems)
from ansible.module_utils.multinode.plan import MultinodeError

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
    r = parse_route_get(text)
    assert (r["dev"], r["src"], r["via"], r["type"]) == (dev, src, via, kind)


def test_route_interface_remote_local_and_loopback():
    assert route_interface(ROUTE_VIA) == "eth0"
    assert route_interface(ROUTE_DIRECT) == "lab-2fec97"
    assert route_interface(ROUTE6_VIA) == "eth0"
    # rank 0 itself: the route says lo, the other ranks reach it on the interface carrying its address
    assert route_interface(ROUTE_LOCAL, ADDRS) == "eth0"
    assert route_interface(ROUTE6_LOCAL, ADDRS) == "eth0"
    assert route_interface(ROUTE_LOOPBACK) == "lo"  # a group on one host
    with pytest.raises(MultinodeError, match="ip -o addr show"):
        route_interface(ROUTE_LOCAL)
    with pytest.raises(MultinodeError, match="no interface of this host carries 192.0.2.2"):
        route_interface(ROUTE_LOCAL, ADDRS.replace("192.0.2.2/24", "192.0.2.3/24"))
    with pytest.raises(MultinodeError, match="Network is unreachable"):
        route_interface("RTNETLINK answers: Network is unreachable\n")
    with pytest.raises(MultinodeError, match="no usable route"):
        route_interface("unreachable 10.9.9.9 table main uid 0\n    cache\n")
    with pytest.raises(MultinodeError, match="empty"):
        route_interface("")


def test_route_to_runs_ip_and_reads_the_addresses_on_rank0():
    calls = []
    outputs = {("ip", "route", "get", "192.0.2.2"): ROUTE_LOCAL, ("ip", "-o", "addr", "show"): ADDRS,
               ("ip", "route", "get", "8.8.8.8"): ROUTE_VIA}

    def run(argv, timeout=15.0):
        calls.append(tuple(argv))
        return 0, outputs[tuple(argv)], ""

    r0 = route_to("192.0.2.2", run=run)
    assert (r0["interface"], r0["src"], r0["route_type"]) == ("eth0", "192.0.2.2", "local")
    r1 = route_to("8.8.8.8", run=run)
    assert (r1["interface"], r1["src"], r1["via"]) == ("eth0", "192.0.2.2", "192.0.2.1")
    assert calls == [("ip", "route", "get", "192.0.2.2"), ("ip", "-o", "addr", "show"), ("ip", "route", "get",
                                                                                           "8.8.8.8")]
    with pytest.raises(MultinodeError, match="rc=2.*unreachable"):
        route_to("10.9.9.9", run=lambda argv, timeout=15.0: (2, "", "RTNETLINK answers: Network is unreachable"))


def test_socket_env_and_ifname_checks():
    assert socket_env("eth0") == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}
    assert nccl_ifname_matches("=eth0", "eth0") and not nccl_ifname_matches("=eth0", "eth01")
    assert nccl_ifname_matches("eth", "eth01") and nccl_ifname_matches("ib,eth", "eth0")
    assert not nccl_ifname_matches("^eth", "eth0") and nccl_ifname_matches("^docker,lo", "eth0")
    assert not nccl_ifname_matches("^=eth0", "eth0") and nccl_ifname_matches("^=eth0", "eth01")
    assert nccl_ifname_matches("eth0:5000", "eth0")
    assert socket_ifname_problems({}, "eth0") == []
    assert socket_ifname_problems({"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"}, "eth0") == []
    problems = socket_ifname_problems({"NCCL_SOCKET_IFNAME": "ib", "GLOO_SOCKET_IFNAME": "eth1,eth2"}, "eth0")
    assert len(problems) == 2 and "NCCL_SOCKET_IFNAME=ib" in problems[0] and "GLOO_SOCKET_IFNAME" in problems[1]


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
        results[name] = connect("127.0.0.1", port, token="run7", name=name, attempts=200, interval=0.02, **kw)

    # r1 starts before the listener: its refused attempts are the retries
    t1 = threading.Thread(target=connector, args=("r1",), kwargs={"on_attempt": lambda n, why: refused_once.set()})
    t1.start()
    assert refused_once.wait(5)
    listening = threading.Event()
    t2 = threading.Thread(target=lambda: listening.wait(5) and connector("r2"))
    t2.start()
    out = listen("127.0.0.1", port, seconds=20, token="run7", name="r0", expected_peers=["r1", "r2"],
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
    out = listen("127.0.0.1", free_port(), seconds=0.3, token="t", name="r0", expected_peers=["r1"])
    assert out["state"] == "listened" and out["missing"] == ["r1"] and out["peers"] == []
    assert 0.3 <= out["seconds"] < 2


def test_port_held_by_the_running_server_is_reported_distinctly_and_only_connected_to():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))  # a wildcard listener, as the running server's
    server.listen(4)
    port = server.getsockname()[1]
    try:
        out = listen("127.0.0.1", port, seconds=5, token="t", name="r0", expected_peers=["r1"])
        assert out["state"] == "in_use" and os.getpid() in [h["pid"] for h in out["holders"]]
        assert out["seconds"] < 1
        assert port_state(port)["in_use"] and not port_state(free_port())["in_use"]
        got = {}

        def accept():
            conn, _ = server.accept()
            conn.settimeout(5)
            got["bytes"] = conn.recv(100)  # b"" once the connector closed without sending anything
            conn.close()

        t = threading.Thread(target=accept)
        t.start()
        res = connect("127.0.0.1", port, token="t", name="r1", attempts=1, read_timeout=0.3)
        t.join(5)
        assert res["reach"] == "connected" and res["attempts"] == 1 and res["answer"] == ""
        assert got["bytes"] == b""  # the running server's listener saw a connect, no bytes
    finally:
        server.close()


def test_connector_gives_up_after_bounded_attempts():
    port = free_port()
    seen = []
    with pytest.raises(MultinodeError) as err:
        connect("127.0.0.1", port, attempts=3, interval=0.01, on_attempt=lambda n, why: seen.append(n))
    assert seen == [1, 2, 3] and err.value.evidence["attempts"] == 3
    assert f"127.0.0.1:{port} unreachable after 3 attempts" in err.value.message and "refused" in err.value.message


def test_connector_refuses_another_runs_listener():
    port = free_port()
    listening = threading.Event()
    t = threading.Thread(target=listen, args=("127.0.0.1", port, 1.0), kwargs={
        "token": "old-run", "name": "r0", "expected_peers": ["never"], "on_listening": listening.set})
    t.start()
    assert listening.wait(5)
    with pytest.raises(MultinodeError, match="another preflight's token"):
        connect("127.0.0.1", port, token="new-run", name="r1", attempts=1)
    t.join(5)


def test_listening_on_another_hosts_address_is_refused():
    with pytest.raises(MultinodeError, match="not an address of this host"):
        listen("203.0.113.7", free_port(), seconds=1)
