#!/usr/bin/python
"""Ansible module: the DFlash drafter's own block size (its config.json on the host) against the server's (reads only)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_drafter_check
short_description: Refuse a DFlash drafter whose config.json block size is not the one the server would run
description:
  - "Reads C(<path>/config.json) of the drafter the server would load and takes its block size where SGLang 0.5.11
    takes it: C(dflash_config.block_size), else a top-level C(block_size)
    (sglang/srt/speculative/dflash_utils.py parse_dflash_draft_config)."
  - "Fails when I(block_size) is given and differs, naming both numbers and both sources (I(source) and the config
    file with its key); real SGLang only logs such a mismatch and runs the drafter with blocks it was not made for."
  - "Fails, naming the path, when the config is missing, unreadable, not a JSON object, or carries no block size
    (the server would then run it with I(block_size), or 16, unchecked)."
  - "Without I(block_size) (the profile sets none and the version's default is none) the server takes the drafter's
    own block size (sglang/srt/server_args.py ServerArgs._handle_speculative_decoding): the config must still carry
    one."
  - "Changes nothing, so it runs in check mode too; there a missing config is reported (RV(checked) false), not
    refused, since the models play of the same run (also in check mode) has not fetched it yet."
options:
  path:
    description: "the drafter's directory on the host (the server's C(--speculative-draft-model-path))."
    type: path
    required: true
  block_size:
    description: "the block size the server would run; omitted when the server would take the drafter's own."
    type: int
  source:
    description: "where I(block_size) comes from, in words (a flag of the argv, or the version's default)."
    type: str
    default: ""
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: The drafter is made for the block size the server would run
  sglang_drafter_check:
    path: /srv/models/Kimi-K2.6-DFlash
    block_size: 8
    source: --speculative-dflash-block-size 8 (the server's argv)
"""

RETURN = r"""
checked: {description: whether the drafter's config was read and judged (false only for a missing config in check mode)., type: bool, returned: always}
config: {description: the drafter's config.json path., type: str, returned: always}
drafter_block_size: {description: the drafter's own block size (null when unchecked)., type: int, returned: always}
drafter_key: {description: the config key it came from (dflash_config.block_size or block_size)., type: str, returned: always}
block_size: {description: the block size the server would run (the drafter's own when the profile sets none)., type: int, returned: always}
source: {description: where the server's block size comes from., type: str, returned: always}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang.drafter import CONFIG_FILE, DrafterError, check


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            block_size=dict(type="int"),
            source=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = check(p["path"], p["block_size"], p["source"])
    except DrafterError as exc:
        if module.check_mode and exc.kind == "drafter_missing":
            module.exit_json(changed=False, checked=False, config=os.path.join(p["path"], CONFIG_FILE),
                             drafter_block_size=None, drafter_key=None, block_size=p["block_size"],
                             source=p["source"], msg=f"check mode: {exc.message} A real run refuses it unless the "
                                                     "models play has put the drafter there.")
        module.fail_json(**exc.fail_kwargs())
    module.exit_json(changed=False, checked=True, **result)


if __name__ == "__main__":
    main()
