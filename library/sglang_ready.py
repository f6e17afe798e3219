#!/usr/bin/python
"""Ansible module: wait until the SGLang service this play (re)started is ready; fail fast when it dies."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_ready
short_description: (Re)start an SGLang systemd unit and wait, fail-fast, until its new process is ready
description:
  - Watches the unit (ActiveState, SubState, MainPID, InvocationID, NRestarts, ExecMainStatus via C(systemctl show))
    and HTTP readiness (health path 200, then C(/v1/models) listing I(model_id)) in one loop.
  - Fails at the next poll (default 0.25 s) after the unit fails, is auto-restarted or changes main pid, with the
    failed invocation's journal lines in the message.
  - Never accepts an answer from a process older than the (re)start it performed; the invocation id captured before
    the (re)start is refused and every listening socket on the port must belong to the unit's current cgroup.
  - A timeout names the phase it was stuck in (stopping previous process, starting, not listening, old process
    listening, warming up, answering).
options:
  name:
    description: "systemd unit name (e.g. sglang.service)."
    type: str
    required: true
  url:
    description: "base URL to probe from the host itself (e.g. http://127.0.0.1:30001)."
    type: str
    required: true
  model_id:
    description: "id C(/v1/models) must list; empty accepts any."
    type: str
    default: ""
  api_key:
    description: "bearer key for C(/v1/models) (never logged)."
    type: str
    no_log: true
  state:
    description:
      - C(ready) only waits; C(started) starts the unit when it is not running, then waits;
        C(restarted) always restarts (C(systemctl restart --no-block)) and waits for the new invocation.
    type: str
    choices: [ready, started, restarted]
    default: ready
  timeout:
    description: "seconds to wait for readiness (model load on 8x B300 takes ~6 min)."
    type: float
    default: 900
  poll_interval:
    description: "seconds between polls; bounds the crash-to-verdict latency."
    type: float
    default: 0.25
  health_path:
    description: "readiness path (C(/health) or C(/health_generate))."
    type: str
    default: /health
  check_listener_owner:
    description: "require the port's listening sockets to belong to the unit's processes."
    type: bool
    default: true
  journal_lines:
    description: "journal lines of the failed invocation to include."
    type: int
    default: 40
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Restart and wait for the new process
  sglang_ready:
    name: sglang.service
    url: http://127.0.0.1:30001
    model_id: /srv/models/Kimi-K2.6
    api_key: "{{ sglang_service_api_key }}"
    state: restarted
    timeout: 900
  register: ready
"""

RETURN = r"""
time_to_ready: {description: seconds from the (re)start (or from the call) to ready., type: float, returned: success}
pid: {description: main pid of the ready process., type: int, returned: success}
invocation_id: {description: systemd invocation id of the ready process., type: str, returned: success}
n_restarts: {description: NRestarts of the unit., type: int, returned: success}
phases: {description: phases passed through, with their durations., type: list, returned: success}
phase: {description: phase at failure or timeout., type: str, returned: failure}
kind: {description: failed (the unit died) or timeout or error., type: str, returned: failure}
journal: {description: journal lines of the failed invocation., type: list, returned: failure}
unit: {description: unit state summary at failure., type: dict, returned: failure}
crash_to_verdict_s: {description: seconds from the main process exit (systemd's monotonic timestamp) to this verdict.,
                     type: float, returned: when the process exited}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang.ready import Options, Probe, ReadyError, start, wait_ready
from ansible.module_utils.systemd.unit import SystemdError


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            url=dict(type="str", required=True),
            model_id=dict(type="str", default=""),
            api_key=dict(type="str", no_log=True),
            state=dict(type="str", choices=["ready", "started", "restarted"], default="ready"),
            timeout=dict(type="float", default=900),
            poll_interval=dict(type="float", default=0.25),
            health_path=dict(type="str", default="/health"),
            check_listener_owner=dict(type="bool", default=True),
            journal_lines=dict(type="int", default=40),
        ),
        supports_check_mode=True,
    )
    p = module.params
    opts = Options(unit=p["name"], base_url=p["url"], model_id=p["model_id"], api_key=p["api_key"],
                   timeout=p["timeout"], poll=p["poll_interval"], health_path=p["health_path"],
                   check_listener_owner=p["check_listener_owner"], journal_lines=p["journal_lines"])
    probe = Probe()
    try:
        current = probe.show(opts.unit)
        action = {"restarted": "restart", "started": None if current.running else "start"}.get(p["state"])
        if module.check_mode:
            module.exit_json(changed=action is not None, pid=current.main_pid, invocation_id=current.invocation_id,
                             time_to_ready=None, n_restarts=current.n_restarts, phases=[])
        stale = start(opts.unit, action, probe) if action else None
        result = wait_ready(opts, stale_invocation=stale.invocation_id if stale else "",
                            stale_pid=stale.main_pid if stale else 0, probe=probe)
    except ReadyError as exc:
        module.fail_json(msg=exc.message, phase=exc.phase, kind=exc.kind, journal=exc.evidence.get("journal", []),
                         unit=exc.evidence.get("unit", {}), phases=exc.evidence.get("phases", []),
                         crash_to_verdict_s=exc.evidence.get("crash_to_verdict_s"))
    except SystemdError as exc:
        module.fail_json(msg=str(exc), phase="systemctl", kind="error")
    module.exit_json(changed=action is not None, time_to_ready=result["time_to_ready"], pid=result["pid"],
                     invocation_id=result["invocation_id"], n_restarts=result["n_restarts"], phases=result["phases"])


if __name__ == "__main__":
    main()
