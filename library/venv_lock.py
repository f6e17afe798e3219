#!/usr/bin/python
"""Ansible module: check a flavour's full lock (on the controller, before any host changes)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_lock
short_description: Check that a venv flavour's lock is a full lock pip's hash-checking mode installs as it stands
description:
  - Parses the lock (module_utils/venv/lock.py) as pip reads a requirements file and fails naming the first line
    that is not one exact C(name==version) with C(--hash=sha256:<64 hex>) hashes (a range, a wildcard, a URL or path,
    a line without hashes, an include C(-r)/C(-c), an editable, an option other than C(--index-url),
    C(--extra-index-url), C(--find-links), a name locked twice for the same markers).
  - >-
    With I(input) - the lock's C(# input: <file> sha256=<hex>) header must be the input's current sha256 (the
    flavour's top-level pins changed and nobody re-ran roles/venv/files/locks/lock.sh otherwise).
  - With I(local_packages) - their C([build-system].requires) and C([project].dependencies) must be in the lock
    (they are installed after it with C(--no-deps --no-build-isolation)); requirements with markers are left to
    C(pip check) after the install.
  - Reads files only; never changes anything.
options:
  path: {description: The lock file., type: path, required: true}
  input: {description: "The flavour's top-level pins the lock was generated from; empty = not compared.", type: path, default: ""}
  local_packages: {description: Source trees installed after the lock., type: list, elements: path, default: []}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: The lab flavour's lock is full and fresh
  venv_lock:
    path: roles/venv/files/locks/lab.txt
    input: roles/venv/files/requirements/lab.txt
    local_packages: [lab/sglang_standin]
  delegate_to: localhost
"""

RETURN = r"""
packages: {description: Lock entries (a name locked for two marker sets counts twice)., type: int, returned: success}
names: {description: Distribution names the lock holds (PEP 503 normalised)., type: list, returned: success}
options: {description: "Index options of the lock ([option, value])", type: list, returned: success}
lock_hash: {description: sha256 of the lock's canonical form (what the recipe hash covers)., type: str, returned: success}
input_sha256: {description: The input's sha256 recorded in the lock header., type: str, returned: success}
python:
  description: >-
    Lowest CPython the lock was resolved for (its C(# resolver:) header's C(--python-version), written by lock.sh);
    "" when the header has none.
  type: str
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.lock import LockError, check_input, check_local_packages, project_name, read, summary


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            input=dict(type="path", default=""),
            local_packages=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        lock = read(p["path"])
        if p["input"]:
            check_input(lock, p["input"], p["path"])
        names = tuple(n for n in (project_name(t) for t in p["local_packages"]) if n)
        problems = check_local_packages(lock, p["local_packages"], names)
        if problems:
            raise LockError("; ".join(problems))
    except LockError as exc:
        module.fail_json(msg=f"venv lock: {exc}", path=p["path"])
    module.exit_json(changed=False, **summary(lock))


if __name__ == "__main__":
    main()
