#!/usr/bin/python
"""Ansible module: the byte-code of the live venv (check it as importlib does, or complete it in place)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_bytecode
short_description: Check or complete the byte-code of a venv so that importing compiles nothing
description:
  - Runs module_utils/venv/bytecode.py with the venv's own interpreter (its magic number and cache tag) over the
    venv's purelib and platlib.
  - C(state=checked) - every C(*.py) there must have a pyc that importlib accepts without recompiling (magic number,
    flags, then the source hash of a checked-hash pyc, or the source mtime and size of a timestamp pyc), readable by
    other users (the service user). Fails with the count of stale and missing pycs and the first files named. A
    source without pyc that does not even compile (a syntax error; no import can use it) is reported, not counted.
    Never changes anything.
  - C(state=compiled) - the same check; when something is stale or missing, compiles those modules in place as
    checked-hash pycs (written atomically, mode 0644), then checks again. A venv swapped in by venv_commit was compiled
    in its stage already, so this changes nothing then; it completes a venv built before byte-code was compiled, or
    whose pycs were removed. Check mode reports what it would compile.
  - Byte-code is outside the manifest and the content hash (it is derived from the sources).
options:
  path: {description: Absolute venv path., type: path, required: true}
  state: {description: "checked (verify only) or compiled (complete what is stale or missing).", type: str, choices: [checked, compiled], default: checked}
  workers: {description: Compile processes (0 = one per CPU)., type: int, default: 0}
  timeout: {description: Seconds allowed for each pass of the venv's interpreter., type: int, default: 1800}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Every module of the live venv has valid byte-code
  venv_bytecode:
    path: /opt/sglang/venv
    state: checked

- name: Compile what is stale or missing in the live venv
  venv_bytecode:
    path: /opt/sglang/venv
    state: compiled
"""

RETURN = r"""
sources: {description: Python source files under purelib/platlib., type: int, returned: success}
valid: {description: Sources whose pyc importlib accepts without recompiling (after compiling for state=compiled)., type: int, returned: success}
invalid: {description: Stale plus missing pycs (0 on success of state=checked; before compiling for state=compiled)., type: int, returned: success}
stale: {description: "First stale pycs: path and why (source hash, mtime, size, magic, flags, mode).", type: list, returned: success}
missing: {description: First sources without pyc., type: list, returned: success}
uncompilable: {description: First sources that do not compile (syntax errors; they cannot be imported at all)., type: list, returned: success}
modes: {description: "Valid pycs per invalidation mode (checked-hash, timestamp, unchecked-hash).", type: dict, returned: success}
compiled: {description: "state=compiled: the compile pass (compiled, kept, uncompilable_count, ...); {} when nothing was needed.", type: dict, returned: success}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.bytecode import BytecodeError, describe_invalid, ensure, run

KEYS = ("dirs", "sources", "valid", "invalid", "stale_count", "missing_count", "uncompilable_count", "stale", "missing",
        "uncompilable", "modes", "python", "cache_tag")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["checked", "compiled"], default="checked"),
            workers=dict(type="int", default=0),
            timeout=dict(type="int", default=1800),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isfile(os.path.join(p["path"], "pyvenv.cfg")):
        if module.check_mode and p["state"] == "compiled":  # a first run in check mode: the venv would be made
            module.exit_json(changed=True, msg=f"check mode: no venv at {p['path']} yet", compiled={})
        module.fail_json(msg=f"venv bytecode: no venv at {p['path']}", path=p["path"])
    try:
        if p["state"] == "checked":
            result = run(p["path"], "check", timeout=p["timeout"])
            facts = {k: result.get(k) for k in KEYS}
            if result["invalid"]:
                module.fail_json(msg=f"venv bytecode: {result['invalid']} of {result['sources']} module(s) in "
                                     f"{p['path']} have no valid byte-code ({result['stale_count']} stale, "
                                     f"{result['missing_count']} missing): every start would compile them: "
                                     f"{describe_invalid(result)}", **facts)
            module.exit_json(changed=False, compiled={}, **facts)
        done = ensure(p["path"], check_mode=module.check_mode, workers=p["workers"], timeout=p["timeout"])
    except BytecodeError as exc:
        module.fail_json(msg=f"venv bytecode: {exc}", path=p["path"])
    facts = {k: (done["after"] or done["before"]).get(k) for k in KEYS}
    facts["invalid"] = done["before"]["invalid"]
    module.exit_json(changed=done["changed"], compiled=done["compiled"], **facts)


if __name__ == "__main__":
    main()
