"""The built-in load harness (ansible.module_utils.loadgen.client/bench_http) against a loopback fixture server.

The fixture is a tiny SGLang-shaped HTTP server (streaming /generate and OpenAI completions, chunked
transfer encoding, /server_info) with known delays and faults, listening on 127.0.0.1 only.
"""
import asyncio
import json

import pytest

from ansible.module_utils.loadgen import client as bench_client
from ansible.module_utils.loadgen.transport import HttpConnection, HttpError
from tests.helpers.fixture_server import FixtureServer


def cell(server, **kw):
    args = dict(base_url=server.url, input_len=8, output_len=16, concurrency=2, num_prompts=6,
                warmup_requests=1, request_timeout=10, cell_timeout=20)
    args.update(kw)
    return bench_client.run_cell(**args)


@pytest.mark.parametrize("backend", bench_client.BACKENDS)
def test_counts_every_token_of_every_request(backend):
    with FixtureServer() as server:
        row = cell(server, backend=backend)
    assert row["status"] == "ok", row
    assert row["completed"] == 6 and row["failed"] == 0
    assert row["total_output_tokens"] == 6 * 16
    assert row["total_input_tokens"] == 6 * 8
    assert row["output_throughput"] == pytest.approx(row["total_output_tokens"] / row["duration"])
    # 1 warmup + 6 measured requests reached the server, each with the requested lengths.
    assert len(server.requests) == 7
    path, req, _ = server.requests[-1]
    assert path == bench_client.PATHS[backend]
    if backend == "sglang":
        assert len(req["input_ids"]) == 8 and req["sampling_params"]["max_new_tokens"] == 16
        assert req["sampling_params"]["ignore_eos"] is True


def test_measures_known_ttft_and_itl():
    """End to end, only what load cannot break: the client cannot see a first token before the server's 50 ms
    sleep ended, and TPOT is ITL when every chunk holds one token. (The tracker's arithmetic is tested exactly
    below, on timestamps it is given; how close the figures come to the server's settings is bench_harness's job.)"""
    with FixtureServer(ttft=0.05, itl=0.01) as server:
        row = cell(server, concurrency=2, num_prompts=4, output_len=11)
    assert row["status"] == "ok", row
    assert row["mean_ttft_ms"] >= 50 and row["mean_itl_ms"] > 0
    # TPOT = (latency - ttft) / (n - 1): with one token per chunk it equals the mean ITL.
    assert row["mean_tpot_ms"] == pytest.approx(row["mean_itl_ms"], rel=0.05)


def test_tracker_splits_a_multi_token_chunk_gap_like_bench_serving():
    tracker = bench_client._Tracker("sglang", prompt_len=3, keep_text=False)
    tracker.st = 100.0
    for n, now in ((1, 100.050), (5, 100.070), (9, 100.090)):  # two 4-token chunks, 20 ms apart
        tracker.on_event(json.dumps({"text": "t" * n, "meta_info": {"completion_tokens": n}}), now)
    assert tracker.result.ttft == pytest.approx(0.050)
    assert tracker.result.itl == pytest.approx([0.005] * 8)
    assert tracker.result.output_len == 9


def test_tracker_counts_one_token_per_openai_chunk():
    tracker = bench_client._Tracker("sglang-oai-chat", prompt_len=3, keep_text=True)
    tracker.st = 10.0
    for i, now in enumerate((10.2, 10.25, 10.35)):
        tracker.on_event(json.dumps({"choices": [{"delta": {"content": f"w{i}"}}]}), now)
    assert tracker.result.ttft == pytest.approx(0.2) and tracker.result.itl == pytest.approx([0.05, 0.1])
    assert tracker.texts == ["w0", "w1", "w2"]


def test_a_reasoning_models_thinking_chunks_count_like_content_as_in_bench_serving():
    """--reasoning-parser: the thinking streams as delta.reasoning_content while content is null. Real 0.5.11's
    bench_serving counts both (first token = first thinking chunk); reading content alone would put TTFT at the end
    of the thinking and drop its tokens."""
    tracker = bench_client._Tracker("sglang-oai-chat", prompt_len=3, keep_text=True)
    tracker.st = 10.0
    chunks = [({"reasoning_content": "hm", "content": None}, 10.1), ({"reasoning_content": " ok"}, 10.15),
              ({"content": "Paris"}, 10.2)]
    for delta, now in chunks:
        tracker.on_event(json.dumps({"choices": [{"delta": delta}]}), now)
    assert tracker.result.ttft == pytest.approx(0.1) and tracker.result.itl == pytest.approx([0.05, 0.05])
    assert tracker.texts == ["hm", " ok", "Paris"]


