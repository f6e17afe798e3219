"""library/cuda_toolkit.py as Ansible runs it on a host: it reports the toolkit and its problems, changes nothing
(check mode runs the same read), and refuses input that is no MAJOR.MINOR release."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.helpers.ansible_module import module_command

NVCC = "#!/bin/sh\necho 'Cuda compilation tools, release %s, V%s.88'\n"


def run_module(tmp_path, args, check_mode=False):
    argfile = tmp_path / f"args-{time.monotonic_ns()}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}))
    proc = subprocess.run(module_command("cuda_toolkit", argfile), capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def toolkit(root: Path, release: str) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "version.json").write_text(json.dumps({"cuda": {"version": release + ".2"}}))
    (root / "bin" / "nvcc").write_text(NVCC % (release, release))
    (root / "bin" / "nvcc").chmod(0o755)
    return root


def test_reports_a_matching_toolkit_in_check_mode_too(tmp_path):
    home = toolkit(tmp_path / "cuda-13.0", "13.0")
    before = sorted(p.name for p in home.rglob("*"))
    for check in (False, True):
        res = run_module(tmp_path, {"cuda_home": str(home), "version": "13.0"}, check_mode=check)
        assert not res.get("failed") and res["changed"] is False and res["problems"] == [], res
        assert (res["toolkit"]["version"], res["toolkit"]["version_source"], res["toolkit"]["nvcc_release"]) == \
            ("13.0.2", "version.json", "13.0")
    assert sorted(p.name for p in home.rglob("*")) == before


def test_reports_what_it_found_and_does_not_fail(tmp_path):
    home = toolkit(tmp_path / "cuda-12.8", "12.8")
    res = run_module(tmp_path, {"cuda_home": str(home), "version": "13.0"})
    assert not res.get("failed") and res["problems"] == [
        f"{home}/version.json says CUDA 12.8.2, not 13.0", f"{home}/bin/nvcc --version reports release 12.8, not 13.0"]
    res = run_module(tmp_path, {"cuda_home": str(tmp_path / "nowhere"), "version": "13.0"})
    assert res["problems"] == [f"{tmp_path}/nowhere does not exist"] and res["toolkit"]["exists"] is False


def test_refuses_a_version_that_is_no_release(tmp_path):
    res = run_module(tmp_path, {"cuda_home": str(tmp_path), "version": "13"})
    assert res["failed"] and "MAJOR.MINOR" in res["msg"], res
