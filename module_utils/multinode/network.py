"""The network preflight of a multi-node serving group: the route to rank 0, the interface it leaves by, and whether
the ranks reach rank 0's dist-init port.

Pure:
  parse_route_get(text) / route_interface(text, ip_addr_text)  -> what `ip route get <rank0>` says / its device
  address_interface(ip_addr_text, address)    -> the device carrying an address (`ip -o addr show`)
  socket_env(interface) / socket_ifname_problems(env, interface)  -> NCCL_/GLOO_SOCKET_IFNAME for that device
I/O, every side effect injectable (tests run them on 127.0.0.1 without systemd or a GPU):
  route_to(address)                   -> interface, own address, gateway (runs `ip route get`, `ip -o addr show`)
  port_state(port)                    -> who listens on the dist-init port (/proc, read-only)
  listen(...) / connect(...)          -> the dist-init port reachability handshake (rank 0 / ranks >= 1)
Refusals raise plan.MultinodeError with their evidence.

Stdlib only (runs on the target with the system python3, 3.10+).
"""
from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import threading
import time
from typing import Callable

from ansible.module_utils.multinode.plan import MultinodeError, host_port
from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.systemd import unit as systemd_unit

HANDSHAKE = "SGLANG-NET-PREFLIGHT"
HANDSHAKE_ACK = "SGLANG-NET-PREFLIGHT-ACK"
MAX_LINE = 512
ROUTE_TYPES = ("local", "unicast", "broadcast", "multicast", "anycast", "unreachable", "blackhole", "prohibit",
               "throw", "nat")
ROUTE_ARG_KEYS = ("via", "dev", "src", "from", "table", "proto", "metric", "pref", "uid", "scope", "mtu", "iif",
                  "oif", "realms", "expires", "hoplimit", "tos", "mark")


# ================================================================ pure: routes and interfaces
def parse_route_get(text: str) -> dict:
    """`ip route get ADDR` (text or `ip -j`) -> {"type", "dst", "dev", "src", "via", "table", "line"}.

    Real outputs (iproute2 6.1):
      '8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0'                    (via a gateway)
      '10.213.151.5 dev lab-2fec97 src 10.213.151.1 uid 0'                     (directly connected)
      'local 192.0.2.2 dev lo src 192.0.2.2 uid 0'                             (an address of this host)
      '2606:4700::1111 from :: via fd00::1 dev eth0 src fd00::2 metric 1024 pref medium'
    """
    text = (text or "").strip()
    if not text:
        raise MultinodeError("empty `ip route get` output")
    if text.startswith("["):
        try:
            routes = json.loads(text)
        except ValueError as exc:
            raise MultinodeError(f"unreadable `ip -j route get` output: {exc}: {text[:200]!r}") from None
        if not routes or not isinstance(routes[0], dict):
            raise MultinodeError(f"no route in `ip -j route get` output: {text[:200]!r}")
        r = routes[0]
        return {"type": r.get("type") or "unicast", "dst": r.get("dst", ""), "dev": r.get("dev", ""),
                "src": r.get("prefsrc", ""), "via": r.get("gateway", ""), "table": str(r.get("table", "")),
                "line": json.dumps(r, sort_keys=True)}
    line = next(ln for ln in text.splitlines() if ln.strip()).strip()
    if line.startswith("RTNETLINK") or line.lower().startswith("error"):
        raise MultinodeError(f"no route: {line}")
    words = line.split()
    route = {"type": "unicast", "dst": "", "dev": "", "src": "", "via": "", "table": "", "line": line}
    if words[0] in ROUTE_TYPES:
        route["type"] = words.pop(0)
    if not words:
        raise MultinodeError(f"unreadable `ip route get` output: {line!r}")
    route["dst"] = words.pop(0)
    i = 0
    while i < len(words):
        key = words[i]
        if key in ROUTE_ARG_KEYS and i + 1 < len(words):
            value = words[i + 1]
            if key == "via" and value in ("inet", "inet6") and i + 2 < len(words):  # 'via inet6 fe80::1' (RFC 5549)
                i += 1
                value = words[i + 1]
            if key in route and not route[key]:
                route[key] = value
            i += 2
        else:
            i += 1
    if route["type"] in ("unreachable", "blackhole", "prohibit", "throw"):
        raise MultinodeError(f"no usable route to {route['dst']}: {line}")
    if not route["dev"]:
        raise MultinodeError(f"`ip route get` names no device: {line!r}")
    return route


def address_interface(ip_addr_text: str, address: str) -> str:
    """The device carrying `address`, from `ip -o addr show` ('4: eth0    inet 192.0.2.2/24 brd ... eth0\\ ...')."""
    want = ipaddress.ip_address(address.strip("[]"))
    for line in (ip_addr_text or "").splitlines():
        words = line.split()
        if len(words) < 4 or words[2] not in ("inet", "inet6"):
            continue
        try:
            have = ipaddress.ip_interface(words[3]).ip
        except ValueError:
            continue
        if have == want:
            return words[1].split("@", 1)[0]
    raise MultinodeError(f"no interface of this host carries {address}")