def test_multi_token_chunks_are_all_counted():
    with FixtureServer(itl=0.02, tokens_per_chunk=4) as server:
        row = cell(server, concurrency=1, num_prompts=2, output_len=9)
    assert row["status"] == "ok", row
    assert row["total_output_tokens"] == 18


def test_accept_length_read_from_server_info():
    with FixtureServer(accept_length=3.25) as server:
        assert cell(server)["accept_length"] == 3.25
    with FixtureServer() as server:
        assert cell(server)["accept_length"] is None


def test_http_error_fails_the_warmup_with_the_servers_words():
    with FixtureServer(fault="http500") as server:
        with pytest.raises(bench_client.CellError, match="HTTP 500.*boom"):
            cell(server)


def test_server_closing_midstream_is_a_failed_request_not_a_hang():
    with FixtureServer(fault="close_midway") as server:
        with pytest.raises(bench_client.CellError, match="connection closed"):
            cell(server)


def test_hanging_server_is_bounded_by_the_cell_timeout():
    with FixtureServer() as server:
        # Warm up against a healthy server, then make it hang for the measured phase.
        async def flip():
            server.fault = "hang"

        row_holder = {}

        def run():
            row_holder["row"] = cell(server, warmup_requests=0, cell_timeout=1.0, request_timeout=30)

        asyncio.run_coroutine_threadsafe(flip(), server.loop).result(2)
        run()
    row = row_holder["row"]
    assert row["status"] == "timeout"
    assert "exceeded its 1s bound" in row["error"]
    assert row["completed"] == 0


def test_request_timeout_marks_requests_failed():
    with FixtureServer(ttft=0.0, itl=0.5) as server:
        row = cell(server, warmup_requests=0, output_len=5, request_timeout=0.3, num_prompts=2)
    assert row["status"] == "error"
    assert row["failed"] == 2
    assert "timed out" in row["error"]


def test_unreachable_server_is_a_clear_cell_error():
    with FixtureServer() as server:
        url = server.url
    with pytest.raises(bench_client.CellError, match="warmup failed"):
        bench_client.run_cell(base_url=url, input_len=4, output_len=4, concurrency=1, num_prompts=1,
                              request_timeout=2, cell_timeout=5)


def test_connection_is_kept_alive_between_requests():
    with FixtureServer() as server:
        async def two():
            conn = HttpConnection("127.0.0.1", server.port)
            seen = []
            for _ in range(2):
                body = bench_client.build_body("sglang", "m", [1, 2], 3)
                await conn.stream_post("/generate", body, lambda p, t: seen.append(p), timeout=5)
            first = conn.protocol
            await conn.stream_post("/generate", body, lambda p, t: seen.append(p), timeout=5)
            same = conn.protocol is first
            conn.close()
            return seen, same
        seen, same = asyncio.run(two())
    assert same
    assert len(seen) == 9


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown backend"):
        bench_client.build_body("vllm", "m", [1], 1)
    with pytest.raises(ValueError):
        bench_client.run_cell(base_url="http://127.0.0.1:1", concurrency=0)
    with pytest.raises(ValueError, match="http://host:port"):
        bench_client.run_cell(base_url="https://example.invalid", concurrency=1)


def test_http_error_class_is_raised_for_non_200():
    with FixtureServer(fault="http500") as server:
        async def go():
            conn = HttpConnection("127.0.0.1", server.port)
            try:
                await conn.stream_post("/generate", b"{}", lambda p, t: None, timeout=5)
            finally:
                conn.close()
        with pytest.raises(HttpError, match="HTTP 500"):
            asyncio.run(go())


