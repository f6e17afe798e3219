"""module_utils/sglang/ready.py: the fail-fast readiness loop, driven by a scripted unit (no systemd needed)."""
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible.module_utils.sglang import ready as r
from ansible.module_utils.sglang.api import Response
from ansible.module_utils.systemd.unit import UnitState, listening_pids

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
from sglang_standin.local import LocalServer, free_port  # noqa: E402

JOURNAL = ["sglang[200]: Load weight begin.", "sglang[200]: RuntimeError: CUDA out of memory",
           "systemd[1]: sglang.service: Main process exited, code=exited, status=1/FAILURE",
           "systemd[1]: sglang.service: Failed with result 'exit-code'."]


def st(inv, active="active", sub="running", pid=200, restarts=0, status=0, code="", result="success"):
    return UnitState(unit="sglang.service", load_state="loaded", active_state=active, sub_state=sub, main_pid=pid,
                     invocation_id=inv, n_restarts=restarts, exec_main_status=status, exec_main_code=code,
                     result=result, control_group="/system.slice/sglang.service")


class Scripted:
    """A fake clock plus unit states and HTTP answers that change at given (fake) times."""

    def __init__(self, states, http=None, listeners=None, pids=None):
        self.now = 0.0
        self.states = states  # [(from_time, UnitState)]
        self.http_script = http or (lambda now, path: Response(status=200, body=b'{"data":[{"id":"m"}]}'))
        self.listener_script = listeners or (lambda now: {"pids": {200}, "sockets": 1, "unreadable": 0})
        self.pids = pids or (lambda state: {state.main_pid})
        self.journal_calls = []

    def state_at(self, now):
        current = self.states[0][1]
        for t, s in self.states:
            if now >= t:
                current = s
        return current

    def probe(self):
        return r.Probe(
            show=lambda unit: self.state_at(self.now),
            systemctl=lambda action, unit, no_block=True: None,
            journal=lambda unit, inv, n: self.journal_calls.append(inv) or JOURNAL,
            listeners=lambda port: self.listener_script(self.now),
            unit_pids=self.pids,
            http=lambda base, path, api_key=None, timeout=0: self.http_script(self.now, path),
            clock=lambda: self.now,
            sleep=self._sleep,
        )

    def _sleep(self, seconds):
        self.now += seconds


OPTS = dict(unit="sglang.service", base_url="http://127.0.0.1:30001", model_id="m", timeout=60, poll=0.25)


def test_ready_after_warmup_returns_pid_invocation_and_time():
    s = Scripted([(0, st("old", pid=100)), (1.0, st("new", pid=200))],
                 http=lambda now, path: Response(status=503) if now < 3 and path == "/health" else Response(
                     status=200, body=b'{"data":[{"id":"m"}]}'))
    out = r.wait_ready(r.Options(**OPTS), stale_invocation="old", stale_pid=100, probe=s.probe())
    assert out["pid"] == 200 and out["invocation_id"] == "new"
    assert 3.0 <= out["time_to_ready"] <= 3.3
    assert [p["phase"] for p in out["phases"]] == ["stopping previous process", "starting", "warming up"]


def test_crash_while_loading_fails_at_next_poll_with_journal():
    s = Scripted([(0, st("new")), (5.0, st("new", active="failed", sub="failed", pid=0, status=1, code="1",
                                               result="exit-code"))],
                 listeners=lambda now: {"pids": set(), "sockets": 0, "unreadable": 0})
    with pytest.raises(r.ReadyError) as exc:
        r.wait_ready(r.Options(**OPTS), stale_invocation="old", probe=s.probe())
    err = exc.value
    assert err.kind == "failed" and err.phase == "not listening"
    assert s.now - 5.0 <= 0.25 + 1e-9  # verdict at the first poll after the crash
    assert "main process exited with status 1" in err.message and "CUDA out of memory" in err.message
    assert s.journal_calls[0] == "new"


def test_auto_restart_by_systemd_is_a_failure_of_this_invocation():
    s = Scripted([(0, st("new")), (2.0, st("newer", pid=300, restarts=1))],
                 http=lambda now, path: Response(status=503))
    with pytest.raises(r.ReadyError) as exc:
        r.wait_ready(r.Options(**OPTS), stale_invocation="old", probe=s.probe())
    assert "restarted by systemd" in exc.value.message and s.journal_calls[0] == "new"


def test_auto_restart_pending_substate_fails():
    s = Scripted([(0, st("new")), (1.0, st("new", active="activating", sub="auto-restart", pid=0, status=1,
                                               code="1"))], http=lambda now, path: Response(status=503))
    with pytest.raises(r.ReadyError, match="auto-restart"):
        r.wait_ready(r.Options(**OPTS), stale_invocation="old", probe=s.probe())


