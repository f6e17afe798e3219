# -*- coding: utf-8 -*-
"""The built-in load harness: one benchmark cell (workload x concurrency) against an SGLang server.

Mirrors `python -m sglang.bench_serving` with request rate inf and --max-concurrency C: a warmup, then
`num_prompts` requests driven by exactly C workers, every request streamed (transport.py, the one HTTP layer);
metrics from metrics.compute_metrics. Stdlib only.

A prompt is either a list of token ids (the random-ids workload: exact input length, output fixed by ignore_eos,
throughput only) or a text item {"text", "messages"} (a prompt set or dataset rendered by prompts.py: greedy, the
model may stop, so every config produces the same tokens).

Backends (bench_serving's names): `sglang` = POST /generate (token ids or text; its final answer carries the
per-request speculative figures spec_verify_ct / spec_accepted_drafts / spec_proposed_drafts, the only source of a
per-cell accept length), `sglang-oai` = POST /v1/completions, `sglang-oai-chat` = POST /v1/chat/completions (the
server applies the chat template to the messages). Token counting and ITL follow bench_serving: /generate reports
cumulative completion_tokens per chunk and a chunk carrying n tokens (several with speculative decoding) adds n ITL
samples of gap/n; OpenAI chunks count one token each unless the final usage says otherwise.

Every cell is bounded: per-request timeout, and a cell timeout after which the unfinished requests are
cancelled and the row says status=timeout (partial metrics kept, never a hang).
"""
from __future__ import annotations

import asyncio
import json
import random
import time

from ansible.module_utils.loadgen.transport import HttpConnection, HttpError, get_json, split_url
from ansible.module_utils.loadgen.metrics import RequestResult, compute_metrics, first_errors, request_record, spec_totals
from ansible.module_utils.evidence.error import EvidenceError

BACKENDS = ("sglang", "sglang-oai", "sglang-oai-chat")
# Token ids drawn for random prompts: well inside any production vocabulary, clear of special tokens.
TOKEN_ID_RANGE = (1000, 20000)


class CellError(EvidenceError):
    """The cell could not be measured at all (warmup failed, server unreachable)."""


def make_prompts(count, input_len, seed):
    """`count` distinct random token-id prompts of exactly input_len tokens (reproducible by seed)."""
    rng = random.Random(seed)
    lo, hi = TOKEN_ID_RANGE
    return [[rng.randrange(lo, hi) for _ in range(input_len)] for _ in range(count)]


def build_body(backend, model, prompt, output_len, ignore_eos=True):
    """JSON body (bytes) for one request at temperature 0. prompt: token ids, or {"text", "messages"}."""
    ids = prompt if isinstance(prompt, list) else None
    text = None if ids is not None else prompt["text"]
    if backend == "sglang":
        body = {"stream": True, "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0,
                                                    "ignore_eos": ignore_eos}}
        if ids is not None:
            body["input_ids"] = ids
        else:
            body["text"] = text
    elif backend == "sglang-oai":
        body = {"model": model, "prompt": ids if ids is not None else text, "max_tokens": output_len,
                "temperature": 0.0, "ignore_eos": ignore_eos, "stream": True,
                "stream_options": {"include_usage": True}}
    elif backend == "sglang-oai-chat":
        messages = ([{"role": "user", "content": " ".join("w%d" % t for t in ids)}] if ids is not None
                    else prompt["messages"])
        body = {"model": model, "messages": messages, "max_tokens": output_len, "temperature": 0.0,
                "ignore_eos": ignore_eos, "stream": True, "stream_options": {"include_usage": True}}
    else:
        raise ValueError("unknown backend %r (have %s)" % (backend, ", ".join(BACKENDS)))
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


# How the cell's workers hold their HTTP connections (_drive): kept alive and opened before the timed phase, or one
# per request inside it as sglang.bench_serving does. Every row says which.
CONNECTIONS = ("keep-alive", "per-request")
PATHS = {"sglang": "/generate", "sglang-oai": "/v1/completions", "sglang-oai-chat": "/v1/chat/completions"}


