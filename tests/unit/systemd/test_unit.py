"""module_utils/systemd/unit.py: systemctl show parsing, the bounded stop, journal command, cgroup/process helpers."""
import os
from pathlib import Path

import pytest

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.systemd import unit as su

ROOT = Path(__file__).resolve().parents[3]

SHOW = """Id=sglang.service
LoadState=loaded
ActiveState=failed
SubState=failed
MainPID=0
InvocationID=3f1c2b6a9d8e4f00a1b2c3d4e5f60718
NRestarts=2
ExecMainStatus=1
ExecMainCode=1
ExecMainPID=4242
Result=exit-code
ControlGroup=
"""


def test_parse_show():
    s = su.parse_show("sglang.service", SHOW)
    assert (s.active_state, s.sub_state, s.main_pid, s.n_restarts, s.exec_main_status) == ("failed", "failed", 0, 2, 1)
    assert s.invocation_id.startswith("3f1c") and not s.running
    assert s.exit_description == "main process exited with status 1 (result=exit-code)"
    assert s.summary()["exec_main_code"] == "exited"


def test_parse_show_killed_by_signal_and_running():
    s = su.parse_show("u", "ActiveState=active\nSubState=running\nMainPID=12\nExecMainCode=2\nExecMainStatus=9\n")
    assert s.running and s.exit_description.startswith("main process killed with signal 9")


def test_show_uses_properties_and_reports_errors():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, SHOW, ""
    assert su.show("sglang.service", run=run).exec_main_pid == 4242
    assert "--property=InvocationID" in calls[0] and "--property=NRestarts" in calls[0]
    try:
        su.show("x", run=lambda argv: (1, "", "Failed to connect to bus"))
    except su.SystemdError as exc:
        assert "Failed to connect to bus" in str(exc)
    else:
        raise AssertionError("no error")


def test_journal_selects_this_invocation_only():
    argv = su.journal_argv("sglang.service", "abc", 30)
    assert "_SYSTEMD_INVOCATION_ID=abc" in argv and "INVOCATION_ID=abc" in argv and "+" in argv
    assert su.journal_argv("sglang.service", "", 5)[-2:] == ["-u", "sglang.service"]
    assert su.journal("u", "abc", run=lambda argv: (0, "a\n\nb\n", "")) == ["a", "b"]
    assert "journalctl failed" in su.journal("u", "abc", run=lambda argv: (1, "", "boom"))[0]


def test_systemctl_no_block():
    calls = []
    su.systemctl("restart", "sglang.service", run=lambda argv: calls.append(argv) or (0, "", ""))
    assert calls == [["systemctl", "restart", "--no-block", "sglang.service"]]


def test_descendants_includes_self():
    assert os.getpid() in su.descendants(os.getpid())


def test_cgroup_pids(tmp_path):
    (tmp_path / "system.slice" / "x.service" / "sub").mkdir(parents=True)
    (tmp_path / "system.slice" / "x.service" / "cgroup.procs").write_text("10\n11\n")
    (tmp_path / "system.slice" / "x.service" / "sub" / "cgroup.procs").write_text("12\n")
    assert su.cgroup_pids("/system.slice/x.service", str(tmp_path)) == {10, 11, 12}
    assert su.cgroup_pids("/system.slice/missing.service", str(tmp_path)) is None
    assert su.cgroup_pids("", str(tmp_path)) is None


def test_parse_show_reads_only_the_first_unit_of_a_multi_unit_answer():
    """`systemctl show a b` separates the units by an empty line: b's values must not overwrite a's."""
    text = ("Id=a.service\nLoadState=loaded\nActiveState=active\nMainPID=10\nTransient=yes\n\n"
            "Id=b.service\nLoadState=not-found\nActiveState=inactive\nMainPID=0\n")
    s = su.parse_show("a.service", text)
    assert (s.raw["Id"], s.load_state, s.active_state, s.main_pid, s.transient) == ("a.service", "loaded", "active",
                                                                                     10, True)
    assert su.parse_show("a.service", "\n" + text).raw["Id"] == "a.service"  # a leading empty line is no unit


