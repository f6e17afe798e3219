"""The stand-in's speculative acceptance model (lab/sglang_standin engine.py, README "Speculative decoding"): prompt
classes, expected accept length per drafter shape, the verify-step schedule, and what a live stand-in reports from
it (per-request spec_* figures, the running /server_info average, multi-token chunks, speculative timing)."""
import http.client
import json
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from sglang_standin import engine  # noqa: E402
from sglang_standin import decoding  # noqa: E402
from sglang_standin.local import LocalServer  # noqa: E402
from sglang_standin.server_args import prepare_server_args  # noqa: E402
from sglang_standin.serving_state import WARMUP_PROMPT, WARMUP_TOKENS  # noqa: E402

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402

FAST = {"SGLANG_STANDIN_LOAD_S": "0.3", "SGLANG_STANDIN_WARMUP_S": "0.3"}
BASE = ["--model-path", "/srv/models/m", "--host", "127.0.0.1"]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/srv/models/drafter",
          "--speculative-dflash-block-size", "8"]


def ddtree(budget: int, topk: int = 4) -> list:
    return ["--attention-backend", "triton", "--page-size", "1", "--speculative-algorithm", "DDTREE",
            "--speculative-draft-model-path", "/srv/models/drafter", "--speculative-dflash-block-size", "8",
            "--speculative-ddtree-budget", str(budget), "--speculative-ddtree-topk-cap", str(topk)]


CODE = "Write a Python function that checks whether a string is a palindrome."
PROSE = "I am planning a trip to Japan in spring. Which cities should I visit, and what should I pack?"
SHAPES = [engine.SpecShape.resolve("DFLASH", 8), engine.SpecShape.resolve("DFLASH"),
          engine.SpecShape.resolve("EAGLE", 4), engine.SpecShape.resolve("NGRAM", 8),
          engine.SpecShape.resolve("DDTREE", 8, 4, 4), engine.SpecShape.resolve("DDTREE", 8, 16, 4)]


# ---- the model, in-process

@pytest.mark.parametrize("text,klass", [
    (PROSE, "prose"),
    ("What are the import rules for food into Australia? I fly from 2024-05-01 and return on the 20th.", "prose"),
    ("The capital city of France is", "prose"),
    ("Tell me a story about a lighthouse keeper.", "prose"),
    (CODE, "code"),
    ("How do I reverse an array in JavaScript?", "code"),
    ("def add(a, b):\n    return a + b\n", "code"),
    ('#include <stdio.h>\nint main() { printf("hi"); return 0; }', "code"),
    ("Write a Python function to compute the factorial of n.", "code"),
    ("Solve 3x + 5 = 20", "math"),
    ("What is 17 + 25?", "math"),
    ("Compute the derivative of f(x) = x^2 + 3x.", "math"),
    ("Calculate the probability of rolling two sixes.", "math"),
    (engine.prompt_of(list(range(100, 164)))[0], "random-ids"),
    ("1 2 3 -400 5", "random-ids"),
    ("the cat sat on the mat " * 10, "repetitive"),
    ("Repeat after me: " + "hello world " * 15, "repetitive"),
    (" ".join(engine.tokens_for("long pseudo prose", 300)), "prose"),  # many words, few distinct: not repetitive
])
def test_text_class(text, klass):
    assert engine.text_class(text) == klass


def test_expected_accept_length_formulas():
    assert engine.expected_accept_length("code", "NONE") == 1.0 == engine.expected_accept_length("code", None)
    assert engine.expected_accept_length("code", "DFLASH", 8) == pytest.approx(sum(0.75 ** i for i in range(8)))
    assert engine.expected_accept_length("prose", "DFLASH") == pytest.approx(sum(0.55 ** i for i in range(16)))
    q = 1 - 0.45 ** 4  # DDTREE budget 16, topk 4: 4 children per depth, depth 4
    assert engine.expected_accept_length("prose", "DDTREE", 8, 16, 4) == pytest.approx(sum(q ** i for i in range(5)))
    defaults = [engine.expected_accept_length(k, "DFLASH", 8) for k in ("random-ids", "prose", "math", "code",
                                                                        "repetitive")]
    assert defaults == sorted(defaults) and len(set(defaults)) == 5