class _Tracker:
    """Consumes one request's events; fills a RequestResult (bench_serving's per-request logic)."""

    __slots__ = ("result", "st", "last_t", "last_len", "backend", "chunks", "keep_text", "texts")

    def __init__(self, backend, prompt_len, keep_text):
        self.backend = backend
        self.result = RequestResult(prompt_len=prompt_len)
        self.st = 0.0
        self.last_t = 0.0
        self.last_len = 0
        self.chunks = 0
        self.keep_text = keep_text
        self.texts = []

    def on_event(self, payload, now):
        data = json.loads(payload)
        if self.backend == "sglang":
            text = data.get("text")
            meta = data.get("meta_info") or {}
            n = meta.get("completion_tokens")
            if n is None:
                return
            if self.keep_text and text is not None:
                self.texts = [text]  # /generate streams the cumulative text
            self._tokens(n, now)
            if meta.get("finish_reason") is not None:
                self._final(meta)
        else:
            usage = data.get("usage")
            choices = data.get("choices") or []
            piece = ""
            if choices:
                choice = choices[0]
                piece = choice.get("text")
                if piece is None:
                    # A reasoning model streams its thinking as delta.reasoning_content (--reasoning-parser):
                    # counted like content, as real 0.5.11's bench_serving does (async_request_openai_chat_completions).
                    delta = choice.get("delta") or {}
                    piece = (delta.get("reasoning_content") or "") + (delta.get("content") or "")
            if piece:
                if self.keep_text:
                    self.texts.append(piece)
                self._tokens(self.last_len + 1, now)
            if usage and usage.get("completion_tokens"):
                self.result.output_len = int(usage["completion_tokens"])
            if usage and usage.get("prompt_tokens"):
                self.result.prompt_len = int(usage["prompt_tokens"])

    def _final(self, meta):
        """The finished request's own counts: prompt tokens as the server tokenised them, spec_* figures."""
        result = self.result
        if meta.get("prompt_tokens"):
            result.prompt_len = int(meta["prompt_tokens"])
        if meta.get("spec_verify_ct"):
            result.spec_verify_ct = int(meta["spec_verify_ct"])
            result.spec_accepted_drafts = int(meta.get("spec_accepted_drafts") or 0)
            result.spec_proposed_drafts = int(meta.get("spec_proposed_drafts") or 0)
            if meta.get("spec_accept_length") is not None:
                result.server_accept_length = float(meta["spec_accept_length"])

    def _tokens(self, n, now):
        new = n - self.last_len
        if new <= 0:
            return
        result = self.result
        if self.last_len == 0:
            result.ttft = now - self.st
        else:
            gap = (now - self.last_t) / new
            result.itl.extend([gap] * new)
        self.last_t = now
        self.last_len = n
        result.output_len = n


async def _one_request(conn, path, body, backend, prompt_len, headers, timeout, keep_text):
    tracker = _Tracker(backend, prompt_len, keep_text)
    result = tracker.result
    tracker.st = result.start_time = time.perf_counter()
    try:
        await conn.stream_post(path, body, tracker.on_event, headers=headers, timeout=timeout)
        result.latency = time.perf_counter() - tracker.st
        if tracker.last_len == 0:
            result.error = "stream ended without any token"
        else:
            result.success = True
    except asyncio.TimeoutError:
        result.error = "request timed out after %.0fs" % timeout
    except (HttpError, OSError, ValueError) as exc:
        result.error = "%s: %s" % (type(exc).__name__, exc)
    if keep_text:
        result.text = "".join(tracker.texts)
    return result


async def _drive(host, port, path, bodies, prompt_len, backend, concurrency, headers, request_timeout,
                 results, keep_text=False, on_start=None, connection="keep-alive", more=None):
    """Run every body with exactly `concurrency` workers; append RequestResults to `results` as they end.

    more(index, elapsed_s): asked for the next body once `bodies` are all issued (a cell sized by time); None ends
    the cell.
    connection "keep-alive": the workers open their connections first (not timed: TCP setup and the server accepting
    C connections are not the server's TTFT) and reuse them. "per-request": every request opens its own connection
    inside its timed region and closes it after, as sglang.bench_serving does (0.5.11 bench_serving.py
    async_request_sglang_generate: `async with _create_bench_client_session() as session` per request, `st` taken
    before the post), so its TTFT includes the connection setup. Returns via on_start the perf_counter at which the
    first request starts.
    """
    if connection not in CONNECTIONS:
        raise ValueError("connection must be one of %s, got %r" % (", ".join(CONNECTIONS), connection))
    per_request = connection == "per-request"
    issued = [0]
    connected = []
    go = asyncio.Event()
    count = min(concurrency, len(bodies))
    started = []

    async def worker():
        conn = HttpConnection(host, port)
        try:
            if not per_request:
                try:
                    await conn.connect()
                except (OSError, asyncio.TimeoutError):
                    pass  # the first request on this connection reports the failure
            connected.append(1)
            if len(connected) == count:
                started.append(time.perf_counter())
                go.set()
            await go.wait()
            while True:
                index = issued[0]
                body = bodies[index] if index < len(bodies) else \
                    (more(index, time.perf_counter() - started[0]) if more is not None else None)
                if body is None:
                    break
                issued[0] += 1
                if per_request:
                    conn.close()
                    conn = HttpConnection(host, port)
                result = await _one_request(conn, path, body, backend, prompt_len, headers, request_timeout,
                                            keep_text)
                result.index = index
                results.append(result)
        finally:
            conn.close()

    workers = [asyncio.ensure_future(worker()) for _ in range(count)]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if on_start is not None:
            on_start(started[0] if started else time.perf_counter())


