"""The lossless gate's measurement (ansible.module_utils.loadgen.lossless): the same prompts for every config, greedy
bodies, outputs (text and token ids, cumulative or delta streams) kept per prompt, and its rows through the matrix
(loopback fixture server)."""
import asyncio
import json

import pytest

from ansible.module_utils.loadgen import lossless
from ansible.module_utils.loadgen import matrix as bench_matrix
from tests.helpers.fixture_server import FixtureServer

TEXT = {"id": "prompts/chat", "kind": "prompts", "slug": "chat", "name": "chat",
        "items": [{"text": "hello %d" % i, "messages": [], "id": "c%d" % i} for i in range(3)]}
RANDOM = {"id": "random-ids/ctx60", "kind": "random-ids", "slug": "ctx60", "context_length": 60}


def test_random_id_prompts_are_seeded_so_every_config_gets_the_same():
    first, again = lossless.gate_prompts(RANDOM, 4), lossless.gate_prompts(RANDOM, 4)
    assert first == again and len(first) == 4
    assert all(len(p) == 60 for _, p in first) and len({tuple(p) for _, p in first}) == 4
    assert [pid for pid, _ in first] == ["ids-0", "ids-1", "ids-2", "ids-3"]
    assert lossless.gate_prompts(RANDOM, 0) == []


def test_text_prompts_are_the_sets_first_items_with_their_ids():
    assert [pid for pid, _ in lossless.gate_prompts(TEXT, 2)] == ["c0", "c1"]
    assert len(lossless.gate_prompts(TEXT, 8)) == 3     # a smaller set gives what it has


def test_gate_body_is_greedy_and_lets_the_model_stop():
    body = json.loads(lossless.gate_body({"text": "hi"}, 32))
    assert body == {"stream": True, "text": "hi", "sampling_params": {"max_new_tokens": 32, "temperature": 0.0}}
    assert json.loads(lossless.gate_body([5, 6], 4))["input_ids"] == [5, 6]


def test_output_from_cumulative_chunks_as_real_sglang_streams_by_default():
    out = lossless.Output()
    out.on_event(json.dumps({"text": "A", "output_ids": [1], "meta_info": {"completion_tokens": 1}}))
    out.on_event(json.dumps({"text": None, "output_ids": [1, 2, 3], "meta_info": {"completion_tokens": 3}}))
    out.on_event(json.dumps({"text": "A b c", "output_ids": [1, 2, 3],
                             "meta_info": {"completion_tokens": 3, "finish_reason": {"type": "length"}}}))
    assert (out.text, out.ids, out.completion_tokens) == ("A b c", [1, 2, 3], 3)
    assert out.finish_reason == {"type": "length"}


def test_output_from_delta_chunks_of_incremental_streaming_output():
    out = lossless.Output()
    out.on_event(json.dumps({"text": "A", "output_ids": [1], "meta_info": {"completion_tokens": 1}}))
    out.on_event(json.dumps({"text": " b c", "output_ids": [2, 3], "meta_info": {"completion_tokens": 3}}))
    assert (out.text, out.ids) == ("A b c", [1, 2, 3])


def test_a_server_without_output_ids_leaves_them_unknown():
    with FixtureServer() as server:
        out = asyncio.run(lossless.run_gate_async(server.url, lossless.gate_prompts(TEXT, 3), 5, concurrency=2))
    assert out["status"] == "ok" and [o["index"] for o in out["outputs"]] == [0, 1, 2]
    assert all(o["text"] == "ttttt" and o["output_ids"] is None and o["error"] == "" for o in out["outputs"])
    assert out["outputs"][1]["prompt_id"] == "c1" and out["outputs"][1]["prompt"] == "hello 1"
    bodies = [req for _, req, _ in server.requests]
    assert all(b["sampling_params"]["temperature"] == 0.0 and "ignore_eos" not in b["sampling_params"]
               for b in bodies)


def test_failed_requests_are_kept_per_prompt_with_the_servers_words():
    with FixtureServer(fault="http500") as server:
        out = asyncio.run(lossless.run_gate_async(server.url, lossless.gate_prompts(TEXT, 2), 5))
    assert out["status"] == "error" and "2 of 2 gate requests failed" in out["error"]
    assert all("HTTP 500" in o["error"] for o in out["outputs"])


def test_a_hanging_server_is_bounded():
    with FixtureServer(fault="hang") as server:
        out = asyncio.run(lossless.run_gate_async(server.url, lossless.gate_prompts(TEXT, 2), 5, timeout=0.5))
    assert out["status"] == "timeout" and all(o["error"] for o in out["outputs"])


def test_gate_phase_primary_then_self_check_per_workload():
    spec = {"base_url": None, "output_len": 4, "request_timeout_s": 5, "cell_timeout_s": 10, "lossless_prompts": 2,
            "lossless_concurrency": 1, "lossless_self_concurrency": 4}
    assert lossless.run_gate_phase(dict(spec, lossless_prompts=0), [TEXT], {}) == []
    with FixtureServer() as server:
        spec["base_url"] = server.url
        rows = lossless.run_gate_phase(spec, [RANDOM, TEXT], {"config": "ar", "host": "h"})
    assert [len(server.requests)] == [2 * (2 + 4)]     # the self-check's 2 prompts cycled to fill its batch of 4
    assert [(r["workload"], r["gate"], r["max_concurrency"]) for r in rows] == [
        ("random-ids/ctx60", "primary", 1), ("random-ids/ctx60", "self_check", 4),
        ("prompts/chat", "primary", 1), ("prompts/chat", "self_check", 4)]
    assert all(r["kind"] == "gate" and r["config"] == "ar" and r["status"] == "ok" and len(r["outputs"]) == 2
               for r in rows)
    assert [r["in_flight"] for r in rows] == [1, 4, 1, 4]


def test_matrix_writes_gate_rows_after_the_cells(tmp_path):
    out = tmp_path / "rows.jsonl"
    with FixtureServer() as server:
        spec = {"base_url": server.url, "context_lengths": [60], "concurrencies": [1], "output_len": 4,
                "prompts_per_concurrency": 1, "min_prompts": 2, "warmup_requests": 0, "cell_timeout_s": 30,
                "request_timeout_s": 10, "client": "builtin", "backend": "sglang", "lossless_prompts": 3}
        summary = bench_matrix.run_matrix(spec, labels={"config": "x"}, output_path=str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["cell", "gate"]
    assert rows[1]["gate"] == "primary" and len(rows[1]["outputs"]) == 3 and rows[1]["schema"] == 2
    assert summary["gate"] == {"rows": 1, "failed": []}


@pytest.mark.parametrize("key, value", [("lossless_prompts", -1), ("lossless_concurrency", 0),
                                        ("lossless_self_concurrency", "x")])
def test_bad_gate_settings_are_refused(key, value):
    from ansible.module_utils.loadgen.workloads import validate_spec
    spec = {"base_url": "http://127.0.0.1:1", "context_lengths": [60], "concurrencies": [1], "output_len": 4,
            "prompts_per_concurrency": 1, "min_prompts": 2, "cell_timeout_s": 30, "request_timeout_s": 10,
            key: value}
    assert any(key in e for e in validate_spec(spec))