def test_expected_accept_length_is_monotone():
    ps = [0.0, 0.05, 0.3, 0.55, 0.75, 0.9, 1.0]
    for algo, kw in (("DFLASH", {"num_draft_tokens": 8}), ("EAGLE", {"num_draft_tokens": 4}),
                     ("DDTREE", {"budget": 8, "topk": 4})):
        by_p = [engine.expected_accept_length("prose", algo, p=p, **kw) for p in ps]
        assert by_p == sorted(by_p) and len(set(by_p)) == len(ps), (algo, by_p)
    by_len = [engine.expected_accept_length("code", "DFLASH", n) for n in (1, 2, 4, 8, 16, 32)]
    assert by_len[0] == 1.0 and all(a < b for a, b in zip(by_len, by_len[1:]))
    by_budget = [engine.expected_accept_length("prose", "DDTREE", 8, b, 4) for b in (1, 2, 4, 8, 16, 32)]
    assert all(a < b for a, b in zip(by_budget, by_budget[1:])), by_budget


def test_env_overrides_probabilities_and_legacy_constant(monkeypatch):
    monkeypatch.setenv("SGLANG_STANDIN_ACCEPT_P", json.dumps({"code": 0.2}))
    assert engine.expected_accept_length("code", "DFLASH", 8) == pytest.approx(sum(0.2 ** i for i in range(8)))
    assert engine.accept_probabilities()["prose"] == engine.DEFAULT_ACCEPT_P["prose"]
    monkeypatch.setenv("SGLANG_STANDIN_ACCEPT_LENGTH", "4.48")
    assert {engine.expected_accept_length(k, "DDTREE", 8, 8, 4) for k in engine.CLASSES} == {4.48}
    steps = engine.SpecShape.resolve("DDTREE", 8, 8, 4).schedule(448, "prose")  # wider than depth+1 = 3
    assert 448 / len(steps) == pytest.approx(4.48, rel=0.01)
    for bad in ('{"cod": 0.5}', '{"code": 1.5}', "not json"):
        monkeypatch.setenv("SGLANG_STANDIN_ACCEPT_P", bad)
        with pytest.raises(ValueError):
            engine.accept_probabilities()


def test_step_sizes_sum_and_bounds():
    assert engine.step_sizes(1, 3.0) == [] and engine.step_sizes(2, 3.0) == [1]
    assert SHAPES[0].max_step == 8 and SHAPES[4].max_step == 2 and SHAPES[5].max_step == 5
    for shape in SHAPES:
        for klass in engine.CLASSES:
            for n in range(1, 300):
                steps = shape.schedule(n, klass)
                assert sum(steps) == n - 1 and bool(steps) == (n > 1), (shape, klass, n)
                assert all(1 <= s <= shape.max_step for s in steps), (shape, klass, n, steps)


def test_per_request_accept_length_matches_the_model():
    """n / verify steps is E within 2% once a request has 25+ verify steps (n >= 160 for every default class and
    shape here); below that, integer step counts keep it within (E/2 + 1) / steps (the +1: at most max_step tokens
    a step when E is close to it). At n = 64 the 2% hold only for E <= 2.5: E 6.17 takes 10 or 11 steps (6.4, 5.8)."""
    for shape in SHAPES:
        for klass in engine.CLASSES:
            e = shape.expected(klass)
            for n in range(64, 1025, 3):
                k = len(shape.schedule(n, klass))
                assert abs(n / k - e) <= (e / 2 + 1) / k, (shape, klass, n)
                if n >= 160:
                    assert n / k == pytest.approx(e, rel=0.02), (shape, klass, n)


def test_speculative_steps_beat_autoregressive_at_low_concurrency_only():
    """Per-request decode speed from the timing model: speculation wins at 1 running request, loses at 256."""
    kw = dict(ttft_ms=40, itl_ms=8, itl_slope_ms=0.05, prefill_us_per_token=20, max_running=256)
    ar, spec = engine.Timing(**kw), engine.Timing(verify_width=8, draft_cost=0.3, **kw)
    e = engine.expected_accept_length("code", "DFLASH", 8)
    speed = {running: (1 / ar.step_seconds(running), e / spec.step_seconds(running)) for running in (1, 256)}
    assert speed[1][1] > 2 * speed[1][0]
    assert speed[256][1] < speed[256][0]