def read_accept_length(base_url, api_key=None, timeout=5.0):
    """internal_states[0].avg_spec_accept_length from /server_info (or the older /get_server_info)."""
    for path in ("/server_info", "/get_server_info"):
        info = get_json(base_url, path, timeout=timeout, api_key=api_key)
        if isinstance(info, dict):
            if "decode" in info and isinstance(info["decode"], list) and info["decode"]:
                info = info["decode"][0]
            states = info.get("internal_states") or []
            if states and isinstance(states[0], dict):
                value = states[0].get("avg_spec_accept_length")
                return float(value) if value is not None else None
            return None
    return None


def _prompts_for(prompts, count, input_len, seed):
    """The cell's prompts: the given workload items (cycled), or `count` random token-id prompts."""
    return PromptStream(prompts, input_len, seed).take(count)


class PromptStream:
    """A cell's prompts in order, without end: the workload's items cycled, or random token-id prompts drawn from
    one generator seeded once (the first `count` are make_prompts(count, ...)'s). A cell sized by time keeps taking
    from it: text items repeat (the prompt sets are finite), random ids never do, so a request past the planned
    count is not a prefix-cache hit of an earlier one (real 0.5.11's bench_serving gives each of its num_prompts
    random-ids requests its own ids: sglang/benchmark/datasets/random.py sample_random_requests, a random offset
    per prompt; sglang/bench_serving.py benchmark() runs a fixed count, hence bench_serving.run_sized_cell)."""

    def __init__(self, prompts, input_len, seed):
        if prompts is not None and not prompts:
            raise ValueError("the workload has no prompt")
        self.prompts, self.input_len, self.next = prompts, input_len, 0
        self.rng = random.Random(seed) if prompts is None else None

    def take(self, count):
        if self.prompts is None:
            lo, hi = TOKEN_ID_RANGE
            return [[self.rng.randrange(lo, hi) for _ in range(self.input_len)] for _ in range(count)]
        out = [self.prompts[(self.next + i) % len(self.prompts)] for i in range(count)]
        self.next += count
        return out