def test_accept_length_is_per_request_not_the_servers_running_average():
    # 16 tokens in chunks of 1 (prefill) + 4 + 4 + 4 + 3: verify_ct 4, accept length 16/4 per request. The server's
    # running average says 9.0 (what earlier cells left): the row must not take it.
    with FixtureServer(tokens_per_chunk=4, accept_length=9.0) as server:
        row = cell(server)
    assert row["accept_length_source"] == "per_request"
    assert row["accept_length"] == pytest.approx(16 / 4)
    assert row["server_running_average"] == 9.0                 # kept as a diagnostic, not as the figure
    assert sorted(r["index"] for r in row["requests"]) == list(range(6))
    assert row["accept_rate"] == pytest.approx((16 - 1 - 4) / (4 * 3))
    assert len(row["requests"]) == 6
    assert {r["spec_verify_ct"] for r in row["requests"]} == {4}
    # each request's own figure (the server's spec_accept_length) is what the counts say
    assert all(r["spec_accept_length"] == pytest.approx(r["completion_tokens"] / r["spec_verify_ct"])
               for r in row["requests"])
    assert sum(r["completion_tokens"] for r in row["requests"]) == 6 * 16


def test_server_running_average_only_without_per_request_figures_and_labelled():
    with FixtureServer(accept_length=3.25) as server:
        row = cell(server)
    assert row["accept_length"] == 3.25 and row["accept_length_source"] == "server_running_average"
    assert row["accept_rate"] is None


def test_weighted_acceptance_is_not_a_mean_of_means():
    from ansible.module_utils.loadgen.metrics import RequestResult, acceptance
    short = RequestResult(success=True, output_len=4, spec_verify_ct=3, spec_accepted_drafts=0,
                          spec_proposed_drafts=9)          # 1.33 per step
    long = RequestResult(success=True, output_len=100, spec_verify_ct=20, spec_accepted_drafts=79,
                         spec_proposed_drafts=60 * 3)      # 5.0 per step
    length, rate, source = acceptance([short, long])
    assert length == pytest.approx(104 / 23)               # not (1.33 + 5.0) / 2 = 3.17
    assert rate == pytest.approx(79 / 189) and source == "per_request"


def test_text_prompts_go_to_generate_as_text_and_the_server_counts_their_tokens():
    prompts = [{"text": "one two three", "messages": [{"role": "user", "content": "one two three"}]},
               {"text": "four five", "messages": [{"role": "user", "content": "four five"}]}]
    with FixtureServer() as server:
        row = cell(server, prompts=prompts, ignore_eos=False, sample_outputs=2)
        sent = [req for path, req, _ in server.requests if path == "/generate"]
    assert row["status"] == "ok"
    assert all("text" in r and "input_ids" not in r for r in sent)
    assert all(r["sampling_params"]["ignore_eos"] is False for r in sent)
    # 6 measured requests cycle the 2 prompts: 3 x 3 + 3 x 2 prompt tokens as the server counted them
    assert row["total_input_tokens"] == 15
    assert len(row["samples"]) == 2 and all(s["text"] == "t" * 16 for s in row["samples"])


def test_every_prompt_of_a_text_cell_is_checked_once_with_its_id_then_more_spread_over_the_cell():
    """The degenerate check reads one output of every distinct prompt under every config (so a loop of the model on
    one prompt shows in the baseline too: reporting/degenerate.py), each sample naming its prompt; requests issued
    past the planned count (a cell sized by time, after the warmup's items) keep the right id."""
    words = ["alpha", "bravo", "charlie", "delta", "echo"]
    prompts = [{"id": "p-" + w, "text": w + " x", "messages": [{"role": "user", "content": w + " x"}]} for w in words]
    with FixtureServer(reply=lambda ws: (ws[0] + " ") * 8) as server:
        row = cell(server, prompts=prompts, ignore_eos=False, sample_outputs=2, concurrency=1, num_prompts=3,
                   output_len=12, min_seconds=0.3)
    assert row["status"] == "ok" and row["completed"] > 6                  # past the planned 3: sized by time
    samples = row["samples"]
    assert sorted({s["prompt_id"] for s in samples}) == sorted(p["id"] for p in prompts)
    assert len(samples) == len(prompts) + 2
    for s in samples:                                                       # the id is the prompt that was sent
        assert s["text"].startswith(s["prompt_id"][2:]), s
    assert any(s["index"] >= 3 for s in samples)


def test_chat_backend_sends_the_conversation_not_the_rendered_text():
    prompts = [{"text": "<|user|>hi<|assistant|>", "messages": [{"role": "user", "content": "hi there"}]}]
    with FixtureServer() as server:
        row = cell(server, backend="sglang-oai-chat", prompts=prompts)
        sent = [req for path, req, _ in server.requests if path == "/v1/chat/completions"]
    assert row["status"] == "ok" and sent
    assert all(r["messages"] == [{"role": "user", "content": "hi there"}] for r in sent)