def test_old_invocation_answering_is_never_accepted():
    # The old process keeps answering 200 (slow shutdown) and the unit still shows it: not ready, phase named.
    s = Scripted([(0, st("old", pid=100))], listeners=lambda now: {"pids": {100}, "sockets": 1, "unreadable": 0})
    with pytest.raises(r.ReadyError) as exc:
        r.wait_ready(r.Options(**dict(OPTS, timeout=10)), stale_invocation="old", stale_pid=100, probe=s.probe())
    assert exc.value.kind == "timeout" and exc.value.phase == "stopping previous process"
    assert "stuck" in exc.value.message


def test_port_held_by_a_process_outside_the_unit_is_never_accepted():
    s = Scripted([(0, st("new", pid=200))], listeners=lambda now: {"pids": {100}, "sockets": 1, "unreadable": 0})
    with pytest.raises(r.ReadyError) as exc:
        r.wait_ready(r.Options(**dict(OPTS, timeout=5)), stale_invocation="old", probe=s.probe())
    assert exc.value.phase == "old process listening" and "100" in exc.value.message


@pytest.mark.parametrize("phase,http,listeners", [
    ("not listening", None, lambda now: {"pids": set(), "sockets": 0, "unreadable": 0}),
    ("warming up", lambda now, path: Response(status=503), None),
    ("answering", lambda now, path: Response(status=200, body=b'{"data":[{"id":"other"}]}'), None),
])
def test_timeout_names_the_phase(phase, http, listeners):
    s = Scripted([(0, st("new"))], http=http, listeners=listeners)
    with pytest.raises(r.ReadyError) as exc:
        r.wait_ready(r.Options(**dict(OPTS, timeout=30)), stale_invocation="old", probe=s.probe())
    assert exc.value.kind == "timeout" and exc.value.phase == phase
    assert f"phase '{phase}'" in exc.value.message
    assert 30 <= s.now <= 30.5


def test_main_pid_change_fails():
    s = Scripted([(0, st("new", pid=200)), (1, st("new", pid=201))], http=lambda now, path: Response(status=503))
    with pytest.raises(r.ReadyError, match="changed main pid"):
        r.wait_ready(r.Options(**OPTS), stale_invocation="old", probe=s.probe())


def test_unit_not_found():
    s = Scripted([(0, UnitState(unit="x", load_state="not-found"))])
    with pytest.raises(r.ReadyError, match="not found"):
        r.wait_ready(r.Options(**OPTS), probe=s.probe())


# ---------------------------------------------------------------- real processes on loopback
FAST = {"SGLANG_STANDIN_LOAD_S": "0.3", "SGLANG_STANDIN_WARMUP_S": "0.3"}


def test_restart_race_with_real_processes_never_reports_the_old_one():
    """The old stand-in keeps answering 200 after SIGTERM (slow shutdown) while the unit already names the new
    process, which is still loading: readiness must wait for the new process's own socket."""
    port = free_port()
    args = ["--model-path", "m", "--host", "127.0.0.1", "--port", str(port)]
    old = LocalServer(args, env=dict(FAST, SGLANG_STANDIN_FAULT="slow_shutdown", SGLANG_STANDIN_SHUTDOWN_S="1"))
    new = LocalServer(args, env=dict(FAST, SGLANG_STANDIN_LOAD_S="3"))  # binds well after the old one exits
    old.start()
    try:
        old.wait_for_line("fired up")
        old.proc.terminate()
        old.wait_for_line("still answering")
        new.start()
        probe = r.Probe(show=lambda unit: st("new", pid=new.proc.pid), journal=lambda *a: [],
                        unit_pids=lambda s: {s.main_pid}, listeners=listening_pids)
        out = r.wait_ready(r.Options(unit="sglang.service", base_url=f"http://127.0.0.1:{port}", model_id="m",
                                     timeout=20, poll=0.05), stale_invocation="old", probe=probe)
        assert out["pid"] == new.proc.pid
        assert old.proc.poll() == -signal.SIGKILL  # the old process had exited (by SIGKILL after its drain, as the
        # real server does) before "ready"
        phases = [p["phase"] for p in out["phases"]]
        assert "old process listening" in phases and "warming up" in phases
    finally:
        new.stop()
        old.stop()


def test_listening_pids_finds_the_owner():
    with LocalServer(["--model-path", "m"], env=FAST) as srv:
        srv.wait_for_line("Uvicorn running")
        found = listening_pids(srv.port)
        assert found["sockets"] == 1 and found["pids"] == {srv.proc.pid}
    assert listening_pids(srv.port)["sockets"] == 0
