"""The bench matrix of ansible.module_utils.loadgen, stage by stage and driven whole (loopback fixture): spec validation
(workloads), serving check (server), the sglang.bench_serving route (bench_serving), JSONL rows with provenance
(rows, matrix)."""
import json

import pytest

from ansible.module_utils.loadgen import bench_serving as bench_route
from ansible.module_utils.loadgen import rows as bench_rows
from ansible.module_utils.loadgen import server as bench_server
from ansible.module_utils.loadgen import workloads as bench_workloads
from ansible.module_utils.loadgen import matrix as bench_matrix
from tests.helpers.fixture_server import FixtureServer

GOOD = {"base_url": "http://127.0.0.1:1", "context_lengths": [60, 1024], "concurrencies": [1, 8],
        "output_len": 8, "prompts_per_concurrency": 1, "min_prompts": 2, "warmup_requests": 1,
        "cell_timeout_s": 30, "request_timeout_s": 10, "client": "builtin", "backend": "sglang"}


def spec(**kw):
    out = dict(GOOD)
    out.update(kw)
    return out


def test_good_spec_has_no_errors():
    assert bench_workloads.validate_spec(GOOD) == []


@pytest.mark.parametrize("change, message", [
    ({"context_lengths": []}, "context_lengths is empty"),
    ({"concurrencies": []}, "concurrencies is empty"),
    ({"concurrencies": None}, "concurrencies is empty"),
    ({"context_lengths": [60, 0]}, "integers >= 1"),
    ({"context_lengths": [60, "x"]}, "integers >= 1"),
    ({"concurrencies": [1, True]}, "integers >= 1"),
    ({"concurrencies": [8, 8]}, "duplicates"),
    ({"output_len": 0}, "output_len must be"),
    ({"cell_timeout_s": 0}, "cell_timeout_s must be"),
    ({"request_timeout_s": -1}, "request_timeout_s must be"),
    ({"warmup_requests": -1}, "warmup_requests must be"),
    ({"client": "vllm"}, "client must be one of"),
    ({"backend": "trt"}, "backend must be one of"),
    ({"base_url": "127.0.0.1:30000"}, "base_url must be"),
    ({"cell_repeats": 0}, "cell_repeats must be an integer >= 1"),
    ({"min_cell_seconds": -1}, "min_cell_seconds must be a number >= 0"),
    ({"min_cell_seconds": 30}, "min_cell_seconds (30) must be below cell_timeout_s (30)"),
    ({"max_spread": 0}, "max_spread must be a number > 0"),
])
def test_bad_specs_are_named(change, message):
    errors = bench_workloads.validate_spec(spec(**change))
    assert any(message in e for e in errors), errors


def test_empty_matrix_refused_before_any_request():
    with FixtureServer() as server:
        with pytest.raises(ValueError, match="context_lengths is empty"):
            bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[]))
        assert server.requests == []


def test_cells_order_and_bound():
    assert [(w["id"], c) for w, c in bench_workloads.cells(GOOD)] == [
        ("random-ids/ctx60", 1), ("random-ids/ctx60", 8), ("random-ids/ctx1024", 1), ("random-ids/ctx1024", 8)]
    assert bench_workloads.worst_case_seconds(GOOD) == 4 * 30
    assert bench_workloads.worst_case_seconds(spec(cell_repeats=3)) == 4 * 3 * 30


def test_check_serving():
    with FixtureServer() as server:
        assert bench_server.check_serving(server.url) is None
        server.fault = "warming"
        assert "HTTP 503" in bench_server.check_serving(server.url)
        url = server.url
    reason = bench_server.check_serving(url, timeout=2)
    assert "is not serving" in reason and url in reason


def test_redact_argv_hides_secrets():
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "s3cret", "--hf-token=abc", "--port", "1"]
    out = bench_server.redact_argv(argv)
    assert "s3cret" not in out and "--hf-token=abc" not in out
    assert out[-2:] == ["--port", "1"] and "--hf-token=<redacted>" in out


