"""library/gpu_daemons.py as Ansible runs it on a host, with fake systemctl/journalctl first on PATH: the present and
required daemons, a warning for a failed daemon that is not required, a refusal (check mode too) for a required one."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.ansible_module import module_command

ROOT = Path(__file__).resolve().parents[3]
PM, FM = "nvidia-persistenced.service", "nvidia-fabricmanager.service"
# systemctl show as systemd 252 answers two units with KEY=VALUE lines: an empty line between the blocks.
SYSTEMCTL = """#!/bin/sh
[ "$1" = show ] || exit 1
printf 'Id=%s\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\nMainPID=811\\n\\n' "$2"
printf 'Id=%s\\nLoadState=%s\\nActiveState=%s\\nSubState=%s\\nMainPID=0\\nExecMainCode=1\\nExecMainStatus=1\\n' \\
  "$3" "$FM_LOAD" "$FM_ACTIVE" "$FM_SUB"
"""
JOURNALCTL = "#!/bin/sh\necho 'b300 nv-fabricmanager[912]: NVSwitch fabric initialization failed'\n"


def run_module(tmp_path, fm, require, check_mode=False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("systemctl", SYSTEMCTL), ("journalctl", JOURNALCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    argfile = tmp_path / f"args-{time.monotonic_ns()}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"units": [PM, FM], "require": require,
                                                           "_ansible_check_mode": check_mode}}))
    load, active, sub = fm
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{bin_dir}:{os.environ['PATH']}", FM_LOAD=load,
               FM_ACTIVE=active, FM_SUB=sub)
    proc = subprocess.run(module_command("gpu_daemons", argfile), env=env, capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fm,require,present,required", [
    (("loaded", "active", "running"), [FM], [PM, FM], [FM]),      # nvlink, fabric manager up
    (("not-found", "inactive", "dead"), [FM], [PM], []),           # nvlink, not installed
    (("loaded", "active", "running"), [], [PM, FM], []),           # pcie: installed, never required
])
def test_present_and_required(tmp_path, fm, require, present, required):
    res = run_module(tmp_path, fm, require)
    assert not res.get("failed") and not res["changed"], res
    assert (res["present"], res["required"]) == (present, required)
    assert res["states"][FM] == dict(zip(("load_state", "active_state", "sub_state"), fm))


def test_failed_fabric_manager_refused_where_required_and_warned_where_not(tmp_path):
    failed = ("loaded", "failed", "failed")
    res = run_module(tmp_path, failed, [FM], check_mode=True)
    assert res["failed"] and res["kind"] == "gpu_daemon", res
    assert f"{FM} ActiveState=failed SubState=failed" in res["msg"] and "nothing was changed" in res["msg"]
    assert "NVSwitch fabric initialization failed" in res["msg"]
    assert res["daemons"][FM]["journal"] == ["b300 nv-fabricmanager[912]: NVSwitch fabric initialization failed"]
    res = run_module(tmp_path, failed, [])
    assert not res.get("failed") and res["failed_daemons"] == [FM] and res["required"] == []
    assert FM in json.dumps(res["warnings"]) and "does not require it" in json.dumps(res["warnings"])
