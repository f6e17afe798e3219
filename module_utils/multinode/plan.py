"""The rank plan of a multi-node SGLang serving group: which host is which rank, and where the ranks meet.

A group is several hosts serving one model together (`--nnodes`, `--node-rank`, `--dist-init-addr`, ../shared/FACTS.md
"Multi-node"). Rank order is the inventory order; rank 0 runs the HTTP API, ranks >= 1 only a dummy server whose
/health says 200 once that node's schedulers are up, so the group's readiness is rank 0's and the other ranks can
only be watched as live processes (group_ready.py).

Pure (no I/O; the controller's static checks in filter_plugins/multinode.py and the modules both use it):
  group_plan(ranks, dist_init_port, tp, pp)   -> {host: {node_rank, nnodes, dist_init_addr}} in inventory order
  plan_problems(ranks, dist_init_port, tp, pp, service_port) -> [] or why group_plan() refuses them
  host_port(address, port) / canonical_address(address)      -> host:port ([v6]:port) / one spelling of an address
  MultinodeError                              -> the refusal every file of this package raises, with its evidence

The rest of the package: network.py (the network preflight: route, interface, dist-init port handshake),
consistency.py (driver / CUDA / venv hash across ranks), group_ready.py (the group's readiness wait).

Stdlib only (runs on the target with the system python3, 3.10+).
"""
from __future__ import annotations

import ipaddress

from ansible.module_utils.evidence.error import EvidenceError


class MultinodeError(EvidenceError, ValueError):
    """A refusal with its evidence (a bad group, an unusable route, unreachable ranks)."""

    default_kind = "refused"

    def __init__(self, message: str, **evidence):
        super().__init__(message, evidence=evidence)


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


def canonical_address(address: str) -> str:
    """One spelling of an address (an IP in its compressed form, a name lower-cased without its trailing dot), so
    the same host written two ways is seen as one."""
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
        canonical = canonical_address(address)
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


def plan_problems(ranks, dist_init_port, tp, pp, service_port=None) -> list[str]:
    """Why group_plan() refuses these ranks (its message), or a dist-init port equal to the HTTP --port; [] = fine."""
    try:
        group_plan(ranks, dist_init_port, tp, pp)
    except MultinodeError as exc:
        return [exc.message]
    if service_port not in (None, "") and str(service_port).strip() == str(dist_init_port).strip():
        return [f"dist_init_port={dist_init_port} is also the server's --port: rank 0 cannot hold both"]
    return []

