"""Multi-node SGLang serving groups: the rank plan, the network preflight and the group's readiness.

A group is several hosts serving one model together (`--nnodes`, `--node-rank`, `--dist-init-addr`, ../shared/FACTS.md
"Multi-node"). Rank order is the inventory order; rank 0 runs the HTTP API, ranks >= 1 only a dummy server whose
/health says 200 once that node's schedulers are up, so the group's readiness is rank 0's and the other ranks can
only be watched as live processes.

Pure parts (no I/O; the controller's static checks and the modules both use them):
  group_plan(ranks, dist_init_port, tp, pp)   -> {host: {node_rank, nnodes, dist_init_addr}} in inventory order
  parse_route_get(text) / route_interface(text, ip_addr_text)  -> what `ip route get <rank0>` says / its device
  address_interface(ip_addr_text, address)    -> the device carrying an address (`ip -o addr show`)
  socket_env(interface) / socket_ifname_problems(env, interface)  -> NCCL_/GLOO_SOCKET_IFNAME for that device
  consistency(facts_by_rank)                  -> driver / CUDA / venv hash mismatches, naming the ranks
I/O parts, every side effect injectable (tests run them on 127.0.0.1 without systemd or a GPU):
  route_to(address)                   -> interface, own address, gateway (runs `ip route get`, `ip -o addr show`)
  port_state(port)                    -> who listens on the dist-init port (/proc, read-only)
  listen(...) / connect(...)          -> the dist-init port reachability handshake (rank 0 / ranks >= 1)
  wait_group(GroupOptions, ...)       -> rank 0 ready the way module_utils/sglang/ready decides it, every other
                                         rank answering, then a settle window; any rank silent for rank_dead_after
                                         seconds fails it, naming that rank.

Stdlib only (runs on the target with the system python3, 3.10+).
"""
from __future__ import annotations

import dataclasses
import errno
import ipaddress
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.sglang import ready as sglang_ready
from ansible.module_utils.systemd import unit as systemd_unit

RANK_FACT_KEYS = ("driver", "cuda", "venv_hash")
HANDSHAKE = "SGLANG-NET-PREFLIGHT"
HANDSHAKE_ACK = "SGLANG-NET-PREFLIGHT-ACK"
MAX_LINE = 512
ROUTE_TYPES = ("local", "unicast", "broadcast", "multicast", "anycast", "unreachable", "blackhole", "prohibit",
               "throw", "nat")
ROUTE_ARG_KEYS = ("via", "dev", "src", "from", "table", "proto", "metric", "pref", "uid", "scope", "mtu", "iif",
                  "oif", "realms", "expires", "hoplimit", "tos", "mark")


class MultinodeError(ValueError):
    """A refusal with its evidence (a bad group, an unusable route, unreachable ranks)."""

    def __init__(self, message: str, **evidence):
        super().__init__(message)
        self.message = message
        self.evidence = evidence


