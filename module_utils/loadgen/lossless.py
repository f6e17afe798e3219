# -*- coding: utf-8 -*-
"""The lossless gate's measurement (stdlib only): per workload, a fixed set of prompts generated greedily and every
output kept, so the controller (reporting/lossless.py) can compare each config's outputs with the autoregressive
baseline's.

Under greedy decoding a speculative config must return the baseline's tokens. The gate's prompts are the same for
every config of a run: a text workload's first `lossless_prompts` items, or for random ids `lossless_prompts`
token-id prompts drawn with a fixed seed (GATE_SEED + the context length); the same max tokens (the matrix's
output_len), temperature 0, no ignore_eos (the model may stop, and where it stops is part of its output). No
sampling_seed is sent: greedy decoding needs none, and real 0.5.11 asserts that a seed is absent on its flashinfer
sampling path (sglang/srt/layers/sampler.py, Sampler._sample_from_probs).

Each gate request is a streamed POST /generate over transport.py (the one HTTP layer). Real SGLang 0.5.11's
/generate carries `text` and `output_ids` in every chunk (sglang/srt/managers/tokenizer_manager.py,
TokenizerManager._handle_batch_output, the BatchStrOutput branch): cumulative by default, deltas with
--incremental-streaming-output; the finished chunk's meta_info has completion_tokens and finish_reason. So the gate
keeps the token ids too, and a delta stream is told from a cumulative one by completion_tokens.

A gate row (kind "gate") per workload and concurrency: `gate` "primary" (every config, at lossless_concurrency) or
"self_check" (the baseline only, at lossless_self_concurrency: the baseline's agreement with itself across batch
sizes, from which the tolerance is set), and per prompt {index, prompt_id, prompt, text, output_ids, finish_reason,
completion_tokens, error}.
"""
from __future__ import annotations

import asyncio
import json
import time

from ansible.module_utils.loadgen.client import make_prompts
from ansible.module_utils.loadgen.transport import HttpConnection, HttpError, split_url

GATE_SEED = 27000
PROMPT_EXCERPT = 160


def gate_prompts(workload, count):
    """[(prompt_id, prompt)] of the workload's gate: the first `count` text items (fewer when the set is smaller),
    or `count` seeded random token-id prompts of exactly the context length."""
    if count <= 0:
        return []
    if workload["kind"] == "random-ids":
        ctx = workload["context_length"]
        return [("ids-%d" % i, p) for i, p in enumerate(make_prompts(count, ctx, GATE_SEED + ctx))]
    items = workload.get("items") or []
    return [(str(item.get("id") or "#%d" % i), item) for i, item in enumerate(items[:count])]


