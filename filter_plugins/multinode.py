"""Filters for multi-node SGLang serving groups: the controller's side of the rank plan and of the cross-rank checks.

The logic is module_utils/multinode/'s (plan.py: the rank plan and its refusals; consistency.py: the cross-rank
comparison), under the one import name the modules use, so the plan the controller refuses or renders is the one the
modules and the unit test use.

    groups[g] | sglang_group_ranks(hostvars)               -> [{"name", "address"}] in inventory order (rank order)
    ranks | sglang_group_problems(port, tp, pp, http_port)  -> [] or [why the group cannot be planned]
    ranks | sglang_group_plan(port, tp, pp)                 -> {host: {"node_rank", "nnodes", "dist_init_addr"}}
    {rank: facts} | sglang_group_consistency(allow_missing) -> [{"key", "values", "detail"}] (driver, CUDA, venv hash)
    address | sglang_rank_url(port)                         -> http://address:port ([v6]:port for IPv6)

A rank's address is its `sglang_service_advertise_address` when the inventory sets one, else its `ansible_host`, else
its inventory name: the address the other ranks (and rank 0's readiness check) reach it at.
"""
from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleFilterError

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.multinode import consistency, plan  # noqa: E402


def _hostvar(hostvars, host: str, key: str):
    try:
        value = hostvars[host].get(key)
    except KeyError:
        return None
    return value


def sglang_group_ranks(hosts, hostvars) -> list[dict]:
    """[{"name", "address"}] of a serving group's hosts, in the given (inventory) order."""
    if isinstance(hosts, str) or hosts is None:
        raise AnsibleFilterError(f"sglang_group_ranks: expected a list of hosts, got {hosts!r}")
    out = []
    for host in hosts:
        address = (_hostvar(hostvars, host, "sglang_service_advertise_address")
                   or _hostvar(hostvars, host, "ansible_host") or host)
        out.append({"name": str(host), "address": str(address).strip()})
    return out


def sglang_group_problems(ranks, dist_init_port, tp=1, pp=1, http_port=None) -> list[str]:
    """Why these ranks cannot form a group (an empty or duplicated group, tp*pp not divisible by the number of nodes,
    a bad port, the dist-init port equal to the server's --port): [] when they can."""
    return plan.plan_problems(ranks, dist_init_port, 1 if tp in (None, "") else tp, 1 if pp in (None, "") else pp,
                              http_port)


def sglang_group_plan(ranks, dist_init_port, tp=1, pp=1) -> dict:
    """{host: {"node_rank", "nnodes", "dist_init_addr"}}: the server config keys of each rank."""
    try:
        return plan.group_plan(ranks, dist_init_port, 1 if tp in (None, "") else tp, 1 if pp in (None, "") else pp)
    except plan.MultinodeError as exc:
        raise AnsibleFilterError(f"sglang_group_plan: {exc.message}") from None


def sglang_group_consistency(facts_by_rank, allow_missing=False) -> list[dict]:
    """Driver / CUDA / venv-hash differences across ranks ({rank: {driver, cuda, venv_hash}}, rank order kept).
    allow_missing (check mode on hosts not built yet): a rank lacking a fact is left out of that fact's comparison."""
    if not isinstance(facts_by_rank, dict):
        raise AnsibleFilterError(f"sglang_group_consistency: expected {{rank: facts}}, "
                                 f"got {type(facts_by_rank).__name__}")
    facts = {str(rank): dict(value or {}) for rank, value in facts_by_rank.items()}
    if not allow_missing:
        return consistency.consistency(facts)
    out = []
    for key in consistency.RANK_FACT_KEYS:
        present = {rank: f for rank, f in facts.items() if str(f.get(key) or "").strip()}
        out += consistency.consistency(present, keys=(key,)) if present else []
    return out


def sglang_rank_url(address, port) -> str:
    try:
        return "http://" + plan.host_port(str(address), int(port))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sglang_rank_url: {address!r}:{port!r}: {exc}") from None


class FilterModule:
    def filters(self):
        return {
            "sglang_group_ranks": sglang_group_ranks,
            "sglang_group_problems": sglang_group_problems,
            "sglang_group_plan": sglang_group_plan,
            "sglang_group_consistency": sglang_group_consistency,
            "sglang_rank_url": sglang_rank_url,
        }
