"""GET /metrics as real SGLang 0.5.11 serves it with --enable-metrics: the recorded set of families (names, types,
HELP lines, label names, histogram buckets; tests/fixtures/real_sglang/metrics-0.5.11-h200/, held by
tests/unit/lab/sglang_standin/test_metrics.py), with the values the alert rules and the dashboard read driven by
the stand-in's own state; the rest are plausible constants. The stand-in serves /metrics with or without
--enable-metrics (a deliberate difference: tests/fixtures/real_sglang/differences.json).

How real 0.5.11 sets them (read in /tmp/sglang-src/sglang):
- tokenizer series (labels engine_type, model_name): prompt/generation token counters, requests, TTFT, ITL, e2e,
  counted when a request finishes or streams (srt/observability/metrics_collector.py TokenizerMetricsCollector.
  observe_one_finished_request, observe_time_to_first_token, observe_inter_token_latency: one ITL observation per new
  token, the chunk's interval divided by its tokens);
- scheduler gauges (labels engine_type, model_name, moe_ep_rank, pp_rank, tp_rank) are set only when the scheduler
  logs: each prefill batch (srt/observability/scheduler_metrics_mixin.py report_prefill_stats: running, queue, KV
  pool), every --decode-log-interval decode steps (report_decode_stats: the same plus gen_throughput and
  spec_accept_length/spec_accept_rate over the window, whose counters are then reset; 0 with NONE) and, while
  fully idle, every 30 s (srt/managers/scheduler_runtime_checker_mixin.py _maybe_log_idle_metrics: running, queue,
  KV pool, gen_throughput 0, but not the speculative gauges, which keep the last window's value).
The stand-in has no batch loop: a request's decode step counts 1/running of a batch step (so --decode-log-interval
batch steps close a window as on the real scheduler), and the idle refresh happens when /metrics is read.
"""
from __future__ import annotations

import os
import threading
import time

from sglang_standin.logs import env_float

MAX_TOTAL_NUM_TOKENS = 1281809   # the KV pool (/server_info max_total_num_tokens, /v1/loads)
CONTEXT_LEN = 8192
SECONDS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0)
LENGTHS = (100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0,
           9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0, 35000.0, 40000.0,
           60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1e6, 1.1e6)
