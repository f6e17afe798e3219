#!/usr/bin/python
"""Ansible module: verify an operator's existing venv, adopt it as the live venv, or undo that (roles/takeover)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_adopt
short_description: Verify an existing venv and adopt it at the venv path (relocated, recorded), or undo the adoption
description:
  - C(state=verified) (read-only) - the venv at I(source) must run its python (not older than I(python_floor), the
    lock's CPython), import I(sglang_module), have I(sglang_dist) at exactly I(sglang_version) (what the flavour's lock
    pins), have every patch of I(series) applied (reverse dry runs, either patch form, module_utils/venv/patch.py) and
    extract its own flag schema from I(schema_module) (module_utils/venv/flag_schema.py). The first failing check
    fails naming it, with its output, before anything changes.
  - C(state=adopted) - the same checks, then the venv is renamed to I(path) (same filesystem) or copied there and the
    copy's manifest compared with the source's (the source then stays), the old prefix rewritten in bin/ (shebangs,
    activate scripts), made readable, its flag schema written in, and the provenance fact written with method
    C(adopted), C(adopted_from), C(adopted_pin) and the content hash the venv role computes; recorded first in
    I(record_path). Already adopted from I(source) and unchanged - nothing to do.
  - C(state=reverted) - the last takeover's adoption in I(record_path) undone (moved back and relocated, or the copy
    removed; the adopted fact removed).
  - Check mode runs every read-only check and reports what would be done.
options:
  state: {description: verified, adopted or reverted., type: str, choices: [verified, adopted, reverted], default: adopted}
  source: {description: The existing venv (absolute path)., type: path}
  path: {description: The venv path it is adopted at (venv_path)., type: path}
  fact_path: {description: The venv role's provenance fact., type: path, default: /etc/ansible/facts.d/sglang_venv.fact}
  record_path: {description: The takeover record (JSON list of takeovers)., type: path, required: true}
  fields: {description: "Recipe fields recorded in the fact (flavour, source, patch_series_hash, patches, patch_form).", type: dict, default: {}}
  python_floor: {description: "Lowest CPython the flavour's lock was resolved for (its header); empty = any.", type: str, default: ""}
  sglang_dist: {description: Distribution whose version must be I(sglang_version)., type: str, default: sglang}
  sglang_module: {description: Module that must import., type: str, default: sglang}
  sglang_version: {description: "The version the flavour pins for I(sglang_dist) (empty = refused: nothing to compare).", type: str, default: ""}
  series:
    description: "The flavour's patch series as the controller read it, in order: [{name, text}]."
    type: list
    elements: dict
    default: []
  patch_packages: {description: "Top-level names in site-packages the series may touch ([] = any).", type: list, elements: str, default: []}
  schema_module: {description: "Parser module of the flag schema; empty = none.", type: str, default: sglang.srt.server_args}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Adopt the operator's venv
  venv_adopt:
    state: adopted
    source: /root/venv_sglang211
    path: /opt/sglang/venv
    record_path: /var/lib/sglang-takeover/record.json
    python_floor: "3.11"
    sglang_version: 0.5.11
    series: "{{ series_texts }}"
    fields: {flavour: ddtree}
"""

RETURN = r"""
adopted: {description: This run moved the venv to the venv path., type: bool, returned: always}
method: {description: "rename or copy (empty when nothing is to be done).", type: str, returned: always}
relocated: {description: bin/ files whose old prefix was (or would be) rewritten., type: list, returned: always}
verified: {description: "What the checks found (python_version, sglang_version, patches, patch_form, flag_schema).", type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.venv.adopt import adopt, revert


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["verified", "adopted", "reverted"], default="adopted"),
            source=dict(type="path"),
            path=dict(type="path"),
            fact_path=dict(type="path", default="/etc/ansible/facts.d/sglang_venv.fact"),
            record_path=dict(type="path", required=True),
            fields=dict(type="dict", default={}),
            python_floor=dict(type="str", default=""),
            sglang_dist=dict(type="str", default="sglang"),
            sglang_module=dict(type="str", default="sglang"),
            sglang_version=dict(type="str", default=""),
            series=dict(type="list", elements="dict", default=[]),
            patch_packages=dict(type="list", elements="str", default=[]),
            schema_module=dict(type="str", default="sglang.srt.server_args"),
        ),
        required_if=[("state", "verified", ["source", "path"]), ("state", "adopted", ["source", "path"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "reverted":
            result = dict(revert(p["record_path"], module.check_mode), adopted=False, method="", verified={})
        else:
            result = adopt(p["source"], p["path"], p["fact_path"], p["record_path"], p["fields"], p["python_floor"],
                           p["sglang_dist"], p["sglang_module"], p["sglang_version"], p["series"],
                           p["patch_packages"], p["schema_module"], check_only=p["state"] == "verified",
                           check_mode=module.check_mode)
    except EvidenceError as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