def route_interface(ip_route_get_output: str, ip_addr_output: str = "") -> str:
    """The interface that routes to rank 0. On rank 0 itself the route is `local ... dev lo`: the interface is then
    the one carrying rank 0's address (read from `ip -o addr show`), since that is where the other ranks reach it;
    lo only for a loopback address (a group on one host)."""
    route = parse_route_get(ip_route_get_output)
    if route["type"] != "local" and route["dev"] != "lo":
        return route["dev"]
    try:
        if ipaddress.ip_address(route["dst"]).is_loopback:
            return route["dev"] or "lo"
    except ValueError:
        pass
    if not ip_addr_output:
        raise MultinodeError(f"{route['dst']} is an address of this host (route: {route['line']}): its interface "
                             "comes from `ip -o addr show`, which was not given")
    return address_interface(ip_addr_output, route["dst"])


def socket_env(interface: str) -> dict:
    """The environment that pins NCCL's and Gloo's bootstrap sockets to `interface` ('=' = exact name in NCCL)."""
    return {"NCCL_SOCKET_IFNAME": f"={interface}", "GLOO_SOCKET_IFNAME": interface}


def nccl_ifname_matches(spec: str, interface: str) -> bool:
    """NCCL's list syntax: comma-separated name prefixes; leading '^' excludes, then leading '=' means exact names;
    an item may carry ':port'."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [item.split(":", 1)[0].strip() for item in spec.split(",") if item.strip()]
    hit = any(interface == item if exact else interface.startswith(item) for item in items)
    return hit != exclude


def socket_ifname_problems(env: dict | None, interface: str) -> list[str]:
    """What in the service's environment would bind NCCL's or Gloo's sockets elsewhere than `interface`."""
    env = env or {}
    problems = []
    nccl = env.get("NCCL_SOCKET_IFNAME")
    if nccl not in (None, "") and not nccl_ifname_matches(str(nccl), interface):
        problems.append(f"NCCL_SOCKET_IFNAME={nccl!s} does not select {interface}, the interface that routes to "
                        f"rank 0 (use ={interface})")
    gloo = env.get("GLOO_SOCKET_IFNAME")
    if gloo not in (None, "") and interface not in [x.strip() for x in str(gloo).split(",")]:
        problems.append(f"GLOO_SOCKET_IFNAME={gloo!s} does not name {interface}, the interface that routes to rank 0")
    return problems


# ================================================================ I/O: route, port, handshake
def route_to(address: str, ip: str = "ip", run=None) -> dict:
    """{"address" (the resolved rank 0 address), "interface", "src" (this host's address on it), "via",
    "route_type", "route" (the line)} from `ip route get` (and `ip -o addr show` on rank 0 itself)."""
    run = run or systemd_unit.default_run
    resolved = resolve(address)
    rc, out, err = run([ip, "route", "get", resolved])
    if rc != 0:
        raise MultinodeError(f"`{ip} route get {resolved}` failed (rc={rc}): {(err or out).strip()[-300:]}",
                             address=resolved)
    route = parse_route_get(out)
    addr_out = ""
    if route["type"] == "local" or route["dev"] == "lo":
        rc, addr_out, err = run([ip, "-o", "addr", "show"])
        if rc != 0:
            raise MultinodeError(f"`{ip} -o addr show` failed (rc={rc}): {err.strip()[-300:]}", address=resolved)
    interface = route_interface(out, addr_out)
    src = route["src"]
    if route["type"] == "local":
        src = route["dst"]
    return {"address": resolved, "interface": interface, "src": src, "via": route["via"],
            "route_type": route["type"], "route": route["line"]}