def test_run_matrix_writes_one_row_per_cell_with_provenance(tmp_path):
    out = tmp_path / "sub" / "cfg.jsonl"
    prov = {"host_group": "nvlink", "driver": "none", "cuda": "13.0", "venv_hash": "abc",
            "flags": ["--tp-size", "8"]}
    with FixtureServer(accept_length=4.5) as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4, 16]),
                                          labels={"run": "r1", "config": "cfg", "host": "h"},
                                          provenance=prov, output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["rows"] == 4 and summary["ok_cells"] == 4 and summary["failed_cells"] == 0
    assert summary["client"] == "builtin"
    assert [r["cell"] for r in rows] == ["ctx4_c1", "ctx4_c8", "ctx16_c1", "ctx16_c8"]
    for r in rows:
        assert r["kind"] == "cell" and r["status"] == "ok"
        assert r["run"] == "r1" and r["config"] == "cfg" and r["host"] == "h"
        assert r["provenance"] == prov
        assert r["accept_length"] == 4.5
        assert r["total_input_tokens"] == r["context_length"] * r["completed"]
        for key in ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
                    "median_itl_ms", "p99_itl_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms"):
            assert isinstance(r[key], float), key
    assert summary["best_output_throughput"] == max(r["output_throughput"] for r in rows)


def test_failed_cell_is_recorded_and_matrix_moves_on(tmp_path):
    out = tmp_path / "x.jsonl"
    with FixtureServer(fault="http500") as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[1, 2]),
                                          output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["failed_cells"] == 2 and len(rows) == 2
    assert all(r["status"] == "error" and "HTTP 500" in r["error"] for r in rows)
    assert rows[0]["output_throughput"] is None


def test_bench_serving_client_refused_when_not_importable(tmp_path):
    with pytest.raises(ValueError, match="not importable"):
        bench_matrix.run_matrix(spec(client="sglang.bench_serving", venv_python=str(tmp_path / "nope")))


def test_auto_client_falls_back_to_builtin(tmp_path):
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, client="auto", venv_python="/usr/bin/python3",
                                               context_lengths=[4], concurrencies=[1]))
    assert summary["client"] == "builtin"


def test_bench_serving_argv_matches_the_seed_command():
    argv = bench_route.bench_serving_argv(dict(GOOD, venv_python="/v/bin/python", base_url="http://127.0.0.1:30001"),
                                          1024, 8, 32, "/tmp/o.jsonl")
    joined = " ".join(argv)
    assert joined.startswith("/v/bin/python -m sglang.bench_serving --backend sglang")
    assert argv[argv.index("--dataset-name") + 1] == "random-ids"  # `random` would download ShareGPT
    for part in ("--random-input-len 1024", "--random-output-len 8",
                 "--random-range-ratio 1.0", "--num-prompts 32", "--max-concurrency 8",
                 "--output-file /tmp/o.jsonl"):
        assert part in joined
    # exact token ids: without --tokenize-prompt real 0.5.11 sends the ids decoded to text (re-tokenised by the server)
    assert "--tokenize-prompt" in argv


def test_bench_serving_openai_backends_send_text_and_the_row_says_so(fake_sglang, tmp_path):
    # real 0.5.11 asserts --tokenize-prompt is given with --backend sglang only
    argv = bench_route.bench_serving_argv(dict(GOOD, venv_python="/v/bin/python", backend="sglang-oai"),
                                          256, 8, 32, "/o")
    assert "--tokenize-prompt" not in argv
    row = bench_route.run_bench_serving_cell(dict(GOOD, venv_python=fake_sglang, base_url="http://127.0.0.1:9",
                                                  backend="sglang-oai", cell_timeout_s=60),
                                             {"kind": "random-ids", "context_length": 64}, 2, 4)
    assert row["status"] == "ok" and row["prompt_sent"] == "text"
    assert row["total_input_tokens"] == 4 * 63   # bench_serving's own count: the special token taken off


