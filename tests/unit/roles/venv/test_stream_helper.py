"""roles/venv: the controller-side stream helper the role runs (venv_stream_helper) is found on the module_utils path
by the real lookup, through ansible-playbook, and it is module_utils/venv/stream.py (it once named the flat
venv_stream.py after the move to packages: every stream route failed at argument validation)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def test_the_stream_helper_lookup_finds_the_packaged_file(tmp_path):
    defaults = (ROOT / "roles/venv/defaults/main.yml").read_text()
    expr = defaults.split("venv_stream_helper: >-", 1)[1].split("\n\n", 1)[0].strip()
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "FOUND=" + expr}}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(play)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = re.search(r'"msg": "FOUND=([^"]+)"', proc.stdout)
    assert found, proc.stdout[-2000:]
    assert Path(found.group(1)).resolve() == ROOT / "module_utils" / "venv" / "stream.py"