# ================================================================ pure: the rank plan
def _positive_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise MultinodeError(f"{name}={value!r} is not a positive integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise MultinodeError(f"{name}={value!r} is not a positive integer") from None
    if number != value and str(number) != str(value).strip():
        raise MultinodeError(f"{name}={value!r} is not a positive integer")
    if number < 1:
        raise MultinodeError(f"{name}={value!r} is not a positive integer")
    return number


def _rank_entry(entry, index: int) -> tuple[str, str]:
    """(name, address) of one inventory entry: a host string (its own address) or {name, address}."""
    if isinstance(entry, str):
        name = address = entry.strip()
    elif isinstance(entry, dict):
        name = str(entry.get("name") or "").strip()
        address = str(entry.get("address") or name).strip()
    else:
        raise MultinodeError(f"rank {index}: {entry!r} is neither a host name nor {{name, address}}")
    if not name or not address:
        raise MultinodeError(f"rank {index}: empty host name or address in {entry!r}")
    return name, address


def _canonical_address(address: str) -> str:
    try:
        return str(ipaddress.ip_address(address.strip("[]")))
    except ValueError:
        return address.lower().rstrip(".")


def host_port(address: str, port: int) -> str:
    """host:port with an IPv6 literal in brackets ([fd00::2]:5000), the form tcp:// init methods take."""
    bare = address.strip("[]")
    try:
        if ipaddress.ip_address(bare).version == 6:
            return f"[{bare}]:{port}"
    except ValueError:
        pass
    return f"{bare}:{port}"


def group_plan(ranks, dist_init_port, tp, pp) -> dict:
    """Per rank, in inventory order: {name: {"node_rank", "nnodes", "dist_init_addr"}} (the structured server
    config's own keys, to merge into the host's server dict). Refuses, naming the values: an empty group, a host
    (name or address) listed twice, tp*pp not divisible by the number of nodes, a port out of 1..65535."""
    ranks = list(ranks or [])
    if not ranks:
        raise MultinodeError("empty serving group: no hosts to plan ranks for")
    entries = [_rank_entry(entry, i) for i, entry in enumerate(ranks)]
    seen_names: dict[str, int] = {}
    seen_addresses: dict[str, int] = {}
    for i, (name, address) in enumerate(entries):
        if name in seen_names:
            raise MultinodeError(f"duplicate host {name!r} in the serving group (ranks {seen_names[name]} and {i})",
                                 duplicate=name)
        canonical = _canonical_address(address)
        if canonical in seen_addresses:
            other = entries[seen_addresses[canonical]][0]
            raise MultinodeError(f"duplicate host in the serving group: {name!r} (rank {i}) and {other!r} "
                                 f"(rank {seen_addresses[canonical]}) have the same address {address}",
                                 duplicate=address)
        seen_names[name], seen_addresses[canonical] = i, i
    try:
        port = int(dist_init_port)
    except (TypeError, ValueError):
        port = -1
    if isinstance(dist_init_port, bool) or str(port) != str(dist_init_port).strip() or not 1 <= port <= 65535:
        raise MultinodeError(f"dist_init_port={dist_init_port!r} is out of range 1..65535")
    tp_n, pp_n, nnodes = _positive_int("tp", tp), _positive_int("pp", pp), len(entries)
    if (tp_n * pp_n) % nnodes:
        raise MultinodeError(f"tp={tp_n} x pp={pp_n} = {tp_n * pp_n} GPUs is not divisible by nnodes={nnodes} "
                             f"(hosts {[n for n, _ in entries]})", tp=tp_n, pp=pp_n, nnodes=nnodes)
    addr = host_port(entries[0][1], port)
    return {name: {"node_rank": i, "nnodes": nnodes, "dist_init_addr": addr} for i, (name, _a) in enumerate(entries)}


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


# ================================================================ pure: cross-rank consistency
def consistency(facts_by_rank: dict, keys=RANK_FACT_KEYS) -> list[dict]:
    """Mismatches of driver, CUDA and venv hash across ranks: [{"key", "values": {rank: value}, "detail"}], one
    per key whose value differs between ranks or is missing on any rank (a fact that cannot be compared cannot
    be vouched for). `facts_by_rank`: {rank name: {"driver", "cuda", "venv_hash"}} in rank order."""
    mismatches = []
    ranks = list(facts_by_rank or {})
    for key in keys:
        values = {rank: str((facts_by_rank[rank] or {}).get(key) or "").strip() for rank in ranks}
        by_value: dict[str, list[str]] = {}
        for rank, value in values.items():
            by_value.setdefault(value, []).append(rank)
        if len(by_value) <= 1 and "" not in by_value:
            continue
        parts = [f"{v!r} on {', '.join(r)}" if v else f"missing on {', '.join(r)}" for v, r in by_value.items()]
        mismatches.append({"key": key, "values": values, "detail": f"{key} differs across ranks: " + "; ".join(parts)})
    return mismatches


def rank_facts(cuda_home: str = "", venv_digest_path: str = "", gpus_expected: bool = True,
               driver_files=("/sys/module/nvidia/version", "/proc/driver/nvidia/version")) -> dict:
    """This host's {"driver", "cuda", "venv_hash"} for consistency(): the loaded NVIDIA kernel module's version
    (/sys/module/nvidia/version, else the 'Kernel Module  X' of /proc/driver/nvidia/version), the CUDA toolkit's
    version at cuda_home (version.json, else version.txt), the venv's content hash (the venv role's digest file).
    A fact the host lacks is "" (consistency() then refuses it), except that a host declaring no GPU
    (gpus_expected=False, the lab) has "none" for a missing driver and toolkit, so such ranks still compare."""
    driver = ""
    for path in driver_files:
        text = _read_text(path)
        if not text:
            continue
        m = re.search(r"Kernel Module(?: for [a-z0-9_]+)?\s+([0-9][0-9.]*)", text)
        driver = m.group(1) if m else (text.split()[0] if re.match(r"^[0-9][0-9.]*$", text.split()[0]) else "")
        if driver:
            break
    cuda = ""
    if cuda_home:
        try:
            with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as fh:
                cuda = str(json.load(fh)["cuda"]["version"])
        except (OSError, ValueError, KeyError, TypeError):
            m = re.search(r"CUDA Version\s+([0-9.]+)", _read_text(os.path.join(cuda_home, "version.txt")))
            cuda = m.group(1) if m else ""
    if not gpus_expected:
        driver, cuda = driver or "none", cuda or "none"
    return {"driver": driver, "cuda": cuda, "venv_hash": _read_text(venv_digest_path) if venv_digest_path else ""}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def plan_problems(ranks, dist_init_port, tp, pp, service_port=None) -> list[str]:
    """Why group_plan() refuses these ranks (its message), or a dist-init port equal to the HTTP --port; [] = fine."""
    try:
        group_plan(ranks, dist_init_port, tp, pp)
    except MultinodeError as exc:
        return [exc.message]
    if service_port not in (None, "") and str(service_port).strip() == str(dist_init_port).strip():
        return [f"dist_init_port={dist_init_port} is also the server's --port: rank 0 cannot hold both"]
    return []


# ================================================================ pure: which rank rank 0 lost
# gloo's lines when a peer is gone (tests/fixtures/real_sglang/multinode-0.5.11.md): they name the peer's address,
# not its rank; the lab stand-in adds "(stand-in: lost node rank N)".
LOST_PEER_RE = re.compile(r"(?:Connection closed by peer|Read error) \[([^\]]+)\]:\d+")
LOST_RANK_RE = re.compile(r"lost node rank (\d+)")


def _url_address(url: str) -> str:
    host = urlsplit(url).hostname or ""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        try:
            return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
        except (OSError, IndexError):
            return host


def lost_rank(journal_lines, ranks, resolve_url=_url_address):
    """(rank, line): the rank >= 1 that rank 0's journal says it lost (gloo's 'Connection closed by peer [ADDR]:P'
    or 'Read error [ADDR]:P', matched to the one rank whose URL has that address; or a 'lost node rank N'),
    else (None, ""). An address shared by several ranks names none of them."""
    by_rank = {r.node_rank: r for r in ranks}
    addresses = None
    for line in journal_lines or ():
        m = LOST_RANK_RE.search(line)
        if m and int(m.group(1)) in by_rank:
            return by_rank[int(m.group(1))], line
        m = LOST_PEER_RE.search(line)
        if not m:
            continue
        if addresses is None:
            addresses = {}
            for r in ranks:
                addresses.setdefault(_canonical_address(resolve_url(r.url)), []).append(r)
        hits = addresses.get(_canonical_address(m.group(1).removeprefix("::ffff:")), [])
        if len(hits) == 1:
            return hits[0], line
    return None, ""


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


# ================================================================ I/O: the group's readiness
PHASE_RANK0 = "rank 0 starting"
PHASE_RANKS = "waiting for ranks"
PHASE_SETTLE = "settling"


@dataclass
class RankSpec:
    name: str
    url: str
    node_rank: int
    restarted: bool = False  # answers count only after the rank was seen down once (its old process gone)


@dataclass
class RankStatus:
    spec: RankSpec
    checks: int = 0
    oks: int = 0
    seen_down: bool = False
    first_ok: float | None = None
    last_ok: float | None = None
    last_answer: str = "not probed yet"

    @property
    def answered(self) -> bool:
        return self.first_ok is not None

    def view(self, now: float) -> dict:
        return {"name": self.spec.name, "node_rank": self.spec.node_rank, "url": self.spec.url,
                "answered": self.answered, "checks": self.checks, "oks": self.oks,
                "last_ok_ago_s": round(now - self.last_ok, 3) if self.last_ok is not None else None,
                "last_answer": self.last_answer}


@dataclass
class GroupOptions:
    ready: sglang_ready.Options          # rank 0: unit, url, model, timeout, poll, health path...
    ranks: list                          # RankSpec of ranks >= 1, in rank order
    rank0_name: str = "rank 0"
    rank_health_path: str = "/health"
    rank_dead_after: float = 2.0
    rank_http_timeout: float = 1.0
    settle: float = 5.0


class GroupError(Exception):
    def __init__(self, kind: str, rank: str, node_rank, phase: str, message: str, evidence: dict):
        super().__init__(message)
        self.kind = kind  # "rank_dead" | "failed" (rank 0's unit) | "timeout" | "error"
        self.rank, self.node_rank, self.phase, self.message, self.evidence = rank, node_rank, phase, message, evidence


class _Aborted(Exception):
    pass


class _Watcher(threading.Thread):
    """Polls one rank's health path; records when it last answered 200 (the verdict is the caller's)."""

    def __init__(self, status: RankStatus, path: str, http, timeout: float, poll: float, lock, stop, changed, clock):
        super().__init__(daemon=True, name=f"rank-{status.spec.node_rank}")
        self.status, self.path, self.http, self.timeout, self.poll = status, path, http, timeout, poll
        self.lock, self.stop, self.changed, self.clock = lock, stop, changed, clock

    def run(self):
        while not self.stop.is_set():
            began = self.clock()
            resp = self.http(self.status.spec.url, self.path, timeout=self.timeout)
            now = self.clock()
            with self.lock:
                st = self.status
                st.checks += 1
                st.last_answer = resp.describe() if not resp.ok else "HTTP 200"
                if not resp.ok:
                    st.seen_down = True
                elif st.seen_down or not st.spec.restarted:
                    st.oks += 1
                    st.last_ok = now
                    if st.first_ok is None:
                        st.first_ok = now
            self.changed.set()
            self.stop.wait(max(0.0, self.poll - (now - began)))


def wait_group(gopts: GroupOptions, stale_invocation: str = "", stale_pid: int = 0,
               probe: sglang_ready.Probe | None = None, rank_http=None, on_event: Callable | None = None,
               wall: Callable[[], float] = time.time) -> dict:
    """Block until rank 0 is ready (sglang_ready.wait_ready, run in a thread) and every rank >= 1 answers its
    health path, then watch all of them for `settle` seconds. Raises GroupError as soon as a rank that answered
    has not answered for `rank_dead_after` seconds (rank 0: also its unit failing, restarting or changing pid,
    with its journal), or when the time runs out (naming what it waited for)."""
    probe = probe or sglang_ready.Probe()
    http = rank_http or sglang_http.call
    clock = probe.clock
    opts = gopts.ready
    poll = max(0.02, min(opts.poll, 0.25))
    emit = on_event or (lambda name, detail: None)
    lock, stop, changed = threading.Lock(), threading.Event(), threading.Event()
    started = clock()
    hard_deadline = started + opts.timeout + 30.0  # wait_ready ends itself at opts.timeout; this only bounds a hang
    statuses = [RankStatus(spec) for spec in gopts.ranks]
    watchers = [_Watcher(s, gopts.rank_health_path, http, gopts.rank_http_timeout, poll, lock, stop, changed, clock)
                for s in statuses]
    holder: dict = {}

    def abortable_sleep(seconds):
        if stop.wait(seconds):
            raise _Aborted()

    worker_probe = dataclasses.replace(probe, sleep=abortable_sleep)

    def rank0():
        try:
            holder["result"] = sglang_ready.wait_ready(opts, stale_invocation=stale_invocation, stale_pid=stale_pid,
                                                       probe=worker_probe)
        except _Aborted:
            holder["aborted"] = True
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            holder["error"] = exc
        finally:
            changed.set()

    rank0_status = RankStatus(RankSpec(gopts.rank0_name, opts.base_url, 0))
    worker = threading.Thread(target=rank0, daemon=True, name="rank-0")
    phase, ready0, ready_at, settle_from, unit_checked = PHASE_RANK0, None, None, None, float("-inf")

    def views(now):
        with lock:
            out = [s.view(now) for s in ([rank0_status] if settle_from is not None else []) + statuses]
        return out

    def evidence(now, **extra):
        return dict({"ranks": views(now), "phases": (ready0 or {}).get("phases", []), "unit": {}, "journal": [],
                     "detect_s": None, "waited_s": round(now - started, 3), "lost_line": "",
                     "failed_at": round(wall(), 3)}, **extra)

    def rank0_failure(kind, phase_now, message, ev):
        """Rank 0 went down: when its journal says it lost a rank >= 1, that rank is the one to name."""
        spec, line = lost_rank(ev.get("journal", []), [s.spec for s in statuses])
        if spec is None:
            return GroupError(kind, gopts.rank0_name, 0, phase_now, message, ev)
        ev["lost_line"] = line
        return GroupError("rank_dead", spec.name, spec.node_rank, phase_now, (
            f"rank {spec.node_rank} ({spec.name}, {spec.url}) was lost: rank 0 ({gopts.rank0_name}) logged "
            f"{line.strip()!r} and went down. Its journal: journalctl -u {opts.unit} -n 80 on {spec.name}\n"
            f"rank 0: {message}"), ev)

    try:
        worker.start()
        for w in watchers:
            w.start()
        while True:
            changed.wait(poll)
            changed.clear()
            now = clock()
            # ---- a rank that answered and went silent
            with lock:
                watched = ([rank0_status] if settle_from is not None else []) + statuses
                dead = next((s for s in watched if s.answered and now - s.last_ok >= gopts.rank_dead_after), None)
            if dead is not None:
                silent = now - dead.last_ok
                spec = dead.spec
                ev = evidence(now, detect_s=round(silent, 3))
                if spec.node_rank == 0:
                    state = probe.show(opts.unit)
                    ev.update(unit=state.summary(), journal=sglang_ready.journal_excerpt(
                        opts, state.invocation_id or (ready0 or {}).get("invocation_id", ""), probe))
                    lost, _line = lost_rank(ev["journal"], [s.spec for s in statuses])
                    if lost is not None:
                        raise rank0_failure("rank_dead", phase, f"stopped answering {opts.health_path} for "
                                            f"{silent:.2f}s", ev)
                path = gopts.rank_health_path if spec.node_rank else opts.health_path
                tail = (f". Its journal: journalctl -u {opts.unit} -n 80 on {spec.name}" if spec.node_rank else
                        ". Last journal lines of rank 0:\n" + "\n".join(ev["journal"][-opts.journal_lines:]))
                raise GroupError("rank_dead", spec.name, spec.node_rank, phase, (
                    f"rank {spec.node_rank} ({spec.name}, {spec.url}) stopped answering {path}: no 200 for "
                    f"{silent:.2f}s (rank_dead_after {gopts.rank_dead_after:g}s; last answer: {dead.last_answer}) "
                    f"while {phase}, {now - started:.2f}s after the wait began{tail}"), ev)
            # ---- rank 0's own wait
            if ready0 is None and not worker.is_alive():
                if "error" in holder:
                    exc = holder["error"]
                    if isinstance(exc, sglang_ready.ReadyError):
                        ev = evidence(now, unit=exc.evidence.get("unit", {}), journal=exc.evidence.get("journal", []),
                                      phases=exc.evidence.get("phases", []),
                                      crash_to_verdict_s=exc.evidence.get("crash_to_verdict_s"))
                        waiting = [s.spec.name for s in statuses if not s.answered]
                        message = (f"rank 0 ({gopts.rank0_name}): {exc.message}"
                                   + (f"\nranks not answering yet: {waiting}" if waiting else ""))
                        if exc.kind == "failed":
                            raise rank0_failure(exc.kind, exc.phase, message, ev)
                        raise GroupError(exc.kind, gopts.rank0_name, 0, exc.phase, message, ev)
                    if isinstance(exc, systemd_unit.SystemdError):
                        raise GroupError("error", gopts.rank0_name, 0, phase, f"rank 0 ({gopts.rank0_name}): {exc}",
                                         evidence(now))
                    raise exc
                ready0 = holder["result"]
                ready_at = now
                phase = PHASE_RANKS
                emit("rank0_ready", ready0)
            # ---- everyone answers: settle
            if ready0 is not None and settle_from is None:
                with lock:
                    waiting = [s for s in statuses if not s.answered]
                if not waiting:
                    settle_from, phase = now, PHASE_SETTLE
                    with lock:
                        rank0_status.checks = rank0_status.oks = 1
                        rank0_status.first_ok = rank0_status.last_ok = ready_at
                        rank0_status.last_answer = "HTTP 200"
                    w0 = _Watcher(rank0_status, opts.health_path, lambda base, path, timeout: probe.http(
                        base, path, api_key=opts.api_key, timeout=timeout), max(opts.http_timeout,
                                                                                 gopts.rank_http_timeout),
                        poll, lock, stop, changed, clock)
                    w0.start()
                    watchers.append(w0)
                    emit("settling", now - started)
            if settle_from is not None and (now - unit_checked >= poll or now - settle_from >= gopts.settle):
                unit_checked = now
                state = probe.show(opts.unit)
                why = ""
                if state.invocation_id != ready0["invocation_id"]:
                    why = f"was restarted (invocation {ready0['invocation_id']} -> {state.invocation_id or '-'})"
                elif state.main_pid != ready0["pid"]:
                    why = f"changed main pid {ready0['pid']} -> {state.main_pid}"
                elif not state.running:
                    why = f"stopped ({state.active_state}/{state.sub_state}; {state.exit_description})"
                if why:
                    lines = sglang_ready.journal_excerpt(opts, ready0["invocation_id"], probe)
                    raise rank0_failure("failed", phase, (
                        f"rank 0 ({gopts.rank0_name}): {opts.unit} {why} while {phase}, "
                        f"{clock() - settle_from:.2f}s into the settle window. Last journal lines:\n"
                        + "\n".join(lines[-opts.journal_lines:])), evidence(clock(), unit=state.summary(),
                                                                            journal=lines))
            if settle_from is not None:
                if now - settle_from >= gopts.settle:
                    return {"time_to_ready": ready0["time_to_ready"], "group_ready_s": round(settle_from - started, 3),
                            "settle_s": round(now - settle_from, 3), "pid": ready0["pid"],
                            "invocation_id": ready0["invocation_id"], "n_restarts": ready0["n_restarts"],
                            "phases": ready0["phases"], "ranks": views(now)}
            # ---- out of time
            if settle_from is None and ((ready0 is not None and now >= started + opts.timeout)
                                        or now >= hard_deadline):
                with lock:
                    never = [s for s in statuses if not s.answered]
                    waiting = [f"rank {s.spec.node_rank} ({s.spec.name}, {s.spec.url}): {s.last_answer}"
                               for s in never]
                if ready0 is not None:
                    raise GroupError("timeout", never[0].spec.name, never[0].spec.node_rank, phase, (
                        f"group not ready after {opts.timeout:.0f}s: rank 0 ({gopts.rank0_name}) is ready but "
                        f"these ranks never answered {gopts.rank_health_path}: " + "; ".join(waiting)), evidence(now))
                raise GroupError("timeout", gopts.rank0_name, 0, phase, (
                    f"group not ready after {now - started:.0f}s: the wait for rank 0 ({gopts.rank0_name}) did not "
                    "end by itself"), evidence(now))
    finally:
        stop.set()
        changed.set()
