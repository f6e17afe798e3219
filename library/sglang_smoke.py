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
  - With a reasoning parser SGLang puts the thinking in C(reasoning_content) and the answer in C(content); both are
    read. Where the model's chat template (the server's Jinja C(--chat-template), else C(chat_template.jinja) or
    C(tokenizer_config.json)'s C(chat_template) in O(model_path)) tests a thinking switch (a variable such as
    C(thinking) or C(enable_thinking)), every request sends it off in C(chat_template_kwargs); else each request
    gets O(thinking_tokens) more. A reply that only thinks fails, naming that the budget ran out while thinking.
  - With a tool-call parser, one request offers a C(get_weather(city)) function (C(tool_choice=auto)) and requires
    C(tool_calls) naming it with JSON-object arguments.
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
  reasoning_parser:
    description: "the server's C(--reasoning-parser) (empty: none); set, requests get the thinking budget unless the
      template's switch turns thinking off."
    type: str
    default: ""
  tool_call_parser:
    description: "the server's C(--tool-call-parser) (empty: none); set, the tool-call request runs too."
    type: str
    default: ""
  thinking_tokens:
    description: "tokens added to each request's budget when the server separates reasoning and the template has no
      switch to answer without thinking."
    type: int
    default: 1024
  model_path:
    description: "the served model's directory on the host, whose chat template is read for a thinking switch."
    type: str
    default: ""
  chat_template:
    description: "the server's C(--chat-template) (empty: none); read instead of the model's when it is a Jinja file."
    type: str
    default: ""
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Smoke test
  sglang_smoke:
    url: http://127.0.0.1:30001
    model_id: /srv/models/Kimi-K2.6
    api_key: "{{ sglang_service_api_key }}"
    reasoning_parser: kimi_k2
    tool_call_parser: kimi_k2
    model_path: /srv/models/Kimi-K2.6
  register: smoke
"""

RETURN = r"""
answers: {description: each prompt with its output and verdict., type: list, returned: always}
tok_s: {description: decode tokens per second of the streamed generation., type: float, returned: always}
ttft_s: {description: time to first token of the streamed generation., type: float, returned: always}
accept_length: {description: speculative accept length from /server_info (null without speculation)., type: float,
                returned: always}
thinking_switch: {description: "the chat_template_kwargs sent to turn thinking off ({} when none), where the template
                  came from and why none was sent.", type: dict, returned: always}
tool_call: {description: the tool-call request (tool_calls, finish_reason and verdict); null without a tool-call
            parser., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang.chat_template import find_template, switch_off_kwargs
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
            reasoning_parser=dict(type="str", default=""),
            tool_call_parser=dict(type="str", default=""),
            thinking_tokens=dict(type="int", default=1024),
            model_path=dict(type="str", default=""),
            chat_template=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    template, source = find_template(p["model_path"], p["chat_template"])
    kwargs = switch_off_kwargs(template)
    switch = {"chat_template_kwargs": kwargs, "template": source if template else None,
              "why_none": None if kwargs else (source if not template else f"{source} tests no thinking switch")}
    result = run(p["url"], p["model_id"], api_key=p["api_key"], prompts=p["prompts"] or list(DEFAULT_PROMPTS),
                 max_tokens=p["max_tokens"], throughput_tokens=p["throughput_tokens"], timeout=p["timeout"],
                 min_tok_s=p["min_tok_s"], reasoning_parser=p["reasoning_parser"],
                 tool_call_parser=p["tool_call_parser"], template_kwargs=kwargs, thinking_tokens=p["thinking_tokens"])
    fields = {k: result[k] for k in ("answers", "tok_s", "ttft_s", "accept_length", "completion_tokens", "tool_call")}
    fields["thinking_switch"] = switch
    if not result["ok"]:
        module.fail_json(msg="smoke test failed:\n" + "\n".join(result["failures"]), **fields)
    module.exit_json(changed=False, **fields)


if __name__ == "__main__":
    main()
