"""Every role's molecule scenario (`molecule test` in roles/<role>: destroy, syntax, create, converge, idempotence,
verify, destroy), run as part of the lab suite so the two xdist workers share them out with the other labs.

Each scenario brings up and takes down its own lab (LAB_NAME mol-<role>, set in its molecule.yml): this module has no
LAB_NAME, so each scenario is a unit of work of its own for the xdist workers. `make molecule` runs the same scenarios one after the other, outside pytest.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.parents[2].name for p in ROOT.glob("roles/*/molecule/default/molecule.yml"))
BIN = ROOT / ".venv" / "bin"


def test_every_role_has_a_scenario_here():
    assert set(ROLES) == {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}, ROLES


@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(role, tmp_path):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "PYTHONPATH": str(ROOT), "LAB_NAME": f"mol-{role}"}
    log = tmp_path / "molecule.log"
    with log.open("w") as out:
        try:
            rc = subprocess.run([str(BIN / "molecule"), "test"], cwd=ROOT / "roles" / role, env=env, stdout=out,
                                stderr=subprocess.STDOUT, timeout=1800).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout (1800 s)"
    text = log.read_text(errors="replace")
    if rc != 0:     # a scenario stopped before its destroy step leaves its lab up: take it down (its hosts hold inotify)
        subprocess.run([str(BIN / "python"), "-m", "lab", "--name", f"mol-{role}", "down"], cwd=ROOT, env=env,
                       capture_output=True, timeout=300)
    assert rc == 0, f"molecule test of {role}: rc={rc}\n{text[-12000:]}"
