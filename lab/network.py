"""The lab's network on the controller: the choice of a free /24, the bridge with the gateway address, and the
HTTP proxy on the gateway (tinyproxy: the hosts' only way out, restricted to Debian and PyPI)."""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from lab.error import LabError
from lab.paths import STATE_ROOT
from lab.system import pid_alive, run

# The hosts reach only these through the proxy.
PROXY_ALLOWED_DOMAINS = (
    r"^deb\.debian\.org$", r"^security\.debian\.org$", r"^pypi\.org$", r"^files\.pythonhosted\.org$",
)
PROXY_PORT = 3128
# Candidate subnets, 10.213.0.0/16 carved into /24s; the first unused one (by address, route and other lab) wins.
SUBNET_POOL = ipaddress.ip_network("10.213.0.0/16")


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine already has an address or a route in (all tables)."""
    nets: list[ipaddress.IPv4Network] = []
    addrs = json.loads(run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]")
    for link in addrs:
        for info in link.get("addr_info", []):
            nets.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("type") in ("broadcast", "local") and dst.startswith("127."):
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def subnet_in_use(subnet: ipaddress.IPv4Network) -> str | None:
    """Why `subnet` cannot be used (what overlaps it), or None when it is free."""
    for net in used_networks():
        if net.overlaps(subnet):
            return f"{net} is already configured on this machine"
    for other in STATE_ROOT.glob("*/state.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            if ipaddress.ip_network(json.loads(other.read_text())["subnet"]).overlaps(subnet):
                return f"lab {other.parent.name} uses it"
    return None


def pick_subnet(requested: str | None, short: str) -> ipaddress.IPv4Network:
    """The lab's /24: `requested` (LAB_SUBNET) when free, else the first free one of SUBNET_POOL, starting at a
    place derived from the lab's short id (so two labs rarely try the same one first)."""
    if requested:
        try:
            net = ipaddress.ip_network(requested)
        except ValueError as exc:
            raise LabError(f"LAB_SUBNET {requested!r} is not a network ({exc}): give one like 10.213.7.0/24.") from exc
        why = subnet_in_use(net)
        if why:
            raise LabError(f"subnet {net} is already in use ({why}): pick a free one with LAB_SUBNET or omit it to let the lab choose.")
        return net
    start = int(short, 16) % 256
    for i in range(256):
        net = list(SUBNET_POOL.subnets(new_prefix=24))[(start + i) % 256]
        if subnet_in_use(net) is None:
            return net
    raise LabError(f"no free /24 left in {SUBNET_POOL}: run `python -m lab down` for labs you no longer need.")


def ensure_bridge(bridge: str, net: ipaddress.IPv4Network) -> str:
    """The bridge up with the subnet's first address (the gateway) on it; returns the gateway."""
    gateway = str(next(net.hosts()))
    if run(["ip", "link", "show", bridge], check=False).returncode != 0:
        run(["ip", "link", "add", bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{gateway}/{net.prefixlen}", "dev", bridge])
    run(["ip", "link", "set", bridge, "up"])
    return gateway


def remove_bridge(bridge: str) -> None:
    run(["ip", "link", "del", bridge], check=False)


def orphan_proxies(pdir: Path, proc: str = "/proc") -> list[int]:
    """tinyproxy processes started with this lab's config (pdir/tinyproxy.conf) that its state no longer names: what a
    run killed between starting the proxy and saving the state leaves. Still bound to the gateway's port, one would
    make every later proxy on the same subnet fail with "Could not create listening sockets"."""
    conf = str(pdir / "tinyproxy.conf")
    found = []
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            argv = Path(proc, pid, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"tinyproxy") and conf.encode() in argv:
            found.append(int(pid))
    return found


def _kill_orphans(pdir: Path) -> None:
    for pid in orphan_proxies(pdir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid_alive(pid, "tinyproxy") and time.monotonic() < deadline:
            time.sleep(0.05)


def ensure_proxy(state: dict, pdir: Path) -> None:
    """tinyproxy on the gateway (state["proxy_pid"]), configured in pdir; bounded wait until it listens. An orphan
    of an earlier run of this lab (orphan_proxies) is killed first."""
    pid = state.get("proxy_pid", 0)
    if pid and pid_alive(pid, "tinyproxy"):
        return
    _kill_orphans(pdir)
    pdir.mkdir(parents=True, exist_ok=True)
    os.chmod(pdir, 0o777)
    (pdir / "filter").write_text("\n".join(PROXY_ALLOWED_DOMAINS) + "\n")
    (pdir / "tinyproxy.conf").write_text(
        f'User nobody\nGroup nogroup\nPort {PROXY_PORT}\nListen {state["gateway"]}\nTimeout 600\n'
        f'LogFile "{pdir}/tinyproxy.log"\nLogLevel Connect\nMaxClients 200\n'
        f'Allow {state["subnet"]}\nConnectPort 443\nConnectPort 80\n'
        f'Filter "{pdir}/filter"\nFilterURLs Off\nFilterExtended On\nFilterDefaultDeny Yes\n'
        f'DisableViaHeader Yes\n')
    log = open(pdir / "stdout.log", "ab")
    proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(pdir / "tinyproxy.conf")], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    state["proxy_pid"] = proc.pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"tinyproxy exited at start: {(pdir / 'stdout.log').read_text()[-400:]}")
        with contextlib.suppress(OSError), socket.create_connection((state["gateway"], PROXY_PORT), timeout=0.5):
            return
        time.sleep(0.05)
    raise LabError("tinyproxy did not start listening within 10s: see .lab/<name>/proxy/stdout.log.")


def stop_proxy(state: dict) -> None:
    """SIGTERM the lab's tinyproxy, SIGKILL after 5 s; and any orphan of this lab's proxy config."""
    pid = state.get("proxy_pid", 0)
    if pid and pid_alive(pid, "tinyproxy"):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while pid_alive(pid, "tinyproxy") and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid, "tinyproxy"):
            os.kill(pid, signal.SIGKILL)
    if state.get("name"):
        _kill_orphans(STATE_ROOT / state["name"] / "proxy")


def proxy_running(state: dict) -> bool:
    return pid_alive(state.get("proxy_pid", 0), "tinyproxy")
