#!/usr/bin/python
"""Ansible module: ask the installed SGLang server's own parser whether an argv is accepted (changes nothing)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_preflight
short_description: Check SGLang server flags with the target venv's own parser before a restart
description:
  - Runs C(<python> -c ...) which imports I(parser_module) and calls its C(prepare_server_args(argv)) (upstream
    C(sglang.srt.server_args); the lab stand-in C(sglang_standin.server_args)). Starts, writes and restarts nothing,
    so it also runs in check mode.
  - On rejection it fails with the parser's own message (argparse's C(error:) line or the exception).
  - The API key is never passed; with I(with_api_key) a placeholder checks that C(--api-key) is accepted.
options:
  python:
    description: "the venv's python (e.g. /opt/sglang/venv/bin/python)."
    type: path
    required: true
  parser_module:
    description: "module with prepare_server_args."
    type: str
    default: sglang.srt.server_args
  function:
    description: "the parsing function."
    type: str
    default: prepare_server_args
  argv:
    description: "server flags (from the sglang_argv filter)."
    type: list
    elements: str
    required: true
  with_api_key:
    description: "add C(--api-key <placeholder>) like the launcher will."
    type: bool
    default: false
  environment:
    description: "extra environment (e.g. CUDA_HOME, LD_LIBRARY_PATH) for the import."
    type: dict
    default: {}
  timeout:
    description: "seconds allowed for import and parse."
    type: float
    default: 300
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Preflight the new flags
  sglang_preflight:
    python: /opt/sglang/venv/bin/python
    parser_module: sglang.srt.server_args
    argv: "{{ sglang_service_server | sglang_argv(sglang_service_speculative) }}"
"""

RETURN = r"""
accepted: {description: whether the parser accepted the argv., type: bool, returned: always}
rc: {description: exit status of the parser process., type: int, returned: always}
message: {description: the parser's complaint (empty when accepted)., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_preflight import check


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            parser_module=dict(type="str", default="sglang.srt.server_args"),
            function=dict(type="str", default="prepare_server_args"),
            argv=dict(type="list", elements="str", required=True),
            with_api_key=dict(type="bool", default=False),
            environment=dict(type="dict", default={}),
            timeout=dict(type="float", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = check(p["python"], p["parser_module"], p["argv"], function=p["function"], with_api_key=p["with_api_key"],
                   timeout=p["timeout"], env={k: str(v) for k, v in p["environment"].items()})
    if not result["accepted"]:
        module.fail_json(msg=f"{p['parser_module']}.{p['function']} rejected the new flags (the running service "
                             f"was left untouched): {result['message']}", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
