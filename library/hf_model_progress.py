#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: wait for and report the progress of an hf_model download."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: hf_model_progress
short_description: Report the progress of an hf_model run (percent, rate, ETA)
description:
  - Reads C(<dest>/.hf_model/progress.json), waiting up to I(wait) seconds for it to change or for the run to
    end, and returns a one-line summary. A run whose worker pid is gone counts as finished and failed, so a
    poll loop never outlives the worker.
  - Meant for a loop with C(loop_control.break_when) and C(label) showing the summary (see roles/models).
options:
  dest:
    description: Model directory given to hf_model.
    type: path
    required: true
  wait:
    description: Longest wait for a change, in seconds.
    type: int
    default: 15
  since:
    description: The C(updated) value of the previous poll; return as soon as the file has a newer one.
    type: float
  name:
    description: Label for the summary when no progress file exists yet.
    type: str
  job_id:
    description: Ansible async job id of the hf_model run; its end (even before any progress was written) ends the wait.
    type: str
  newer_than:
    description: Ignore a progress file whose run started before this epoch time (an earlier worker's).
    type: float
  async_dir:
    description: Directory of the async job files.
    type: path
    default: ~/.ansible_async
attributes:
  check_mode:
    support: full
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: Show download progress
  hf_model_progress:
    dest: /srv/models/Kimi-K2.6
    since: "{{ poll.updated | default(omit) }}"
  register: poll
  loop: "{{ range(0, 240) | list }}"
  loop_control:
    label: "{{ poll.summary | default('') }}"
    break_when: poll.finished
"""

RETURN = r"""
finished:
  description: The run ended (done, failed, or its worker is gone).
  type: bool
  returned: always
failed_run:
  description: The run ended without success.
  type: bool
  returned: always
summary:
  description: One line, e.g. C(Kimi-K2.6 running 41.2% 2.3 GiB/5.6 GiB 180.1 MiB/s ETA 0:00:19).
  type: str
  returned: always
updated:
  description: Time stamp of the progress file (pass it back as I(since)).
  type: float
  returned: always
progress:
  description: The progress file's content.
  type: dict
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.hf import progress as hf_progress


def main():
    module = AnsibleModule(argument_spec=dict(dest=dict(type="path", required=True), wait=dict(type="int", default=15),
                                              since=dict(type="float"), name=dict(type="str"), job_id=dict(type="str"),
                                              newer_than=dict(type="float"),
                                              async_dir=dict(type="path", default="~/.ansible_async")),
                           supports_check_mode=True)
    p = module.params
    path = os.path.join(p["dest"], ".hf_model", "progress.json")
    job_file = None
    if p["job_id"]:
        if "/" in p["job_id"] or p["job_id"].startswith("."):
            module.fail_json(msg="bad job_id %r" % p["job_id"])
        job_file = os.path.join(os.path.expanduser(p["async_dir"]), p["job_id"])
    prog, finished, failed = hf_progress.poll(path, wait=max(0, p["wait"]), since=p["since"], job_file=job_file,
                                              newer_than=p["newer_than"])
    if prog is None:
        prog = {"name": p["name"] or os.path.basename(p["dest"]), "state": "starting"}
    module.exit_json(changed=False, finished=finished, failed_run=failed, summary=hf_progress.summary(prog),
                     updated=prog.get("updated") or 0.0, progress=prog)


if __name__ == "__main__":
    main()