FAKE_BENCH_SERVING = '''
import argparse, json, sys, time


def main():
    p = argparse.ArgumentParser()
    for a in ("--backend", "--base-url", "--dataset-name", "--random-input-len", "--random-output-len",
              "--random-range-ratio", "--num-prompts", "--max-concurrency", "--warmup-requests", "--output-file",
              "--tokenizer", "--model", "--dataset-path", "--sharegpt-output-len", "--seed"):
        p.add_argument(a)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--tokenize-prompt", action="store_true")
    a = p.parse_args()
    # as real 0.5.11: ids only with the sglang backend; otherwise random-ids are decoded to text, one token shorter
    # for the tokenizer's special token (sglang/benchmark/datasets/random.py)
    assert not a.tokenize_prompt or a.backend == "sglang", "--tokenize-prompt only compatible with --backend sglang"
    specials = 0 if (a.tokenize_prompt or a.dataset_name != "random-ids") else 1
    if a.random_input_len == "13":
        time.sleep(30)
    n = int(a.num_prompts)
    if a.dataset_name == "sharegpt":
        json.load(open(a.dataset_path))
        a.random_input_len, a.random_output_len = "7", a.sharegpt_output_len
    row = {"backend": a.backend, "completed": n, "total_input_tokens": n * (int(a.random_input_len) - specials),
           "total_output_tokens": n * int(a.random_output_len), "output_throughput": 1234.5, "mean_ttft_ms": 40.0,
           "median_ttft_ms": 40.0, "p99_ttft_ms": 41.0, "mean_itl_ms": 8.0, "median_itl_ms": 8.0, "p99_itl_ms": 9.0,
           "mean_tpot_ms": 8.0, "median_tpot_ms": 8.0, "p99_tpot_ms": 8.5, "accept_length": 4.48, "duration": 1.0}
    with open(a.output_file, "a") as f:
        f.write(json.dumps(row) + "\\n")


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_serving.py").write_text(FAKE_BENCH_SERVING)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    import sys
    return sys.executable


def test_bench_serving_client_is_used_when_importable(fake_sglang, tmp_path):
    out = tmp_path / "rows.jsonl"
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, client="auto", venv_python=fake_sglang,
                                               context_lengths=[60], concurrencies=[1, 8]), output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["client"] == "sglang.bench_serving" and summary["ok_cells"] == 2
    assert [r["bench_client"] for r in rows] == ["sglang.bench_serving"] * 2
    assert rows[1]["output_throughput"] == 1234.5 and rows[1]["accept_length"] == 4.48
    assert rows[1]["num_prompts"] == 8 and rows[1]["total_output_tokens"] == 8 * 8
    assert rows[1]["total_input_tokens"] == 8 * 60 and rows[1]["prompt_sent"] == "input_ids"  # exact ids
    assert rows[1]["client_cpu_s"] > 0   # the bench_serving process's own CPU, as the built-in row has it
    assert server.requests == []   # all traffic came from the (fake) bench_serving, none from the builtin client


def test_bench_serving_cell_is_bounded(fake_sglang, tmp_path):
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, client="sglang.bench_serving",
                                               venv_python=fake_sglang, context_lengths=[13], concurrencies=[1],
                                               cell_timeout_s=1.5), output_path=str(tmp_path / "o.jsonl"))
    assert summary["failed_cells"] == 1
    assert "exceeded the 1.5s cell bound" in summary["failures"][0]


def test_bench_serving_dataset_cell_is_offline_with_dataset_path(fake_sglang, tmp_path):
    data = tmp_path / "sg.json"
    data.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "hello there"}]}]))
    out = tmp_path / "rows.jsonl"
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, client="sglang.bench_serving",
                                               venv_python=fake_sglang, context_lengths=[], concurrencies=[2],
                                               dataset_path=str(data), prompt_format="plain"),
                                          output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["ok_cells"] == 1 and rows[0]["workload"] == "dataset/sg" and rows[0]["cell"] == "ds-sg_c2"
    assert rows[0]["bench_client"] == "sglang.bench_serving" and rows[0]["dataset_name"] == "sharegpt"
    assert rows[0]["accept_length_source"] == "server_running_average"  # bench_serving reads /server_info
    argv = bench_route.bench_serving_argv(dict(GOOD, venv_python="/v/bin/python"),
                                          bench_workloads.workloads(spec(dataset_path=str(data)))[-1], 2, 8, "/o")
    assert argv[argv.index("--dataset-path") + 1] == str(data)


CODE_SET = [{"id": "c1", "messages": [{"role": "user", "content": "Write a Python function add(a, b)."}]},
            {"id": "c2", "messages": [{"role": "user", "content": "Write a bash loop over files."}]}]


def test_prompt_set_cells_carry_per_request_acceptance_and_real_token_counts(tmp_path):
    out = tmp_path / "rows.jsonl"
    with FixtureServer(tokens_per_chunk=3) as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[], concurrencies=[1, 2],
                                               prompt_sets={"code": CODE_SET}, prompt_format="plain",
                                               sample_outputs=2), output_path=str(out))
        sent = [req for path, req, _ in server.requests if path == "/generate"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["ok_cells"] == 2 and [r["cell"] for r in rows] == ["code_c1", "code_c2"]
    assert summary["workloads"]["prompts/code"].startswith("plain role lines")
    assert all(r["text"].startswith("user: Write a") and r["text"].endswith("assistant:") for r in sent)
    for r in rows:
        assert r["workload"] == "prompts/code" and r["prompt_set"] == "code" and r["ignore_eos"] is False
        # 8 tokens: prefill 1, then steps of 3, 3, 1 -> 3 verify steps per request
        assert r["accept_length_source"] == "per_request" and r["accept_length"] == pytest.approx(8 / 3)
        assert r["spec_totals"]["verify_ct"] == 3 * r["completed"]
        assert r["context_length"] == round(sum(q["prompt_tokens"] for q in r["requests"]) / len(r["requests"]))
        assert r["degenerate"]["checked"] == 2


def test_degenerate_bench_outputs_are_flagged_with_evidence(tmp_path):
    out = tmp_path / "rows.jsonl"
    with FixtureServer() as server:   # the fixture answers "tttt...": one word, but a loop only from 12 words
        server_url = server.url
        looping = [{"id": "x", "messages": [{"role": "user", "content": "say it"}]}]
        summary = bench_matrix.run_matrix(spec(base_url=server_url, context_lengths=[], concurrencies=[1],
                                               prompt_sets={"loop": looping}, prompt_format="plain",
                                               sample_outputs=1), output_path=str(out))
    assert summary["ok_cells"] == 1
    check = bench_rows.degenerate_check([{"index": 0, "text": "the sea the sea " * 10}, {"index": 1, "text": "Paris."}])
    assert check["checked"] == 2 and check["flagged"] == 1
    assert "repetition loop" in check["evidence"][0]["reason"] and check["evidence"][0]["index"] == 0


@pytest.mark.parametrize("change, message", [
    ({"context_lengths": [], "prompt_sets": {"chat": []}}, "prompt set 'chat' is empty"),
    ({"prompt_sets": {"chat": [{"id": "a", "messages": []}]}}, "needs messages"),
    ({"prompt_format": "html"}, "prompt_format must be one of"),
    ({"context_lengths": [], "prompt_sets": {}}, "context_lengths is empty"),
    ({"soak_concurrency": -1}, "soak_concurrency must be"),
])
def test_bad_workloads_are_named(change, message):
    errors = bench_workloads.validate_spec(spec(**change))
    assert any(message in e for e in errors), errors


def test_missing_dataset_refused_before_any_request(tmp_path):
    with FixtureServer() as server:
        with pytest.raises(ValueError, match="does not exist on this host"):
            bench_matrix.run_matrix(spec(base_url=server.url, dataset_path=str(tmp_path / "none.json")))
        assert server.requests == []


def test_chat_template_required_but_unrenderable_is_refused(tmp_path):
    with FixtureServer() as server:
        with pytest.raises(ValueError, match="prompt_format chat-template"):
            bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[], prompt_sets={"code": CODE_SET},
                                         prompt_format="chat-template", venv_python="/usr/bin/python3",
                                         tokenizer=str(tmp_path)))
        assert [p for p, _, _ in server.requests if p == "/generate"] == []


def test_soak_row_follows_the_matrix(tmp_path):
    out = tmp_path / "rows.jsonl"
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[1],
                                               soak_concurrency=3, soak_rounds=2), output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["matrix", "soak"]
    assert rows[1]["cell"] == "soak_c3" and rows[1]["status"] == "ok" and rows[1]["requests"] == 6
    assert summary["soak"]["status"] == "ok" and summary["rows"] == 1


def test_soak_fails_when_the_unit_was_restarted(tmp_path, monkeypatch):
    states = iter([{"main_pid": 10, "n_restarts": 0, "active": "active"},
                   {"main_pid": 11, "n_restarts": 1, "active": "active"}])
    monkeypatch.setattr(bench_server, "unit_state", lambda unit, run=None: next(states))
    with FixtureServer() as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[1],
                                               soak_concurrency=2, service_unit="sglang.service"))
    assert summary["soak"]["status"] == "failed"
    assert "MainPID 10 -> 11, restarts 0 -> 1" in summary["soak"]["error"]


def test_bench_serving_that_fails_to_import_is_not_available(tmp_path, monkeypatch):
    # real 0.5.11: sglang/bench_serving.py imports `datasets` at import time; found is not enough
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_serving.py").write_text("from datasets import load_dataset\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    import sys
    ok, why = bench_route.bench_serving_available(sys.executable)
    assert not ok and "datasets" in why
    with pytest.raises(ValueError, match="not importable.*datasets"):
        bench_matrix.run_matrix(spec(client="sglang.bench_serving", venv_python=sys.executable))


def test_every_cell_is_repeated_and_its_row_keeps_the_median_the_repeats_and_the_spread(tmp_path):
    out = tmp_path / "r.jsonl"
    with FixtureServer(itl=0.002) as server:
        summary = bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[2],
                                               cell_repeats=3, max_spread=50.0), output_path=str(out))
        measured = len(server.requests)
    row = json.loads(out.read_text())
    assert summary["rows"] == 1 and summary["ok_cells"] == 1 and summary["spread_flagged_cells"] == []
    assert measured == 3 * (2 + 1)                     # 3 repeats of (k x C = 2 requests + 1 warmup)
    assert row["cell_repeats"] == 3 and [r["repeat"] for r in row["repeats"]] == [1, 2, 3]
    tps = sorted(r["output_throughput"] for r in row["repeats"])
    assert row["output_throughput"] == tps[1]          # the median is the row's figure
    assert row["spread"]["output_throughput"] == pytest.approx((tps[2] - tps[0]) / tps[1])
    assert row["spread_flag"] is None and row["max_spread"] == 50.0
    assert len(row["requests"]) == 6 and {r["repeat"] for r in row["requests"]} == {1, 2, 3}


def test_repeats_of_a_random_ids_cell_send_other_ids_and_every_config_the_same(tmp_path):
    """A repeat that resent the ids of the one before would be served from SGLang's radix cache (on by default): its
    prefill skipped, its TTFT and throughput not the cell's. Each repeat draws its own; a second run (another config)
    draws the same ones again, so configs stay compared on the same prompts."""
    sent = []
    for _ in range(2):
        with FixtureServer(itl=0.001) as server:
            bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[2], cell_repeats=3,
                                         max_spread=1000.0), output_path=str(tmp_path / "r.jsonl"))
            sent.append([tuple(req["input_ids"]) for path, req, _ in server.requests if path == "/generate"])
    assert len(sent[0]) == 9 and len(set(sent[0])) == 9     # 3 repeats x (2 measured + 1 warmup), none resent
    assert set(sent[0]) == set(sent[1])                     # (two workers: the order may differ)


def test_the_bench_serving_route_seeds_each_repeat_and_each_rerun_apart(monkeypatch):
    seeds = []

    def run(spec_, workload, conc, count):
        seeds.append(spec_["seed"])
        return {"status": "ok", "duration": 0.5 if len(seeds) == 1 else 20.0, "completed": count}

    monkeypatch.setattr(bench_route, "run_bench_serving_cell", run)
    for repeat in range(2):
        bench_matrix._measure_cell(dict(GOOD, min_cell_seconds=10), {"kind": "random-ids", "context_length": 60}, 8,
                                   16, "sglang.bench_serving", "m", repeat)
    assert len(seeds) == 3 and len(set(seeds)) == 3       # repeat 0: a short run and its rerun; repeat 1: one run
    argv = bench_route.bench_serving_argv(dict(GOOD, venv_python="/v", seed=seeds[2]), 60, 8, 16, "/o")
    assert argv[argv.index("--seed") + 1] == str(seeds[2])


def test_a_cell_whose_repeats_spread_past_the_bound_is_flagged(tmp_path, monkeypatch):
    figures = iter([100.0, 125.0, 102.0])

    def fake(spec_, workload, conc, num_prompts, chosen, model, gpu_count=None, repeat=0):
        return {"status": "ok", "output_throughput": next(figures), "median_tpot_ms": 10.0, "completed": 4,
                "duration": 1.0, "degenerate": {"checked": 0, "flagged": 0, "evidence": []}}

    monkeypatch.setattr(bench_matrix, "_measure", fake)
    monkeypatch.setattr(bench_matrix.server, "served_model", lambda *a, **k: "m")
    out = tmp_path / "f.jsonl"
    summary = bench_matrix.run_matrix(spec(context_lengths=[4], concurrencies=[1], cell_repeats=3, max_spread=0.1),
                                      output_path=str(out))
    row = json.loads(out.read_text())
    assert row["output_throughput"] == 102.0 and row["spread"]["output_throughput"] == pytest.approx(25 / 102)
    assert row["spread"]["median_tpot_ms"] == 0.0
    assert row["spread_flag"] == {"bound": 0.1, "figures": {"output_throughput": {
        "spread": pytest.approx(25 / 102), "values": [100.0, 125.0, 102.0]}}}
    assert summary["spread_flagged_cells"] == ["ctx4_c1: output_throughput spread 24.5%"]


def test_a_failed_repeat_ends_the_cell_with_its_reason(tmp_path, monkeypatch):
    results = iter([{"status": "ok", "output_throughput": 100.0, "duration": 1.0},
                    {"status": "error", "error": "2 of 4 requests failed: boom", "output_throughput": 50.0}])
    calls = []

    def fake(*args):
        calls.append(1)
        return next(results)

    monkeypatch.setattr(bench_matrix, "_measure", fake)
    monkeypatch.setattr(bench_matrix.server, "served_model", lambda *a, **k: "m")
    out = tmp_path / "e.jsonl"
    summary = bench_matrix.run_matrix(spec(context_lengths=[4], concurrencies=[1], cell_repeats=3),
                                      output_path=str(out))
    row = json.loads(out.read_text())
    assert len(calls) == 2 and summary["failed_cells"] == 1
    assert row["status"] == "error" and row["error"] == "2 of 4 requests failed: boom"
    assert [r["status"] for r in row["repeats"]] == ["ok", "error"]


def test_min_cell_seconds_reaches_the_client(tmp_path):
    out = tmp_path / "t.jsonl"
    with FixtureServer(itl=0.002) as server:
        bench_matrix.run_matrix(spec(base_url=server.url, context_lengths=[4], concurrencies=[1],
                                     min_cell_seconds=0.3), output_path=str(out))
    row = json.loads(out.read_text())
    assert row["duration"] >= 0.3 and row["min_cell_seconds"] == 0.3 and row["completed"] > 2
