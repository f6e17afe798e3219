#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: adopt a model's weights already on disk (an old deployment's) into the models role's layout."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: hf_adopt
short_description: Verify an old copy of a model against the Hub's hashes and hard-link it into the models root
description:
  - Logic in C(module_utils/hf/adopt.py). Looks for the model under each of I(sources) (C(<dir>/<repo name>), then
    C(<dir>/<name>)), checks every file the models role would fetch against I(tree) (sizes, then sha256 / git blob
    sha1, hashed in parallel, progress in C(<dest>/.hf_model/progress.json)), hard-links the good ones into I(dest)
    and records them in the models role's manifest, so the models role fetches 0 bytes for them.
  - The source is never changed. Another filesystem is refused unless I(copy). Files missing or bad in the source
    are reported and left for the models role. Check mode reads the source's sizes only and reports what it would do.
options:
  name:
    description: the model's directory name under the models root (the models role's entry name).
    type: str
    required: true
  repo_id:
    description: Hub repository id, C(namespace/name); its name part is the first directory looked for.
    type: str
    required: true
  repo_type:
    description: C(model) or C(dataset).
    type: str
    choices: [model, dataset]
    default: model
  tree:
    description: the Hub's tree at the pinned commit, as library/hf_tree.py returns it (C(sha), C(files)).
    type: dict
    required: true
  dest:
    description: the model's directory under the models root.
    type: path
    required: true
  sources:
    description: the old deployment's model directories to look in.
    type: list
    elements: path
    required: true
  copy:
    description: copy (and hash the copy) when the source is on another filesystem than I(dest).
    type: bool
    default: false
  hash_workers:
    description: files hashed at once (0 = one per CPU).
    type: int
    default: 0
attributes:
  check_mode:
    support: full
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: Adopt the old deployment's copy of Kimi-K2.6
  hf_adopt:
    name: Kimi-K2.6
    repo_id: moonshotai/Kimi-K2.6
    tree: "{{ tree_result }}"
    dest: /srv/models/Kimi-K2.6
    sources: [/root/models]
"""

RETURN = r"""
source: {description: the old copy used (null when none was found)., type: str, returned: always}
looked_in: {description: the directories looked for., type: list, returned: always}
method: {description: hardlink or copy (null without a source)., type: str, returned: always}
files_adopted: {description: files linked or copied and recorded in the manifest (check mode - that would be)., type: int, returned: always}
bytes_adopted: {description: their bytes., type: int, returned: always}
files_vouched: {description: files the manifest already vouched for (nothing to do)., type: int, returned: always}
files_missing: {description: files absent (or of another size) in the source., type: list, returned: always}
files_bad: {description: files whose hash did not match (left in the source, not adopted)., type: list, returned: always}
sha: {description: the commit of the tree., type: str, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.hf.adopt import adopt


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            repo_id=dict(type="str", required=True),
            repo_type=dict(type="str", choices=["model", "dataset"], default="model"),
            tree=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            sources=dict(type="list", elements="path", required=True),
            copy=dict(type="bool", default=False),
            hash_workers=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = adopt(p["name"], p["dest"], p["tree"], p["repo_id"], p["sources"], repo_type=p["repo_type"],
                       copy=p["copy"], check=module.check_mode, workers=p["hash_workers"] or None)
    except EvidenceError as exc:
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
