"""The fleet peer server as a host runs it: a run dir laid out by model_peer's own code (fanout/peer_unit.py writes
model_peer_server.py and hf_verify.py side by side), started as a plain script with no Ansible on its path."""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from ansible.module_utils.fanout import peer_unit


@functools.lru_cache(maxsize=None)
def server_script() -> Path:
    """Path of model_peer_server.py in a run dir of this test process (made once, removed at exit)."""
    run_dir = tempfile.mkdtemp(prefix="peer-run-")
    atexit.register(shutil.rmtree, run_dir, True)
    # the tests pass their own --token-sha256-file: the run dir's token file is unused
    return Path(peer_unit.prepare_run_dir(run_dir, "unused-token")["server"])
