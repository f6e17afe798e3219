"""module_utils/sglang/takeover.py: the record is written before anything changes, units are stopped (bounded) and
disabled, a rerun changes nothing, and a unit that will not stop fails with its state, journal and the record."""
from __future__ import annotations

import json

import pytest

from ansible.module_utils.sglang import takeover
from ansible.module_utils.systemd import unit as su

CMD = "/root/venv/bin/python -m sglang_standin.launch_server --port 30001"


class Host:
    """systemctl of a host with one hand-made unit; stop makes it inactive unless stuck."""

    def __init__(self, unit_file, active="active", enabled="enabled", stuck=False):
        self.active, self.enabled, self.stuck, self.unit_file, self.calls = active, enabled, stuck, unit_file, []

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        verb = argv[1]
        if verb == "stop" and not self.stuck:
            self.active = "inactive"
        if verb == "disable":
            self.enabled = "disabled"
        if verb == "show":
            unit = argv[-1]
            return 0, (f"Id={unit}\nLoadState=loaded\nActiveState={self.active}\nSubState=x\nMainPID=4242\n"
                       f"UnitFileState={self.enabled}\nFragmentPath={self.unit_file}\nUser=\n"
                       f"ExecStart={{ path=/root/venv/bin/python ; argv[]={CMD} ; ignore_errors=no }}\n"), ""
        if verb == "journalctl" or argv[0] == "journalctl":
            return 0, "line one\nline two\n", ""
        return 0, "", ""


def test_stop_disable_record_then_nothing(tmp_path):
    unit_file = tmp_path / "sglang-k26-ddtree.service"
    unit_file.write_text("[Service]\nExecStart=" + CMD + "\n")
    record = tmp_path / "lib" / "record.json"
    host = Host(str(unit_file))
    assert [u["stop"] for u in takeover.plan(["sglang-k26-ddtree.service"], host)] == [True]
    done = takeover.take_over(["sglang-k26-ddtree.service"], str(record), timeout=5, run=host, clock=lambda: 0)
    assert done["changed"] and host.active == "inactive" and host.enabled == "disabled"
    saved = json.loads(record.read_text())
    assert record.stat().st_mode & 0o777 == 0o600
    assert saved[0]["time"] == "1970-01-01T00:00:00Z"
    entry = saved[0]["units"][0]
    assert entry["unit"] == "sglang-k26-ddtree.service" and entry["stopped"] and entry["disabled"]
    assert entry["unit_file"].startswith("[Service]") and entry["exec_start"] == [CMD] and entry["user"] == "root"
    assert entry["active_state"] == "active" and entry["unit_file_state"] == "enabled" and entry["main_pid"] == 4242
    again = takeover.take_over(["sglang-k26-ddtree.service"], str(record), timeout=5, run=host)
    assert again == {"changed": False, "units": [], "record_path": str(record)}
    assert len(json.loads(record.read_text())) == 1


def test_a_unit_that_will_not_stop_fails_with_evidence_and_the_record_says_so(tmp_path, monkeypatch):
    record = tmp_path / "record.json"
    host = Host(str(tmp_path / "missing.service"), stuck=True)
    t = [0.0]

    def clock():
        t[0] += 1.0
        return t[0]
    orig = su.stop_and_wait
    monkeypatch.setattr(su, "stop_and_wait", lambda unit, run, timeout: orig(unit, run, timeout=timeout, clock=clock,
                                                                             sleep=lambda s: None))
    with pytest.raises(takeover.TakeoverError) as err:
        takeover.take_over(["sglang-k26-ddtree.service"], str(record), timeout=2, run=host)
    ev = err.value.evidence
    assert "taking over sglang-k26-ddtree.service failed" in err.value.message
    assert ev["unit_state"]["active_state"] == "active" and ev["journal"] == ["line one", "line two"]
    assert ["systemctl", "kill", "--signal=SIGKILL", "sglang-k26-ddtree.service"] in host.calls
    entry = json.loads(record.read_text())[0]["units"][0]
    assert entry["stopped"] is False and entry["unit_file"].startswith("(unreadable")
