"""Lab tests of playbooks/bench.yml and playbooks/sweep.yml against the SGLang stand-in on b300-lab.

The baseline service is deployed once (playbooks/venv.yml + playbooks/service.yml); ct200-lab deliberately gets no
service, so it is "a host that is not serving". Matrices are tiny: the point is behaviour, not numbers.
"""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

LAB_NAME = "bench"
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
HOST = "b300-lab"
TINY = {"sglang_bench_context_lengths": [60, 1024], "sglang_bench_concurrencies": [1, 4],
        "sglang_bench_output_len": 8, "sglang_bench_cell_timeout_s": 60, "sglang_bench_request_timeout_s": 30}
CRASH = {"name": "ddtree-b16-graphs-sm103", "speculative": {"algorithm": "DDTREE", "budget": 16, "topk_cap": 4},
         "env": {"SGLANG_STANDIN_GPU_CC": "10.3"}}
GARBAGE = {"name": "ddtree-b6-garbage", "speculative": {"algorithm": "DDTREE", "budget": 6, "topk_cap": 4},
           "env": {"SGLANG_STANDIN_FAULT": "garbage"}}
OK4 = {"name": "ddtree-b4", "speculative": {"algorithm": "DDTREE", "budget": 4, "topk_cap": 4}}
OK8 = {"name": "ddtree-b8", "speculative": {"algorithm": "DDTREE", "budget": 8, "topk_cap": 4}}


def run_id(tag):
    return f"itest-{tag}-{uuid.uuid4().hex[:6]}"


def unit_state(lab, host=HOST):
    out = lab.ssh(host, "systemctl show -p MainPID -p InvocationID -p ActiveState sglang.service").stdout
    return dict(line.split("=", 1) for line in out.strip().splitlines())


@pytest.fixture(scope="module")
def served(lab, request):
    """Baseline service on b300-lab (the host's nvlink profile, run by the stand-in)."""
    from tests.integration.conftest import run_playbook
    for playbook in ("playbooks/venv.yml", "playbooks/service.yml"):
        r = run_playbook(lab, playbook, limit=HOST, timeout=900)
        assert r.rc == 0, f"{playbook} failed:\n{r.stdout[-4000:]}"
    state = unit_state(lab)
    assert state["ActiveState"] == "active", state
    return state


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bench_matrix_rows_provenance_report(served, lab, playbook):
    run = run_id("bench")
    r = playbook("playbooks/bench.yml", limit=HOST, extravars={**TINY, "sglang_bench_run_id": run})
    assert r.rc == 0, r.stdout[-4000:]
    rows = read_jsonl(RESULTS / run / HOST / "default.jsonl")
    assert [row["cell"] for row in rows] == ["ctx60_c1", "ctx60_c4", "ctx1024_c1", "ctx1024_c4"]
    fact = json.loads(lab.ssh(HOST, "cat /etc/ansible/facts.d/sglang_venv.fact").stdout)
    for row in rows:
        assert row["status"] == "ok", row
        assert row["total_output_tokens"] == 8 * row["completed"] and row["failed"] == 0
        assert row["total_input_tokens"] == row["context_length"] * row["completed"]
        assert row["output_throughput"] > 0 and row["mean_ttft_ms"] > 0 and row["median_itl_ms"] > 0
        assert row["accept_length"] == pytest.approx(4.48)          # the stand-in's DDTREE accept length
        prov = row["provenance"]
        assert prov["host_group"] == "nvlink"
        assert prov["venv_content_hash"] == fact["content_hash"]
        assert prov["sglang_version"] == fact["sglang_version"]
        assert prov["patch_series_hash"] == fact["patch_series_hash"]
        assert "--speculative-ddtree-budget" in prov["flags"] and "8" in prov["flags"]
        assert "lab-only-standin-key" not in json.dumps(row)        # the API key never lands in results
        assert prov["driver"].startswith("none") and prov["cuda"].startswith("none")  # lab: no GPU, said so
    report = (RESULTS / run / "report.md").read_text()
    assert "**1 ok, 0 failed** of 1 config(s). Best: **default**." in report
    assert (RESULTS / run / "plots" / "throughput_vs_concurrency.png").stat().st_size > 1000
    assert unit_state(lab) == served                                 # a bench restarts nothing


def test_bench_refuses_an_empty_matrix(served, lab, playbook):
    r = playbook("playbooks/bench.yml", limit=HOST, extravars={**TINY, "sglang_bench_concurrencies": []})
    assert r.rc != 0
    assert "invalid bench matrix" in r.stdout and "Nothing was run" in r.stdout
    assert unit_state(lab) == served


