"""module_utils/systemd/unit.py: systemctl show parsing, journal command, cgroup/process helpers."""
import os

from ansible.module_utils.systemd import unit as su

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
