#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: read a Hub repository's file list and hashes at a pinned revision (run once, on the controller)."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: hf_tree
short_description: Resolve a Hub revision and list its files with the Hub's own hashes
description:
  - Resolves I(revision) to its commit sha and lists the tree at that commit (huggingface_hub HfApi when importable,
    else a stdlib client speaking the same protocol), with the file selection of I(allow_patterns) and
    I(ignore_patterns). Hostile trees (absolute paths, C(..), duplicates, sizes that disagree) are refused.
  - Meant to run once per model on the controller (C(run_once), C(delegate_to localhost)) for the LAN fan-out of
    roles/models - every receiver checks every file against these hashes (sha256 for LFS files, the git blob sha1
    for the others), so a peer is never trusted for a hash.
  - Reads the Hub only; changes nothing anywhere.
options:
  repo_id:
    description: Repository id, C(namespace/name).
    type: str
    required: true
  repo_type:
    description: C(model) or C(dataset).
    type: str
    choices: [model, dataset]
    default: model
  revision:
    description: Branch, tag or full commit sha. A sha must come back unchanged.
    type: str
    default: main
  endpoint:
    description: Hub endpoint (HF_ENDPOINT).
    type: str
    default: https://huggingface.co
  token:
    description: Hub access token (gated or private repositories).
    type: str
  allow_patterns:
    description: Keep only files matching one of these fnmatch patterns (a trailing C(/) matches a directory).
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Drop files matching one of these fnmatch patterns.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Read-only; the same answer in check mode.
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: Read the Hub's tree once for the whole fleet
  hf_tree:
    repo_id: moonshotai/Kimi-K2.6
    revision: 2755962d07cb42aa2d988a35bcb65cd4a9c2de82
    ignore_patterns: ["*.md", "original/"]
  delegate_to: localhost
  run_once: true
  register: tree
"""

RETURN = r"""
sha:
  description: Commit sha the revision resolved to.
  type: str
  returned: always
files:
  description: Selected files, each C(path), C(size), C(sha256) (LFS files; else null) and C(blob_sha1).
  type: list
  elements: dict
  returned: always
files_total:
  description: Number of selected files.
  type: int
  returned: always
bytes_total:
  description: Their total size.
  type: int
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.hf.hub import REPO_ARGS, HubError, hub_tree

ARGS = REPO_ARGS


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    p = module.params
    try:
        sha, files = hub_tree(p["endpoint"], p["repo_id"], p["revision"], token=p["token"],
                              repo_type=p["repo_type"], allow_patterns=p["allow_patterns"],
                              ignore_patterns=p["ignore_patterns"])
    except HubError as err:
        module.fail_json(msg=str(err), error_code=err.code, http_status=err.status)
    if not files:
        module.fail_json(msg="%s@%s: no file matches allow_patterns=%s ignore_patterns=%s"
                         % (p["repo_id"], sha, p["allow_patterns"], p["ignore_patterns"]))
    module.exit_json(changed=False, sha=sha, files=[f.as_dict() for f in files], files_total=len(files),
                     bytes_total=sum(f.size for f in files))


if __name__ == "__main__":
    main()