def _sampled_outputs(results, count, prompt_ids=None):
    """The outputs the degenerate-output check reads, each with its prompt's id (None for random ids): with count > 0,
    the first finished output of every distinct prompt of the cell (so the baseline and every config check the same
    prompts, and a loop of the model on one prompt is seen in the baseline too), then up to `count` more spread over
    the cell. prompt_ids: {request index: prompt id}."""
    done = sorted((r for r in results if r.success), key=lambda r: r.index)
    if count <= 0 or not done:
        return []
    prompt_ids = prompt_ids or {}
    chosen, seen = [], set()
    for r in done:
        pid = prompt_ids.get(r.index)
        if pid is not None and pid not in seen:
            seen.add(pid)
            chosen.append(r)
    taken = {r.index for r in chosen}
    rest = [r for r in done if r.index not in taken]
    step = max(1, len(rest) // count) if rest else 1
    chosen += [rest[i] for i in range(0, len(rest), step)][:count]
    return [{"index": r.index, "prompt_id": prompt_ids.get(r.index), "text": r.text}
            for r in sorted(chosen, key=lambda r: r.index)]


def _prompt_id(item):
    """A text item's id (prompt sets give one to each), else None."""
    return item.get("id") if isinstance(item, dict) else None


async def run_cell_async(base_url, backend="sglang", model="default", input_len=60, output_len=256,
                         concurrency=1, num_prompts=None, warmup_requests=1, request_timeout=600.0,
                         cell_timeout=1800.0, api_key=None, seed=0, prompts_per_concurrency=4,
                         min_prompts=8, prompts=None, ignore_eos=True, sample_outputs=0, min_seconds=0.0,
                         connection="keep-alive"):
    """Measure one cell. Returns a dict: bench_serving metric keys + acceptance (per request), status
    ('ok'|'timeout'|'error'), error, errors (first distinct request errors), num_prompts (requests issued),
    min_requests, min_cell_seconds, client_cpu_s, prompt_sent (input_ids: random ids sent as ids; text), requests
    (per-request counts), samples (finished texts with their prompt ids: one per distinct prompt, then up to
    sample_outputs more).

    prompts: the workload's items (token-id lists or {"text", "messages"}); None = random ids of input_len.
    Sized by time: with min_seconds > 0 the workers keep issuing requests (PromptStream: the same seed, text
    cycled) until both at least num_prompts requests were issued and min_seconds have passed since the first one
    started; every issued request is awaited, so the cell completes at least num_prompts and lasts at least
    min_seconds (both bounded by cell_timeout).
    connection: CONNECTIONS (see _drive); the warmup always keeps its connections alive."""
    if connection not in CONNECTIONS:
        raise ValueError("connection must be one of %s, got %r" % (", ".join(CONNECTIONS), connection))
    if backend not in PATHS:
        raise ValueError("unknown backend %r (have %s)" % (backend, ", ".join(BACKENDS)))
    if input_len < 1 or output_len < 1 or concurrency < 1:
        raise ValueError("input_len, output_len and concurrency must be >= 1")
    host, port = split_url(base_url)
    path = PATHS[backend]
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else None
    if num_prompts is None:
        num_prompts = max(concurrency * prompts_per_concurrency, min_prompts)
    warm_n = max(warmup_requests, 0)
    stream = PromptStream(prompts, input_len, seed)
    items = stream.take(num_prompts + warm_n)
    # Warmup takes the items after the measured ones, so a text workload's measured prompts are not cached by it.
    bodies = [build_body(backend, model, p, output_len, ignore_eos) for p in items[:num_prompts]]
    warm_bodies = [build_body(backend, model, p, min(output_len, 32), ignore_eos) for p in items[num_prompts:]]
    prompt_len = input_len if prompts is None else 0  # text: the server's prompt_tokens fill it in
    keep_text = sample_outputs > 0
    row = {"status": "ok", "error": "", "errors": [], "num_prompts": num_prompts,
           "warmup_requests": len(warm_bodies), "min_requests": num_prompts, "min_cell_seconds": float(min_seconds),
           "connection": connection, "prompt_sent": "input_ids" if prompts is None else "text"}

    # which prompt each measured request sent (the degenerate check names it; sampling covers every prompt)
    prompt_ids = {i: _prompt_id(p) for i, p in enumerate(items[:num_prompts])}

    def more(index, elapsed):
        """The next request of a cell sized by time, or None once min_seconds have passed."""
        if elapsed >= min_seconds:
            return None
        item = stream.take(1)[0]
        prompt_ids[index] = _prompt_id(item)
        return build_body(backend, model, item, output_len, ignore_eos)
    deadline = time.monotonic() + cell_timeout

    if warm_bodies:
        warm = []
        try:
            await asyncio.wait_for(
                _drive(host, port, path, warm_bodies, prompt_len, backend, len(warm_bodies), headers,
                       request_timeout, warm),
                max(deadline - time.monotonic(), 0.001))
        except asyncio.TimeoutError:
            pass
        if not any(r.success for r in warm):
            errors = first_errors(warm) or ["warmup did not finish within the cell timeout"]
            raise CellError("warmup failed: %s" % "; ".join(errors))

    results = []
    cpu0 = time.process_time()
    marks = [time.perf_counter()]
    try:
        await asyncio.wait_for(
            _drive(host, port, path, bodies, prompt_len, backend, concurrency, headers, request_timeout,
                   results, keep_text=keep_text, on_start=marks.append, connection=connection,
                   more=more if min_seconds > 0 else None),
            max(deadline - time.monotonic(), 0.001))
    except asyncio.TimeoutError:
        row["status"] = "timeout"
        row["error"] = "cell exceeded its %.0fs bound: %d requests finished (at least %d and %gs asked)" % (
            cell_timeout, len(results), num_prompts, min_seconds)
    duration = time.perf_counter() - marks[-1]
    row["client_cpu_s"] = time.process_time() - cpu0
    # Kept beside the per-cell figure as a diagnostic (what a reader of /server_info would have reported); it is the
    # cell's accept length only when no request carried figures, and then labelled so.
    running_average = read_accept_length(base_url, api_key=api_key)
    row.update(compute_metrics(results, duration, running_average))
    row["server_running_average"] = running_average
    row["spec_totals"] = spec_totals(results)
    row["requests"] = [request_record(r) for r in results]
    row["samples"] = _sampled_outputs(results, sample_outputs, prompt_ids)
    row["errors"] = first_errors(results)
    row["num_prompts"] = max(num_prompts, len(results))
    if row["status"] == "ok" and row["failed"]:
        row["status"] = "error"
        row["error"] = "%d of %d requests failed: %s" % (row["failed"], len(results), "; ".join(row["errors"]))
    return row


async def run_soak_async(base_url, backend="sglang", model="default", concurrency=8, output_len=256,
                         rounds=1, request_timeout=600.0, timeout=1800.0, api_key=None, prompts=None,
                         input_len=60, seed=0):
    """The shrinking batch: `concurrency` requests start together with output lengths output_len*k/C
    (k = 1..C, ignore_eos, so they are exact) and finish one after another, so the running batch passes through
    every size from C down to 1 (CUDA-graph replay at each batch size, the known crash pattern of speculative
    decoding). Repeated `rounds` times. Returns {"status", "error", "rounds", "requests", "failed", "errors"}."""
    if concurrency < 1 or rounds < 1 or output_len < 1:
        raise ValueError("concurrency, rounds and output_len must be >= 1")
    host, port = split_url(base_url)
    path = PATHS[backend]
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else None
    items = _prompts_for(prompts, concurrency, input_len, seed)
    lengths = [max(1, output_len * (k + 1) // concurrency) for k in range(concurrency)]
    prompt_len = input_len if prompts is None else 0
    out = {"status": "ok", "error": "", "rounds": 0, "requests": 0, "failed": 0, "errors": [],
           "batch_sizes": list(range(concurrency, 0, -1)), "output_lengths": lengths}
    deadline = time.monotonic() + timeout
    results = []
    for _ in range(rounds):
        bodies = [build_body(backend, model, p, n, True) for p, n in zip(items, reversed(lengths))]
        batch = []
        try:
            await asyncio.wait_for(_drive(host, port, path, bodies, prompt_len, backend, concurrency, headers,
                                          request_timeout, batch), max(deadline - time.monotonic(), 0.001))
        except asyncio.TimeoutError:
            out.update(status="timeout", error="soak exceeded its %.0fs bound" % timeout)
        results += batch
        out["rounds"] += 1
        if out["status"] != "ok" or not all(r.success for r in batch):
            break
    out["requests"] = len(results)
    out["failed"] = sum(1 for r in results if not r.success)
    out["errors"] = first_errors(results)
    if out["status"] == "ok" and (out["failed"] or len(results) < rounds * concurrency):
        out.update(status="error", error="%d of %d soak requests failed: %s" % (
            out["failed"], len(results), "; ".join(out["errors"])))
    return out


def run_cell(**kwargs):
    """Blocking wrapper around run_cell_async (fresh event loop per cell)."""
    return asyncio.run(run_cell_async(**kwargs))


def run_soak(**kwargs):
    """Blocking wrapper around run_soak_async."""
    return asyncio.run(run_soak_async(**kwargs))


def main(argv=None):
    """`python -m ansible.module_utils.loadgen.client --base-url URL ...`: one cell, JSON on stdout."""
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--backend", default="sglang", choices=BACKENDS)
    parser.add_argument("--model", default="default")
    parser.add_argument("--input-len", type=int, default=60)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--num-prompts", type=int)
    parser.add_argument("--warmup-requests", type=int, default=1)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--cell-timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--connection", default="keep-alive", choices=CONNECTIONS)
    parser.add_argument("--min-seconds", type=float, default=0.0)
    args = parser.parse_args(argv)
    try:
        row = run_cell(base_url=args.base_url, backend=args.backend, model=args.model,
                       input_len=args.input_len, output_len=args.output_len, concurrency=args.concurrency,
                       num_prompts=args.num_prompts, warmup_requests=args.warmup_requests,
                       request_timeout=args.request_timeout, cell_timeout=args.cell_timeout, seed=args.seed,
                       connection=args.connection, min_seconds=args.min_seconds)
    except CellError as exc:
        print(json.dumps({"status": "error", "error": str(exc)}))
        return 1
    print(json.dumps(row))
    return 0 if row["status"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
