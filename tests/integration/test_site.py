"""End to end: `ansible-playbook site.yml -l b300` on the lab (what `make demo` runs), then a no-op rerun."""
from __future__ import annotations

LAB_NAME = "site"


def test_site_b300_end_to_end_then_noop(playbook):
    run = playbook("site.yml", limit="b300", timeout=1500)
    assert run.rc == 0, run.failures() + "\n" + run.stdout[-3000:]
    hosts = {ev["event_data"]["host"] for ev in run.events if ev.get("event", "").startswith("runner_on_")}
    assert hosts == {"b300-lab"}, f"site.yml -l b300 touched {hosts}"
    facts = run.results("Gathering Facts")
    assert facts and {r["_host"] for r in facts} == {"b300-lab"}
    assert {r["ansible_facts"]["ansible_hostname"] for r in facts} == {"b300-lab"}
    assert all(r["ansible_facts"]["ansible_service_mgr"] == "systemd" for r in facts)

    again = playbook("site.yml", limit="b300", timeout=900)
    assert again.rc == 0, again.failures() + "\n" + again.stdout[-3000:]
    assert again.changed_count("b300-lab") == 0, "second site.yml run changed something:\n" + again.stdout[-4000:]


def _main_pid(lab) -> str:
    return lab.ssh("b300-lab", "systemctl show -p MainPID --value sglang.service").stdout.strip()


def test_a_venv_change_is_served_in_the_same_run_and_no_other_venv_starts_under_the_unit(lab, playbook, tmp_path):
    """site.yml after a venv change: the venv play swaps it and restarts the service onto it in the same run
    (readiness and smoke shown), the service play then has nothing left to do. A venv swapped behind the unit's back
    is refused by the launcher (exit 78) and systemd does not retry it."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    series = tmp_path / "series-dir"
    shutil.copytree(root / "roles/venv/files/patches/lab", series)
    (series / "0004-site-venv-change.patch").write_text(
        "--- /dev/null\n+++ b/sglang_standin/lab_site_venv_change.py\n@@ -0,0 +1 @@\n+MARK = 'site test: a new venv'\n")
    with (series / "series").open("a") as fh:
        fh.write("0004-site-venv-change.patch\n")
    before_pid = _main_pid(lab)
    before_hash = lab.ssh("b300-lab", "cat /opt/sglang/venv/.sglang-venv-digest").stdout.strip()

    run = playbook("site.yml", limit="b300", extravars={"venv_patch_source_dir": str(series)}, timeout=1500)
    assert run.rc == 0, run.failures() + "\n" + run.stdout[-3000:]
    new_hash = lab.ssh("b300-lab", "cat /opt/sglang/venv/.sglang-venv-digest").stdout.strip()
    assert new_hash and new_hash != before_hash
    # the restart happened inside playbooks/venv.yml's second play; the service play later had nothing to restart
    restarts = [ev["event_data"] for ev in run.events if ev.get("event") == "runner_on_ok"
                and ev["event_data"].get("task") == "Restart sglang service"]
    assert [r["play"] for r in restarts] == ["Serve the new venv where this run swapped it"], restarts
    # the real parser is asked once per run for one unit: the service play renders the same argv on the same venv and
    # does not ask again (22 s of python import on the H200)
    asked = [(ev["event"], ev["event_data"]["play"]) for ev in run.events
             if ev.get("event") in ("runner_on_ok", "runner_on_skipped", "runner_on_failed")
             and ev["event_data"].get("task") == "Ask the installed server's parser whether the new flags are accepted"]
    assert asked == [("runner_on_ok", "Serve the new venv where this run swapped it"),
                     ("runner_on_skipped", "SGLang service")], asked
    ready = run.result("Restart sglang service", "b300-lab")
    assert ready["time_to_ready"] > 0 and str(ready["pid"]) != before_pid
    smoke = run.results("Known-answer prompts, degenerate-output check, tool call, tok/s and accept length")
    assert smoke and all(r["_host"] == "b300-lab" for r in smoke)
    env = lab.ssh("b300-lab", "systemctl show -p Environment --value sglang.service").stdout
    assert f"SGLANG_SERVICE_VENV_HASH={new_hash}" in env
    # the process that serves now runs the new venv: its patch is importable from the service's python
    assert "a new venv" in lab.ssh("b300-lab", "/opt/sglang/venv/bin/python -c "
                                               "'from sglang_standin import lab_site_venv_change as m; print(m.MARK)'").stdout

    # a venv swapped behind the unit's back (what a half-finished run or a hand copy leaves): the unit refuses it
    lab.ssh("b300-lab", "cp /opt/sglang/venv/.sglang-venv-digest /root/digest.keep; "
                        "echo 0000-not-this-venv > /opt/sglang/venv/.sglang-venv-digest; "
                        "systemctl restart sglang.service || true")
    deadline_state = lab.ssh("b300-lab", "for i in $(seq 1 600); do s=$(systemctl show -p ActiveState --value "
                                         "sglang.service); [ \"$s\" = failed ] && break; sleep 0.1; done; "
                                         "systemctl show -p ActiveState,ExecMainStatus,NRestarts sglang.service").stdout
    assert "ActiveState=failed" in deadline_state and "ExecMainStatus=78" in deadline_state, deadline_state
    assert "NRestarts=0" in deadline_state, deadline_state   # RestartPreventExitStatus=78: systemd does not retry
    journal = lab.ssh("b300-lab", "journalctl -u sglang.service -n 20 --no-pager").stdout
    assert "refusing to start" in journal and new_hash in journal and "0000-not-this-venv" in journal, journal
    lab.ssh("b300-lab", "cp /root/digest.keep /opt/sglang/venv/.sglang-venv-digest")