BUCKETS = {
    "time_to_first_token_seconds": SECONDS,
    "e2e_request_latency_seconds": SECONDS + (600.0, 1200.0, 1800.0, 2400.0),
    "prompt_tokens_histogram": LENGTHS, "generation_tokens_histogram": LENGTHS,
    "inter_token_latency_seconds": (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
                                    0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
    "per_stage_req_latency_seconds": tuple(0.001 * 1.62 ** i for i in range(30)),
    "queue_time_seconds": (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                           80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
                           1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0),
}
ROUTING_BINS = (("0", "1"), ("1", "2"), ("2", "3"), ("3", "5"), ("5", "7"), ("7", "10"), ("10", "20"), ("20", "50"),
                ("50", "100"), ("100", "200"), ("200", "+Inf"))
# (name without "sglang:", type, base labels: "" none / "tok" tokenizer / "sched" scheduler, HELP), in real order.
FAMILIES = (
    ("process_cpu_seconds_total", "counter", "", "Total CPU time consumed by this process (user + system)"),
    ("http_requests_total", "counter", "", "Total number of HTTP requests by endpoint and method"),
    ("http_responses_total", "counter", "", "Total number of HTTP responses by endpoint and status code"),
    ("prompt_tokens_total", "counter", "tok", "Number of prefill tokens processed."),
    ("generation_tokens_total", "counter", "tok", "Number of generation tokens processed."),
    ("num_requests_total", "counter", "tok", "Number of requests processed."),
    ("cached_tokens_total", "counter", "tok", "Number of cached prompt tokens by source (device/host/storage)."),
    ("max_total_num_tokens", "gauge", "sched", "Maximum total number of tokens in the KV cache pool."),
    ("engine_startup_time", "gauge", "sched", "The time taken for the engine to start up."),
    ("engine_load_weights_time", "gauge", "sched", "The time taken for the engine to load weights."),
    ("page_size", "gauge", "sched", "KV cache page size in tokens."),
    ("num_pages", "gauge", "sched", "Number of KV cache pages."),
    ("context_len", "gauge", "sched", "Maximum context length."),
    ("startup_available_gpu_memory_gb", "gauge", "sched", "Available GPU memory in GB at startup."),
    ("num_running_reqs", "gauge", "sched", "The number of running requests."),
    ("num_queue_reqs", "gauge", "sched", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "gauge", "sched", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "gauge", "sched", "The generation throughput (token/s)."),
    ("cache_hit_rate", "gauge", "sched", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "gauge", "sched", "The sum of all sequence lengths in decode."),
    ("token_usage", "gauge", "sched", "The token usage."),
    ("full_token_usage", "gauge", "sched", "The token usage for full attention layers."),
    ("swa_token_usage", "gauge", "sched", "The token usage for SWA layers."),
    ("mamba_usage", "gauge", "sched", "The token usage for Mamba layers."),
    ("num_used_tokens", "gauge", "sched", "The number of used tokens."),
    ("kv_available_tokens", "gauge", "sched", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "gauge", "sched", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "gauge", "sched", "Number of actively used token slots in the KV cache pool."),
    ("spec_accept_length", "gauge", "sched",
     "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."),
    ("spec_accept_rate", "gauge", "sched", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    ("num_prefill_prealloc_queue_reqs", "gauge", "sched", "The number of requests in the prefill prealloc queue."),
    ("num_prefill_inflight_queue_reqs", "gauge", "sched", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "gauge", "sched", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "gauge", "sched", "The number of requests in the decode transfer queue."),
    ("pending_prealloc_token_usage", "gauge", "sched",
     "The token usage for pending preallocated tokens (not preallocated yet)."),
    ("utilization", "gauge", "sched", "The utilization."),
    ("new_token_ratio", "gauge", "sched", "The new token ratio."),
    ("is_cuda_graph", "gauge", "sched", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "gauge", "sched", "Number of unique routing keys in running batch."),
    ("routing_key_running_req_count", "gauge", "sched",
     "Distribution of routing keys by running request count (gt < count <= le)."),
    ("routing_key_all_req_count", "gauge", "sched",
     "Distribution of routing keys by running+waiting request count (gt < count <= le)."),
    ("cuda_graph_passes_total", "counter", "sched", "Total number of forward passes categorized by CUDA graph."),
    ("realtime_tokens_total", "counter", "sched",
     "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode."),
    ("num_retracted_reqs", "gauge", "sched", "The number of retracted requests."),
    ("num_paused_reqs", "gauge", "sched", "The number of paused requests by async weight sync."),
    ("routing_keys_active", "gauge", "", "Number of unique routing keys with active requests"),
    ("http_requests_active", "gauge", "", "Number of currently active HTTP requests"),
    ("time_to_first_token_seconds", "histogram", "tok", "Histogram of time to first token in seconds."),
    ("e2e_request_latency_seconds", "histogram", "tok", "Histogram of End-to-end request latency in seconds"),
    ("prompt_tokens_histogram", "histogram", "tok", "Histogram of prompt token length."),
    ("generation_tokens_histogram", "histogram", "tok", "Histogram of generation token length."),
    ("inter_token_latency_seconds", "histogram", "tok", "Histogram of inter-token latency in seconds."),
    ("per_stage_req_latency_seconds", "histogram", "sched", "The latency of each stage of requests."),
    ("queue_time_seconds", "histogram", "sched", "Histogram of queueing time in seconds."),
)
# Scheduler gauges a log sets (the rest keep their start value); "basic" = what every log sets.
_BASIC = ("num_running_reqs", "num_queue_reqs", "token_usage", "full_token_usage", "num_used_tokens",
          "kv_available_tokens", "kv_used_tokens", "decode_sum_seq_lens")


class Histogram:
    def __init__(self, bounds):
        self.bounds, self.counts, self.sum, self.count = tuple(bounds), [0] * len(bounds), 0.0, 0

    def observe(self, value: float, times: int = 1) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
        self.sum += value * times
        self.count += times


def _num(value) -> str:
    return repr(float(value)) if value not in (float("inf"),) else "+Inf"


def _labels(pairs) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}" if pairs else ""


class Metrics:
    """The counters, histograms and logged scheduler gauges of one server; thread-safe; text() is /metrics."""

    def __init__(self, model_name: str, spec=None, decode_log_interval: int = 40, timing=None):
        self.lock = threading.Lock()
        self.spec, self.timing = spec, timing
        self.interval = max(1, int(decode_log_interval or 40))
        self.idle_s = env_float("SGLANG_STANDIN_IDLE_METRICS_S", 30.0)
        self.tok = {"engine_type": "unified", "model_name": model_name}
        self.sched = dict(self.tok, moe_ep_rank="0", pp_rank="0", tp_rank="0")
        self.counters = {"prompt_tokens_total": 0.0, "generation_tokens_total": 0.0, "num_requests_total": 0.0}
        self.cached_tokens = 0.0
        self.realtime = {"prefill_compute": 0.0, "prefill_cache": 0.0, "decode": 0.0}
        self.passes = {"prefill_cuda_graph": 0.0, "decode_cuda_graph": 0.0}
        self.hist = {name: Histogram(BUCKETS[name]) for name in BUCKETS if name != "per_stage_req_latency_seconds"}
        self.stages = {s: Histogram(BUCKETS["per_stage_req_latency_seconds"])
                       for s in ("request_process", "prefill_forward")}
        self.http_total, self.http_active, self.http_responses = {}, {}, {}
        self.gauges = {name: 0.0 for name, kind, base, _ in FAMILIES if kind == "gauge" and base == "sched"}
        self.gauges.update(max_total_num_tokens=MAX_TOTAL_NUM_TOKENS, num_pages=MAX_TOTAL_NUM_TOKENS, page_size=1.0,
                           context_len=CONTEXT_LEN, startup_available_gpu_memory_gb=105.0, new_token_ratio=0.7,
                           kv_available_tokens=MAX_TOTAL_NUM_TOKENS)
        self.kv_used = 0          # KV slots of the running requests (prompt + generated so far)
        self.seq_lens = 0
        self.batch_steps = 0.0    # decode batch steps (a request's step counts 1/running)
        self.win_tokens = self.win_steps = self.win_generated = 0
        self.last_log = self.win_started = time.monotonic()

    # ---- the scheduler's logs
    def _running_waiting(self):
        if self.timing is None:
            return 0, 0
        return self.timing.running, self.timing.waiting

    def _log_basic(self) -> None:
        running, waiting = self._running_waiting()
        used = max(0, self.kv_used)
        self.gauges.update(num_running_reqs=running, num_queue_reqs=waiting, num_used_tokens=used, kv_used_tokens=used,
                           kv_available_tokens=MAX_TOTAL_NUM_TOKENS - used, decode_sum_seq_lens=max(0, self.seq_lens),
                           full_token_usage=used / MAX_TOTAL_NUM_TOKENS,
                           token_usage=round(used / MAX_TOTAL_NUM_TOKENS, 2))
        self.last_log = time.monotonic()

    def _close_window(self) -> None:
        """report_decode_stats: gen_throughput and the speculative gauges over the window, then reset it."""
        now = time.monotonic()
        self.gauges["gen_throughput"] = self.win_generated / max(1e-6, now - self.win_started)
        if self.spec is None or not self.win_steps:
            length = rate = 0.0
        else:
            length = self.win_tokens / self.win_steps
            proposed = self.win_steps * self.spec.drafts_per_step
            rate = (self.win_tokens - self.win_steps) / proposed if proposed else 0.0
        self.gauges.update(spec_accept_length=length, spec_accept_rate=rate)
        self.win_tokens = self.win_steps = self.win_generated = 0
        self.win_started = now
        self._log_basic()

    def maybe_idle_log(self) -> None:
        """_maybe_log_idle_metrics: fully idle and no log for idle_s: running, queue, KV pool, gen_throughput 0."""
        running, waiting = self._running_waiting()
        if running == 0 and waiting == 0 and time.monotonic() - self.last_log >= self.idle_s:
            self.gauges["gen_throughput"] = 0.0
            self._log_basic()

    # ---- events from the serving state
    def prefill(self, prompt_tokens: int, cached: int, queue_s: float, forward_s: float) -> None:
        with self.lock:
            self.kv_used += prompt_tokens
            self.seq_lens += prompt_tokens
            self.realtime["prefill_compute"] += prompt_tokens - cached
            self.realtime["prefill_cache"] += cached
            self.passes["prefill_cuda_graph"] += 1
            self.hist["queue_time_seconds"].observe(queue_s)
            self.stages["request_process"].observe(0.00002)
            self.stages["prefill_forward"].observe(forward_s)
            self.gauges["cache_hit_rate"] = cached / prompt_tokens if prompt_tokens else 0.0
            self._log_basic()

    def first_token(self, ttft_s: float) -> None:
        with self.lock:
            self.hist["time_to_first_token_seconds"].observe(ttft_s)

    def decode_step(self, tokens: int, verify_tokens: int, interval_s, running: int) -> None:
        """One request's decode forward: `tokens` visible tokens (verify_tokens with the hidden EOS, the step's
        accept length; 0 without speculative decoding), interval_s since its previous chunk (None: not timed)."""
        with self.lock:
            self.kv_used += tokens
            self.seq_lens += tokens
            self.realtime["decode"] += tokens
            self.passes["decode_cuda_graph"] += 1
            self.win_generated += tokens
            if verify_tokens:
                self.win_tokens += verify_tokens
                self.win_steps += 1
            if interval_s is not None and tokens:
                self.hist["inter_token_latency_seconds"].observe(interval_s / tokens, tokens)
            before = int(self.batch_steps // self.interval)
            self.batch_steps += 1.0 / max(1, running)
            if int(self.batch_steps // self.interval) > before:
                self._close_window()

    def release(self, kv_tokens: int) -> None:
        """A request left the batch (finished or its client gone): its KV slots are free."""
        with self.lock:
            self.kv_used -= kv_tokens
            self.seq_lens -= kv_tokens

    def warmup(self, prompt_tokens: int, completion_tokens: int, steps: list) -> None:
        """SGLang's warmup request (counted in the fresh recordings: 1 request, 6 prompt and 8 generated tokens),
        untimed: its decode steps go into the scheduler's first window."""
        self.prefill(prompt_tokens, 0, 0.0, 0.0)
        self.first_token(0.0)
        for n in (steps or [1] * (completion_tokens - 1)):
            self.decode_step(n if steps else 1, n if steps else 0, None, 1)
        self.release(prompt_tokens + completion_tokens - 1)
        self.finished(prompt_tokens, completion_tokens, 0.0)

    def finished(self, prompt_tokens: int, completion_tokens: int, e2e_s) -> None:
        with self.lock:
            self.counters["prompt_tokens_total"] += prompt_tokens
            self.counters["generation_tokens_total"] += completion_tokens
            self.counters["num_requests_total"] += 1
            self.hist["prompt_tokens_histogram"].observe(prompt_tokens)
            self.hist["generation_tokens_histogram"].observe(completion_tokens)
            if e2e_s is not None:
                self.hist["e2e_request_latency_seconds"].observe(e2e_s)

    def cached(self, tokens: int) -> None:
        with self.lock:
            self.cached_tokens += tokens

    def http_start(self, endpoint: str, method: str) -> None:
        with self.lock:
            key = (endpoint, method)
            self.http_total[key] = self.http_total.get(key, 0) + 1
            self.http_active[key] = self.http_active.get(key, 0) + 1

    def http_end(self, endpoint: str, method: str) -> None:
        with self.lock:
            key = (endpoint, method)
            self.http_active[key] = self.http_active.get(key, 1) - 1

    def http_respond(self, endpoint: str, method: str, status) -> None:
        with self.lock:
            key = (endpoint, method, str(status))
            self.http_responses[key] = self.http_responses.get(key, 0) + 1

    # ---- the exposition
    def _samples(self, name: str) -> list:
        """[(sample name suffix, extra labels, value)] of one family (histograms: _sum, _bucket..., _count)."""
        if name in self.counters:
            return [("", {}, self.counters[name])]
        if name == "cached_tokens_total":
            return [("", {"cache_source": "device"}, self.cached_tokens)] if self.cached_tokens else []
        if name == "process_cpu_seconds_total":
            cpu = sum(os.times()[:2])
            return [("", {"component": "tokenizer"}, cpu / 2), ("", {"component": "detokenizer"}, cpu / 2)]
        if name in ("http_requests_total", "http_requests_active"):
            src = self.http_total if name == "http_requests_total" else self.http_active
            return [("", {"endpoint": e, "method": m}, v) for (e, m), v in src.items()]
        if name == "http_responses_total":
            return [("", {"endpoint": e, "method": m, "status_code": s}, v)
                    for (e, m, s), v in self.http_responses.items()]
        if name == "realtime_tokens_total":
            return [("", {"mode": m}, v) for m, v in self.realtime.items()]
        if name == "cuda_graph_passes_total":
            return [("", {"mode": m}, v) for m, v in self.passes.items()]
        if name in ("num_retracted_reqs", "num_paused_reqs"):
            return [("", {"pid": str(os.getpid())}, 0.0)]
        if name.startswith("routing_key_") and name.endswith("_req_count"):
            return [("", {"gt": gt, "le": le}, 0.0) for gt, le in ROUTING_BINS]
        if name == "routing_keys_active":
            return [("", {}, 0.0)]
        if name == "per_stage_req_latency_seconds":
            out = []
            for stage, h in self.stages.items():
                out += _histogram(h, {"stage": stage})
            return out
        if name in self.hist:
            h = self.hist[name]
            return _histogram(h, {}) if h.count or name != "inter_token_latency_seconds" else []
        return [("", {}, self.gauges[name])]

    def text(self) -> str:
        with self.lock:
            self.maybe_idle_log()
            lines = []
            for name, kind, base, help_text in FAMILIES:
                samples = self._samples(name)
                if not samples:  # a labelled family with no child yet is absent (as real, before first use)
                    continue
                labels = {"tok": self.tok, "sched": self.sched}.get(base, {})
                lines += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} {kind}"]
                lines += [f"sglang:{name}{suffix}{_labels(dict(labels, **extra))} {_num(value)}"
                          for suffix, extra, value in samples]
            return "\n".join(lines) + "\n"


def _histogram(h: Histogram, extra: dict) -> list:
    out = [("_sum", extra, h.sum)]
    out += [("_bucket", dict(extra, le=_num(b)), c) for b, c in zip(h.bounds, h.counts)]
    out += [("_bucket", dict(extra, le="+Inf"), h.count), ("_count", extra, h.count)]
    return out
