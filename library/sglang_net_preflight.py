#!/usr/bin/python
"""Ansible module: a multi-node SGLang group's network preflight on one rank (route, socket env, dist-init port)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_net_preflight
short_description: Check, before any restart, that a rank reaches rank 0's dist-init port and which interface to use
description:
  - Runs on every rank of a multi-node group (all ranks in the same task, so they run together).
  - "Finds the interface that routes to rank 0 (C(ip route get <rank0_address>); on rank 0 itself the route is
    C(local ... dev lo), so it is the interface carrying rank 0's address, from C(ip -o addr show)), this host's
    address on it, and the environment that pins NCCL's and Gloo's sockets to it (C(NCCL_SOCKET_IFNAME==<if>),
    C(GLOO_SOCKET_IFNAME=<if>)); a service I(environment) that sets either to another interface fails."
  - "Rank 0 (I(listen=true)) binds I(rank0_address):I(dist_init_port) for at most I(listen_seconds) and answers each
    connection with a one-line handshake, returning as soon as every I(expected_peers) name acknowledged it. A port
    already held (the running server, expected before a restart) is reported as I(reach=in_use) with its holders,
    not as a failure: the other ranks' TCP connect to that listener is then the reachability check."
  - "Other ranks connect (at most I(connect_attempts) tries) and read the handshake; they send nothing unless it is
    this run's, so a running server's listener only sees a connect (I(reach=connected))."
  - Returns this host's own I(facts) (NVIDIA driver, CUDA toolkit version, venv content hash) for the controller to
    compare across ranks; with I(rank_facts) (driver, CUDA, venv hash per rank, from the controller) it fails on any
    mismatch itself, naming the ranks.
  - Check mode runs the read-only parts (route, environment, facts, who holds the port); the listener and the
    connects do not run (I(reach=skipped)).
  - Every problem found is reported together, after the port check, so one run shows all of them.
options:
  rank0_address:
    description: "rank 0's address (the host of C(--dist-init-addr)); a name is resolved on this host."
    type: str
    required: true
  dist_init_port:
    description: "the port of C(--dist-init-addr)."
    type: int
    required: true
  listen:
    description: "true on rank 0: listen instead of connecting."
    type: bool
    default: false
  listen_seconds:
    description: "most seconds rank 0 listens (0 < x <= 600); it stops earlier once every expected peer answered."
    type: float
    default: 30
  expected_peers:
    description: "on rank 0: names (their I(name)) of the ranks that must complete the handshake."
    type: list
    elements: str
    default: []
  name:
    description: "how this host names itself in the handshake (default: its host name); use inventory_hostname."
    type: str
    default: ""
  token:
    description: "a per-run string both sides must agree on (so an old or foreign listener is never taken for it)."
    type: str
    default: ""
  connect_attempts:
    description: "connect tries on ranks >= 1."
    type: int
    default: 40
  retry_interval:
    description: "seconds between connect tries."
    type: float
    default: 0.5
  connect_timeout:
    description: "seconds allowed for one connect and for reading the handshake."
    type: float
    default: 2.0
  environment:
    description: "the service's environment; its C(NCCL_SOCKET_IFNAME) / C(GLOO_SOCKET_IFNAME), when set, must select
      the interface found."
    type: dict
    default: {}
  rank_facts:
    description: "C({rank: {driver, cuda, venv_hash}}) for every rank; any difference fails."
    type: dict
    default: {}
  cuda_home:
    description: "the CUDA toolkit whose C(version.json) (or C(version.txt)) names this host's CUDA version (I(facts))."
    type: str
    default: ""
  venv_digest_path:
    description: "the venv's content hash file (written by the venv role at every swap) read into I(facts)."
    type: str
    default: ""
  gpus_expected:
    description: "false on a host that declares no GPU (the lab): a missing driver and toolkit read C(none), not empty."
    type: bool
    default: true
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Network preflight of the group before any restart (every rank in one task)
  sglang_net_preflight:
    rank0_address: "{{ hostvars[sglang_group_hosts[0]].ansible_host }}"
    dist_init_port: 5000
    listen: "{{ inventory_hostname == sglang_group_hosts[0] }}"
    expected_peers: "{{ sglang_group_hosts[1:] if inventory_hostname == sglang_group_hosts[0] else [] }}"
    name: "{{ inventory_hostname }}"
    token: "{{ sglang_run_id }}"
    environment: "{{ sglang_service_environment }}"
    rank_facts: >-
      {{ dict(sglang_group_hosts | zip(sglang_group_hosts | map('extract', hostvars, 'sglang_rank_facts'))) }}
  register: net
- name: Pin NCCL and Gloo to that interface in the unit
  ansible.builtin.set_fact:
    sglang_service_environment: "{{ sglang_service_environment | combine(net.socket_env) }}"
"""