def test_state_properties_loaded_live_gone_transient():
    assert su.parse_show("u", "LoadState=not-found\nActiveState=inactive\n").gone
    assert su.parse_show("u", "").gone
    failed = su.parse_show("u", "LoadState=loaded\nActiveState=failed\nTransient=no\n")
    assert failed.loaded and not failed.live and not failed.gone and not failed.transient
    for active in su.LIVE_STATES:
        assert su.parse_show("u", "ActiveState=%s\n" % active).live


def test_show_asks_for_transient():
    calls = []
    su.show("u", run=lambda argv: calls.append(argv) or (0, "Transient=yes\n", ""))
    assert "--property=Transient" in calls[0]


def test_systemd_error_is_an_evidence_error():
    with pytest.raises(su.SystemdError) as err:
        su.systemctl("restart", "u", run=lambda argv: (1, "", "Access denied"))
    assert isinstance(err.value, EvidenceError) and isinstance(err.value, RuntimeError)
    assert err.value.kind == "systemd" and "Access denied" in err.value.message


class FakeUnit:
    """systemctl show/stop/kill/reset-failed of one unit; `stops`: whether a plain stop ends it."""

    def __init__(self, state, stops=True, stuck=False):
        self.state, self.stops, self.stuck, self.calls = dict(state), stops, stuck, []

    def __call__(self, argv):
        self.calls.append(argv[1])
        if argv[1] == "stop" and self.stops:
            self.state.update(LoadState="not-found", ActiveState="inactive")
        elif argv[1] == "kill" and not self.stuck:
            self.state.update(ActiveState="failed")
        elif argv[1] == "reset-failed":
            self.state.update(LoadState="not-found", ActiveState="inactive")
        return 0, "".join("%s=%s\n" % kv for kv in self.state.items()), ""


def fake_clock():
    now = [0.0]

    def sleep(s):
        now[0] += s
    return now, (lambda: now[0]), sleep


def test_stop_and_wait_escalates_to_sigkill_and_resets_the_failed_unit():
    now, clock, sleep = fake_clock()
    unit = FakeUnit({"LoadState": "loaded", "ActiveState": "active"}, stops=False)
    assert su.stop_and_wait("u", unit, timeout=15, clock=clock, sleep=sleep) is True
    assert [c for c in unit.calls if c != "show"] == ["stop", "kill", "reset-failed"] and 15 <= now[0] < 16


def test_stop_and_wait_gives_up_with_the_last_state():
    now, clock, sleep = fake_clock()
    unit = FakeUnit({"LoadState": "loaded", "ActiveState": "deactivating", "MainPID": "7"}, stops=False, stuck=True)
    with pytest.raises(su.StopTimeout) as err:
        su.stop_and_wait("u", unit, timeout=15, clock=clock, sleep=sleep)
    assert "still deactivating after SIGTERM and SIGKILL" in str(err.value) and 20 <= now[0] < 21
    assert err.value.state.main_pid == 7 and err.value.evidence["unit_state"]["active_state"] == "deactivating"
    assert isinstance(err.value, su.SystemdError) and err.value.kind == "timeout"


def test_stop_and_wait_of_nothing_only_looks():
    unit = FakeUnit({"LoadState": "not-found", "ActiveState": "inactive"})
    assert su.stop_and_wait("u", unit) is False and unit.calls == ["show"]
    unit = FakeUnit({"LoadState": "loaded", "ActiveState": "active"})
    now, clock, sleep = fake_clock()
    assert su.stop_and_wait("u", unit, clock=clock, sleep=sleep) is True and now[0] == 0.0


def test_journal_of_a_unit_by_name():
    calls = []
    lines = su.journal("peer", "", lines=40, run=lambda argv: calls.append(argv) or (0, "x\n", ""))
    assert lines == ["x"] and calls[0][-2:] == ["-u", "peer"] and "40" in calls[0]


def test_the_peer_unit_asks_systemd_only_through_this_file():
    src = (ROOT / "module_utils" / "fanout" / "peer_unit.py").read_text()
    for spelled in ('"systemctl", "show"', '"journalctl"', '"reset-failed"', "--signal=SIGKILL"):
        assert spelled not in src, spelled


