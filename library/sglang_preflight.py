#!/usr/bin/python
"""Ansible module: the installed SGLang's own validation judges an argv, with every GPU hidden (changes nothing)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_preflight
short_description: Check SGLang server flags with the target venv's own validation before a restart
description:
  - "Runs C(<python> -c ...) which imports I(parser_module) and runs what the version's launcher runs before it
    loads weights: C(prepare_server_args(argv)) (argparse, then C(__post_init__), the semantic checks of 0.5.11),
    then C(resolve_once()) where it exists (0.5.23's checks) and C(check_server_args())."
  - The subprocess sees no GPU (C(CUDA_VISIBLE_DEVICES="")) and runs at nice 10, so it can neither open a CUDA context
    next to the live server nor slow it; the host's real GPU facts (name, compute capability, memory, count of the
    service's I(environment.CUDA_VISIBLE_DEVICES)) are read with C(nvidia-smi) and handed to torch.cuda instead.
  - Starts, writes and restarts nothing, so it also runs in check mode.
  - "The subprocess runs in a private scratch home (HOME, XDG_CACHE_HOME, TRITON_CACHE_DIR and every other JIT
    cache variable pointed into it; removed afterwards): the JIT caches an import of SGLang writes never land in the
    service's home, owned by root."
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
    description: "the service's environment (CUDA_HOME, LD_LIBRARY_PATH, CUDA_VISIBLE_DEVICES...); GPUs stay hidden."
    type: dict
    default: {}
  nvidia_smi:
    description: "nvidia-smi to read the GPU facts from; a host without it gets no GPU facts (the lab)."
    type: str
    default: nvidia-smi
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
    argv: "{{ sglang_service_server | sglang_argv(sglang_service_speculative, {}, 'b64:' ~ schema_file.content) }}"
"""

RETURN = r"""
accepted: {description: whether the parser accepted the argv., type: bool, returned: always}
rc: {description: exit status of the parser process., type: int, returned: always}
message: {description: the parser's complaint (empty when accepted)., type: str, returned: always}
steps: {description: "validation steps that ran (prepare_server_args, resolve_once, check_server_args).", type: list,
        returned: always}
gpus: {description: "GPU facts handed to the validation (name, compute_cap, memory_mib per GPU).", type: list,
       returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.nvidia_smi import NvidiaSmiError, NvidiaSmiParseError
from ansible.module_utils.sglang.preflight import check, device_facts, read_gpus


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            parser_module=dict(type="str", default="sglang.srt.server_args"),
            argv=dict(type="list", elements="str", required=True),
            with_api_key=dict(type="bool", default=False),
            environment=dict(type="dict", default={}),
            timeout=dict(type="float", default=300),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    env = {k: str(v) for k, v in p["environment"].items()}
    try:
        facts = device_facts(read_gpus(p["nvidia_smi"]), env.get("CUDA_VISIBLE_DEVICES"))
    except (NvidiaSmiError, NvidiaSmiParseError, OSError) as exc:
        module.fail_json(msg=f"could not read the GPU facts for the preflight (nothing was changed): {exc}")
    result = check(p["python"], p["parser_module"], p["argv"], facts=facts, with_api_key=p["with_api_key"],
                   timeout=p["timeout"], env=env)
    result["gpus"] = facts["gpus"]
    if not result["accepted"]:
        module.fail_json(msg=f"{p['parser_module']} ({' -> '.join(result['steps']) or 'prepare_server_args'}) rejected the new flags (the running service "
                             f"was left untouched): {result['message']}", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
