"""The monitoring role's scrape targets and rule inputs, from the inventory (filter monitoring_targets):

    scrape_targets(serving, workers, routers, addresses, monitoring_host, node_port, settings=None)
        -> {"jobs": {job: [{"targets": ["ADDR:PORT"], "labels": {"host", "group"}}, ...]},
            "workers": [{"host", "group", "url"}],      (the rules' "out of the router's healthy set", one each)
            "serving_hosts": [host, ...], "exporter_hosts": [host, ...]}

serving: {group: [host, ...]}: the monitored serving groups and ALL their hosts (every rank of a multi-node group);
    a host listed under several groups belongs to the first.
workers: the hosts that serve SGLang's HTTP API, as filter_plugins/router.py router_workers gives them ({host, url}):
    rank 0 only of a multi-node group (ranks >= 1 run no API: the rule lives there, not here).
routers: [{"host", "bind", "port"}]: each router host, its metrics listener's bind address and port
    (sglang_router_prometheus_host/port). A loopback bind can only be scraped from the router host itself.
addresses: {host: address}: how the monitoring host reaches each host (advertise address, else ansible_host).

Jobs (names from rules.py DEFAULTS, overridable by the rule settings, so rules and scrape config agree): the
workers' /metrics (SGLang 0.5.11 mounts it on the API port with --enable-metrics: srt/entrypoints/http_server.py
`if server_args.enable_metrics: add_prometheus_middleware(app)`, srt/utils/common.py add_prometheus_middleware; open
without the API key: srt/utils/auth.py decide_request_auth lets /health* and /metrics* through), the router's
listener, and each serving and router host's node exporter. Every target carries the labels host and group (the
serving group; "router" for a router host), which every alert names. No target at all is refused.
"""
from __future__ import annotations

import ipaddress

from ansible.module_utils.monitoring.rules import DEFAULTS, MonitoringError, _LABEL_SAFE

LOOPBACK = ("localhost", "127.0.0.1", "::1")
ROUTER_GROUP_LABEL = "router"


def _netloc(address, port):
    try:
        ip = ipaddress.ip_address(str(address).strip("[]"))
    except ValueError:
        return "%s:%d" % (address, int(port))
    return ("[%s]:%d" if ip.version == 6 else "%s:%d") % (ip, int(port))


def _loopback(address):
    if address in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(str(address).strip("[]")).is_loopback
    except ValueError:
        return False


def _port(value, what):
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if isinstance(value, bool) or not 1 <= port <= 65535:
        raise MonitoringError(f"{what}: {value!r} is not a TCP port (1-65535)", evidence={"field": what})
    return port


def _safe(value, what):
    if not isinstance(value, str) or not _LABEL_SAFE.match(value):
        raise MonitoringError(f"{what}: {value!r} is not a plain label value", evidence={"field": what})
    return value


def _target(netloc, host, group):
    return {"targets": [netloc], "labels": {"host": host, "group": group}}


def scrape_targets(serving, workers, routers, addresses, monitoring_host, node_port, settings=None):
    jobs = {k: DEFAULTS[k] for k in ("job_sglang", "job_router", "job_node")}
    jobs.update({k: v for k, v in (settings or {}).items() if k in jobs})
    node_port = _port(node_port, "node exporter port")
    group_of = {}
    for group, hosts in (serving or {}).items():
        for host in hosts or ():
            group_of.setdefault(_safe(host, "host"), _safe(group, "group"))
    if not group_of:
        raise MonitoringError(
            "a monitoring group with no targets: no host in the monitored serving groups %s" % sorted(serving or {}),
            kind="no_targets", evidence={"serving": {g: list(h or ()) for g, h in (serving or {}).items()}})

    def address(host):
        value = (addresses or {}).get(host) or host
        return _safe(str(value), f"{host}: address")

    out = {jobs["job_sglang"]: [], jobs["job_router"]: [], jobs["job_node"]: []}
    rule_workers = []
    for worker in workers or ():
        host, url = worker.get("host"), worker.get("url")
        if host not in group_of:
            continue  # the router's worker list may hold groups that are not monitored
        netloc = _safe(str(url), f"{host}: worker url").split("://", 1)[-1].rstrip("/")
        out[jobs["job_sglang"]].append(_target(netloc, host, group_of[host]))
        rule_workers.append({"host": host, "group": group_of[host], "url": url.rstrip("/")})
    router_hosts = []
    for router in routers or ():
        host = _safe(router.get("host"), "router host")
        port = _port(router.get("port"), f"{host}: router metrics port")
        bind = str(router.get("bind") or "")
        if _loopback(bind):
            if host != monitoring_host:
                raise MonitoringError(
                    f"the router on {host} serves its metrics on loopback ({bind}:{port}) and Prometheus runs on "
                    f"{monitoring_host}: set sglang_router_prometheus_host to an address {monitoring_host} reaches "
                    "(0.0.0.0), or put the monitoring group on the router host", kind="unreachable_target",
                    evidence={"router": host, "bind": bind, "monitoring_host": monitoring_host})
            netloc = _netloc("127.0.0.1", port)
        elif bind in ("0.0.0.0", "::", ""):
            netloc = _netloc(address(host), port)
        else:
            netloc = _netloc(bind, port)
        out[jobs["job_router"]].append(_target(netloc, host, ROUTER_GROUP_LABEL))
        router_hosts.append(host)
    for host, group in group_of.items():
        out[jobs["job_node"]].append(_target(_netloc(address(host), node_port), host, group))
    for host in router_hosts:
        if host not in group_of:
            out[jobs["job_node"]].append(_target(_netloc(address(host), node_port), host, ROUTER_GROUP_LABEL))
    return {"jobs": out, "workers": rule_workers, "serving_hosts": list(group_of),
            "exporter_hosts": list(group_of) + [h for h in router_hosts if h not in group_of]}


def inventory_groups(serving, speculative, gpu_daemons, fabric_manager_unit=DEFAULTS["fabric_manager_unit"]):
    """The rules' group inputs read from the inventory, {group: {"speculative", "nvswitch"}}: a group is speculative
    when its first host's speculative algorithm is not NONE, on NVSwitch when that host's service Requires= the
    fabric manager (sglang_service_gpu_daemons_require). speculative/gpu_daemons: {host: value} as the inventory
    gives them. Groups with no host are left out."""
    out = {}
    for group, hosts in (serving or {}).items():
        if not hosts:
            continue
        first = hosts[0]
        algorithm = str((speculative or {}).get(first) or "NONE").upper()
        out[group] = {"speculative": algorithm not in ("", "NONE"),
                      "nvswitch": fabric_manager_unit in list((gpu_daemons or {}).get(first) or ())}
    return out
