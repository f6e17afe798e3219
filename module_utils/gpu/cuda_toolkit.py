"""The CUDA toolkit installed at a CUDA_HOME: its version, as the compile-cache key and the multi-node consistency
check read it (version.json, else the older version.txt)."""
from __future__ import annotations

import json
import os
import re


def cuda_version(cuda_home: str) -> str:
    """The CUDA toolkit's version at cuda_home (version.json, else version.txt); "" when there is none."""
    if not cuda_home:
        return ""
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as fh:
            return str(json.load(fh)["cuda"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(cuda_home, "version.txt"), encoding="utf-8") as fh:
            m = re.search(r"CUDA Version\s+([0-9.]+)", fh.read())
            return m.group(1) if m else ""
    except OSError:
        return ""