def test_decode_plan_groups_and_figures():
    shape = engine.SpecShape.resolve("DFLASH", 8)
    toks = engine.tokens_for("code prompt", 40)
    d = decoding.plan_decode(shape, CODE, toks, stopped=False)
    assert [len(g) for g in d.groups] == [1] + d.steps and sum(d.groups, []) == toks
    fig = decoding.spec_figures(shape, len(toks), d.steps)
    assert fig["spec_verify_ct"] == len(d.steps) and 40 == 1 + fig["spec_verify_ct"] + fig["spec_accepted_drafts"]
    assert fig["spec_proposed_drafts"] == 7 * len(d.steps)
    # one token, length-finished: no verify step, no figures (real adds them only when verify_ct > 0)
    one = decoding.plan_decode(shape, CODE, ["x"], stopped=False)
    assert one.groups == [["x"]] and one.steps == [] and decoding.spec_figures(shape, 1, one.steps) == {}
    # stopped by itself: the EOS token (not in the answer) is decoded by the last verify step
    stop = decoding.plan_decode(shape, CODE, ["Paris"], stopped=True)
    assert stop.groups == [["Paris"]] and stop.steps == [1]
    assert decoding.spec_figures(shape, 1, stop.steps)["spec_verify_ct"] == 1
    plain = decoding.plan_decode(None, CODE, toks[:3], stopped=False)
    assert plain.groups == [[t] for t in toks[:3]] and decoding.spec_figures(None, 3, plain.steps) == {}


# ---- live stand-ins

