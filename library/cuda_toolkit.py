#!/usr/bin/python
"""Ansible module cuda_toolkit: what CUDA toolkit sits at a CUDA_HOME (version file or headers, nvcc --version)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit
short_description: Read the CUDA toolkit at a CUDA_HOME and say why it is not the release asked for
description:
  - "Reads the toolkit's version from C(version.json) (C(cuda.version)), else C(version.txt), else the
    C(CUDA_VERSION) of C(include/cuda.h) (toolkits laid out from NVIDIA's wheels carry no version file), and runs
    C(<cuda_home>/bin/nvcc --version) for its C(release X.Y) line (module_utils/gpu/cuda_toolkit.py)."
  - "RV(problems) names every finding that makes it not a CUDA O(version) toolkit: O(cuda_home) missing, no
    version, another version, nvcc missing or not executable, nvcc failing, nvcc reporting another release."
  - "Reports only; the task decides (the cuda role refuses adoption before any change, and fails verify). Only
    reads and runs C(nvcc --version), so check mode runs the same."
options:
  cuda_home:
    description: The toolkit's directory (CUDA_HOME); nvcc is C(<cuda_home>/bin/nvcc).
    type: path
    required: true
  version:
    description: The release the toolkit must be, MAJOR.MINOR (C(13.0)); patch levels are not compared.
    type: str
    required: true
  timeout:
    description: Seconds nvcc --version may take.
    type: int
    default: 60
author: sglang-deploy
"""

EXAMPLES = r"""
- name: Read the toolkit at /usr/local/cuda-13.0
  cuda_toolkit:
    cuda_home: /usr/local/cuda-13.0
    version: "13.0"
  register: toolkit
"""

RETURN = r"""
toolkit:
  description: What was found at cuda_home.
  returned: always
  type: dict
  contains:
    cuda_home: {description: The directory read, type: str}
    exists: {description: Whether cuda_home is a directory, type: bool}
    version: {description: "The toolkit's version (13.0.2 from version.json, 13.0 from cuda.h); empty when none", type: str}
    version_source: {description: "version.json, version.txt or include/cuda.h; empty when none", type: str}
    nvcc: {description: The nvcc path, type: str}
    nvcc_rc: {description: nvcc --version's exit status; null when it did not run, type: int}
    nvcc_release: {description: "The release nvcc --version reports (13.0); empty when none", type: str}
    nvcc_output: {description: "nvcc --version's output (its last 2000 characters)", type: str}
problems:
  description: One line per finding that makes it not a CUDA I(version) toolkit; [] = it is one.
  returned: always
  type: list
  elements: str
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.cuda_toolkit import inspect


def main():
    module = AnsibleModule(
        argument_spec=dict(
            cuda_home=dict(type="path", required=True),
            version=dict(type="str", required=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not re.match(r"^[0-9]+\.[0-9]+$", p["version"]):
        module.fail_json(msg="version must be MAJOR.MINOR (13.0), got %r" % p["version"])
    if not p["cuda_home"].startswith("/"):
        module.fail_json(msg="cuda_home must be an absolute path, got %r" % p["cuda_home"])
    found = inspect(p["cuda_home"], p["version"], timeout=p["timeout"])
    problems = found.pop("problems")
    module.exit_json(changed=False, toolkit=found, problems=problems)


if __name__ == "__main__":
    main()
