#!/usr/bin/python
"""Ansible module: take one worker out of SGLang's router (drained) or put it back (healthy and routed to)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_router_worker
short_description: Remove a worker from SGLang's router, or add it back and wait until the router routes to it
description:
  - >-
    Talks to the router's worker API (smg 1.13: C(GET/POST /workers), C(DELETE /workers/{id}); recorded in
    C(tests/fixtures/router/smg-1.13.0/)). Logic in C(module_utils/router/client.py).
  - C(state=absent) deletes the worker (found by URL) and waits, bounded, until the router no longer lists it (it
    drains it first, ~5 s). It refuses, before deleting, when fewer than I(min_healthy_after) healthy workers would
    remain.
  - >-
    C(state=present) adds the worker when it is not listed, or when it is listed but not healthy (a worker marked
    failed in a static fleet is re-added explicitly: it is deleted and added again), then waits until the router
    lists it healthy and, with I(wait_routed), until the router's own per-worker counter
    (C(smg_worker_requests_total)) shows a request dispatched to it. With I(probe) the module sends its own small
    requests through the router while it waits (an idle fleet has no traffic to watch).
  - Every wait is bounded by I(timeout); a failure carries the router's last answers.
  - Check mode looks and reports what it would do.
options:
  router_url:
    description: "the router's base URL as seen from where the module runs (e.g. http://127.0.0.1:30080)."
    type: str
    required: true
  metrics_url:
    description: "the router's Prometheus listener (e.g. http://127.0.0.1:29000); needed for I(wait_routed)."
    type: str
    default: ""
  api_key:
    description: "the router's C(--api-key); never logged."
    type: str
    no_log: true
  worker_api_key:
    description: "the key the router must send to this worker when adding it (default: I(api_key)); never logged."
    type: str
    no_log: true
  url:
    description: "the worker's URL exactly as the router knows it (e.g. http://10.0.0.11:30001)."
    type: str
    required: true
  state:
    description: "C(absent): out of rotation; C(present): in rotation, healthy."
    type: str
    choices: [present, absent]
    required: true
  min_healthy_after:
    description: "C(state=absent) only: refuse when fewer healthy workers than this would remain."
    type: int
    default: 0
  wait_routed:
    description: "C(state=present): also wait until a request was dispatched to the worker."
    type: bool
    default: true
  probe:
    description: "C(state=present) with I(wait_routed): send small generations through the router while waiting."
    type: bool
    default: true
  timeout:
    description: "seconds allowed for each wait (gone / healthy / routed)."
    type: float
    default: 120
  interval:
    description: "seconds between polls."
    type: float
    default: 0.25
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Out of rotation (the router drains it), keeping at least one healthy worker
  sglang_router_worker:
    router_url: http://127.0.0.1:30080
    api_key: "{{ sglang_router_api_key }}"
    url: http://10.0.0.11:30001
    state: absent
    min_healthy_after: 1
  delegate_to: router-01

- name: Back into rotation, routed to
  sglang_router_worker:
    router_url: http://127.0.0.1:30080
    metrics_url: http://127.0.0.1:29000
    api_key: "{{ sglang_router_api_key }}"
    url: http://10.0.0.11:30001
    state: present
  delegate_to: router-01
"""

RETURN = r"""
worker_id: {description: the router's id of the worker (the removed one, or the one added)., type: str, returned: always}
before: {description: "the worker's router status before (C(absent) when not listed).", type: str, returned: always}
healthy_workers: {description: healthy workers the router listed at the end., type: list, returned: always}
waited_s: {description: seconds spent waiting (gone, or healthy + routed)., type: float, returned: always}
routed: {description: "with I(wait_routed): {url, before, after, rounds, seconds} of the dispatch counter.", type: dict,
  returned: when routed}
"""

import time
import uuid

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.router.client import RouterClient, RouterError, norm_url
from ansible.module_utils.sglang import api as sglang_http