def generate_stream(srv, text: str, max_new: int) -> list:
    """[(arrival time, event)] of a streamed /generate."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("POST", "/generate", body=json.dumps({"text": text, "stream": True, "sampling_params": {
            "max_new_tokens": max_new}}), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        out = []
        while True:
            line = resp.readline()
            if not line or line.strip() == b"data: [DONE]":
                return out
            if line.startswith(b"data: {"):
                out.append((time.monotonic(), json.loads(line[6:])))
    finally:
        conn.close()


def server_avg(srv):
    return sglang_http.accept_length(sglang_http.call(srv.url, "/server_info").json())


def started(*servers):
    for srv in servers:
        srv.start()
    for srv in servers:
        srv.wait_for_line("fired up")
    return servers


@pytest.fixture(scope="module")
def dflash():
    srv = LocalServer(BASE + DFLASH, env=FAST)
    try:
        yield started(srv)[0]
    finally:
        srv.stop()


def test_generate_stream_carries_the_class_accept_length(dflash):
    shape = decoding.spec_shape(prepare_server_args(BASE + DFLASH))
    assert (shape.algorithm, shape.num_draft_tokens) == ("DFLASH", 8)
    got = {}
    for text, klass in ((CODE, "code"), (PROSE, "prose")):
        events = [ev for _t, ev in generate_stream(dflash, text, 256)]
        metas = [ev["meta_info"] for ev in events]
        done = metas[-1]
        counts = [m["completion_tokens"] for m in metas]
        jumps = [b - a for a, b in zip(counts, counts[1:])]
        assert counts[0] == 1 and counts[-1] == 256 and max(jumps) > 1 and max(jumps) <= 8 and min(jumps) >= 1
        assert all(len(ev["output_ids"]) == m["completion_tokens"] for ev, m in zip(events, metas))
        assert not any(k.startswith("spec_") for m in metas[:-1] for k in m)
        assert done["completion_tokens"] == 1 + done["spec_verify_ct"] + done["spec_accepted_drafts"]
        assert done["spec_proposed_drafts"] == 7 * done["spec_verify_ct"] == len(jumps) * 7
        assert done["spec_accept_rate"] == pytest.approx(done["spec_accepted_drafts"] / done["spec_proposed_drafts"])
        assert done["spec_accept_length"] == pytest.approx(256 / done["spec_verify_ct"])
        assert done["spec_accept_length"] == pytest.approx(engine.expected_accept_length(klass, "DFLASH", 8),
                                                           rel=0.02)
        got[klass] = done["spec_accept_length"]
    assert got["code"] > got["prose"] * 1.3


def test_openai_endpoints_stream_steps_without_spec_figures(dflash):
    chat = sglang_http.stream(dflash.url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": CODE}], "max_tokens": 64, "stream_options": {"include_usage": True}})
    assert not chat.error and chat.usage["completion_tokens"] == 64 and 1 < chat.chunks < 64
    body = sglang_http.call(dflash.url, "/v1/completions", "POST", {"prompt": CODE, "max_tokens": 16}).json()
    assert body["usage"]["completion_tokens"] == 16 and "spec_" not in json.dumps(body)


def test_server_info_is_a_running_average_since_start():
    """Warmup included, every finished speculative request (OpenAI ones too) counted: mixed classes give an average
    that no single request reports."""
    args = BASE + DFLASH
    shape = decoding.spec_shape(prepare_server_args(args))
    with LocalServer(args, env=FAST) as srv:
        srv.wait_for_line("fired up")
        warm = shape.schedule(WARMUP_TOKENS, engine.text_class(WARMUP_PROMPT))
        tokens, steps = sum(warm), len(warm)
        avgs = [server_avg(srv)]
        assert avgs[0] == pytest.approx(tokens / steps)
        per_request = []
        for text in (CODE, PROSE):
            done = generate_stream(srv, text, 200)[-1][1]["meta_info"]
            per_request.append(done["spec_accept_length"])
            tokens += done["completion_tokens"] - 1
            steps += done["spec_verify_ct"]
            avgs.append(server_avg(srv))
            assert avgs[-1] == pytest.approx(tokens / steps)
        assert len(set(avgs)) == 3 and all(abs(avgs[-1] - r) > 0.1 for r in per_request)
        sglang_http.call(srv.url, "/v1/completions", "POST", {"prompt": "Solve 3x + 5 = 20", "max_tokens": 64})
        opened = shape.schedule(64, "math")
        assert server_avg(srv) == pytest.approx((tokens + sum(opened)) / (steps + len(opened)))


def test_ddtree_budget_changes_the_accept_length(standin_ddtree_root):
    servers = [LocalServer(BASE + ddtree(b), env=FAST, package_root=standin_ddtree_root) for b in (4, 16)]
    try:
        got = {}
        for budget, srv in zip((4, 16), started(*servers)):
            done = sglang_http.call(srv.url, "/generate", "POST", {"text": PROSE, "sampling_params": {
                "max_new_tokens": 256}}).json()["meta_info"]
            assert done["spec_proposed_drafts"] == budget * done["spec_verify_ct"]
            assert done["spec_accept_length"] == pytest.approx(
                engine.expected_accept_length("prose", "DDTREE", 8, budget, 4), rel=0.02)
            got[budget] = done["spec_accept_length"]
        assert got[16] > got[4] * 1.5
    finally:
        for srv in servers:
            srv.stop()


def test_speculation_decodes_faster_than_autoregressive_at_concurrency_1():
    env = dict(FAST, SGLANG_STANDIN_ITL_MS="3")
    servers = [LocalServer(BASE + DFLASH, env=env), LocalServer(BASE, env=env)]
    try:
        rates = []
        for srv in started(*servers):
            events = generate_stream(srv, CODE, 200)
            (t0, first), (t1, last) = events[0], events[-1]
            rates.append((last["meta_info"]["completion_tokens"] - first["meta_info"]["completion_tokens"]) / (t1 - t0))
        spec, plain = rates
        assert spec > 1.5 * plain, rates  # the model: E 3.6 tokens per 1.3 ITL, about 2.8x
    finally:
        for srv in servers:
            srv.stop()


def test_shrinking_batch_fault_kills_the_server_only_after_a_big_batch_shrinks():
    import concurrent.futures
    from sglang_standin.local import LocalServer
    from ansible.module_utils.loadgen import client as bench_client
    argv = ["--model-path", "/m", "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/d"]
    env = {"SGLANG_STANDIN_LOAD_S": "0.1", "SGLANG_STANDIN_WARMUP_S": "0.1", "SGLANG_STANDIN_ITL_MS": "1",
           "SGLANG_STANDIN_FAULT": "crash_shrinking_batch", "SGLANG_STANDIN_CRASH_BATCH": "4"}
    with LocalServer(argv, env=env) as srv:
        srv.wait_for_line("fired up")
        small = bench_client.run_soak(base_url=srv.url, concurrency=3, output_len=24, rounds=2, request_timeout=20,
                                      timeout=60)
        assert small["status"] == "ok"                  # a batch of 3 shrinking to 1 is below the trigger
        big = bench_client.run_soak(base_url=srv.url, concurrency=4, output_len=24, rounds=1, request_timeout=20,
                                    timeout=60)
        assert big["status"] == "error" and big["failed"] >= 1
        assert srv.wait_exit(20) == 1
        assert any("replaying the CUDA graph of batch size 1 after the batch shrank from 4" in line for line in srv.lines)
