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
