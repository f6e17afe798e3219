#!/usr/bin/python
"""Ansible module: wait until SGLang's router (smg) is ready and reports enough healthy workers."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_router_ready
short_description: Wait, bounded, until SGLang's router answers and reports enough healthy workers
description:
  - Polls the router's C(/liveness), C(/readiness) and C(/workers) (smg 1.13; the router formerly shipped as
    C(sglang-router)) until it is live, C(/readiness) answers 200 and at least I(min_healthy_workers) workers
    are healthy and every URL of I(expected_workers) is listed and healthy.
  - A timeout fails naming the missing and the unhealthy workers (with the router's status for each) and
    carries the last answers.
  - With I(unit), the router's systemd unit is watched at every poll. The wait ends at once, with the unit's state
    and that invocation's journal, when the unit is not active/running or its main process changes (a router that
    dies at start-up is reported at the next poll, not after I(timeout)).
  - Read-only: it never adds or removes workers, so check mode runs the same probes.
options:
  url:
    description: "router base URL (e.g. http://127.0.0.1:30000)."
    type: str
    required: true
  api_key:
    description: "the router's C(--api-key) (C(/workers) answers 401 without it); never logged."
    type: str
    no_log: true
  min_healthy_workers:
    description: "healthy workers needed; 0 only checks that the router answers."
    type: int
    default: 1
  expected_workers:
    description: "worker URLs that must be listed and healthy (a trailing slash is ignored)."
    type: list
    elements: str
    default: []
  timeout:
    description: "seconds to wait."
    type: float
    default: 120
  interval:
    description: "seconds between polls."
    type: float
    default: 1.0
  unit:
    description: "the router's systemd unit (e.g. sglang-router.service) to watch while waiting; empty = not watched."
    type: str
    default: ""
  journal_lines:
    description: "journal lines of the unit's invocation returned when it died."
    type: int
    default: 40
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Wait for the router and both serving hosts behind it
  sglang_router_ready:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_router_api_key }}"
    min_healthy_workers: 2
    expected_workers:
      - http://10.0.0.11:30001
      - http://10.0.0.12:30001
    timeout: 300
    unit: sglang-router.service
  register: router
"""

RETURN = r"""
healthy_workers: {description: URLs of the healthy workers., type: list, returned: always}
unhealthy_workers: {description: "URLs of listed, unhealthy workers, each with the router's status
  (e.g. C(http://h:30001 (failed)))", type: list, returned: always}
missing_workers: {description: URLs of I(expected_workers) the router does not list., type: list, returned: always}
readiness: {description: "the router's own view: live, ready, healthy_workers, total_workers, status, reason.",
            type: dict, returned: always}
time_to_ready: {description: seconds until ready., type: float, returned: success}
reasons: {description: why it is not ready (the last poll)., type: list, returned: failure}
answers: {description: the last HTTP answers (method, path, status, body excerpt)., type: list, returned: failure}
kind: {description: "why it failed: timeout, failed (the unit died or restarted), unauthorized, error.", type: str,
       returned: failure}
unit: {description: "the unit's state when it died (active_state, sub_state, main_pid, result, ...).", type: dict,
       returned: when the watched unit died}
journal: {description: the journal lines of the unit's invocation that died., type: list,
          returned: when the watched unit died}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.systemd import unit as systemd_unit
from ansible.module_utils.router.client import RouterClient, RouterError, unit_watch


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", no_log=True),
            min_healthy_workers=dict(type="int", default=1),
            expected_workers=dict(type="list", elements="str", default=[]),
            timeout=dict(type="float", default=120),
            interval=dict(type="float", default=1.0),
            unit=dict(type="str", default=""),
            journal_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["min_healthy_workers"] < 0 or p["timeout"] < 0 or p["interval"] <= 0:
        module.fail_json(msg="min_healthy_workers and timeout must be >= 0, interval > 0")
    client = RouterClient(url=p["url"].rstrip("/"), api_key=p["api_key"])
    watch = None
    if p["unit"]:
        watch = unit_watch(p["unit"], lambda u: systemd_unit.show(u),
                           lambda u, inv, n: systemd_unit.journal(u, inv, n), p["journal_lines"])
    try:
        look = client.wait_ready(min_healthy=p["min_healthy_workers"], timeout=p["timeout"],
                                 expected=p["expected_workers"], interval=p["interval"], watch=watch)
    except RouterError as exc:
        ev = exc.evidence
        module.fail_json(msg=exc.message, kind=exc.kind, healthy_workers=ev.get("healthy", []),
                         unhealthy_workers=ev.get("unhealthy", []), missing_workers=ev.get("missing", []),
                         readiness=ev.get("health", {}), reasons=ev.get("why", []), answers=ev.get("answers", []),
                         unit=ev.get("unit", {}), journal=ev.get("journal", []))
    except systemd_unit.SystemdError as exc:
        module.fail_json(msg=str(exc), kind="error")
    module.exit_json(changed=False, healthy_workers=look["healthy"], unhealthy_workers=look["unhealthy"],
                     missing_workers=look["missing"], readiness=look["health"], time_to_ready=look["time_to_ready"])


if __name__ == "__main__":
    main()