def gate_body(prompt, output_len):
    """The streamed /generate body of one gate request: greedy, the model may stop."""
    body = {"stream": True, "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0}}
    if isinstance(prompt, list):
        body["input_ids"] = prompt
    else:
        body["text"] = prompt["text"]
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def prompt_excerpt(prompt):
    """How the report names a prompt: its text's start, or the first token ids."""
    if isinstance(prompt, list):
        return "token ids [%s%s] (%d)" % (", ".join(str(t) for t in prompt[:8]), ", ..." if len(prompt) > 8 else "",
                                          len(prompt))
    text = prompt["text"]
    return text[:PROMPT_EXCERPT] + ("..." if len(text) > PROMPT_EXCERPT else "")


class Output:
    """One gate request's answer, built from its /generate chunks (cumulative or delta)."""

    def __init__(self):
        self.text = ""
        self.ids = []
        self.has_ids = False
        self.completion_tokens = 0
        self.finish_reason = None

    def on_event(self, payload, _now=None):
        data = json.loads(payload)
        if "error" in data:
            raise HttpError("server error in stream: %s" % (data["error"],))
        meta = data.get("meta_info") or {}
        n = meta.get("completion_tokens")
        ids = data.get("output_ids")
        text = data.get("text")
        # Cumulative chunks carry every id so far (len == completion_tokens); delta chunks carry the new ones only.
        delta = isinstance(ids, list) and isinstance(n, int) and len(ids) < n
        if isinstance(ids, list):
            self.has_ids = True
            self.ids = self.ids + ids if delta else list(ids)
        if text is not None:
            self.text = self.text + text if delta else text
        if isinstance(n, int):
            self.completion_tokens = n
        if meta.get("finish_reason") is not None:
            self.finish_reason = meta["finish_reason"]


async def _one(conn, path, body, headers, timeout):
    out = Output()
    try:
        await conn.stream_post(path, body, out.on_event, headers=headers, timeout=timeout)
        error = "" if out.finish_reason is not None or out.completion_tokens else "stream ended without any token"
    except asyncio.TimeoutError:
        error = "request timed out after %.0fs" % timeout
    except (HttpError, OSError, ValueError) as exc:
        error = "%s: %s" % (type(exc).__name__, exc)
    return out, error


async def run_gate_async(base_url, prompts, output_len, concurrency=1, request_timeout=600.0, timeout=1800.0,
                         api_key=None):
    """Generate every prompt with `concurrency` workers. Fewer prompts than workers are cycled to fill the batch
    (the copies only keep the batch at `concurrency`; their outputs are not returned), so the prompts decode in a
    batch of that size. Returns {"outputs": [per prompt, in prompt order], "status": ok|timeout|error, "error",
    "in_flight", "elapsed_s"}."""
    if output_len < 1 or concurrency < 1:
        raise ValueError("output_len and concurrency must be >= 1")
    host, port = split_url(base_url)
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else None
    count = len(prompts)
    requests = prompts + [prompts[i % count] for i in range(count, concurrency)] if count else []
    results = [None] * len(requests)
    queue = list(range(len(requests)))
    started = time.monotonic()

    async def worker():
        conn = HttpConnection(host, port)
        try:
            while queue:
                i = queue.pop(0)
                pid, prompt = requests[i]
                out, error = await _one(conn, "/generate", gate_body(prompt, output_len), headers, request_timeout)
                results[i] = {"index": i, "prompt_id": pid, "prompt": prompt_excerpt(prompt), "text": out.text,
                              "output_ids": out.ids if out.has_ids else None, "finish_reason": out.finish_reason,
                              "completion_tokens": out.completion_tokens, "error": error}
        finally:
            conn.close()

    out = {"status": "ok", "error": ""}
    out["in_flight"] = min(concurrency, len(requests))
    workers = [asyncio.ensure_future(worker()) for _ in range(out["in_flight"] or 1)]
    try:
        await asyncio.wait_for(asyncio.gather(*workers), timeout)
    except asyncio.TimeoutError:
        out.update(status="timeout", error="gate exceeded its %.0fs bound" % timeout)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    results = results[:count]
    for i, (pid, prompt) in enumerate(prompts):
        if results[i] is None:
            results[i] = {"index": i, "prompt_id": pid, "prompt": prompt_excerpt(prompt), "text": "",
                          "output_ids": None, "finish_reason": None, "completion_tokens": 0,
                          "error": out["error"] or "not run"}
    failed = [r for r in results if r["error"]]
    if out["status"] == "ok" and failed:
        out.update(status="error", error="%d of %d gate requests failed: %s" % (len(failed), len(results),
                                                                                 failed[0]["error"]))
    out["outputs"] = results
    out["elapsed_s"] = round(time.monotonic() - started, 3)
    return out


def gate_row(spec, workload, concurrency, which, labels):
    """A gate row before it is measured: its coordinates and labels."""
    row = {"kind": "gate", "phase": "lossless", "gate": which, "workload": workload["id"],
           "max_concurrency": concurrency, "output_len": spec["output_len"], "temperature": 0.0,
           "prompts_requested": spec.get("lossless_prompts", 0)}
    row.update(labels)
    return row


def gate_runs(spec):
    """[(which, concurrency)] the spec asks for: the primary gate, then the self-check (0 = none)."""
    runs = [("primary", spec.get("lossless_concurrency") or 1)]
    if spec.get("lossless_self_concurrency"):
        runs.append(("self_check", spec["lossless_self_concurrency"]))
    return runs


def run_gate_phase(spec, prepared, labels):
    """Every workload's gate rows (primary, then self-check when asked); [] when lossless_prompts is 0."""
    count = spec.get("lossless_prompts") or 0
    rows = []
    if count <= 0:
        return rows
    for workload in prepared:
        prompts = gate_prompts(workload, count)
        for which, conc in gate_runs(spec):
            row = gate_row(spec, workload, conc, which, labels)
            try:
                row.update(asyncio.run(run_gate_async(
                    spec["base_url"], prompts, spec["output_len"], concurrency=conc,
                    request_timeout=float(spec["request_timeout_s"]), timeout=float(spec["cell_timeout_s"]),
                    api_key=spec.get("api_key"))))
            except (OSError, ValueError) as exc:
                row.update(status="error", error="gate could not run: %s" % exc, outputs=[])
            rows.append(row)
    return rows
