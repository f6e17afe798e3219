#!/usr/bin/python
"""Ansible module: wait, bounded, until an SGLang server has no request in flight (after its router removed it)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_drain
short_description: Wait, bounded, until an SGLang server's in-flight requests reach zero
description:
  - Polls the server's live load, C(GET /v1/loads?include=core) (SGLang 0.5.11; running + waiting requests summed
    over DP ranks), until it is zero for I(quiet_for) seconds. Logic in C(module_utils/sglang/drain.py).
  - >-
    Meant for after the server was taken out of its router's rotation: no new request arrives, the ones in flight
    finish. A server still busy at I(timeout), one that stops answering, or one without C(/v1/loads) fails, with the
    series of samples as evidence.
  - Read-only; check mode takes one look and reports it.
options:
  url:
    description: "the server's base URL as seen from where the module runs (e.g. http://127.0.0.1:30001)."
    type: str
    required: true
  api_key:
    description: "the server's C(--api-key) (C(/v1/loads) needs it); never logged."
    type: str
    no_log: true
  timeout:
    description: "seconds to wait for the in-flight requests to finish."
    type: float
    default: 600
  interval:
    description: "seconds between polls."
    type: float
    default: 0.5
  quiet_for:
    description: "seconds the count must stay at zero (requests still being tokenized or streamed out are not counted)."
    type: float
    default: 2.0
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Wait until the requests still in flight on this host have finished
  sglang_drain:
    url: http://127.0.0.1:30001
    api_key: "{{ sglang_service_api_key }}"
    timeout: 300
  register: drained
"""

RETURN = r"""
waited_s: {description: seconds until the server was quiet for I(quiet_for)., type: float, returned: success}
peak: {description: the most requests seen in flight during the wait., type: int, returned: success}
first_zero_s: {description: seconds until the count first read zero., type: float, returned: success}
polls: {description: how many looks were taken., type: int, returned: always}
samples: {description: "the last samples, each [t, running, waiting] or [t, error].", type: list, returned: always}
kind: {description: "on failure: timeout, down, unsupported or unauthorized.", type: str, returned: failure}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.sglang.drain import Drain, DrainError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=600.0),
            interval=dict(type="float", default=0.5),
            quiet_for=dict(type="float", default=2.0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    for name in ("timeout", "interval"):
        if p[name] <= 0:
            module.fail_json(msg=f"{name} must be > 0 (got {p[name]})")
    if p["quiet_for"] < 0:
        module.fail_json(msg=f"quiet_for must be >= 0 (got {p['quiet_for']})")
    drain = Drain(url=p["url"].rstrip("/"), api_key=p["api_key"] or None, timeout=p["timeout"],
                  interval=p["interval"], quiet_for=p["quiet_for"])
    try:
        if module.check_mode:
            running, waiting = drain.look()
            module.exit_json(changed=False, waited_s=0.0, peak=running + waiting, first_zero_s=None, polls=1,
                             samples=[[0.0, running, waiting]])
        result = drain.wait()
    except ConnectionError as exc:
        module.fail_json(msg=f"{p['url']}: {exc}", kind="down", polls=len(drain.samples), samples=drain.samples)
    except DrainError as exc:
        module.fail_json(msg=exc.message, kind=exc.kind, **exc.evidence)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
