#!/usr/bin/python
"""Ansible module: known-answer smoke generations against an SGLang server; records tok/s and accept length."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_smoke
short_description: Known-answer prompts at temperature 0 through SGLang's OpenAI-compatible API
description:
  - Sends each prompt to C(/v1/chat/completions) at temperature 0 and checks the answer against its C(expect) regex.
  - Detects degenerate output (empty, U+FFFD replacement characters, repetition loops).
  - Streams one longer generation to measure decode tok/s and TTFT; reads the speculative accept length from
    C(/server_info) (C(internal_states[0].avg_spec_accept_length)).
  - Read-only for the host (never reports changed). Fails showing every output.
options:
  url:
    description: "base URL (e.g. http://127.0.0.1:30001)."
    type: str
    required: true
  model_id:
    description: "model name to send."
    type: str
    required: true
  api_key:
    description: "bearer key (never logged)."
    type: str
    no_log: true
  prompts:
    description: list of C({prompt, expect}) (expect is a case-insensitive regex); default is three known-answer prompts.
    type: list
    elements: dict
  max_tokens:
    description: "max tokens per known-answer prompt."
    type: int
    default: 32
  throughput_tokens:
    description: "tokens of the streamed generation (0 skips it)."
    type: int
    default: 128
  min_tok_s:
    description: "fail below this decode speed (0 = record only)."
    type: float
    default: 0
  timeout:
    description: "per-request timeout in seconds."
    type: float
    default: 120
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Smoke test
  sglang_smoke:
    url: http://127.0.0.1:30001
    model_id: /srv/models/Kimi-K2.6
    api_key: "{{ sglang_service_api_key }}"
  register: smoke
"""

RETURN = r"""
answers: {description: each prompt with its output and verdict., type: list, returned: always}
tok_s: {description: decode tokens per second of the streamed generation., type: float, returned: always}
ttft_s: {description: time to first token of the streamed generation., type: float, returned: always}
accept_length: {description: speculative accept length from /server_info (null without speculation)., type: float,
                returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang.smoke import DEFAULT_PROMPTS, run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model_id=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            prompts=dict(type="list", elements="dict"),
            max_tokens=dict(type="int", default=32),
            throughput_tokens=dict(type="int", default=128),
            min_tok_s=dict(type="float", default=0),
            timeout=dict(type="float", default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    result = run(p["url"], p["model_id"], api_key=p["api_key"], prompts=p["prompts"] or list(DEFAULT_PROMPTS),
                 max_tokens=p["max_tokens"], throughput_tokens=p["throughput_tokens"], timeout=p["timeout"],
                 min_tok_s=p["min_tok_s"])
    fields = {k: result[k] for k in ("answers", "tok_s", "ttft_s", "accept_length", "completion_tokens")}
    if not result["ok"]:
        module.fail_json(msg="smoke test failed:\n" + "\n".join(result["failures"]), **fields)
    module.exit_json(changed=False, **fields)


if __name__ == "__main__":
    main()