def test_host_not_serving_is_refused_and_nothing_restarted(served, lab, playbook):
    bench = playbook("playbooks/bench.yml", limit="ct200-lab", extravars=TINY)
    assert bench.rc != 0
    assert "server at http://127.0.0.1:30001 is not serving" in bench.stdout
    sweep = playbook("playbooks/sweep.yml", limit="ct200-lab",
                     extravars={**TINY, "sglang_bench_sweep_configs": [OK4]})
    assert sweep.rc != 0
    assert "is not serving" in sweep.stdout
    assert "Restart and wait for the new process" not in sweep.task_names()
    assert lab.ssh("ct200-lab", "test -e /etc/systemd/system/sglang.service", check=False).returncode != 0


@pytest.mark.parametrize("bad, expect", [
    ({"name": "ddtree-flashinfer", "speculative": {"algorithm": "DDTREE", "budget": 8, "topk_cap": 4},
      "server": {"attention_backend": "flashinfer"}}, "ddtree-flashinfer"),
    ({"name": "typo", "speculativ": {"algorithm": "NONE"}}, "config #2 typo is invalid"),
])
def test_invalid_config_refuses_the_whole_sweep_named(served, lab, playbook, bad, expect):
    r = playbook("playbooks/sweep.yml", limit=HOST,
                 extravars={**TINY, "sglang_bench_sweep_configs": [OK4, bad, OK8]})
    assert r.rc != 0
    assert "sweep refused" in r.stdout and expect in r.stdout
    assert "Restart and wait for the new process" not in r.stdout
    assert unit_state(lab) == served                                 # same process, same invocation


def test_sweep_four_configs_two_fail_baseline_restored(served, lab, playbook):
    run = run_id("sweep")
    r = playbook("playbooks/sweep.yml", limit=HOST, timeout=1200,
                 extravars={**TINY, "sglang_bench_run_id": run,
                            "sglang_bench_sweep_configs": [OK4, CRASH, GARBAGE, OK8]})
    assert r.rc == 0, r.stdout[-6000:]
    outcomes = read_jsonl(RESULTS / run / HOST / "sweep.jsonl")
    by_name = {o["config"]: o for o in outcomes if not o.get("phase")}
    assert list(by_name) == ["ddtree-b4", "ddtree-b16-graphs-sm103", "ddtree-b6-garbage", "ddtree-b8"]
    assert [by_name[n]["status"] for n in by_name] == ["ok", "failed", "failed", "ok"]

    crash = by_name["ddtree-b16-graphs-sm103"]
    assert crash["failed_step"] == "restart"
    assert "exited" in crash["reason"] or "failed" in crash["reason"]
    assert any("illegal memory access" in line for line in crash["journal"]), crash["journal"]
    garbage = by_name["ddtree-b6-garbage"]
    assert garbage["failed_step"] == "smoke"
    assert "U+FFFD" in garbage["reason"] or "degenerate" in garbage["reason"]
    assert garbage["journal"], "a failed config carries its journal excerpt"
    for name in ("ddtree-b4", "ddtree-b8"):
        assert by_name[name]["cells_ok"] == 4 and by_name[name]["spec"]["budget"] in (4, 8)
        rows = read_jsonl(RESULTS / run / HOST / f"{name}.jsonl")
        assert len(rows) == 4 and all(row["status"] == "ok" and row["config"] == name for row in rows)
        assert f"--speculative-ddtree-budget {by_name[name]['spec']['budget']}" in " ".join(rows[0]["provenance"]["flags"])

    restore = next(o for o in outcomes if o.get("phase") == "restore")
    total = next(o for o in outcomes if o.get("phase") == "sweep_total")
    assert restore["status"] == "ok"
    assert float(total["elapsed_s"]) <= float(total["bound_s"])
    # The baseline is back: the running process is the restored one, ready, with the profile's flags (budget 8,
    # no fault environment).
    state = unit_state(lab)
    assert state["ActiveState"] == "active" and int(state["MainPID"]) == int(restore["pid"])
    cmdline = lab.ssh(HOST, f"tr '\\0' ' ' < /proc/{state['MainPID']}/cmdline").stdout
    assert "--speculative-ddtree-budget 8" in cmdline
    environ = lab.ssh(HOST, f"tr '\\0' '\\n' < /proc/{state['MainPID']}/environ").stdout
    assert "SGLANG_STANDIN_FAULT=garbage" not in environ and "SGLANG_STANDIN_GPU_CC=10.3" not in environ
    health = lab.ssh(HOST, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30001/health").stdout
    assert health == "200"

    report = (RESULTS / run / "report.md").read_text()
    assert "**2 ok, 2 failed** of 4 config(s)." in report
    assert "FAILED at step `restart`" in report and "FAILED at step `smoke`" in report
    assert "restored and ready" in report
    for png in ("throughput_vs_concurrency.png", "accept_throughput_vs_budget.png"):
        assert (RESULTS / run / "plots" / png).stat().st_size > 1000