def block(unit, load="loaded", active="active", sub="running", pid=0):
    return (f"Id={unit}\nLoadState={load}\nActiveState={active}\nSubState={sub}\nMainPID={pid}\nInvocationID=\n"
            f"NRestarts=0\nExecMainStatus=0\nExecMainCode=0\nExecMainPID={pid}\nResult=success\nControlGroup=\n")


PM, FM = "nvidia-persistenced.service", "nvidia-fabricmanager.service"


def test_parse_show_many_keeps_each_units_state_with_its_name():
    """The bug this replaces: `--value` printed an empty line between units and the lines were zipped against the
    names, so the fabric manager got the empty string. Each block is its unit's, whatever lies between."""
    text = block(PM, pid=812) + "\n" + block(FM, load="not-found", active="inactive", sub="dead")
    got = su.parse_show_many([PM, FM], text)
    assert (got[PM].load_state, got[PM].active_state, got[PM].main_pid) == ("loaded", "active", 812)
    assert (got[FM].load_state, got[FM].active_state, got[FM].sub_state) == ("not-found", "inactive", "dead")
    assert got[PM].loaded and not got[FM].loaded
    failed = su.parse_show_many([FM, PM], block(FM, active="failed", sub="failed") + "\n\n" + block(PM) + "\n")
    assert failed[FM].active_state == "failed" and failed[PM].running is False and failed[PM].active_state == "active"


def test_parse_show_many_refuses_an_answer_that_does_not_match_the_units():
    with pytest.raises(su.SystemdError, match="1 block"):
        su.parse_show_many([PM, FM], block(PM))
    with pytest.raises(su.SystemdError, match=f"answered unit {FM} where {PM} was asked"):
        su.parse_show_many([PM, FM], block(FM) + "\n" + block(PM))
    alias = su.parse_show_many(["nvidia-fabricmanager"], block(FM))  # an Id systemd completed is still this unit
    assert alias["nvidia-fabricmanager"].loaded


def test_show_many_asks_once_with_key_value_output():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, block(PM) + "\n" + block(FM, load="not-found", active="inactive", sub="dead"), ""
    got = su.show_many([PM, FM], run=run, systemctl="/bin/systemctl")
    assert len(calls) == 1 and calls[0][:4] == ["/bin/systemctl", "show", PM, FM] and "--value" not in calls[0]
    assert "--property=Id" in calls[0] and "--property=LoadState" in calls[0]
    assert [u for u, s in got.items() if s.loaded] == [PM]
    assert su.show_many([], run=run) == {} and len(calls) == 1
    with pytest.raises(su.SystemdError, match="Failed to connect to bus"):
        su.show_many([PM], run=lambda argv: (1, "", "Failed to connect to bus"))


def test_show_units_exec_start_and_a_pids_unit(tmp_path):
    from ansible.module_utils.systemd.unit import exec_start_argvs, parse_show_blocks, pid_unit, service_names

    text = ("Id=a.service\nExecStart={ path=/x ; argv[]=/x -m sglang.launch_server --port 1 ; ignore_errors=no ; "
            "start_time=[n/a] }\nExecStart={ path=/y ; argv[]=/y two ; ignore_errors=yes }\n\nId=b.service\nUser=u\n")
    blocks = parse_show_blocks(text)
    assert [b["Id"] for b in blocks] == ["a.service", "b.service"] and blocks[1]["User"] == "u"
    assert exec_start_argvs(blocks[0]["ExecStart"]) == ["/x -m sglang.launch_server --port 1", "/y two"]
    assert exec_start_argvs("") == []
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "cgroup").write_text("0::/system.slice/sglang-k26.service\n")
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "cgroup").write_text("1:name=systemd:/user.slice/user-0.slice/session-3.scope\n")
    assert pid_unit(12, str(tmp_path)) == "sglang-k26.service" and pid_unit(13, str(tmp_path)) == "session-3.scope"
    assert pid_unit(14, str(tmp_path)) == ""

    def run(argv, **kw):
        if argv[1] == "list-units":
            return 0, "a.service loaded active running A\n\u25cf b.service not-found inactive dead b\n", ""
        return 0, "a.service enabled enabled\nx@.service static -\nc.service disabled enabled\n", ""
    assert service_names(run) == ["a.service", "b.service", "c.service"]
