#!/usr/bin/python
"""Ansible module: check an offline wheelhouse on the host against the flavour's lock (read-only, before any change)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_wheelhouse
short_description: Check that a host's wheelhouse holds the lock's wheels, with the lock's bytes
description:
  - Reads the wheel files of I(path) on the host (module_utils/venv/wheelhouse.py) and, for every line of the lock
    whose environment marker applies to the host's I(python) (evaluated with that interpreter's own values), requires
    a wheel of that C(name==version) whose sha256 is one of the line's hashes.
  - Fails naming every missing package and every wheel with other bytes, and a missing directory. Reads files only;
    never changes anything (check mode runs the same check).
options:
  path: {description: The wheelhouse directory on the host (absolute)., type: path, required: true}
  lock: {description: "The flavour's full lock, as text (the controller's file).", type: str, required: true}
  python: {description: The host interpreter the venv is made with (its values decide which markers apply)., type: path, default: /usr/bin/python3}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: The wheelhouse holds the flavour's wheels
  venv_wheelhouse:
    path: /srv/wheelhouse
    lock: "{{ lookup('ansible.builtin.file', venv_lock_file) }}"
    python: /usr/bin/python3
"""

RETURN = r"""
wheels: {description: Wheel files in the directory., type: int, returned: success}
needed: {description: Lock lines that apply to the host (each has its wheel)., type: int, returned: success}
skipped: {description: "Lock lines whose marker does not apply to the host (name==version ; marker).", type: list, returned: success}
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.lock import LockError, parse
from ansible.module_utils.venv.wheelhouse import MARKER_ENV_CODE, check


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            lock=dict(type="str", required=True),
            python=dict(type="path", default="/usr/bin/python3"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        lock = parse(p["lock"], "lock")
        rc, out, err = module.run_command([p["python"], "-I", "-c", MARKER_ENV_CODE])
        if rc != 0:
            raise BuildError(f"{p['python']} does not run: {(err or out).strip()}")
        result = check(p["path"], lock, json.loads(out))
    except (BuildError, LockError, OSError, ValueError) as exc:
        module.fail_json(msg=f"venv wheelhouse: {exc}", path=p["path"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
