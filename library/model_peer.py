#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the fleet peer server that serves this host's verified model files to the other hosts."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: model_peer
short_description: Start or stop the read-only peer server of the fleet fan-out of model weights
description:
  - Serves, to the other hosts of the fleet, the files of I(models) under I(root) that this host's own verified
    manifest (C(<root>/<model>/.hf_model/manifest.json)) vouches for right now (recorded size and mtime_ns still
    those of the file), read-only, behind a bearer token, bound to one address. Receivers check every file against
    the Hub's sha256 themselves; a file changed after verification is no longer served.
  - Routes C(/health), C(/index/<model>) (vouched files with size and sha256, the fetch progress, transfers in
    flight), C(/files/<model>/<path>) (Range supported), C(/bundles/<name>) (with I(bundle_dir)).
  - I(state=started) stops a previous run's server of the same I(unit) (its token is stale), writes I(run_dir)
    (0700) with the server's source and sha256(I(token)) (0600), starts it with C(systemd-run --unit=<unit>
    --collect) (C(RuntimeMaxSec) = I(lifetime) + 30 s as the backstop of the server's own lifetime), and waits
    until C(/health) answers from the unit's own process. On failure the unit is stopped and the journal tail and
    the last probe are returned.
  - I(state=stopped) stops the unit (SIGTERM, SIGKILL after 15 s), returns its final stats and removes the files
    of I(run_dir).
  - Runs on the target; needs systemd (C(/run/systemd/system)) and the standard library only.
options:
  state:
    description: Whether the peer server runs.
    type: str
    choices: [started, stopped]
    default: started
  bind:
    description:
      - IP address literal to listen on, this host's fleet network address. The wildcard addresses C(0.0.0.0) and
        C(::) are refused. Required when I(state=started).
    type: str
  port:
    description: TCP port.
    type: int
    default: 8095
  root:
    description: Directory holding the model directories. Required when I(state=started).
    type: path
  models:
    description: Model directory names under I(root) to serve (C([A-Za-z0-9][A-Za-z0-9._-]*)). Required when
      I(state=started).
    type: list
    elements: str
  bundle_dir:
    description: Directory whose regular files are served under C(/bundles/<name>) (compile-cache bundles).
    type: path
  token:
    description: Bearer token the peers send (at least 16 printable characters). Only its sha256 is written.
      Required when I(state=started).
    type: str
  lifetime:
    description: Seconds the server serves before it exits on its own.
    type: int
    default: 7200
  unit:
    description: Name of the transient systemd unit. A loaded unit of that name that is not transient is refused.
    type: str
    default: sglang-model-peer
  run_dir:
    description: Directory of the server's files (sources, token hash, stats); must hold nothing else.
    type: path
    default: /run/sglang-model-peer
  python:
    description: Interpreter that runs the server (default the one running this module).
    type: path
  wait_timeout:
    description: Seconds to wait for C(/health) to answer after the start.
    type: int
    default: 20
attributes:
  check_mode:
    support: full
    details:
      - I(state=started) runs nothing and reports C(changed) with what would start.
      - I(state=stopped) reads the unit's state only; C(changed) is whether it is active.
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: Serve the verified weights to the rest of the fleet for two hours
  model_peer:
    bind: "{{ ansible_default_ipv4.address }}"
    root: /srv/models
    models: [Kimi-K2.6, Kimi-K2.6-DFlash]
    token: "{{ models_peer_token }}"
    lifetime: 7200
  register: peer

- name: Stop it and keep what it served
  model_peer:
    state: stopped
  register: peer_stats
"""

RETURN = r"""
msg:
  description: One line, what was done (or would be, in check mode).
  type: str
  returned: always
url:
  description: Base URL of the server, C(http://<bind>:<port>) (IPv6 in brackets).
  type: str
  returned: state=started
unit:
  description: The transient systemd unit.
  type: str
  returned: state=started
pid:
  description: The server's process id (the unit's MainPID, which answered C(/health)); 0 in check mode.
  type: int
  returned: state=started
stats:
  description:
    - The server's final counters (C(bytes_served) per model and C(bundles), C(files_served) per model,
      C(requests), C(unauthorized), C(started), C(updated), C(pid)); C({}) when there were none.
  type: dict
  returned: state=stopped
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.fanout.peer_unit import PeerError, manage

ARGS = dict(
    state=dict(type="str", choices=["started", "stopped"], default="started"),
    bind=dict(type="str"),
    port=dict(type="int", default=8095),
    root=dict(type="path"),
    models=dict(type="list", elements="str"),
    bundle_dir=dict(type="path"),
    token=dict(type="str", no_log=True),
    lifetime=dict(type="int", default=7200),
    unit=dict(type="str", default="sglang-model-peer"),
    run_dir=dict(type="path", default="/run/sglang-model-peer"),
    python=dict(type="path"),
    wait_timeout=dict(type="int", default=20),
)


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True,
                           required_if=[("state", "started", ("bind", "root", "models", "token"))])
    try:
        result = manage(dict(module.params), check_mode=module.check_mode)
    except PeerError as err:
        module.fail_json(msg=str(err), **err.evidence)
    except Exception as err:  # pylint: disable=broad-except
        module.fail_json(msg="%s: %s" % (type(err).__name__, err), exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
