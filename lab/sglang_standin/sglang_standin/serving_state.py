"""The running server's state: lifecycle flags (ready, stopping), the injected fault, the request pacing
(engine.Timing), the radix cache over earlier prompts and the scheduler's lifetime speculative totals."""
from __future__ import annotations

import os
import threading
import time
from typing import Iterator, Optional

from sglang_standin import engine
from sglang_standin.decoding import Decode, spec_shape
from sglang_standin.logs import crash, env_float
from sglang_standin.metrics import Metrics
from sglang_standin.server_args import ServerArgs

FAULTS = ("none", "crash_loading", "crash_warmup", "bind_then_die", "hang", "hang_warmup", "slow_shutdown", "garbage",
          "crash_shrinking_batch", "think_forever", "wrong_text")
# SGLang's warmup request (http_server._execute_server_warmup): /generate of this prompt, 8 new tokens.
WARMUP_PROMPT = "The capital city of France is"
WARMUP_TOKENS = 8


class State:
    def __init__(self, args: ServerArgs):
        self.args = args
        self.ready = False
        self.stopping = False
        self.fault = os.environ.get("SGLANG_STANDIN_FAULT", "none") or "none"
        if self.fault not in FAULTS:
            raise SystemExit(f"SGLANG_STANDIN_FAULT={self.fault!r} is not one of {', '.join(FAULTS)}")
        self.spec = spec_shape(args)
        try:  # the acceptance model's knobs, checked once at start-up
            engine.accept_probabilities()
            engine.forced_accept_length()
        except ValueError as exc:
            raise SystemExit(f"stand-in acceptance model: {exc}") from None
        self.timing = engine.Timing(
            ttft_ms=env_float("SGLANG_STANDIN_TTFT_MS", 40.0),
            itl_ms=env_float("SGLANG_STANDIN_ITL_MS", 8.0),
            itl_slope_ms=env_float("SGLANG_STANDIN_ITL_SLOPE_MS", 0.05),
            prefill_us_per_token=env_float("SGLANG_STANDIN_PREFILL_US_PER_TOKEN", 20.0),
            max_running=args.max_running_requests or 256,
            verify_width=self.spec.verify_width if self.spec else 0,
            draft_cost=env_float("SGLANG_STANDIN_DRAFT_COST", 0.3),
            on_shrink=self._shrinking_batch_fault if self.fault == "crash_shrinking_batch" else None,
        )
        # The scheduler's lifetime speculative totals (tokens of the verify steps, verify steps).
        self.spec_tokens = 0
        self.spec_steps = 0
        self.metrics = Metrics(args.model_id, self.spec, getattr(args, "decode_log_interval", None) or 40, self.timing)
        self.created = int(time.time())
        self.health_s = env_float("SGLANG_STANDIN_HEALTH_S", 1.0)
        self.drain_s = env_float("SGLANG_STANDIN_DRAIN_S", 0.5)
        # SGLang's warmup request ("The capital city of France is") is in the radix cache before any request.
        self.seen_prompts: list = ["The capital city of France is".split()]
        self.lock = threading.Lock()

    def _shrinking_batch_fault(self, peak: int, running: int) -> None:
        """Fault crash_shrinking_batch: with speculative decoding and CUDA graphs, the server dies replaying the graph
        of batch size 1 once a batch of at least SGLANG_STANDIN_CRASH_BATCH (default 8) requests has shrunk to one
        (the known crash pattern of CUDA-graph replay in speculative decoding; smaller batches never trigger it)."""
        if (running == 1 and self.spec and not self.args.disable_cuda_graph
                and peak >= int(env_float("SGLANG_STANDIN_CRASH_BATCH", 8))):
            crash("cuda_graph_runner", f"CUDA error: an illegal memory access was encountered replaying the CUDA "
                                       f"graph of batch size 1 after the batch shrank from {peak} (stand-in fault "
                                       f"crash_shrinking_batch)")

    def cached_prefix(self, text: str, ptoks: int) -> int:
        """The radix cache: prompt tokens shared with an earlier prompt (at most all but the last one)."""
        words = text.split()
        with self.lock:
            best = 0
            for seen in self.seen_prompts:
                n = 0
                for a, b in zip(seen, words):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self.seen_prompts.append(words)
            del self.seen_prompts[:-256]
        cached = max(0, min(best, ptoks - 1))
        self.metrics.cached(cached)
        return cached

    def generate(self, decode: Decode, prompt_tokens: int, cached: int = 0) -> Iterator[list]:
        """Yield the decode's token groups at the configured pace; its steps count in the spec totals before the
        last group goes out (a client that saw its request finish finds it in /server_info), and in /metrics
        (metrics.py: the prefill, each decode step, the finished request)."""
        last = len(decode.groups) - 1
        started = prev = time.monotonic()
        tokens = kv = 0
        try:
            for i, group in enumerate(self.timing.stream(decode.groups, prompt_tokens)):
                now = time.monotonic()
                tokens += len(group)
                if i == 0:
                    forward = self.timing.ttft + self.timing.prefill * prompt_tokens
                    kv = prompt_tokens
                    self.metrics.prefill(prompt_tokens, cached, max(0.0, now - started - forward), forward)
                    self.metrics.first_token(now - started)
                else:
                    kv += len(group)
                    step = decode.steps[i - 1] if i - 1 < len(decode.steps) else 0
                    self.metrics.decode_step(len(group), step, now - prev, self.timing.running)
                if i == last:
                    for step in decode.steps[i:]:  # a step whose only token was the hidden EOS
                        self.metrics.decode_step(0, step, None, self.timing.running)
                    self.count_steps(decode.steps)
                    self.metrics.finished(prompt_tokens, tokens, time.monotonic() - started)
                prev = now
                yield group
        finally:
            self.metrics.release(kv)

    def count_steps(self, steps: list) -> None:
        with self.lock:
            self.spec_tokens += sum(steps)
            self.spec_steps += len(steps)

    def avg_accept_length(self) -> Optional[float]:
        """internal_states[0].avg_spec_accept_length: verify-step tokens over verify steps since start (the
        warmup included), None before any; like the scheduler's spec_total_num_accepted_tokens / _forward_ct."""
        with self.lock:
            return self.spec_tokens / self.spec_steps if self.spec and self.spec_steps else None

    def warmed_up(self) -> None:
        """Count SGLang's warmup request (WARMUP_TOKENS of WARMUP_PROMPT, no early stop), then serve."""
        steps = self.spec.schedule(WARMUP_TOKENS, engine.text_class(WARMUP_PROMPT)) if self.spec else []
        if self.spec:
            self.count_steps(steps)
        self.metrics.warmup(len(WARMUP_PROMPT.split()), WARMUP_TOKENS, steps)
        self.ready = True
