#!/usr/bin/python
"""Ansible module: find what already serves on this host besides our own SGLang service, and refuse with evidence."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_existing
short_description: Find another SGLang deployment on the host (units, port listeners, GPU processes) and refuse it
description:
  - Reads, and changes nothing (check mode is the same read). Logic in C(module_utils/sglang/existing.py).
  - Finds systemd units other than ours whose ExecStart launches SGLang (C(python -m sglang.launch_server), the
    C(sglang) CLI, the lab's stand-in) or whose name is C(sglang*.service); processes listening on I(port); processes
    holding GPU memory (C(nvidia-smi --query-compute-apps); a host without nvidia-smi is reported as not checked).
  - Fails, naming each unit (state, user, pid, ExecStart, unit file), each process (pid, unit, user, GPU memory,
    port) and the way out, when any of them is in the way and not named in I(takeover). A unit is in the way when it
    runs or is enabled; a process when it is not in one of I(own_units).
options:
  port:
    description: the port our service listens on (the service role's interface).
    type: int
    required: true
  own_units:
    description: our own units (fnmatch patterns); never foreign, nor their processes.
    type: list
    elements: str
    required: true
  takeover:
    description: foreign units (fnmatch patterns) the operator hands over; they are reported, not refused.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: the nvidia-smi to run (a name on PATH or a path).
    type: str
    default: nvidia-smi
  record_hint:
    description: where a takeover records what it did (named in the way out).
    type: str
    default: ""
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Nothing else serves here (or only what the operator hands over)
  sglang_existing:
    port: 30001
    own_units: [sglang.service, sglang-router.service]
    takeover: "{{ takeover_units }}"
  register: existing
"""

RETURN = r"""
units: {description: "the SGLang units found other than ours (unit, active_state, unit_file_state, main_pid, user, exec_start, fragment_path).", type: list, returned: always}
listeners: {description: "processes listening on I(port) (pid, unit, user, cmdline).", type: list, returned: always}
gpu: {description: "checked (bool), note, processes (pid, unit, user, used_memory_mib, percent, gpu_uuid).", type: dict, returned: always}
covered_units: {description: foreign units in the way that I(takeover) names (to stop and disable)., type: list, returned: always}
uncovered: {description: "what stands in the way: units, listeners, gpu_processes.", type: dict, returned: always}
msg: {description: the refusal with its evidence and the way out, or a one-line summary., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.sglang import existing


def main():
    module = AnsibleModule(
        argument_spec=dict(
            port=dict(type="int", required=True),
            own_units=dict(type="list", elements="str", required=True),
            takeover=dict(type="list", elements="str", default=[]),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            record_hint=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["port"] < 65536:
        module.fail_json(msg=f"port {p['port']} is out of range 1-65535")
    try:
        found = existing.find(p["port"], p["own_units"], p["nvidia_smi"])
    except EvidenceError as exc:
        module.fail_json(**exc.fail_kwargs())
    said = existing.verdict(found, p["own_units"], p["takeover"], p["record_hint"])
    result = dict(found, covered_units=said["covered_units"], uncovered=said["uncovered"])
    if said["message"]:
        module.fail_json(msg=said["message"], kind="foreign_deployment", **result)
    gpu = "GPU processes: %d" % len(found["gpu"]["processes"]) if found["gpu"]["checked"] else found["gpu"]["note"]
    summary = "no other deployment in the way on port %d; %s" % (p["port"], gpu)
    if said["covered_units"]:
        summary = "handed over: %s; %s" % (", ".join(said["covered_units"]), summary)
    module.exit_json(changed=False, msg=summary, **result)


if __name__ == "__main__":
    main()
