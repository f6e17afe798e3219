#!/usr/bin/python
"""Ansible module: write the venv provenance local fact."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_provenance
short_description: Write /etc/ansible/facts.d/sglang_venv.fact (content hash, python, sglang, patch series)
description:
  - Asks the venv's own python for its python version and the installed SGLang version, joins the content
    hash and the given recipe fields, and writes the JSON fact when it differs from the file (idempotent).
options:
  path: {description: Absolute live venv path., type: path, required: true}
  fact_path: {description: Fact file., type: path, default: /etc/ansible/facts.d/sglang_venv.fact}
  content_hash: {description: Content hash of the live venv (venv_manifest/venv_commit digest)., type: str, required: true}
  fields: {description: Other fields to record (method, flavour, source, recipe_hash, patch_series_hash, ...)., type: dict, default: {}}
  sglang_dist: {description: Distribution name whose version is the sglang version., type: str, default: sglang}
  sglang_module: {description: Module whose __version__ is the fallback., type: str, default: sglang}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Provenance fact
  venv_provenance:
    path: /opt/sglang/venv
    content_hash: "{{ manifest.digest }}"
    fields: {method: build, flavour: lab}
"""

RETURN = r"""
fact: {description: The fact as written., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.provenance import provenance


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            fact_path=dict(type="path", default="/etc/ansible/facts.d/sglang_venv.fact"),
            content_hash=dict(type="str", required=True),
            fields=dict(type="dict", default={}),
            sglang_dist=dict(type="str", default="sglang"),
            sglang_module=dict(type="str", default="sglang"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        changed, fact = provenance(p["path"], p["fact_path"], p["content_hash"], p["fields"], p["sglang_dist"],
                                   p["sglang_module"], module.check_mode)
    except BuildError as exc:
        module.fail_json(msg=f"venv provenance: {exc}", path=p["path"])
    module.exit_json(changed=changed, fact=fact)


if __name__ == "__main__":
    main()
