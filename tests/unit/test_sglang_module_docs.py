"""library/sglang_*.py: DOCUMENTATION/EXAMPLES/RETURN parse, and documented options match the argument_spec."""
import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["sglang_ready", "sglang_smoke", "sglang_preflight"]


def _docs(name):
    tree = ast.parse((ROOT / "library" / f"{name}.py").read_text())
    return {t.targets[0].id: yaml.safe_load(t.value.value) for t in tree.body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


@pytest.mark.parametrize("name", MODULES)
def test_docs_parse_and_match_argument_spec(name):
    docs = _docs(name)
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == name and all(isinstance(d, str) for d in doc["description"])
    assert all(isinstance(o["description"], str) or all(isinstance(x, str) for x in o["description"])
               for o in doc["options"].values())
    assert all(isinstance(r["description"], str) for r in docs["RETURN"].values())
    assert docs["EXAMPLES"][0]["name"]
    src = (ROOT / "library" / f"{name}.py").read_text()
    spec = set(re.findall(r"^\s{12}([a-z_]+)=dict\(", src, re.M))
    assert spec == set(doc["options"]), (spec, set(doc["options"]))
