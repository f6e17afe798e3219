#!/usr/bin/python
"""Ansible module: verify the staged venv and swap it in atomically."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_commit
short_description: Verify the staged venv against the expected content hash and swap it in by rename
description:
  - Computes the full manifest of C(.<name>.stage); when I(expected_digest) is given it must match, else the
    module fails and the live venv stays as it was.
  - Files the stream's receiver hashed as it wrote them (C(.<name>.stage.hashes), 0600) are not read
    again as long as they keep the stat key they had when hashed; every other file is read and hashed here.
  - >-
    Then (I(bytecode)) compiles the stage's byte-code with the stage's own interpreter, before the swap: every
    module under purelib/platlib as a checked-hash pyc naming its live path (module_utils/venv/bytecode.py), so that
    no start of the service compiles anything (the service user cannot write into the root-owned venv). A pyc the
    stream hard-linked from the live venv that is still valid is kept; pycs of deleted sources are removed. Byte-code
    is outside the manifest: the digest is unchanged by it. A pyc that cannot be written fails the module; the live
    venv stays as it was.
  - Swaps stage and live with renameat2(RENAME_EXCHANGE) (two renames where the filesystem refuses), then
    removes the previous venv.
options:
  path: {description: Absolute live venv path., type: path, required: true}
  expected_digest: {description: Content hash the stage must have (the source's); empty = no comparison., type: str, default: ""}
  bytecode: {description: Compile the stage's byte-code before the swap., type: bool, default: true}
  cache_dir: {description: "Root-only hash cache directory: files whose size, mtime, ctime, inode and device are unchanged since they were last hashed are not read again. Empty = hash every file (full verify).", type: path, default: ""}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Swap the streamed venv in
  venv_commit:
    path: /opt/sglang/venv
    expected_digest: "{{ source.digest }}"
"""

RETURN = r"""
digest: {description: Content hash of the venv now live., type: str, returned: success}
files: {description: Number of files., type: int, returned: success}
bytes: {description: Sum of file sizes., type: int, returned: success}
how: {description: exchange, rename or two-renames., type: str, returned: success}
hashed_at_commit_files: {description: Files read and hashed by this module., type: int, returned: success}
hashed_at_commit_bytes: {description: Bytes read and hashed by this module., type: int, returned: success}
hashed_while_receiving_files: {description: Files vouched for by the stream's receiver (not read again)., type: int, returned: success}
bytecode: {description: "The stage's compile pass: sources, compiled, kept (valid checked-hash pycs carried over), uncompilable_count, uncompilable, orphans_removed, mode, workers.", type: dict, returned: when bytecode is true}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.stage import ManifestError, StageError, commit


def main():
    module = AnsibleModule(
        argument_spec=dict(
            bytecode=dict(type="bool", default=True),
            cache_dir=dict(type="path", default=""),
            path=dict(type="path", required=True),
            expected_digest=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    try:
        result = commit(module.params["path"], module.params["expected_digest"], module.check_mode,
                        module.params["cache_dir"] or "", module.params["bytecode"])
    except (ManifestError, StageError, OSError) as exc:
        module.fail_json(msg=f"venv commit: {exc}", path=module.params["path"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
