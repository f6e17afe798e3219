# -*- coding: utf-8 -*-
"""GPU power during a benchmark cell, sampled on the target (stdlib only).

PowerSampler runs gpu/nvidia_smi.py's power query (`nvidia-smi --query-gpu=index,power.draw,power.limit
--format=csv,noheader,nounits`, the one home of that argv) in a thread every `interval` seconds while a cell runs.
Each sample is the sum of power.draw over the GPUs the server uses (gpu_count: the server's tp x dp from its argv,
else every GPU listed; the first gpu_count by index). summary(duration, output_tokens) keeps the samples of the
measured window (the last `duration` seconds before stop, so the warmup is left out) and gives the row's fields:

  power_mean_w, power_max_w   mean and max of the per-sample sums (W)
  power_limit_w               the sum of the GPUs' power.limit (W)
  power_gpus                  how many GPUs were summed
  power_samples               samples in the window
  output_tokens_per_joule     output tokens / (power_mean_w x duration)
  power_reason                why the figures are None ("" when measured): no nvidia-smi, a failing query, no sample

A host without nvidia-smi, or one whose query fails, gets None figures with the reason: never a crash.
"""
from __future__ import annotations

import threading
import time

from ansible.module_utils.gpu.nvidia_smi import BINARY, NvidiaSmiError, NvidiaSmiParseError, query_power

FIELDS = ("power_mean_w", "power_max_w", "power_limit_w", "power_gpus", "power_samples", "output_tokens_per_joule",
          "power_reason")
# real 0.5.11 sglang/srt/server_args.py ServerArgs.add_cli_args: "--tensor-parallel-size"/"--tp-size" and
# "--data-parallel-size"/"--dp-size", both default 1.
TP_FLAGS = ("--tensor-parallel-size", "--tp-size")
DP_FLAGS = ("--data-parallel-size", "--dp-size")


def _flag_int(argv, names):
    for i, arg in enumerate(argv or []):
        name, eq, value = arg.partition("=")
        if name in names:
            raw = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                return int(raw)
            except ValueError:
                return None
    return None


def server_gpu_count(argv):
    """GPUs the server's argv asks for: tp x dp (TP_FLAGS, DP_FLAGS); None when the argv names neither (then every
    listed GPU counts)."""
    tp, dp = _flag_int(argv, TP_FLAGS), _flag_int(argv, DP_FLAGS)
    if tp is None and dp is None:
        return None
    return max(tp or 1, 1) * max(dp or 1, 1)


def spec_problems(spec):
    """Problems with a bench spec's power_interval (seconds between samples; 0 = off)."""
    value = spec.get("power_interval", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        return ["power_interval must be a number of seconds >= 0 (0 = off), got %r" % (value,)]
    return []


def empty(reason):
    """The row's power fields when nothing was measured, with the reason."""
    out = {k: None for k in FIELDS}
    out["power_reason"] = reason
    return out


class PowerSampler:
    """Samples GPU power in a daemon thread between start() and stop(); summary() gives the row's fields."""

    def __init__(self, interval=1.0, gpu_count=None, nvidia_smi=BINARY, run=None, clock=time.monotonic):
        self.interval = max(float(interval), 0.05)
        self.gpu_count = gpu_count
        self.nvidia_smi = nvidia_smi
        self.run = run
        self.clock = clock
        self.samples = []          # (t, sum draw W, sum limit W, gpus)
        self.reason = ""
        self.stopped_at = None
        self._stop = threading.Event()
        self._thread = None

    def sample(self):
        """One query; False (with self.reason set) when sampling cannot go on."""
        try:
            gpus = query_power(self.nvidia_smi, self.run, timeout=max(self.interval * 5, 5.0))
        except (NvidiaSmiError, NvidiaSmiParseError) as exc:
            self.reason = "nvidia-smi power query failed: %s" % str(exc)[:300]
            return False
        if gpus is None:
            self.reason = "no nvidia-smi on the host"
            return False
        used = gpus[:self.gpu_count] if self.gpu_count else gpus
        draws = [g["draw_w"] for g in used if g["draw_w"] is not None]
        if not used or len(draws) < len(used):
            self.reason = "nvidia-smi reports no power.draw for %s" % (
                "any GPU" if not used else "GPU(s) %s" % ", ".join(str(g["index"]) for g in used
                                                                   if g["draw_w"] is None))
            return False
        limits = [g["limit_w"] for g in used]
        limit = sum(limits) if all(v is not None for v in limits) else None
        self.samples.append((self.clock(), sum(draws), limit, len(used)))
        return True

    def _loop(self):
        while not self._stop.is_set():
            if not self.sample():
                return
            self._stop.wait(self.interval)

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="power-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.stopped_at = self.clock()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(self.interval * 5, 10.0))
        return self

    def summary(self, duration, output_tokens):
        """The row's power fields over the last `duration` seconds before stop() (all samples when unknown)."""
        samples = self.samples
        if duration and self.stopped_at is not None:
            window = [s for s in samples if s[0] >= self.stopped_at - duration - self.interval]
            samples = window or samples[-1:]
        if not samples:
            return empty(self.reason or "no power sample during the cell (shorter than the sampling interval?)")
        draws = [s[1] for s in samples]
        mean_w = sum(draws) / len(draws)
        out = {"power_mean_w": round(mean_w, 2), "power_max_w": round(max(draws), 2),
               "power_limit_w": samples[-1][2], "power_gpus": samples[-1][3], "power_samples": len(samples),
               "output_tokens_per_joule": None, "power_reason": self.reason}
        if duration and mean_w > 0 and output_tokens is not None:
            out["output_tokens_per_joule"] = round(output_tokens / (mean_w * duration), 4)
        return out


def measure(fn, interval, gpu_count=None, nvidia_smi=BINARY, run=None):
    """Run fn() (one cell: returns its row dict with duration and total_output_tokens) with a PowerSampler around
    it; the row gets the power fields. interval <= 0: not sampled, said so."""
    if not interval or interval <= 0:
        row = fn()
        row.update(empty("power sampling off (interval 0)"))
        return row
    sampler = PowerSampler(interval, gpu_count, nvidia_smi, run).start()
    try:
        row = fn()
    finally:
        sampler.stop()
    row.update(sampler.summary(row.get("duration"), row.get("total_output_tokens")))
    return row
