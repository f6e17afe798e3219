"""module_utils/loadgen/server.py: the unit's state and argv as the bench reads them, through systemd/unit.py (the one
reader of `systemctl show`), from a systemctl answer shaped as systemd 252 gives it."""
from __future__ import annotations

from ansible.module_utils.loadgen import server

SHOW = ("Type=exec\nResult=success\nNRestarts=2\nExecMainPID={pid}\nMainPID={pid}\nLoadState=loaded\n"
        "ActiveState=active\nSubState=running\nInvocationID=0123456789abcdef0123456789abcdef\n")


def fake_run(answer, rc=0):
    seen = []

    def run(argv, timeout=15.0):
        seen.append(argv)
        return rc, answer, "" if rc == 0 else "Failed to connect to bus"
    return run, seen


def test_unit_state_reads_systemctl_through_the_systemd_package():
    run, seen = fake_run(SHOW.format(pid=4242))
    assert server.unit_state("sglang.service", run) == {"main_pid": 4242, "n_restarts": 2, "active": "active"}
    assert seen[0][:3] == ["systemctl", "show", "sglang.service"]


def test_no_unit_or_no_systemd_is_unknown():
    assert server.unit_state("") is None
    run, _ = fake_run("", rc=1)
    assert server.unit_state("sglang.service", run) is None
    assert server.service_argv("sglang.service", run) == []


def test_service_argv_reads_the_main_pid_cmdline_and_redacts_the_key(tmp_path, monkeypatch):
    import os
    run, _ = fake_run(SHOW.format(pid=os.getpid()))
    argv = server.service_argv("sglang.service", run)  # this test process stands for the unit's main process
    assert argv == server.redact_argv(open(f"/proc/{os.getpid()}/cmdline", "rb").read().decode().split("\0")[:-1])
    assert server.redact_argv(["x", "--api-key", "s3cret", "--port", "1"]) == ["x", "--api-key", "<redacted>",
                                                                             "--port", "1"]
