"""Filters for the LAN fan-out of roles/models (models_source: peers): the order of the hosts and their peer URLs.

The tree itself (who feeds whom) is module_utils/fanout/sources.py's, loaded by path (filters run on the controller,
outside ansible.module_utils), so the plan printed here is the one the receivers follow.

    play_hosts | fanout_order(seeder)                  -> [seeder, the other hosts in play order]
    order | fanout_peers(hostvars, port)               -> [{"name", "url": "http://<models_peer_address>:<port>"}, ...]
    order | fanout_parents(fanout)                     -> {host: parent or None}
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

from ansible.errors import AnsibleFilterError

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.fanout import sources  # noqa: E402


def fanout_order(play_hosts, seeder=""):
    hosts = list(play_hosts)
    if not hosts:
        raise AnsibleFilterError("fanout_order: the play has no host")
    seeder = seeder or hosts[0]
    if seeder not in hosts:
        raise AnsibleFilterError(f"fanout_order: the seeder {seeder!r} is not a host of this play ({', '.join(hosts)})")
    return [seeder] + [h for h in hosts if h != seeder]


def fanout_peers(order, hostvars, port):
    out = []
    for host in order:
        address = str(hostvars[host].get("models_peer_address") or "")
        try:
            ip = ipaddress.ip_address(address)
        except ValueError as err:
            raise AnsibleFilterError(f"fanout_peers: {host}: models_peer_address {address!r} is not an IP address") from err
        netloc = f"[{ip}]" if ip.version == 6 else str(ip)
        out.append({"name": host, "url": f"http://{netloc}:{int(port)}"})
    return out


def fanout_parents(order, fanout):
    fanout = int(fanout)
    if fanout < 1:
        raise AnsibleFilterError(f"fanout_parents: fan-out must be >= 1, got {fanout}")
    parent_index = sources.parent_index
    return {h: (None if parent_index(i, fanout) is None else order[parent_index(i, fanout)]) for i, h in enumerate(order)}


class FilterModule:
    def filters(self):
        return {"fanout_order": fanout_order, "fanout_peers": fanout_peers, "fanout_parents": fanout_parents}
