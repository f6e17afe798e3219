#!/usr/bin/python
"""Ansible module: content manifest of a venv (read-only)."""
from __future__ import annotations

DOCUMENTATION = r"""
module: venv_manifest
short_description: Content manifest (path, kind, mode, size, sha256) of a venv, and its provenance fact
description:
  - Walks the venv and hashes every file (byte-code caches left out), returning the content hash (digest),
    counts, and optionally every entry. Never changes anything.
  - Fails when the venv is missing and I(must_exist) is true (the stream source check).
options:
  path: {description: Absolute venv path., type: path, required: true}
  fact_path: {description: Provenance fact file to read and return (empty = none)., type: path, default: ""}
  return_entries: {description: Return the full manifest (needed by venv_stage on the target)., type: bool, default: false}
  must_exist: {description: Fail when I(path) is not a venv., type: bool, default: true}
  cache_dir: {description: "Root-only hash cache directory: files whose size, mtime, ctime, inode and device are unchanged since they were last hashed are not read again. Empty = hash every file (full verify).", type: path, default: ""}
author: [sglang-deploy]
"""

EXAMPLES = r"""
- name: Manifest of the source venv
  venv_manifest:
    path: /opt/sglang/venv
    return_entries: true
  delegate_to: ct200-lab
  register: source
"""

RETURN = r"""
exists: {description: Whether a venv is at path., type: bool, returned: always}
digest: {description: Content hash (sha256 of the canonical manifest)., type: str, returned: always}
files: {description: Number of files., type: int, returned: always}
bytes: {description: Sum of file sizes., type: int, returned: always}
manifest: {description: "The canonical manifest text (its sha256 is the digest), one entry per line: path TAB kind (f, d, l) TAB octal mode TAB size TAB sha256-or-link-target.", type: str, returned: when return_entries}
hashed_bytes: {description: Bytes read and hashed (the rest came from the hash cache)., type: int, returned: when exists}
cached_files: {description: Files whose hash came from the hash cache., type: int, returned: when exists}
provenance: {description: Content of the provenance fact file (null when absent)., type: dict, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.venv.manifest import ManifestError, describe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cache_dir=dict(type="path", default=""),
            path=dict(type="path", required=True),
            fact_path=dict(type="path", default=""),
            return_entries=dict(type="bool", default=False),
            must_exist=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = describe(p["path"], p["fact_path"], p["return_entries"], p["must_exist"], p["cache_dir"] or "",
                          not module.check_mode)
    except ManifestError as exc:
        module.fail_json(msg=f"venv manifest: {exc}", path=p["path"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
