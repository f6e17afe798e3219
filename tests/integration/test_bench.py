"""Lab tests of playbooks/bench.yml and playbooks/sweep.yml against the SGLang stand-in on b300-lab.

The baseline service is deployed once (the service scenario's prepare.yml: venv and drafter config, then
playbooks/service.yml); ct200-lab deliberately gets no service, so it is "a host that is not serving". Matrices are
tiny: the point is behaviour, not numbers.
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
        "sglang_bench_output_len": 8, "sglang_bench_cell_timeout_s": 60, "sglang_bench_request_timeout_s": 30,
        "sglang_bench_prompt_sets": [], "sglang_bench_sweep_soak_concurrency": 0}
CRASH = {"name": "ddtree-b16-graphs-sm103", "speculative": {"algorithm": "DDTREE", "budget": 16, "topk_cap": 4},
         "env": {"SGLANG_STANDIN_GPU_CC": "10.3"}}
GARBAGE = {"name": "ddtree-b6-garbage", "speculative": {"algorithm": "DDTREE", "budget": 6, "topk_cap": 4},
           "env": {"SGLANG_STANDIN_FAULT": "garbage"}}
OK4 = {"name": "ddtree-b4", "speculative": {"algorithm": "DDTREE", "budget": 4, "topk_cap": 4}}
OK8 = {"name": "ddtree-b8", "speculative": {"algorithm": "DDTREE", "budget": 8, "topk_cap": 4}}
# Lossy but fluent: known answers right (the smoke passes), pseudo-text wrong from token 3 (the lossless gate's catch).
WRONG = {"name": "ddtree-b4-wrong-text", "speculative": {"algorithm": "DDTREE", "budget": 4, "topk_cap": 4},
         "env": {"SGLANG_STANDIN_FAULT": "wrong_text"}}
# Dies replaying the CUDA graph of batch 1 once a batch of 6 shrank (the soak's C is 6, the matrix's at most 4).
SOAKCRASH = {"name": "ddtree-b6-soak-crash", "speculative": {"algorithm": "DDTREE", "budget": 6, "topk_cap": 4},
             "env": {"SGLANG_STANDIN_FAULT": "crash_shrinking_batch", "SGLANG_STANDIN_CRASH_BATCH": "6"}}


def run_id(tag):
    return f"itest-{tag}-{uuid.uuid4().hex[:6]}"


def unit_state(lab, host=HOST):
    out = lab.ssh(host, "systemctl show -p MainPID -p InvocationID -p ActiveState sglang.service").stdout
    return dict(line.split("=", 1) for line in out.strip().splitlines())


@pytest.fixture(scope="module")
def served(lab, request):
    """Baseline service on b300-lab (the host's nvlink profile, run by the stand-in)."""
    from tests.helpers.playbook import run_playbook
    # the lab venv and the lab drafter's config (the service's drafter check reads it), then the service
    for playbook in ("roles/sglang_service/molecule/default/prepare.yml", "playbooks/service.yml"):
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
    rows = [row for row in read_jsonl(RESULTS / run / HOST / "default.jsonl") if row["kind"] == "cell"]
    assert [row["cell"] for row in rows] == ["ctx60_c1", "ctx60_c4", "ctx1024_c1", "ctx1024_c4"]
    fact = json.loads(lab.ssh(HOST, "cat /etc/ansible/facts.d/sglang_venv.fact").stdout)
    for row in rows:
        assert row["status"] == "ok", row
        assert row["total_output_tokens"] == 8 * row["completed"] and row["failed"] == 0
        assert row["total_input_tokens"] == row["context_length"] * row["completed"]
        assert row["output_throughput"] > 0 and row["mean_ttft_ms"] > 0 and row["median_itl_ms"] > 0
        # per cell from the requests' own figures (sum completion / sum verify steps), not /server_info's average
        reqs = [q for q in row["requests"] if q["success"]]
        assert row["accept_length_source"] == "per_request"
        assert row["accept_length"] == pytest.approx(sum(q["completion_tokens"] for q in reqs)
                                                     / sum(q["spec_verify_ct"] for q in reqs))
        prov = row["provenance"]
        assert prov["host_group"] == "nvlink"
        assert prov["venv_content_hash"] == fact["content_hash"]
        assert prov["sglang_version"] == fact["sglang_version"]
        assert prov["patch_series_hash"] == fact["patch_series_hash"]
        assert "--speculative-ddtree-budget" in prov["flags"] and "8" in prov["flags"]
        assert "lab-only-standin-key" not in json.dumps(row)        # the API key never lands in results
        assert prov["driver"].startswith("none") and prov["cuda"].startswith("none")  # lab: no GPU, said so
    report = (RESULTS / run / "report.md").read_text()
    assert "**1 ok, 0 failed** of 1 config(s). Highest peak throughput: **default**" in report
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


def test_sweep_four_configs_three_fail_baseline_restored(served, lab, playbook):
    """The baseline, one config every landed check passes but the lossless gate disqualifies, and three that fail at
    restart, smoke and soak. (A correct speculative config judged lossless by the gate: the speedup sweep below.)"""
    run = run_id("sweep")
    r = playbook("playbooks/sweep.yml", limit=HOST, timeout=1200,
                 extravars={**TINY, "sglang_bench_run_id": run, "sglang_bench_sweep_soak_concurrency": 6,
                            "sglang_bench_sweep_configs": [WRONG, CRASH, GARBAGE, SOAKCRASH]})
    assert r.rc == 0, r.stdout[-6000:]
    outcomes = read_jsonl(RESULTS / run / HOST / "sweep.jsonl")
    by_name = {o["config"]: o for o in outcomes if not o.get("phase")}
    # the autoregressive baseline is measured first, on the same matrix
    # every config runs, the ones after a failure too (the soak crash comes after two failed configs)
    assert list(by_name) == ["autoregressive", "ddtree-b4-wrong-text", "ddtree-b16-graphs-sm103",
                             "ddtree-b6-garbage", "ddtree-b6-soak-crash"]
    assert [by_name[n]["status"] for n in by_name] == ["ok", "ok", "failed", "failed", "failed"]
    assert by_name["autoregressive"]["baseline"] is True and by_name["ddtree-b4-wrong-text"]["baseline"] is False

    soak = by_name["ddtree-b6-soak-crash"]
    assert soak["failed_step"] == "soak" and "shrinking-batch soak" in soak["reason"]
    assert any("after the batch shrank from 6" in line for line in soak["journal"]), soak["journal"]
    # a config that survives the shrinking batch: its soak recorded ok, at the sweep's soak concurrency
    ok = by_name["ddtree-b4-wrong-text"]
    assert ok["soak"]["status"] == "ok" and ok["soak"]["concurrency"] == 6

    crash = by_name["ddtree-b16-graphs-sm103"]
    assert crash["failed_step"] == "restart"
    assert "exited" in crash["reason"] or "failed" in crash["reason"]
    assert any("illegal memory access" in line for line in crash["journal"]), crash["journal"]
    garbage = by_name["ddtree-b6-garbage"]
    assert garbage["failed_step"] == "smoke"
    assert "U+FFFD" in garbage["reason"] or "degenerate" in garbage["reason"]
    assert garbage["journal"], "a failed config carries its journal excerpt"
    name = "ddtree-b4-wrong-text"      # ok through every step before the gate: its matrix rows are complete
    assert by_name[name]["cells_ok"] == 4 and by_name[name]["spec"]["budget"] == 4
    assert by_name[name]["overrides"]["speculative"]["budget"] == by_name[name]["spec"]["budget"]
    rows = [row for row in read_jsonl(RESULTS / run / HOST / f"{name}.jsonl") if row["phase"] == "matrix"]
    assert len(rows) == 4 and all(row["status"] == "ok" and row["config"] == name for row in rows)
    assert f"--speculative-ddtree-budget {by_name[name]['spec']['budget']}" in " ".join(rows[0]["provenance"]["flags"])

    # The lossless gate: the wrong-text config passed the landed checks (smoke, degenerate detector) but its greedy
    # outputs differ from the baseline's from token 3 on: disqualified, naming the prompt and the position; the
    # baseline matches itself at C=1 and C=16.
    from ansible.module_utils.sglang.degenerate import degenerate
    wrong = by_name["ddtree-b4-wrong-text"]
    assert wrong["degenerate_cells"] == [] and wrong["lossless_min_agreement"] == 0.5
    wrong_gates = [row for row in read_jsonl(RESULTS / run / HOST / "ddtree-b4-wrong-text.jsonl")
                   if row["kind"] == "gate"]
    assert len(wrong_gates) == 2 and all(len(g["outputs"]) == g["prompts_requested"] > 0 for g in wrong_gates)
    assert all(degenerate(o["text"]) is None for g in wrong_gates for o in g["outputs"])
    gate = json.loads((RESULTS / run / "lossless.json").read_text())["hosts"][HOST]
    assert gate["baseline"] == "autoregressive" and gate["self_check"]["match_rate"] == 1.0
    assert gate["self_check"]["concurrencies"] == [1, 16]
    verdict = gate["configs"]["ddtree-b4-wrong-text"]
    assert verdict["lossless"] is False and verdict["match_rate"] == 0.0
    # Wrong from token 3 of the stand-in's short answers: far below the floor (0.5 x the baseline's own 1.0).
    assert gate["self_check"]["agreement"] == 1.0 and verdict["agreement"] < 0.5
    first = verdict["workloads"]["random-ids/ctx60"]["diverged"][0]
    assert first["prompt_id"] == "ids-0" and first["token"] == 3 and first["char"] > 0
    assert first["baseline"] != first["config"]

    # The real parser is asked once per distinct question in a run (18-26 s of import each on the H200): the sweep
    # validates every config up front and its steps render the same questions again, answered already. (The H200
    # rehearsal's sweep asked each of its three configs twice: only the last accepted question was remembered.)
    asked, question = [], None
    for ev in r.events:
        data = ev.get("event_data", {})
        if data.get("host") != HOST or ev.get("event") not in ("runner_on_ok", "runner_on_skipped"):
            continue
        if data.get("task") == "The preflight's question (venv, parser, argv, key or not, environment)":
            question = data["res"]["ansible_facts"]["sglang_service_preflight_key"]
        elif data.get("task") == "Ask the installed server's parser whether the new flags are accepted":
            asked.append((question, ev["event"]))
    answered = [q for q, event in asked if event == "runner_on_ok"]
    assert len(answered) >= 5 and len(answered) == len(set(answered)), asked     # baseline + 4 configs, none twice
    assert [q for q, event in asked if event == "runner_on_skipped"], asked       # the steps' questions: answered
    assert all(q in answered for q, event in asked if event == "runner_on_skipped"), asked

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
    assert "SGLANG_STANDIN_FAULT" not in environ and "SGLANG_STANDIN_GPU_CC=10.3" not in environ
    health = lab.ssh(HOST, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30001/health").stdout
    assert health == "200"

    report = (RESULTS / run / "report.md").read_text()
    assert "**1 ok, 3 failed, 1 disqualified** of 5 config(s)." in report
    assert "| ddtree-b4-wrong-text | DISQUALIFIED |" in report and "**NOT LOSSLESS**" in report
    assert "`ddtree-b4-wrong-text` on random-ids/ctx60, prompt #0 (ids-0): first difference at token 3" in report
    import yaml
    proposal = yaml.safe_load((RESULTS / run / "proposal.yml").read_text())["groups"]["nvlink"]
    assert proposal["winner"] != "ddtree-b4-wrong-text"
    assert any(d["config"] == "ddtree-b4-wrong-text" and "not lossless" in d["why"] for d in proposal["disqualified"])
    assert "FAILED at step `restart`" in report and "FAILED at step `smoke`" in report
    assert "FAILED at step `soak`" in report
    assert "restored and ready" in report
    for png in ("throughput_vs_concurrency.png", "accept_throughput_vs_budget.png"):
        assert (RESULTS / run / "plots" / png).stat().st_size > 1000


# ---- issue 14: numbers that mean something ------------------------------------------------------------------------
# The stand-in's timing for these sweeps: a fast token, and a verify step that grows with the batch (so speculation
# wins at C=1 and loses at C=16, like on real hardware).
FAST = {"SGLANG_STANDIN_ITL_MS": "2", "SGLANG_STANDIN_ITL_SLOPE_MS": "0.1"}
NOSPEC = {"algorithm": "DFLASH", "budget": None, "topk_cap": None, "debug_metrics": None}
SPEEDUP_CONFIGS = [
    {"name": "dflash-b8", "speculative": NOSPEC, "env": FAST},
    {"name": "ddtree-b4", "speculative": {"algorithm": "DDTREE", "budget": 4, "topk_cap": 4}, "env": FAST},
    {"name": "ddtree-b16", "speculative": {"algorithm": "DDTREE", "budget": 16, "topk_cap": 4}, "env": FAST},
]
SPEEDUP = {"sglang_bench_context_lengths": [], "sglang_bench_prompt_sets": ["chat", "code", "math"],
           "sglang_bench_concurrencies": [1, 16], "sglang_bench_output_len": 160,
           "sglang_bench_prompts_per_concurrency": 2, "sglang_bench_min_prompts": 8,
           "sglang_bench_cell_timeout_s": 120, "sglang_bench_request_timeout_s": 60,
           "sglang_bench_sweep_soak_concurrency": 4,
           "sglang_bench_sweep_baseline_config": {"name": "autoregressive", "speculative": {"algorithm": "NONE"},
                                                  "env": FAST},
           "sglang_bench_sweep_configs": SPEEDUP_CONFIGS}


def configured_truth(row):
    """The stand-in's configured accept length for the cell: per request, E of its prompt's text class under the
    config's algorithm and shape (the prompts cycle the set; rendered as plain role lines: the lab model has no chat
    template); the cell's figure is the requests' total tokens over their total verify steps."""
    import sys
    sys.path.insert(0, str(ROOT / "lab/sglang_standin"))
    from sglang_standin import engine
    from ansible.module_utils.loadgen.prompts import plain_text
    items = [json.loads(line) for line in (ROOT / "roles/sglang_bench/files/prompts"
                                           / f"{row['prompt_set']}.jsonl").read_text().splitlines() if line]
    config = {c["name"]: c["speculative"] for c in SPEEDUP_CONFIGS}[row["config"]]
    tokens = steps = 0
    for req in row["requests"]:
        cls = engine.text_class(plain_text(items[req["index"] % len(items)]["messages"]))
        if config["algorithm"] == "DFLASH":
            e = engine.expected_accept_length(cls, "DFLASH", 8)       # the profile's block size 8
        else:
            e = engine.expected_accept_length(cls, "DDTREE", None, config["budget"], config["topk_cap"])
        tokens += req["completion_tokens"]
        steps += req["completion_tokens"] / e
    return tokens / steps


@pytest.fixture(scope="module")
def speedup_run(served, lab):
    from tests.helpers.playbook import run_playbook
    run = run_id("speedup")
    r = run_playbook(lab, "playbooks/sweep.yml", limit=HOST, timeout=1500,
                     extravars={**SPEEDUP, "sglang_bench_run_id": run})
    assert r.rc == 0, r.stdout[-6000:]
    return run


def test_per_cell_acceptance_matches_the_standins_truth_and_the_running_average_would_not(speedup_run):
    rows = [row for name in ("dflash-b8", "ddtree-b4", "ddtree-b16")
            for row in read_jsonl(RESULTS / speedup_run / HOST / f"{name}.jsonl") if row["phase"] == "matrix"]
    assert len(rows) == 3 * 3 * 2 and all(row["status"] == "ok" for row in rows)
    off_by_running_average = []
    for row in rows:
        truth = configured_truth(row)
        assert row["accept_length_source"] == "per_request"
        assert row["accept_length"] == pytest.approx(truth, rel=0.02), (row["cell"], row["config"])
        if abs(row["server_running_average"] - truth) / truth > 0.02:
            off_by_running_average.append((row["config"], row["cell"]))
    # the old method (/server_info's running average since start) misses the truth on most DFLASH cells
    assert len([c for c in off_by_running_average if c[0] == "dflash-b8"]) >= 3, off_by_running_average
    by_set = {}
    for row in rows:
        by_set.setdefault((row["config"], row["prompt_set"]), []).append(row["accept_length"])
    # acceptance differs by prompt set (DFLASH: code > math > chat) and by budget (DDTree 16 > 4)
    assert min(by_set[("dflash-b8", "code")]) > max(by_set[("dflash-b8", "math")]) > max(by_set[("dflash-b8", "chat")])
    assert min(by_set[("ddtree-b16", "chat")]) > 1.5 * max(by_set[("ddtree-b4", "chat")])


def test_report_has_speedups_crossover_plot_and_a_proposal(speedup_run):
    import yaml
    run_dir = RESULTS / speedup_run
    report = (run_dir / "report.md").read_text()
    assert "Speedup over autoregressive" in report and "crossover" in report.lower()
    # the lossless gate passes correct configs: each speculative config reproduces the baseline's greedy outputs on
    # every gate prompt of every workload (the fault sweep above has the config it disqualifies)
    gate = json.loads((run_dir / "lossless.json").read_text())["hosts"][HOST]
    assert gate["baseline"] == "autoregressive" and gate["self_check"]["match_rate"] == 1.0
    for name in ("dflash-b8", "ddtree-b4", "ddtree-b16"):
        assert gate["configs"][name]["lossless"] is True and gate["configs"][name]["match_rate"] == 1.0, name
    assert (run_dir / "plots" / "speedup_vs_concurrency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proposal = yaml.safe_load((run_dir / "proposal.yml").read_text())
    entry = proposal["groups"]["nvlink"]
    assert entry["hosts"] == [HOST] and entry["baseline"] == "autoregressive"
    # speculation wins at C=1 and loses at C=16 on the stand-in: every speculative config has a crossover
    for name in ("dflash-b8", "ddtree-b4", "ddtree-b16"):
        rows = [row for row in read_jsonl(run_dir / HOST / f"{name}.jsonl") if row["phase"] == "matrix"]
        base = {(row["workload"], row["max_concurrency"]): row["output_throughput"]
                for row in read_jsonl(run_dir / HOST / "autoregressive.jsonl") if row["phase"] == "matrix"}
        speed = {(row["workload"], row["max_concurrency"]): row["output_throughput"] / base[(row["workload"],
                 row["max_concurrency"])] for row in rows}
        assert speed[("prompts/code", 1)] > 1.0 and speed[("prompts/code", 16)] < 1.0, (name, speed)
    assert entry["winner"] in ("dflash-b8", "ddtree-b4", "ddtree-b16")
    assert entry["figures"]["geomean_speedup"] > 1.0
    assert entry["group_vars"]["sglang_service_speculative_overrides"] == \
        {c["name"]: c["speculative"] for c in SPEEDUP_CONFIGS}[entry["winner"]]
    assert "sglang_service_speculative_profile" in entry["diff"] or entry["diff"] == ""


def test_an_slo_nobody_meets_is_reported_and_proposes_nothing(speedup_run, tmp_path):
    import shutil
    import subprocess
    import sys
    import yaml
    run_dir = tmp_path / speedup_run
    shutil.copytree(RESULTS / speedup_run, run_dir)
    out = subprocess.run([sys.executable, "-m", "reporting", str(run_dir), "--slo-ttft-p99-ms", "0.001",
                          "--no-plots"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "no config meets the SLO" in (run_dir / "report.md").read_text()
    assert yaml.safe_load((run_dir / "proposal.yml").read_text())["groups"]["nvlink"]["winner"] is None


def test_applying_the_proposal_reconfigures_and_a_bad_one_leaves_the_old_service(speedup_run, lab, playbook, tmp_path):
    import yaml
    proposal_path = RESULTS / speedup_run / "proposal.yml"
    winner = yaml.safe_load(proposal_path.read_text())["groups"]["nvlink"]["winner"]
    # The host's own overrides (host_vars) stay under the proposal's fragment, whose server overrides are empty
    # here: on the H200 (rehearsal h200-2026-12-04d) they replaced the host's, its context_length 8192 fell
    # back to the group's 32768 and the real parser refused the proposal. (Its env overrides are the config's own.)
    own = tmp_path / "own-overrides"
    (own / "host_vars").mkdir(parents=True)
    (own / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {HOST: None}}}))
    (own / "host_vars" / f"{HOST}.yml").write_text(yaml.safe_dump({
        "sglang_service_server_overrides": {"max_running_requests": 96},
        "sglang_service_env_overrides": {"LAB_HOST_OWN": "kept"}}))
    fragment = yaml.safe_load(proposal_path.read_text())["groups"]["nvlink"]["group_vars"]
    assert fragment["sglang_service_server_overrides"] == {}
    assert "LAB_HOST_OWN" not in fragment["sglang_service_env_overrides"]
    r = playbook("playbooks/apply_proposal.yml", limit=HOST, timeout=900, inventory=["inventory/lab", str(own)],
                 extravars={"proposal": str(proposal_path)})
    assert r.rc == 0, r.stdout[-6000:]
    state = unit_state(lab)
    cmdline = lab.ssh(HOST, f"tr '\\0' ' ' < /proc/{state['MainPID']}/cmdline").stdout
    spec = {c["name"]: c["speculative"] for c in SPEEDUP_CONFIGS}[winner]
    assert f"--speculative-algorithm {spec['algorithm']}" in cmdline
    if spec.get("budget"):
        assert f"--speculative-ddtree-budget {spec['budget']}" in cmdline
    assert f"now serves {winner}" in r.stdout
    assert "--max-running-requests 96" in cmdline                     # the host's own server override kept
    assert "LAB_HOST_OWN=kept" in lab.ssh(HOST, f"tr '\\0' '\\n' < /proc/{state['MainPID']}/environ").stdout

    def variant(name, **group_vars):
        """The proposal with some of its group_vars replaced, written beside the test."""
        doc = yaml.safe_load(proposal_path.read_text())
        doc["groups"]["nvlink"]["group_vars"].update(group_vars)
        path = tmp_path / f"{name}-proposal.yml"
        path.write_text(yaml.safe_dump(doc))
        return {"proposal": str(path)}

    r = playbook("playbooks/apply_proposal.yml", limit=HOST, timeout=900,
                 extravars=variant("bad", sglang_service_speculative_overrides={"algorithm": "MEDUSA"}))
    assert r.rc != 0 and "Validate the proposed config" in r.stdout
    assert "Configure the proposed unit" not in r.task_names()       # refused before the unit was touched
    assert unit_state(lab) == state                                  # the old service keeps serving

    # passes every check but dies in warmup: the previous unit is put back, restarted and proven ready
    r = playbook("playbooks/apply_proposal.yml", limit=HOST, timeout=900,
                 extravars=variant("crashing", sglang_service_env_overrides={"SGLANG_STANDIN_FAULT": "crash_warmup"}))
    assert r.rc != 0 and "proposal NOT applied on b300-lab: step 'Restart sglang service' failed" in r.stdout
    after = unit_state(lab)
    assert after["ActiveState"] == "active" and after["MainPID"] != state["MainPID"]
    restored = lab.ssh(HOST, f"tr '\\0' ' ' < /proc/{after['MainPID']}/cmdline").stdout
    assert restored == cmdline                                       # the winner's flags again
    environ = lab.ssh(HOST, f"tr '\\0' '\\n' < /proc/{after['MainPID']}/environ").stdout
    assert "SGLANG_STANDIN_FAULT" not in environ
    # the host serves the winner, ready (asserted above): the tests after this one need a serving host, not the profile


def test_bad_workloads_are_refused_before_anything_runs(served, lab, playbook):
    before = unit_state(lab)
    r = playbook("playbooks/bench.yml", limit=HOST,
                 extravars={**TINY, "sglang_bench_prompt_sets_extra": {"empty": []}})
    assert r.rc != 0 and "prompt set 'empty' is empty" in r.stdout
    r = playbook("playbooks/bench.yml", limit=HOST,
                 extravars={**TINY, "sglang_bench_dataset_path": "/var/lib/nowhere/sharegpt.json"})
    assert r.rc != 0 and "/var/lib/nowhere/sharegpt.json does not exist on this host" in r.stdout
    r = playbook("playbooks/bench.yml", limit=HOST, extravars={**TINY, "sglang_bench_prompt_sets": ["poetry"]})
    assert r.rc != 0 and "unknown prompt set(s) ['poetry']" in r.stdout
    assert unit_state(lab) == before


def test_operator_dataset_fetched_by_the_models_role_is_benchmarked_offline(served, lab, playbook):
    models = playbook("playbooks/models.yml", limit=HOST, timeout=900, extravars={
        "models_list": [{"name": "sharegpt-mini", "repo_id": "lab/sharegpt-mini", "repo_type": "dataset",
                         "revision": "main"}]})
    assert models.rc == 0, models.stdout[-4000:]
    run = run_id("dataset")
    path = "/srv/models/sharegpt-mini/sharegpt_mini.json"                # deploy_models_root / the entry's name
    assert lab.ssh(HOST, f"python3 -c 'import json; print(len(json.load(open(\"{path}\"))))'").stdout.strip() == "21"
    r = playbook("playbooks/bench.yml", limit=HOST, extravars={
        **TINY, "sglang_bench_context_lengths": [], "sglang_bench_dataset_path": path,
        "sglang_bench_concurrencies": [2], "sglang_bench_run_id": run})
    assert r.rc == 0, r.stdout[-4000:]
    rows = [row for row in read_jsonl(RESULTS / run / HOST / "default.jsonl") if row["kind"] == "cell"]
    assert [row["workload"] for row in rows] == ["dataset/sharegpt_mini"]
    assert rows[0]["status"] == "ok" and rows[0]["dataset_name"] == "sharegpt"
    assert rows[0]["accept_length_source"] == "per_request" and rows[0]["context_length"] > 5
