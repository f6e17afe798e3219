"""The fleet peer server as a host runs it: a run dir laid out by model_peer's own code (fanout/peer_unit.py writes
model_peer_server.py and hf_verify.py side by side), started as a plain script with no Ansible on its path."""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

from ansible.module_utils.fanout import peer_unit


@functools.lru_cache(maxsize=None)
def server_script() -> Path:
    """Path of model_peer_server.py in a run dir of this test process (made once, removed at exit)."""
    run_dir = tempfile.mkdtemp(prefix="peer-run-")
    atexit.register(shutil.rmtree, run_dir, True)
    for name, text in peer_unit.server_sources().items():
        with open(os.path.join(run_dir, name), "w") as f:
            f.write(text)
    return Path(run_dir) / peer_unit.SERVER_SCRIPT
