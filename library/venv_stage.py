#!/usr/bin/python
"""Ansible module: compare the live venv with a source manifest and prepare the stage for the transfer."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_stage
short_description: Decide what must move for a venv stream and prepare the staging directory
description:
  - Compares the live venv at I(path) with the source manifest. Identical -> C(in_sync), nothing else happens.
  - Otherwise makes C(.<name>.stage) beside the live venv - a hard-link copy of the live venv without the
    paths that differ (directories and symlinks already as the source has them) - and returns the files to
    request from the source (C(send)) or C(full) when the target has no venv yet.
  - Removes a stale stage left by an interrupted run first. The live path is never written.
options:
  path: {description: Absolute live venv path., type: path, required: true}
  source_manifest: {description: "The source's manifest: the text venv_manifest returns with return_entries.", type: str, required: true}
  cache_dir: {description: "Root-only hash cache directory: files whose size, mtime, ctime, inode and device are unchanged since they were last hashed are not read again. Empty = hash every file (full verify).", type: path, default: ""}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Prepare the stage
  venv_stage:
    path: /opt/sglang/venv
    source_manifest: "{{ source.manifest }}"
  register: stage
"""

RETURN = r"""
in_sync: {description: The live venv equals the source; nothing moves., type: bool, returned: always}
full: {description: No venv on the target; the whole tree moves., type: bool, returned: always}
send: {description: Relative file paths to request from the source (empty when full or in_sync)., type: list, returned: always}
send_count: {description: Number of files that move., type: int, returned: always}
send_bytes: {description: Bytes of file content that move (uncompressed)., type: int, returned: always}
delete: {description: Paths the target has and the source lacks., type: list, returned: always}
stage: {description: Staging directory path., type: str, returned: always}
live_digest: {description: Content hash of the live venv before the change., type: str, returned: always}
hashed_bytes: {description: Bytes of the live venv read and hashed (the rest came from the hash cache)., type: int, returned: always}
cached_files: {description: Live files whose hash came from the hash cache., type: int, returned: always}
recovered: {description: Leftovers of an interrupted run that were cleaned up., type: list, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.manifest import ManifestError, decode
from ansible.module_utils.venv.stage import StageError, prepare


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", default=""),
            path=dict(type="path", required=True),
            source_manifest=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    try:
        result = prepare(module.params["path"], decode(module.params["source_manifest"]), module.check_mode,
                         module.params["cache_dir"] or "")
    except (ManifestError, StageError, OSError) as exc:
        module.fail_json(msg=f"venv stage: {exc}", path=module.params["path"])
    module.exit_json(changed=not result["in_sync"] or bool(result["recovered"]), **result)


if __name__ == "__main__":
    main()
