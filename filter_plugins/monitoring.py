"""Filters for the monitoring role (roles/monitoring): the alert rules rendered from the inventory and checked by
promtool, on the controller (module_utils/monitoring/rules.py, promtool.py).

    groups | monitoring_rules(workers, proposal, settings)  -> {"text", "notes", "floors"}   (the role's template)
    text | monitoring_rules_check                          -> promtool's output; fails with it on a bad file
    serving | monitoring_targets(workers, routers, addresses, monitoring_host, node_port, settings)
                                                           -> scrape jobs and rule workers (monitoring/targets.py)
    serving | monitoring_inventory_groups(speculative, gpu_daemons) -> {group: {speculative, nvswitch}}
    floors | monitoring_dashboard(settings)                -> the Grafana dashboard (monitoring/dashboard.py)
    dashboard | monitoring_dashboard_queries(rate)         -> [{"title", "expr"}]: each panel query, variables filled
    dashboard | monitoring_dashboard_check                 -> promtool's output on every query; fails on a bad one
"""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleFilterError

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.monitoring import dashboard, promtool, rules, targets  # noqa: E402

TEMPLATE = Path(__file__).resolve().parents[1] / "roles" / "monitoring" / "templates" / "rules.yml.j2"


def _plain(value):
    """Ansible's lazy containers and tagged strings as plain dicts, lists and strings."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def monitoring_rules(groups, workers=None, proposal=None, settings=None):
    try:
        return rules.render(TEMPLATE.read_text(encoding="utf-8"), _plain(groups), _plain(workers or []),
                            _plain(proposal) if proposal else None, _plain(settings or {}))
    except rules.MonitoringError as exc:
        raise AnsibleFilterError(f"monitoring_rules: {exc.message} (evidence: {exc.evidence})") from exc


def monitoring_rules_check(text):
    try:
        return promtool.check_rules(str(text))
    except rules.MonitoringError as exc:
        raise AnsibleFilterError(f"monitoring_rules_check: {exc.message}") from exc


def _guard(name, func, *args):
    try:
        return func(*args)
    except rules.MonitoringError as exc:
        raise AnsibleFilterError(f"{name}: {exc.message} (evidence: {exc.evidence})") from exc


def _get(hostvars, host, key, default=None):
    """hostvars[host][key], or default when the host or the variable is absent or undefined."""
    try:
        value = hostvars[host][key]
    except (KeyError, TypeError):
        return default
    return default if value is None or type(value).__name__.startswith("AnsibleUndefined") else value


def monitoring_targets(serving, workers, router_hosts, hostvars, monitoring_host, node_port, router_defaults=None,
                       settings=None):
    """The scrape jobs (targets.scrape_targets) with the addresses and the routers' metrics listeners read from
    hostvars: advertise address, else ansible_host, else the name; sglang_router_prometheus_host/port of each router
    host, else the router role's defaults (router_defaults: its defaults/main.yml, their one home)."""
    serving, defaults = _plain(serving), _plain(router_defaults or {})
    hosts = {h for hs in serving.values() for h in hs or ()} | set(router_hosts or ())
    addresses = {h: str(_get(hostvars, h, "sglang_service_advertise_address") or _get(hostvars, h, "ansible_host")
                        or h) for h in hosts}
    routers = [{"host": h,
                "bind": str(_get(hostvars, h, "sglang_router_prometheus_host",
                                 defaults.get("sglang_router_prometheus_host", "127.0.0.1"))),
                "port": _get(hostvars, h, "sglang_router_prometheus_port", defaults.get("sglang_router_prometheus_port"))}
               for h in router_hosts or ()]
    return _guard("monitoring_targets", targets.scrape_targets, serving, _plain(workers), routers, addresses,
                  str(monitoring_host), node_port, _plain(settings or {}))


def monitoring_inventory_groups(serving, speculative, gpu_daemons):
    return targets.inventory_groups(_plain(serving), _plain(speculative), _plain(gpu_daemons))


def monitoring_dashboard(floors, settings=None):
    return dashboard.build(_plain(floors or {}), _plain(settings or {}))


def monitoring_dashboard_queries(board, rate="1m"):
    return [{"title": t, "expr": e} for t, e in dashboard.queries(_plain(board), rate)]


def monitoring_dashboard_check(board):
    return _guard("monitoring_dashboard_check", promtool.check_rules, dashboard.check_rules_text(_plain(board)))


class FilterModule:
    def filters(self):
        return {"monitoring_rules": monitoring_rules, "monitoring_rules_check": monitoring_rules_check,
                "monitoring_targets": monitoring_targets, "monitoring_inventory_groups": monitoring_inventory_groups,
                "monitoring_dashboard": monitoring_dashboard,
                "monitoring_dashboard_queries": monitoring_dashboard_queries,
                "monitoring_dashboard_check": monitoring_dashboard_check}
