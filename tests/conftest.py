"""Shared pytest setup: the repo root is importable (module_utils, lab, bench, reporting...)."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The controller venv's tools (ansible-playbook, molecule) come first, whoever started pytest.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))
