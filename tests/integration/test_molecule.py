"""Every role's molecule scenario (`molecule test` in roles/<role>: destroy, syntax, create, prepare, converge,
idempotence, verify, destroy), run as part of the lab suite so the two xdist workers share them out with the labs.

A scenario that a lab module hosts runs in that module, on its lab, where the lab is in the state the scenario
converges (tests/helpers/molecule.py HOSTED); the others run here, each on a lab of its own (LAB_NAME mol-<role>, made and
removed by molecule): this module has no LAB_NAME, so each is a unit of work of its own for the xdist workers.
`make molecule` runs every scenario one after the other, outside pytest, each on its own lab.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.molecule import HOSTED, run_scenario

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.parents[2].name for p in ROOT.glob("roles/*/molecule/default/molecule.yml"))
OWN_LAB = [r for r in ROLES if r not in HOSTED]


def _hosted_calls(path: Path) -> dict[str, str]:
    """{role: lab} for each `run_scenario("<role>", ..., lab_name=LAB_NAME, keep_lab=True)` in a test file."""
    tree = ast.parse(path.read_text())
    module_lab = next((n.value.value for n in tree.body if isinstance(n, ast.Assign)
                       and [getattr(t, "id", None) for t in n.targets] == ["LAB_NAME"]), None)
    calls = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_scenario" and node.args
                and isinstance(node.args[0], ast.Constant)):
            kw = {k.arg: k.value for k in node.keywords}
            if getattr(kw.get("lab_name"), "id", None) == "LAB_NAME" and getattr(kw.get("keep_lab"), "value", 0):
                calls[node.args[0].value] = module_lab
    return calls


def test_every_role_has_a_scenario_and_each_runs_once():
    assert set(ROLES) == {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()}, ROLES
    assert set(HOSTED) <= set(ROLES), HOSTED
    for role, (test_file, lab) in HOSTED.items():
        assert _hosted_calls(ROOT / test_file).get(role) == lab, f"{role}: not run by {test_file} on lab {lab}"


@pytest.mark.parametrize("role", OWN_LAB)
def test_molecule_scenario(role, tmp_path):
    run_scenario(role, tmp_path / "molecule.log")