def probe_sender(client: RouterClient):
    """One tiny generation through the router per call, each prompt starting with new random text: a cache-aware
    router sends a prompt that matches no worker's prefix tree to the worker with the smallest tree (the one just
    added); a shared prefix would send every probe to the worker that saw the first one."""
    def send():
        sglang_http.call(client.url, "/generate", "POST", {
            "text": f"{uuid.uuid4().hex} is a probe", "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
            api_key=client.api_key, timeout=client.timeout)
    return send


def short_answers(answers: list) -> list:
    """The router's last answers as evidence: metrics bodies (hundreds of lines) cut to their worker lines."""
    out = []
    for a in answers:
        body = a.get("body", "")
        if a.get("path") == "/metrics":
            body = "\n".join(line for line in body.splitlines() if line.startswith(("smg_worker_requests_total",
                                                                                      "smg_worker_health")))
        out.append({**a, "body": body[:400]})
    return out[-6:]


def remove(client: RouterClient, url: str, min_healthy_after: int, timeout: float, interval: float, check: bool):
    look = client.readiness(min_healthy=0)
    worker = next((w for w in look["workers"] if w["url"] == url), None)
    if worker is None:
        return False, {"worker_id": "", "before": "absent", "healthy_workers": look["healthy"], "waited_s": 0.0}
    remaining = [u for u in look["healthy"] if u != url]
    if len(remaining) < min_healthy_after:
        raise RouterError("refused", f"taking {url} out would leave {len(remaining)} healthy worker(s) behind the "
                          f"router, fewer than the minimum {min_healthy_after} (healthy now: {look['healthy']}); "
                          f"nothing was changed", {"workers": look["workers"]})
    result = {"worker_id": worker["id"], "before": worker["status"], "healthy_workers": remaining, "waited_s": 0.0}
    if check:
        return True, result
    started = time.monotonic()
    client.remove_worker(url)
    client.wait_gone(url, timeout=timeout, interval=interval)
    result["waited_s"] = round(time.monotonic() - started, 3)
    return True, result


def add(client: RouterClient, url: str, worker_key, wait_routed: bool, probe: bool, timeout: float, interval: float,
        check: bool):
    worker = client.find(url)
    before = worker["status"] if worker else "absent"
    if worker is not None and worker["healthy"] and not wait_routed:
        return False, {"worker_id": worker["id"], "before": before, "healthy_workers": [], "waited_s": 0.0}
    changed = worker is None or not worker["healthy"]
    if check:
        return changed, {"worker_id": worker["id"] if worker else "", "before": before, "healthy_workers": [],
                         "waited_s": 0.0}
    started = time.monotonic()
    baseline = client.worker_requests() if wait_routed else None
    worker_id = worker["id"] if worker else ""
    if worker is not None and not worker["healthy"]:
        client.remove_worker(url)  # a failed worker is re-added explicitly (static fleet: smg PR #2468)
        client.wait_gone(url, timeout=timeout, interval=interval)
    if changed:
        try:
            worker_id = client.add_worker(url, worker_key)["worker_id"] or worker_id
        except RouterError as exc:
            if exc.kind != "conflict":  # 409: being added already (a concurrent add): wait for it like ours
                raise
    look = client.wait_ready(min_healthy=1, timeout=timeout, expected=[url], interval=interval)
    result = {"worker_id": worker_id or next((w["id"] for w in look["workers"] if w["url"] == url), ""),
              "before": before, "healthy_workers": look["healthy"]}
    if wait_routed:
        result["routed"] = client.wait_routed(url, send=probe_sender(client) if probe else None, baseline=baseline,
                                              timeout=timeout, interval=interval)
    result["waited_s"] = round(time.monotonic() - started, 3)
    return changed, result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            router_url=dict(type="str", required=True),
            metrics_url=dict(type="str", default=""),
            api_key=dict(type="str", no_log=True),
            worker_api_key=dict(type="str", no_log=True),
            url=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], required=True),
            min_healthy_after=dict(type="int", default=0),
            wait_routed=dict(type="bool", default=True),
            probe=dict(type="bool", default=True),
            timeout=dict(type="float", default=120.0),
            interval=dict(type="float", default=0.25),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] <= 0 or p["interval"] <= 0:
        module.fail_json(msg=f"timeout and interval must be > 0 (got {p['timeout']}, {p['interval']})")
    if p["state"] == "present" and p["wait_routed"] and not p["metrics_url"]:
        module.fail_json(msg="wait_routed needs metrics_url (the router's --prometheus-host/--prometheus-port)")
    client = RouterClient(url=p["router_url"].rstrip("/"), api_key=p["api_key"] or None,
                          metrics_url=p["metrics_url"].rstrip("/"))
    url = norm_url(p["url"])
    try:
        if p["state"] == "absent":
            changed, result = remove(client, url, p["min_healthy_after"], p["timeout"], p["interval"],
                                     module.check_mode)
        else:
            changed, result = add(client, url, p["worker_api_key"] or p["api_key"] or None, p["wait_routed"],
                                  p["probe"], p["timeout"], p["interval"], module.check_mode)
    except RouterError as exc:
        module.fail_json(msg=f"{p['state']} {url} at {p['router_url']}: {exc.message}", kind=exc.kind,
                         worker_id="", before="", healthy_workers=[], waited_s=0.0,
                         evidence={k: v for k, v in exc.evidence.items() if k != "answers"},
                         answers=short_answers(exc.evidence.get("answers", client.answers)))
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
