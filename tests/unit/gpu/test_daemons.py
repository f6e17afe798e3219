"""module_utils/gpu/daemons.py: which GPU daemons a host has (one `systemctl show` through systemd/unit.py), which of
them the service requires, and the refusal of a failed required one with its states and journal."""
import pytest

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.gpu import daemons

PM, FM = "nvidia-persistenced.service", "nvidia-fabricmanager.service"
UNITS = [PM, FM]
STATES = {"active": ("loaded", "active", "running"), "absent": ("not-found", "inactive", "dead"),
          "failed": ("loaded", "failed", "failed"), "stopped": ("loaded", "inactive", "dead")}
JOURNAL = "2026-12-02T10:00:01+0000 b300 nv-fabricmanager[912]: request to query NVSwitch device information failed\n"


def host(pm="active", fm="active"):
    """A fake `run` answering systemctl show (one KEY=VALUE block per unit, an empty line between) and journalctl."""
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0] == "journalctl":
            return 0, JOURNAL, ""
        blocks = []
        for unit in argv[2:argv.index("--no-pager")]:
            load, active, sub = STATES[{PM: pm, FM: fm}[unit]]
            code = "1" if active == "failed" else "0"
            blocks.append(f"Id={unit}\nLoadState={load}\nActiveState={active}\nSubState={sub}\nMainPID=0\n"
                          f"ExecMainCode={code}\nExecMainStatus={code}\nResult={'exit-code' if code == '1' else 'success'}\n")
        return 0, "\n".join(blocks), ""
    run.calls = calls
    return run


@pytest.mark.parametrize("fm,present", [("active", UNITS), ("absent", [PM]), ("stopped", UNITS)])
def test_present_is_loaded_and_required_is_present_and_asked(fm, present):
    run = host(fm=fm)
    got = daemons.read(UNITS, [FM], run=run)
    assert got["present"] == present and got["required"] == [u for u in present if u == FM]
    assert got["states"][FM]["load_state"] == STATES[fm][0] and got["failed_daemons"] == []
    assert len(run.calls) == 1  # one systemctl show, no journal


def test_a_pcie_host_requires_nothing_even_with_the_fabric_manager_installed():
    got = daemons.read(UNITS, [], run=host(fm="failed"))
    assert got["present"] == UNITS and got["required"] == [] and got["failed_daemons"] == [FM]


def test_a_failed_required_daemon_is_refused_with_its_states_and_journal():
    run = host(fm="failed")
    with pytest.raises(daemons.GpuDaemonError) as err:
        daemons.read(UNITS, [FM], run=run, journal_lines=7)
    exc = err.value
    assert isinstance(exc, EvidenceError) and exc.kind == "gpu_daemon"
    assert f"{FM} ActiveState=failed SubState=failed" in exc.message
    assert "main process exited with status 1" in exc.message and "NVSwitch device information failed" in exc.message
    ev = exc.evidence["daemons"][FM]
    assert (ev["load_state"], ev["active_state"], ev["sub_state"]) == ("loaded", "failed", "failed")
    assert ev["journal"] == [JOURNAL.strip()]
    assert run.calls[-1][:7] == ["journalctl", "--no-pager", "-q", "-o", "short-iso", "-n", "7"] and \
        run.calls[-1][-2:] == ["-u", FM]


def test_a_failed_daemon_that_is_absent_from_require_or_a_stray_require():
    assert daemons.read(UNITS, [FM], run=host(pm="failed"))["failed_daemons"] == [PM]  # not required: reported only
    with pytest.raises(ValueError, match="not among the daemons read"):
        daemons.read([PM], [FM], run=host())