def test_soak_shrinks_the_batch_from_c_to_1():
    with FixtureServer(itl=0.001) as server:
        out = bench_client.run_soak(base_url=server.url, concurrency=4, output_len=16, rounds=2,
                                    request_timeout=10, timeout=20)
        lengths = sorted(req["sampling_params"]["max_new_tokens"] for _, req, _ in server.requests)
    assert out["status"] == "ok" and out["rounds"] == 2 and out["requests"] == 8
    assert out["batch_sizes"] == [4, 3, 2, 1]
    assert lengths == [4, 4, 8, 8, 12, 12, 16, 16]  # distinct lengths: requests finish one after another


def test_soak_reports_a_server_that_dies_midway():
    with FixtureServer(fault="close_midway") as server:
        out = bench_client.run_soak(base_url=server.url, concurrency=3, output_len=16, rounds=3,
                                    request_timeout=10, timeout=20)
    assert out["status"] == "error" and out["rounds"] == 1
    assert out["failed"] >= 1 and "soak requests failed" in out["error"]


@pytest.mark.parametrize("mode,expected", [("keep-alive", 1 + 3 + 1), ("per-request", 1 + 9 + 1)])
def test_connection_mode_opens_connections_as_the_row_says(mode, expected):
    """keep-alive: the warmup's one connection plus one per worker, reused; per-request: one per measured request
    (as sglang.bench_serving's session per request), so TTFT pays the connection setup; plus the /server_info read
    after the cell. The row names the mode."""
    with FixtureServer() as server:
        row = cell(server, concurrency=3, num_prompts=9, connection=mode)
        assert row["status"] == "ok" and row["completed"] == 9
        assert row["connection"] == mode
        assert server.connections == expected


def test_an_unknown_connection_mode_is_refused_before_any_request():
    with FixtureServer() as server:
        with pytest.raises(ValueError, match="connection must be one of keep-alive, per-request"):
            cell(server, connection="pooled")
        assert server.requests == []


def test_a_cell_sized_by_time_keeps_issuing_until_the_time_has_passed():
    """min_seconds: the planned 4 requests take ~0.1 s, so the workers keep issuing (fresh random ids from the same
    seeded stream, never a repeat of an earlier prompt) until 0.6 s have passed; all are measured."""
    with FixtureServer(ttft=0.0, itl=0.005) as server:
        row = cell(server, concurrency=2, num_prompts=4, output_len=10, min_seconds=0.6)
        warm = server.requests[0][1]["input_ids"]
        sent = [tuple(req["input_ids"]) for _, req, _ in server.requests[1:]]
    assert row["status"] == "ok", row
    assert row["duration"] >= 0.6 and row["completed"] > 4
    assert row["num_prompts"] == row["completed"] == len(sent)
    assert row["min_requests"] == 4 and row["min_cell_seconds"] == 0.6
    assert len(set(sent)) == len(sent)
    first = bench_client.make_prompts(5, 8, 0)          # the seeded stream's start is make_prompts' (warmup = 5th)
    assert {tuple(p) for p in first[:4]} <= set(sent) and warm == first[4]


def test_a_cell_sized_by_time_still_completes_the_planned_requests():
    """Both floors hold: a tiny min_seconds does not cut the planned k x C requests short."""
    with FixtureServer(ttft=0.0, itl=0.01) as server:
        row = cell(server, concurrency=2, num_prompts=6, output_len=8, min_seconds=0.001)
    assert row["status"] == "ok" and row["completed"] >= 6


def test_a_text_cell_sized_by_time_cycles_its_prompts():
    items = [{"text": "alpha", "messages": []}, {"text": "beta", "messages": []}]
    with FixtureServer(itl=0.005) as server:
        row = cell(server, prompts=items, concurrency=1, num_prompts=2, output_len=6, warmup_requests=0,
                   ignore_eos=False, min_seconds=0.3)
        texts = [req["text"] for _, req, _ in server.requests]
    assert row["status"] == "ok" and len(texts) > 2
    assert texts == [items[i % 2]["text"] for i in range(len(texts))]


def test_a_cell_sized_by_time_is_bounded_by_the_cell_timeout():
    with FixtureServer(itl=0.01) as server:
        row = cell(server, concurrency=2, num_prompts=2, output_len=5, min_seconds=30, cell_timeout=0.5)
    assert row["status"] == "timeout"
    assert "at least 2 and 30s asked" in row["error"]
