"""Where the lab keeps its things on the controller: the repository root, the labs' state, the cache (rootfs, test
Hub hashes), the cgroups its machines run in and the lock that serialises bridge and subnet changes."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("LAB_STATE_DIR", ROOT / ".lab"))
CACHE_DIR = Path(os.environ.get("LAB_CACHE", "/var/cache/sglang-lab"))
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
CGROUP_PARENT = "sglang-lab"
GLOBAL_LOCK = Path("/run/sglang-lab.lock")
