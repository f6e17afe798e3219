"""Run one role's molecule scenario (`molecule test` in roles/<role>) from the lab suite.

Two ways, one helper:
- on a lab of its own (LAB_NAME mol-<role>, the scenario's default): `molecule test` makes and removes it;
- on the calling test module's lab (`lab_name=`, `keep_lab=True`): `molecule test --destroy=never`, and the module's
  lab fixture takes the lab down. A lab module that converges the same playbooks pays for them once (HOSTED below):
  the scenario runs first (its converged hosts are where the module's tests start), or right after the module's own
  tests that converged what it converges (its converge and idempotence are then no-ops, its verify runs).

Each run gets its own molecule state directory (MOLECULE_EPHEMERAL_DIRECTORY): a stale "created"/"prepared" state of
an earlier run must never make molecule skip a step on a lab that is new.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"

# Scenarios run on a lab module's own lab (role -> (test file, LAB_NAME)); the others run on a lab of their own from
# tests/integration/test_molecule.py. A hosted scenario's lab has its hosts (same host set and inventory).
HOSTED = {
    "sglang_service": ("tests/integration/test_service.py", "service"),
    "sglang_bench": ("tests/integration/test_service.py", "service"),
    "sglang_router": ("tests/integration/test_rolling.py", "rolling"),
    "monitoring": ("tests/integration/test_rolling.py", "rolling"),
    "venv": ("tests/integration/test_venv.py", "venv"),
    "models": ("tests/integration/test_models.py", "models"),
}


def run_scenario(role: str, log: Path, lab_name: str | None = None, keep_lab: bool = False,
                 env: dict | None = None) -> None:
    """`molecule test` of roles/<role>; AssertionError with the log's tail when it fails. env: more variables for
    molecule (a scenario's own knobs, e.g. the monitoring scenario's MONITORING_PREPARE)."""
    lab_name = lab_name or f"mol-{role}"
    env = {**os.environ, **(env or {}), "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "PYTHONPATH": str(ROOT), "LAB_NAME": lab_name,
           "MOLECULE_EPHEMERAL_DIRECTORY": str(log.parent / f"molecule-{role}")}
    argv = [str(BIN / "molecule"), "test"] + (["--destroy=never"] if keep_lab else [])
    with log.open("w") as out:
        try:
            rc = subprocess.run(argv, cwd=ROOT / "roles" / role, env=env, stdout=out, stderr=subprocess.STDOUT,
                                timeout=1800).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout (1800 s)"
    text = log.read_text(errors="replace")
    if rc != 0 and not keep_lab:    # stopped before its destroy step: its lab is still up (its hosts hold inotify)
        subprocess.run([str(BIN / "python"), "-m", "lab", "--name", lab_name, "down"], cwd=ROOT, env=env,
                       capture_output=True, timeout=300)
    assert rc == 0, f"molecule test of {role} on lab {lab_name}: rc={rc}\n{text[-12000:]}"
