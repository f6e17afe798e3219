"""Filters for the router role (roles/sglang_router): which inventory hosts are the router's workers, and their URLs.

    groups | router_workers(hostvars, worker_groups, exclude_groups, default_port)
        -> [{"host", "url", "address", "port", "bind", "node_group"}, ...]   (inventory order, each host once)
    groups | router_worker_urls(hostvars, worker_groups, ...)  -> ["http://ADDR:PORT", ...]
    groups | router_worker_map(hostvars, worker_groups, ...)   -> {host: "http://ADDR:PORT"}
    workers | router_worker_problems                           -> ["<host>: why", ...]   (loopback bind/address)
    workers | router_worker_key_problems(hostvars, router_key) -> ["<host>: why", ...]   (no key in the text)
    workers | router_worker_keys_unknown(hostvars)             -> [host, ...]            (key not in the inventory)
    flags | router_argv(extra_args)                            -> ["launch", "--host", "0.0.0.0", ...]
    metrics_text | router_worker_count(url)                    -> smg_worker_requests_total of that worker (0.0)

A worker is every host of the serving groups (`worker_groups`, default nvlink and pcie), in inventory order, minus
the hosts of `exclude_groups` (the router's own group) and minus the ranks >= 1 of multi-node serving groups: a host
var `sglang_service_node_group` names an inventory group whose hosts, in inventory order, are the ranks of one
serving group; only its first host (rank 0) runs SGLang's HTTP API (ranks >= 1 answer /health with a dummy 200:
../shared/FACTS.md), so only rank 0 is a worker.

Address: `sglang_service_advertise_address`, else `ansible_host`, else the inventory name (IPv6 bracketed).
Port: `sglang_service_server_overrides.port`, else `sglang_service_server_profile.port` (the serving groups'
group_vars), else `default_port`: the port the service role's own base layer sets, which these filters cannot see
(the role passes it).
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path

from ansible.errors import AnsibleFilterError

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.router import client as router_client  # noqa: E402
from ansible.module_utils.sglang import endpoint  # noqa: E402

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _get(hostvars, host: str, key: str, default=None):
    """hostvars[host][key], or default when the host or the variable is absent (plain dicts and Ansible's HostVars)."""
    try:
        value = hostvars[host][key]
    except (KeyError, TypeError):
        return default
    if value is None or type(value).__name__.startswith("AnsibleUndefined"):
        return default
    return value


def _as_mapping(value, host: str, key: str) -> Mapping:
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError(f"router_workers: {host}: {key} must be a mapping, got {type(value).__name__}")
    return value


def _port(value, host: str, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 1 <= port <= 65535:
        raise AnsibleFilterError(f"router_workers: {host}: {where} {value!r} is not a TCP port (1-65535)")
    return port


def _netloc(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return address
    return f"[{ip}]" if ip.version == 6 else str(ip)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def router_workers(groups, hostvars, worker_groups=("nvlink", "pcie"), exclude_groups=("router",),
                   default_port=None):
    if isinstance(worker_groups, str):
        worker_groups = [worker_groups]
    if isinstance(exclude_groups, str):
        exclude_groups = [exclude_groups]
    excluded = {h for g in exclude_groups or () for h in (groups.get(g) or ())}
    out, seen = [], set()
    for group in worker_groups or ():
        for host in groups.get(group) or ():
            if host in seen or host in excluded:
                continue
            seen.add(host)
            node_group = str(_get(hostvars, host, "sglang_service_node_group", "") or "")
            if node_group:
                ranks = list(groups.get(node_group) or ())
                if host not in ranks:
                    raise AnsibleFilterError(
                        f"router_workers: {host}: sglang_service_node_group {node_group!r} must name an inventory "
                        f"group that holds {host} (its hosts, in inventory order, are the serving group's ranks); "
                        f"that group has {ranks or 'no hosts'}")
                if ranks[0] != host:
                    continue  # rank >= 1: no HTTP API, not a worker (rank 0 is ranks[0])
            overrides = _as_mapping(_get(hostvars, host, "sglang_service_server_overrides"), host,
                                    "sglang_service_server_overrides")
            profile = _as_mapping(_get(hostvars, host, "sglang_service_server_profile"), host,
                                  "sglang_service_server_profile")
            if overrides.get("port") not in (None, ""):
                port = _port(overrides["port"], host, "sglang_service_server_overrides.port")
            elif profile.get("port") not in (None, ""):
                port = _port(profile["port"], host, "sglang_service_server_profile.port")
            else:
                # the role passes the service's base port; bare, the port SGLang itself defaults to (its schema)
                port = _port(endpoint.default_port() if default_port is None else default_port, host,
                             "the default worker port")
            bind = str(overrides.get("host") or profile.get("host") or "")
            address = str(_get(hostvars, host, "sglang_service_advertise_address", "")
                          or _get(hostvars, host, "ansible_host", "") or host)
            out.append({"host": host, "url": f"http://{_netloc(address)}:{port}", "address": address,
                        "port": port, "bind": bind, "node_group": node_group})
    return out


def router_worker_urls(groups, hostvars, worker_groups=("nvlink", "pcie"), exclude_groups=("router",),
                       default_port=None):
    return [w["url"] for w in router_workers(groups, hostvars, worker_groups, exclude_groups, default_port)]


def router_worker_map(groups, hostvars, worker_groups=("nvlink", "pcie"), exclude_groups=("router",),
                      default_port=None):
    return {w["host"]: w["url"] for w in router_workers(groups, hostvars, worker_groups, exclude_groups, default_port)}


def router_worker_problems(workers):
    """Workers the router cannot reach as configured: one bound to loopback, one whose URL names loopback."""
    out = []
    for w in workers:
        if w["bind"] and _is_loopback(w["bind"]):
            out.append(f"{w['host']}: SGLang binds {w['bind']} (sglang_service_server host), unreachable from a router")
        elif _is_loopback(w["address"]):
            out.append(f"{w['host']}: its address {w['address']} is loopback (set sglang_service_advertise_address)")
    return out


def _worker_key(hostvars, host: str):
    """The worker's key as the inventory gives it: sglang_service_api_key, else vault_sglang_service_api_key (the
    service role's default); None when the inventory holds neither."""
    key = _get(hostvars, host, "sglang_service_api_key")
    if key is None:
        key = _get(hostvars, host, "vault_sglang_service_api_key")
    return None if key is None else str(key)


def router_worker_keys_unknown(workers, hostvars):
    """Hosts of `workers` whose key the inventory does not hold (their key cannot be judged on the controller)."""
    return [w["host"] for w in workers if _worker_key(hostvars, w["host"]) is None]


def router_worker_key_problems(workers, hostvars, router_key):
    """smg's --api-key is both the key clients must send and the key it sends to every worker it registers, so a
    worker with a key of its own is reachable only when that key is the router's. A worker without a key accepts
    any. A worker's key is its sglang_service_api_key, else its vault_sglang_service_api_key (the service role's
    default); one with neither in the inventory is not judged. Returns one line per mismatch (never a key)."""
    router_key = str(router_key or "")
    out = []
    for w in workers:
        key = _worker_key(hostvars, w["host"]) or ""
        if key and not router_key:
            out.append(f"{w['host']}: the worker has an API key and the router none (the router would be refused: 401)")
        elif key and key != router_key:
            out.append(f"{w['host']}: its sglang_service_api_key differs from the router's key (smg sends its own "
                       f"--api-key to every worker)")
    return out


FLAG_RE = r"^[a-z0-9][a-z0-9_-]*$"
SECRET_FLAGS = ("api-key", "tenant-api-key", "control-plane-api-keys")


def router_argv(flags, extra_args=None):
    """`smg launch` argv from {flag: value} (underscores or dashes, no leading dashes), flags first, then extra_args
    (an extra flag replaces a flag of the same name): True = bare flag, False/None = left out, a list = the flag
    then each item (nargs flags such as --worker-urls), anything else = the flag and its value. Key flags are
    refused: the key reaches smg through the launcher, never an argv (README)."""
    merged = {}
    for source in (flags or {}), (extra_args or {}):
        if not isinstance(source, Mapping):
            raise AnsibleFilterError(f"router_argv: flags must be a mapping, got {type(source).__name__}")
        for key, value in source.items():
            name = str(key).lstrip("-").replace("_", "-")
            if not re.match(FLAG_RE, name):
                raise AnsibleFilterError(f"router_argv: {key!r} is not a flag name")
            if name in SECRET_FLAGS:
                raise AnsibleFilterError(f"router_argv: --{name} is refused in the argv (world-readable in "
                                         f"/proc/<pid>/cmdline): set sglang_router_api_key, the launcher passes it")
            merged.pop(name, None)
            merged[name] = value
    argv = ["launch"]
    for name, value in merged.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [f"--{name}"] + [str(v) for v in value]
        elif isinstance(value, Mapping):
            raise AnsibleFilterError(f"router_argv: --{name}: a mapping is not a flag value")
        else:
            argv += [f"--{name}", str(value)]
    return argv


def router_worker_count(metrics_text, url):
    """Requests the router dispatched to `url` (smg_worker_requests_total{worker=url}, summed over models), read from
    the router's Prometheus text by module_utils/router/client.parse_worker_requests; 0.0 when never dispatched."""
    return router_client.parse_worker_requests(str(metrics_text or "")).get(router_client.norm_url(str(url or "")), 0.0)


class FilterModule:
    def filters(self):
        return {"router_workers": router_workers, "router_worker_urls": router_worker_urls,
                "router_worker_map": router_worker_map, "router_worker_problems": router_worker_problems,
                "router_worker_key_problems": router_worker_key_problems,
                "router_worker_keys_unknown": router_worker_keys_unknown, "router_argv": router_argv,
                "router_worker_count": router_worker_count}
