#!/usr/bin/python
"""Ansible module: which GPU daemons this host has (systemd units), and a refusal when a required one has failed."""
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_daemons
short_description: Read the GPU daemons' systemd states; refuse a failed one that the service requires
description:
  - "Reads every unit of I(units) with one C(systemctl show) (module_utils/systemd/unit.py: one KEY=VALUE block per
    unit, so each state stays with its unit) and returns which are present (C(LoadState=loaded)) and which of those
    I(require) names."
  - "Fails, before anything is changed, when a present unit that I(require) names is in C(ActiveState=failed), with
    its LoadState, ActiveState, SubState, exit and its journal's last lines."
  - A present unit that is not required and has failed is returned in C(failed_daemons) with a warning, not refused.
  - Reads only, so it also runs in check mode.
options:
  units:
    description: "GPU daemons to read (e.g. nvidia-persistenced.service, nvidia-fabricmanager.service)."
    type: list
    elements: str
    required: true
  require:
    description: "Of I(units), the ones the service cannot run without (its unit's Requires=) where present."
    type: list
    elements: str
    default: []
  journal_lines:
    description: "journal lines of a failed required daemon that the failure carries."
    type: int
    default: 20
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Which GPU daemons this host has
  gpu_daemons:
    units: [nvidia-persistenced.service, nvidia-fabricmanager.service]
    require: [nvidia-fabricmanager.service]
  register: daemons
"""

RETURN = r"""
present: {description: "units systemd has loaded (installed), in the order of I(units).", type: list, returned: always}
required: {description: "present units that I(require) names (the service's Requires=).", type: list, returned: always}
failed_daemons: {description: "present units in ActiveState failed (a required one fails the module).", type: list,
                 returned: always}
states: {description: "{unit: {load_state, active_state, sub_state}} as systemctl showed them.", type: dict,
         returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.daemons import GpuDaemonError, read
from ansible.module_utils.systemd.unit import SystemdError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", required=True),
            require=dict(type="list", elements="str", default=[]),
            journal_lines=dict(type="int", default=20),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read(p["units"], p["require"], journal_lines=p["journal_lines"])
    except ValueError as exc:
        module.fail_json(msg=f"{exc} (nothing was changed)")
    except (GpuDaemonError, SystemdError) as exc:
        kw = exc.fail_kwargs()
        kw["msg"] = f"{kw['msg']} (nothing was changed)"
        module.fail_json(**kw)
    for unit in result["failed_daemons"]:
        if unit not in result["required"]:
            module.warn(f"{unit} is installed but failed (ActiveState=failed); the service does not require it here "
                        "and is only ordered after it")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
