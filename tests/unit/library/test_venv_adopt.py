"""library/venv_adopt.py as Ansible runs it (argument spec, check mode flag): verified changes nothing, check mode
reports what it would adopt, adopted moves and records it, a rerun is a no-op, reverted gives it back, a refusal
fails with its check and output."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.helpers.ansible_module import module_command
from tests.unit.venv.test_adopt import PY, SERIES, make_venv, pytestmark  # noqa: F401  (GNU patch needed)

ROOT = Path(__file__).resolve().parents[3]


def run_module(tmp_path, check_mode=False, **args):
    argfile = tmp_path / f"args-{time.monotonic_ns()}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode)}))
    proc = subprocess.run(module_command("venv_adopt", argfile), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_module_states(tmp_path):
    old = make_venv(tmp_path / "root/venv")
    args = {"source": str(old), "path": str(tmp_path / "opt/venv"), "fact_path": str(tmp_path / "fact"),
            "record_path": str(tmp_path / "record.json"), "python_floor": PY, "sglang_version": "0.5.11",
            "series": SERIES, "patch_packages": ["sglang"], "fields": {"flavour": "ddtree"}}
    verified = run_module(tmp_path, state="verified", **args)
    assert not verified["changed"] and verified["verified"]["patches"] == ["0001-ddtree.patch"], verified
    planned = run_module(tmp_path, check_mode=True, state="adopted", **args)
    assert planned["changed"] and planned["msg"].startswith("would adopt") and old.exists(), planned
    adopted = run_module(tmp_path, state="adopted", **args)
    assert adopted["changed"] and adopted["adopted"] and adopted["method"] == "rename", adopted
    assert not run_module(tmp_path, state="adopted", **args)["changed"]
    reverted = run_module(tmp_path, state="reverted", record_path=args["record_path"])
    assert reverted["changed"] and old.exists() and not (tmp_path / "opt/venv").exists(), reverted


def test_refusal_names_the_check(tmp_path):
    old = make_venv(tmp_path / "root/venv")
    out = run_module(tmp_path, state="adopted", source=str(old), path=str(tmp_path / "opt/venv"),
                     record_path=str(tmp_path / "r.json"), python_floor=PY, sglang_version="0.5.23",
                     series=SERIES, schema_module="")
    assert out["failed"] and out["check"] == "version" and out["kind"] == "venv_adopt", out
    assert "0.5.23" in out["msg"] and "0.5.11" in out["msg"] and old.exists()
