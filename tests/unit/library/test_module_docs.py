"""Every library/ module: DOCUMENTATION, EXAMPLES and RETURN parse, and the documented options are the module's real
argument_spec, read by running the module up to its AnsibleModule() call (names, type, required, default, choices,
elements, aliases and sub-options), so a doc that drifts from the code fails here.

Each module's own behaviour is tested beside it (tests/unit/<package>/...); this is the contract every one keeps."""
from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

import pytest
import yaml

import ansible.module_utils.basic as basic

ROOT = Path(__file__).resolve().parents[3]
MODULES = sorted(p.stem for p in (ROOT / "library").glob("*.py"))


class _Captured(Exception):
    def __init__(self, kwargs):
        super().__init__("captured")
        self.kwargs = kwargs


class _Recorder:
    def __init__(self, *args, **kwargs):
        if args:
            kwargs = dict(kwargs, argument_spec=args[0])
        raise _Captured(kwargs)


def module_kwargs(name, monkeypatch):
    """The keyword arguments the module gives AnsibleModule (argument_spec, supports_check_mode, ...)."""
    monkeypatch.setattr(basic, "AnsibleModule", _Recorder)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "library" / f"{name}.py")])
    with pytest.raises(_Captured) as got:
        runpy.run_path(str(ROOT / "library" / f"{name}.py"), run_name="__main__")
    return got.value.kwargs


def docs(name):
    tree = ast.parse((ROOT / "library" / f"{name}.py").read_text())
    return {t.targets[0].id: yaml.safe_load(t.value.value) for t in tree.body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


def compare(spec: dict, documented: dict, where: str) -> list:
    out = []
    if set(spec) != set(documented or {}):
        return [f"{where}: code has {sorted(set(spec) - set(documented or {}))} undocumented, docs have "
                f"{sorted(set(documented or {}) - set(spec))} the code lacks"]
    for key, s in spec.items():
        d = documented[key]
        at = f"{where}.{key}"
        if not d.get("description"):
            out.append(f"{at}: no description")
        pairs = (("type", s.get("type", "str"), d.get("type", "str")),
                 ("required", bool(s.get("required", False)), bool(d.get("required", False))),
                 ("default", s.get("default"), d.get("default")),
                 ("choices", s.get("choices"), d.get("choices")),
                 ("elements", s.get("elements"), d.get("elements")),
                 ("aliases", sorted(s.get("aliases") or []), sorted(d.get("aliases") or [])))
        for what, code, doc in pairs:
            if what == "choices" and code is not None and doc is not None:
                code, doc = list(code), list(doc)
            if code != doc:
                out.append(f"{at}: {what} is {code!r} in the code, {doc!r} in the docs")
        if s.get("options") or d.get("suboptions"):
            out += compare(s.get("options") or {}, d.get("suboptions") or {}, at)
    return out


def test_every_module_is_covered():
    assert len(MODULES) >= 23 and "hf_model" in MODULES and "venv_stage" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docs_parse_and_match_the_argument_spec(name, monkeypatch):
    parsed = docs(name)
    doc = parsed["DOCUMENTATION"]
    assert doc["module"] == name
    assert doc["short_description"] and doc["description"]
    assert isinstance(parsed["EXAMPLES"], list) and all(e.get("name") for e in parsed["EXAMPLES"])
    assert isinstance(parsed["RETURN"], dict) and parsed["RETURN"]
    for key, ret in parsed["RETURN"].items():
        assert ret.get("description") and ret.get("returned"), f"RETURN.{key} needs description and returned"
    kwargs = module_kwargs(name, monkeypatch)
    problems = compare(kwargs["argument_spec"], doc.get("options") or {}, name)
    assert not problems, "\n".join(problems)
    assert "supports_check_mode" in kwargs, f"{name} must say whether it supports check mode"


@pytest.mark.parametrize("name", MODULES)
def test_examples_call_the_module_with_documented_options(name):
    parsed = docs(name)
    options = set(parsed["DOCUMENTATION"].get("options") or {})
    for example in parsed["EXAMPLES"]:
        calls = [v for k, v in example.items() if k in (name, f"ansible.builtin.{name}")]
        for args in calls:
            if isinstance(args, dict):
                assert set(args) <= options, f"{example['name']}: {sorted(set(args) - options)} not documented"


def test_the_checker_sees_a_drift():
    spec = {"url": {"type": "str", "required": True}, "timeout": {"type": "float", "default": 30.0}}
    doc = {"url": {"description": "u", "type": "str", "required": True},
           "timeout": {"description": "t", "type": "float", "default": 60.0}}
    assert compare(spec, doc, "m") == ["m.timeout: default is 30.0 in the code, 60.0 in the docs"]
    assert compare(spec, {"url": doc["url"]}, "m")[0].startswith("m: code has ['timeout'] undocumented")
