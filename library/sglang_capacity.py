#!/usr/bin/python
"""Ansible module: a ready SGLang server's KV cache pool holds the longest request it accepts."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_capacity
short_description: Check that a ready SGLang server's KV cache pool can hold the longest request it accepts
description:
  - Reads C(/server_info) (C(max_total_num_tokens), the KV pool in tokens; C(max_req_input_len), the longest input
    the server accepts) and fails, naming both and what to look at, when the pool is below the floor.
  - A server reports ready whatever its pool; one started while another process held GPU memory gets a pool sized
    from what was left (284 tokens on the H200) and then refuses long prompts and dies under a batch.
  - Reads only; check mode runs the same read.
options:
  url:
    description: "base URL of the server, from the host itself (e.g. http://127.0.0.1:30001)."
    type: str
    required: true
  api_key:
    description: "bearer key for C(/server_info) (never logged)."
    type: str
    no_log: true
  min_tokens:
    description:
      - "the floor in tokens; unset: the server's own C(max_req_input_len) (one longest request must fit); 0: report
        only."
    type: int
  timeout:
    description: "seconds for the read."
    type: float
    default: 10
"""

EXAMPLES = r"""
- name: KV cache pool holds the longest request
  sglang_capacity:
    url: http://127.0.0.1:30001
    api_key: "{{ sglang_service_api_key }}"
"""

RETURN = r"""
pool_tokens: {description: "the KV cache pool (max_total_num_tokens).", type: int, returned: always}
max_input_tokens: {description: "the longest input the server accepts (max_req_input_len).", type: int, returned: always}
floor: {description: "the floor the pool was held to.", type: int, returned: always}
floor_from: {description: "where the floor comes from.", type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang.capacity import check


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            min_tokens=dict(type="int"),
            timeout=dict(type="float", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = check(p["url"], api_key=p["api_key"], min_tokens=p["min_tokens"], timeout=p["timeout"])
    fields = {k: result[k] for k in ("pool_tokens", "max_input_tokens", "floor", "floor_from")}
    if not result["ok"]:
        module.fail_json(msg="KV cache pool check failed: %s" % result["why"], **fields)
    module.exit_json(changed=False, **fields)


if __name__ == "__main__":
    main()
