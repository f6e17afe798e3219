#!/usr/bin/python
"""Ansible module: read, apply or verify an ordered patch series against a venv's site-packages."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_patch
short_description: Patch series of a venv - list it, apply it idempotently, or verify it is present
description:
  - C(state=series) only reads I(patch_dir) (its C(series) file or C(*.patch) in name order) and returns the
    names and the series hash; missing files, or an empty directory with I(require=true), fail.
  - C(state=present) applies the patches not yet applied (a reverse dry run recognises applied ones); a patch
    that neither applies nor is applied fails showing the rejected hunks.
  - C(state=verify) changes nothing and fails unless every patch is applied.
  - >-
    Every state reads the series' form from its paths (module_utils/venv/patch.py series_form): site-packages-relative
    C(a/sglang/...) is applied with C(patch -p1), SGLang's repository layout C(a/python/sglang/...) (C(git
    format-patch) of a pull request) with C(patch -p2). A series mixing the forms, or touching a file outside
    C(python/<package>/) or outside I(packages), fails naming each patch and path.
options:
  patch_dir: {description: Directory of the series., type: path, required: true}
  venv: {description: Venv whose site-packages is patched (not needed for state=series)., type: path}
  state: {description: series, present or verify., type: str, choices: [series, present, verify], default: verify}
  require: {description: Fail when the series is empty or its directory missing., type: bool, default: false}
  packages: {description: "Top-level names in site-packages the series may touch ([] = any).", type: list, elements: str, default: []}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Patches present in the live venv
  venv_patch:
    venv: /opt/sglang/venv
    patch_dir: /var/lib/sglang-venv/build/lab/patches
    state: verify
"""

RETURN = r"""
patches: {description: Names of the series in order., type: list, returned: always}
series_hash: {description: sha256 over the ordered names and contents., type: str, returned: always}
applied: {description: Patches applied by this run (present) or found applied (verify)., type: list, returned: when state != series}
already: {description: Patches that were already applied (present)., type: list, returned: when state=present}
form: {description: "The series' form - site (paths relative to site-packages), repository (python/... paths) or empty (no patches).", type: str, returned: always}
strip: {description: "The patch -p level the form takes (1 or 2).", type: int, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.patch import PatchError, run_state


def main():
    module = AnsibleModule(
        argument_spec=dict(
            patch_dir=dict(type="path", required=True),
            venv=dict(type="path"),
            state=dict(type="str", choices=["series", "present", "verify"], default="verify"),
            require=dict(type="bool", default=False),
            packages=dict(type="list", elements="str", default=[]),
        ),
        required_if=[("state", "present", ["venv"]), ("state", "verify", ["venv"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = run_state(p["state"], p["patch_dir"], p["venv"], p["require"], module.check_mode,
                           p["packages"])
    except PatchError as exc:
        module.fail_json(msg=f"venv patch: {exc}", patch_dir=p["patch_dir"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
