#!/usr/bin/python
"""Ansible module: a multi-node SGLang group's readiness, run on rank 0's host; fails fast when any rank dies."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_group_ready
short_description: Wait, bounded, until a multi-node SGLang group is ready; fail within seconds when a rank dies
description:
  - Runs on rank 0's host. Rank 0 must become ready exactly as M(sglang_ready) decides it (the same code,
    C(module_utils/sglang/ready.py)), its unit's MainPID and InvocationID watched, so an old process answering
    during a restart is never taken for the new one.
  - "Every other rank is watched through the dummy health server SGLang runs on ranks >= 1 (it answers only
    C(/ping), C(/health), C(/health_generate): 200 once that node's schedulers are up): each I(ranks) URL must
    answer 200."
  - Once rank 0 is ready and every rank answered, all ranks (rank 0 too, through its I(health_path) and its unit)
    are watched for I(settle) more seconds.
  - A rank that has answered and then gives no 200 for I(rank_dead_after) seconds fails the wait at once, naming
    that rank (default 2 s, so a killed rank is reported within 3 s). A rank that never answered is only reported
    at I(timeout) (a rank still loading and a rank that died while loading look the same over HTTP).
  - When rank 0 is the one (its unit failed, was restarted, changed pid, or stopped answering) the failure carries
    its unit state and journal tail; for a rank >= 1 the controller reads its journal (see EXAMPLES).
  - "A real group falls together: when a rank >= 1 dies, rank 0 logs gloo's lost-peer line (C(Connection closed by
    peer [ADDR]:PORT), C(Read error [ADDR]:PORT)) and exits within ~0.1 s. When rank 0's journal names a peer
    whose address belongs to exactly one of I(ranks), that rank is the one named (I(kind=rank_dead)), with rank 0's
    unit and journal as the evidence."
options:
  name:
    description: "rank 0's systemd unit name (e.g. sglang.service)."
    type: str
    required: true
  url:
    description: "rank 0's base URL, probed from the host itself (e.g. http://127.0.0.1:30001)."
    type: str
    required: true
  model_id:
    description: "id rank 0's C(/v1/models) must list; empty accepts any."
    type: str
    default: ""
  api_key:
    description: "bearer key for rank 0's C(/v1/models) (never logged)."
    type: str
    no_log: true
  state:
    description:
      - As in M(sglang_ready), for rank 0's unit. C(ready) only waits; C(started) starts it when not running;
        C(restarted) always restarts it (C(systemctl restart --no-block)) and waits for the new invocation.
    type: str
    choices: [ready, started, restarted]
    default: ready
  rank0_name:
    description: "how failures name rank 0 (e.g. its inventory_hostname)."
    type: str
    default: rank 0
  ranks:
    description:
      - "The other ranks, in rank order: each C({name, url}) (C(url) = that host's C(--host):C(--port) as seen
        from rank 0), optionally C(node_rank) (default: its position + 1) and C(restarted: true) (its answers count
        only after it was seen down once: set it when that rank was restarted with C(--no-block) just before,
        so its old process can never count)."
    type: list
    elements: dict
    required: true
  timeout:
    description: "seconds to wait for the whole group (model load on 8x B300 takes ~6 min)."
    type: float
    default: 900
  poll_interval:
    description: "seconds between polls of rank 0's unit and of every rank (at most 0.25 is used for the ranks)."
    type: float
    default: 0.25
  health_path:
    description: "rank 0's readiness path (C(/health) or C(/health_generate))."
    type: str
    default: /health
  rank_health_path:
    description: "path probed on ranks >= 1."
    type: str
    default: /health
  rank_dead_after:
    description:
      - "seconds without a 200 after which a rank that answered counts as dead. Must exceed the time one health
        answer takes (real SGLang's rank 0 C(/health) runs a one-token generation: >= 1 s)."
    type: float
    default: 2.0
  rank_http_timeout:
    description: "seconds allowed for one health request to a rank."
    type: float
    default: 1.0
  settle:
    description: "seconds every rank must keep answering after the group first was ready."
    type: float
    default: 5.0
  check_listener_owner:
    description: "require rank 0's port to be held only by rank 0's unit (see M(sglang_ready))."
    type: bool
    default: true
  journal_lines:
    description: "journal lines of rank 0's failed invocation to include."
    type: int
    default: 40
notes:
  - Check mode starts nothing and does not wait; it reports rank 0's unit and probes every rank once.
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Restart rank 0 and wait for the whole group
  block:
    - name: Wait for the group (rank 0 restarted here, the other ranks restarted just before)
      sglang_group_ready:
        name: sglang.service
        url: http://127.0.0.1:30001
        model_id: /srv/models/Kimi-K2.6
        api_key: "{{ sglang_service_api_key }}"
        state: restarted
        rank0_name: "{{ inventory_hostname }}"
        ranks:
          - {name: b300-02, url: "http://10.0.0.12:30001", restarted: true}
          - {name: b300-03, url: "http://10.0.0.13:30001", restarted: true}
        timeout: 900
      register: group
  rescue:
    - name: Read the journal of the rank the failure names
      ansible.builtin.command: journalctl -u sglang.service -n 80 --no-pager
      delegate_to: "{{ group.failed_rank }}"
      register: rank_journal
      changed_when: false
      when: group.failed_rank | default('') not in ['', inventory_hostname]
    - name: Fail with both
      ansible.builtin.fail:
        msg: "{{ group.msg }}\n{{ rank_journal.stdout | default('') }}"
"""