def resolve(address: str) -> str:
    bare = address.strip().strip("[]")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(bare, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise MultinodeError(f"rank 0 address {address!r} does not resolve: {exc}", address=address) from None
    return infos[0][4][0]


def port_state(port: int, proc: str = "/proc") -> dict:
    """{"in_use": bool, "holders": [{"pid", "comm"}]} for the LISTEN sockets on `port` (read-only)."""
    found = systemd_unit.listening_pids(port, proc)
    holders = []
    for pid in sorted(found["pids"]):
        try:
            with open(os.path.join(proc, str(pid), "comm")) as fh:
                comm = fh.read().strip()
        except OSError:
            comm = "?"
        holders.append({"pid": pid, "comm": comm})
    return {"in_use": found["sockets"] > 0, "holders": holders}


def _read_line(sock: socket.socket, deadline: float, clock=time.monotonic) -> str:
    data = b""
    while b"\n" not in data and len(data) < MAX_LINE:
        left = deadline - clock()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(MAX_LINE - len(data))
        except (socket.timeout, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


def listen(address: str, port: int, seconds: float, token: str = "", name: str = "rank0",
           expected_peers=(), ack_timeout: float = 3.0, on_listening: Callable | None = None,
           clock=time.monotonic) -> dict:
    """Rank 0: bind address:port for at most `seconds` and answer every connection with one handshake line
    ('SGLANG-NET-PREFLIGHT <token> <name>'), recording the peers that acknowledge it. Returns early once every
    name of `expected_peers` has acknowledged.

    {"state": "listened", "peers": [{"name", "address"}], "missing": [...], "seconds"} or, when the port is
    already held (the running server, expected before a restart), {"state": "in_use", "holders": [...]}: the
    others' TCP connect to that listener is then the reachability check. An address of another host raises."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    srv = socket.socket(family, socket.SOCK_STREAM)
    started = clock()
    try:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only; a live listener still refuses
        try:
            srv.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                state = port_state(port)
                return {"state": "in_use", "holders": state["holders"], "peers": [], "missing": list(expected_peers),
                        "seconds": round(clock() - started, 3), "error": str(exc)}
            if exc.errno == errno.EADDRNOTAVAIL:
                raise MultinodeError(f"rank 0 address {address} is not an address of this host (bind: {exc})",
                                     address=address) from None
            raise MultinodeError(f"cannot bind {host_port(address, port)}: {exc}", address=address) from None
        srv.listen(64)
        srv.settimeout(0.2)
        if on_listening:
            on_listening()
        peers: list[dict] = []
        lock = threading.Lock()
        done = threading.Event()
        wanted = set(expected_peers)
        line = f"{HANDSHAKE} {token or '-'} {name}\n".encode()

        def serve(conn: socket.socket, peer_addr: str):
            try:
                conn.sendall(line)
                ack = _read_line(conn, clock() + ack_timeout, clock).strip().split()
                if len(ack) >= 3 and ack[0] == HANDSHAKE_ACK and ack[1] == (token or "-"):
                    with lock:
                        peers.append({"name": ack[2], "address": peer_addr})
                        if wanted and wanted <= {p["name"] for p in peers}:
                            done.set()
            except OSError:
                pass
            finally:
                conn.close()

        deadline = started + seconds
        workers = []
        while not done.is_set() and clock() < deadline:
            try:
                conn, peer = srv.accept()
            except (socket.timeout, TimeoutError):
                continue
            t = threading.Thread(target=serve, args=(conn, peer[0]), daemon=True)
            t.start()
            workers.append(t)
        for t in workers:
            t.join(timeout=max(0.0, min(ack_timeout, deadline + ack_timeout - clock())))
        with lock:
            got = list(peers)
        names = {p["name"] for p in got}
        return {"state": "listened", "holders": [], "peers": got, "missing": [p for p in expected_peers
                                                                             if p not in names],
                "seconds": round(clock() - started, 3), "error": ""}
    finally:
        srv.close()


def connect(address: str, port: int, token: str = "", name: str = "", attempts: int = 40, interval: float = 0.5,
            timeout: float = 2.0, read_timeout: float = 2.0, on_attempt: Callable | None = None,
            clock=time.monotonic, sleep=time.sleep) -> dict:
    """Ranks >= 1: connect to rank 0's dist-init port (at most `attempts` tries, `interval` apart) and read its
    handshake line; nothing is sent unless that line is ours, so a running server's listener only sees a connect.

    {"reach": "handshake" | "connected", "attempts", "seconds", "peer" (rank 0's name), "answer", "errors"}:
    "connected" = a listener accepted but sent no handshake (the running server). Raises after the last attempt,
    or when the handshake carries another token (another run's listener)."""
    started = clock()
    errors: list[str] = []
    for attempt in range(1, max(1, attempts) + 1):
        try:
            sock = socket.create_connection((address, port), timeout=timeout)
        except OSError as exc:
            why = sglang_http._classify(exc)
            errors.append(why)
            if on_attempt:
                on_attempt(attempt, why)
            if attempt < attempts:
                sleep(interval)
            continue
        try:
            answer = _read_line(sock, clock() + read_timeout, clock)
            words = answer.strip().split()
            base = {"attempts": attempt, "seconds": round(clock() - started, 3), "answer": answer.strip()[:200],
                    "errors": errors[-5:]}
            if len(words) >= 3 and words[0] == HANDSHAKE:
                if words[1] != (token or "-"):
                    raise MultinodeError(f"{host_port(address, port)} answered another preflight's token (not this "
                                         f"run's listener)", attempts=attempt, answer=answer.strip()[:200])
                try:
                    sock.sendall(f"{HANDSHAKE_ACK} {token or '-'} {name or socket.gethostname()}\n".encode())
                except OSError as exc:
                    errors.append(sglang_http._classify(exc))
                return dict(base, reach="handshake", peer=words[2])
            return dict(base, reach="connected", peer="")
        finally:
            sock.close()
    raise MultinodeError(f"rank 0's dist-init port {host_port(address, port)} unreachable after {attempts} attempts "
                         f"over {clock() - started:.1f}s: last error {errors[-1] if errors else '?'}",
                         attempts=attempts, errors=errors[-5:])