RETURN = r"""
interface: {description: the interface that routes to rank 0 (on rank 0 the one carrying its address)., type: str,
            returned: always}
address: {description: this host's address on that interface., type: str, returned: always}
rank0_address: {description: rank 0's address as resolved here., type: str, returned: always}
via: {description: the gateway on the way to rank 0 (empty when directly connected)., type: str, returned: always}
route: {description: the C(ip route get) line., type: str, returned: always}
socket_env: {description: "C({NCCL_SOCKET_IFNAME: =<if>, GLOO_SOCKET_IFNAME: <if>}).", type: dict, returned: always}
reach: {description: "listened or in_use (rank 0), handshake or connected (other ranks), skipped (check mode).",
        type: str, returned: always}
port_in_use: {description: "rank 0: whether something listened on the port before the check (null elsewhere).",
              type: bool, returned: always}
port_holders: {description: "rank 0: pid and comm of the processes listening on the port.", type: list,
               returned: always}
peers: {description: "rank 0: the ranks that completed the handshake (name, address).", type: list, returned: always}
missing_peers: {description: "rank 0: expected peers that did not.", type: list, returned: always}
attempts: {description: connect attempts used (other ranks)., type: int, returned: always}
seconds: {description: seconds spent listening or connecting., type: float, returned: always}
mismatches: {description: "rank_facts differences: key, values per rank, detail.", type: list, returned: always}
facts: {description: "this host's {driver, cuda, venv_hash} (empty string = not found).", type: dict,
        returned: always}
problems: {description: every problem found (empty on success)., type: list, returned: always}
"""

import socket

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.multinode.consistency import consistency, rank_facts
from ansible.module_utils.multinode.network import (connect, listen, port_state, route_to, socket_env,
                                                    socket_ifname_problems)
from ansible.module_utils.multinode.plan import MultinodeError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rank0_address=dict(type="str", required=True),
            dist_init_port=dict(type="int", required=True),
            listen=dict(type="bool", default=False),
            listen_seconds=dict(type="float", default=30),
            expected_peers=dict(type="list", elements="str", default=[]),
            name=dict(type="str", default=""),
            token=dict(type="str", default=""),
            connect_attempts=dict(type="int", default=40),
            retry_interval=dict(type="float", default=0.5),
            connect_timeout=dict(type="float", default=2.0),
            environment=dict(type="dict", default={}),
            rank_facts=dict(type="dict", default={}),
            cuda_home=dict(type="str", default=""),
            venv_digest_path=dict(type="str", default=""),
            gpus_expected=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, interface="", address="", rank0_address=p["rank0_address"], via="", route="",
                  socket_env={}, reach="skipped", port_in_use=None, port_holders=[], peers=[], missing_peers=[],
                  attempts=0, seconds=0.0, mismatches=[], problems=[],
                  facts=rank_facts(p["cuda_home"], p["venv_digest_path"], p["gpus_expected"]))
    if not 1 <= p["dist_init_port"] <= 65535:
        module.fail_json(msg=f"dist_init_port={p['dist_init_port']} is out of range 1..65535", **result)
    if not 0 < p["listen_seconds"] <= 600 or p["connect_attempts"] < 1 or p["retry_interval"] < 0 \
            or p["connect_timeout"] <= 0:
        module.fail_json(msg="listen_seconds must be in (0, 600], connect_attempts >= 1, retry_interval >= 0, "
                             "connect_timeout > 0", **result)
    if any(not str(w).strip() or any(c.isspace() for c in str(w)) for w in [p["token"], p["name"]] if w):
        module.fail_json(msg="token and name must be single words", **result)
    name = p["name"] or socket.gethostname()
    try:
        route = route_to(p["rank0_address"], ip=module.get_bin_path("ip", opt_dirs=["/usr/sbin", "/sbin"]) or "ip")
    except MultinodeError as exc:
        module.fail_json(msg=f"no route to rank 0 ({p['rank0_address']}): {exc.message}", **result)
    result.update(interface=route["interface"], address=route["src"], rank0_address=route["address"],
                  via=route["via"], route=route["route"], socket_env=socket_env(route["interface"]))
    problems = list(socket_ifname_problems(p["environment"], route["interface"]))
    result["mismatches"] = consistency(p["rank_facts"]) if p["rank_facts"] else []
    problems += [m["detail"] for m in result["mismatches"]]
    port = p["dist_init_port"]
    if p["listen"]:
        if route["route_type"] != "local":
            problems.append(f"listen=true but {route['address']} is not an address of this host (route: "
                            f"{route['route']}): this host is not rank 0")
        else:
            held = port_state(port)
            result.update(port_in_use=held["in_use"], port_holders=held["holders"])
    if not module.check_mode and not (p["listen"] and route["route_type"] != "local"):
        try:
            if p["listen"]:
                out = listen(route["address"], port, p["listen_seconds"], token=p["token"], name=name,
                             expected_peers=p["expected_peers"], ack_timeout=p["connect_timeout"])
                result.update(reach=out["state"], peers=out["peers"], missing_peers=out["missing"],
                              seconds=out["seconds"])
                if out["state"] == "in_use":
                    result.update(port_in_use=True, port_holders=out["holders"] or result["port_holders"],
                                  missing_peers=[])
                elif out["missing"]:
                    problems.append(f"ranks {out['missing']} did not reach {route['address']}:{port} within "
                                    f"{p['listen_seconds']:g}s (reached: {[x['name'] for x in out['peers']]})")
            else:
                out = connect(route["address"], port, token=p["token"], name=name, attempts=p["connect_attempts"],
                              interval=p["retry_interval"], timeout=p["connect_timeout"],
                              read_timeout=p["connect_timeout"])
                result.update(reach=out["reach"], attempts=out["attempts"], seconds=out["seconds"])
        except MultinodeError as exc:
            result.update(attempts=exc.evidence.get("attempts", 0))
            problems.append(exc.message)
    result["problems"] = problems
    if problems:
        module.fail_json(msg=f"network preflight for rank 0 {route['address']}:{port} via {route['interface']} "
                             f"failed (nothing was restarted): " + "; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