RETURN = r"""
time_to_ready: {description: seconds from rank 0's (re)start (or from the call) to rank 0 ready., type: float,
                returned: success}
group_ready_s: {description: seconds from the call until rank 0 was ready and every rank answered., type: float,
                returned: success}
settle_s: {description: seconds every rank was watched after that., type: float, returned: success}
pid: {description: rank 0's main pid., type: int, returned: success}
invocation_id: {description: rank 0's systemd invocation id., type: str, returned: success}
n_restarts: {description: NRestarts of rank 0's unit., type: int, returned: success}
phases: {description: rank 0's phases with their durations., type: list, returned: always}
ranks: {description: "per rank: name, node_rank, url, answered, checks, oks, last_ok_ago_s, last_answer.",
        type: list, returned: always}
kind: {description: "rank_dead (a rank stopped answering, or rank 0 logged losing it), failed (rank 0's unit
         died), timeout or error.", type: str, returned: failure}
failed_rank: {description: name of the rank the failure is about (the one to read the journal of)., type: str,
              returned: failure}
node_rank: {description: its node rank., type: int, returned: failure}
phase: {description: "phase at failure (rank 0's own phase, waiting for ranks, settling).", type: str,
        returned: failure}
detect_s: {description: seconds the dead rank had been silent at the verdict., type: float, returned: failure}
failed_at: {description: "wall-clock time (epoch seconds, this host's clock) of the verdict: compare with when a rank
             died.", type: float, returned: failure}
waited_s: {description: seconds from the call to the verdict., type: float, returned: failure}
lost_line: {description: "rank 0's journal line that named the lost rank (empty when none did).", type: str,
            returned: failure}
unit: {description: rank 0's unit state (when rank 0 is the one)., type: dict, returned: failure}
journal: {description: rank 0's journal tail (when rank 0 is the one)., type: list, returned: failure}
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.multinode.group_ready import GroupError, GroupOptions, RankSpec, wait_group
from ansible.module_utils.sglang.ready import Options, Probe, start
from ansible.module_utils.sglang.api import call
from ansible.module_utils.systemd.unit import SystemdError


def _ranks(module, entries):
    specs, seen = [], set()
    for i, entry in enumerate(entries):
        name, url = str(entry.get("name") or "").strip(), str(entry.get("url") or "").strip()
        if not name or not url.startswith(("http://", "https://")):
            module.fail_json(msg=f"ranks[{i}] needs a name and an http(s) url, got {entry!r}", kind="error")
        if name in seen:
            module.fail_json(msg=f"ranks[{i}]: rank {name!r} is listed twice", kind="error")
        seen.add(name)
        node_rank = entry.get("node_rank", i + 1)
        try:
            node_rank = int(node_rank)
        except (TypeError, ValueError):
            node_rank = -1
        if node_rank < 1:
            module.fail_json(msg=f"ranks[{i}] ({name}): node_rank must be >= 1, got {entry.get('node_rank')!r}",
                             kind="error")
        specs.append(RankSpec(name=name, url=url.rstrip("/"), node_rank=node_rank,
                              restarted=module.boolean(entry.get("restarted", False))))
    return specs


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            url=dict(type="str", required=True),
            model_id=dict(type="str", default=""),
            api_key=dict(type="str", no_log=True),
            state=dict(type="str", choices=["ready", "started", "restarted"], default="ready"),
            rank0_name=dict(type="str", default="rank 0"),
            ranks=dict(type="list", elements="dict", required=True),
            timeout=dict(type="float", default=900),
            poll_interval=dict(type="float", default=0.25),
            health_path=dict(type="str", default="/health"),
            rank_health_path=dict(type="str", default="/health"),
            rank_dead_after=dict(type="float", default=2.0),
            rank_http_timeout=dict(type="float", default=1.0),
            settle=dict(type="float", default=5.0),
            check_listener_owner=dict(type="bool", default=True),
            journal_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] <= 0 or p["poll_interval"] <= 0 or p["rank_dead_after"] <= 0 or p["rank_http_timeout"] <= 0 \
            or p["settle"] < 0:
        module.fail_json(msg="timeout, poll_interval, rank_dead_after and rank_http_timeout must be > 0, settle >= 0",
                         kind="error")
    specs = _ranks(module, p["ranks"])
    opts = Options(unit=p["name"], base_url=p["url"], model_id=p["model_id"], api_key=p["api_key"],
                   timeout=p["timeout"], poll=p["poll_interval"], health_path=p["health_path"],
                   check_listener_owner=p["check_listener_owner"], journal_lines=p["journal_lines"])
    gopts = GroupOptions(ready=opts, ranks=specs, rank0_name=p["rank0_name"], rank_health_path=p["rank_health_path"],
                         rank_dead_after=p["rank_dead_after"], rank_http_timeout=p["rank_http_timeout"],
                         settle=p["settle"])
    probe = Probe()
    try:
        current = probe.show(opts.unit)
        action = {"restarted": "restart", "started": None if current.running else "start"}.get(p["state"])
        if module.check_mode:
            ranks = []
            for s in specs:
                resp = call(s.url, p["rank_health_path"], timeout=p["rank_http_timeout"])
                ranks.append({"name": s.name, "node_rank": s.node_rank, "url": s.url, "answered": resp.ok,
                              "checks": 1, "oks": int(resp.ok), "last_ok_ago_s": 0.0 if resp.ok else None,
                              "last_answer": "HTTP 200" if resp.ok else resp.describe()})
            module.exit_json(changed=action is not None, time_to_ready=None, group_ready_s=None, settle_s=None,
                             pid=current.main_pid, invocation_id=current.invocation_id,
                             n_restarts=current.n_restarts, phases=[], ranks=ranks)
        stale = start(opts.unit, action, probe) if action else None
        result = wait_group(gopts, stale_invocation=stale.invocation_id if stale else "",
                            stale_pid=stale.main_pid if stale else 0, probe=probe)
    except GroupError as exc:
        ev = exc.evidence
        module.fail_json(msg=exc.message, kind=exc.kind, failed_rank=exc.rank, node_rank=exc.node_rank,
                         phase=exc.phase, detect_s=ev.get("detect_s"), ranks=ev.get("ranks", []),
                         unit=ev.get("unit", {}), journal=ev.get("journal", []), phases=ev.get("phases", []),
                         lost_line=ev.get("lost_line", ""), failed_at=ev.get("failed_at"),
                         waited_s=ev.get("waited_s"))
    except SystemdError as exc:
        module.fail_json(msg=str(exc), kind="error", failed_rank=p["rank0_name"], node_rank=0, phase="systemctl",
                         detect_s=None, ranks=[], unit={}, journal=[], phases=[], lost_line="", failed_at=time.time(),
                         waited_s=None)
    module.exit_json(changed=action is not None, **result)


if __name__ == "__main__":
    main()
