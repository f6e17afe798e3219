#!/usr/bin/python
"""Ansible module: stop and disable the units of a hand-made deployment the operator hands over, recorded for undo."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_takeover
short_description: Stop and disable the named units (bounded), recording what was done so it can be undone
description:
  - Logic in C(module_utils/sglang/takeover.py). Before changing anything, appends to I(record_path) (JSON, root
    only) each unit's state, unit file path and text, user and ExecStart; then stops each running unit (SIGTERM, then
    SIGKILL after I(timeout) seconds; fails with its state and journal tail if it still lives) and disables each
    enabled one. C(playbooks/takeover_revert.yml) reads the record to put them back.
  - Units already inactive and disabled are left alone (a rerun changes nothing). Check mode reports what would be
    stopped and disabled.
options:
  units:
    description: the units to take over (full names, e.g. sglang-k26-ddtree.service).
    type: list
    elements: str
    required: true
  record_path:
    description: the JSON record of takeovers on the host.
    type: path
    default: /var/lib/sglang-takeover/record.json
  timeout:
    description: seconds a unit gets to stop after SIGTERM before SIGKILL.
    type: float
    default: 60
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Take over the hand-made units
  sglang_takeover:
    units: [sglang-k26-ddtree.service]
    timeout: 120
"""

RETURN = r"""
units: {description: "each unit acted on: unit, active_state, unit_file_state, main_pid, user, exec_start, fragment_path, stopped, disabled (in check mode: stop, disable).", type: list, returned: always}
record_path: {description: the record's path., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.sglang import takeover


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", required=True),
            record_path=dict(type="path", default="/var/lib/sglang-takeover/record.json"),
            timeout=dict(type="float", default=60.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be > 0 (got {p['timeout']})")
    bad = [u for u in p["units"] if not u.endswith(".service") or "/" in u]
    if bad:
        module.fail_json(msg=f"units must be full service unit names (x.service): {bad}")
    try:
        if module.check_mode:
            todo = [u for u in takeover.plan(p["units"]) if u["stop"] or u["disable"]]
            module.exit_json(changed=bool(todo), units=todo, record_path=p["record_path"],
                             msg="check mode: would stop %s, disable %s" % (
                                 [u["unit"] for u in todo if u["stop"]], [u["unit"] for u in todo if u["disable"]]))
        result = takeover.take_over(p["units"], p["record_path"], timeout=p["timeout"])
    except EvidenceError as exc:
        module.fail_json(**exc.fail_kwargs())
    units = [{k: v for k, v in u.items() if k != "unit_file"} for u in result["units"]]
    module.exit_json(changed=result["changed"], units=units, record_path=result["record_path"],
                     msg="stopped %s, disabled %s; recorded in %s" % (
                         [u["unit"] for u in units if u["stopped"]], [u["unit"] for u in units if u["disabled"]],
                         result["record_path"]) if units else "nothing to take over: the units are stopped and disabled")


if __name__ == "__main__":
    main()
