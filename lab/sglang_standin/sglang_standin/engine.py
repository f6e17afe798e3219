"""Deterministic "model" of the stand-in: known answers for smoke prompts, pseudo-text otherwise, and token
timing (TTFT, ITL growing with the number of running requests) so benchmarks measure something realistic."""
from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Iterator, Optional

CAPITALS = {
    "france": "Paris", "germany": "Berlin", "japan": "Tokyo", "italy": "Rome", "spain": "Madrid",
    "canada": "Ottawa", "australia": "Canberra", "egypt": "Cairo", "kenya": "Nairobi", "peru": "Lima",
}
WORDS = (
    "the lighthouse keeper counted waves while ships passed quietly through fog and harbour lights answered "
    "with slow amber pulses across cold water where gulls circled above stone piers and nets dried under "
    "grey morning skies as engines hummed below decks carrying grain timber copper letters and hopeful "
    "travellers toward distant cities built beside rivers bridges markets gardens towers"
).split()
ARITH = re.compile(r"(-?\d+)\s*(\+|-|\*|x|×|times|plus|minus)\s*(-?\d+)")
REPEAT = re.compile(r"repeat(?: exactly| after me| this)?\s*:\s*(.+)", re.IGNORECASE | re.DOTALL)


def answer(prompt: str) -> Optional[str]:
    """The known answer for a smoke-style prompt, or None."""
    m = REPEAT.search(prompt)
    if m:
        return m.group(1).strip().strip('"').strip()
    low = prompt.lower()
    if "capital" in low:
        for country, city in CAPITALS.items():
            if country in low:
                return city
    m = ARITH.search(low)
    if m:
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        if op in ("+", "plus"):
            return str(a + b)
        if op in ("-", "minus"):
            return str(a - b)
        return str(a * b)
    return None


def tokens_for(prompt: str, max_tokens: int, garbage: bool = False) -> list[str]:
    """The output as a list of 'tokens' (each with its leading space), deterministic per prompt."""
    max_tokens = max(1, int(max_tokens))
    if garbage:
        return (["\ufffd"] + [" the"] * (max_tokens - 1))[:max_tokens]
    known = answer(prompt)
    if known is not None:
        parts = known.split(" ")
        return [p if i == 0 else " " + p for i, p in enumerate(parts)][:max_tokens]
    seed = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    out = []
    for i in range(max_tokens):
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        word = WORDS[(seed >> 33) % len(WORDS)]
        out.append(word if i == 0 else " " + word)
    return out


def count_prompt_tokens(text: str) -> int:
    return max(1, len(text.split()))


def prompt_of(value) -> tuple:
    """(text, prompt token count) of a request's prompt: a string, a batch of strings (first one), or token ids
    (a list of ints, or a batch of such lists: the first), which count one token each as on the real server."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        value = value[0]
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return " ".join(map(str, value)), len(value)
    if isinstance(value, list):
        value = value[0] if value else ""
    text = str(value)
    return text, count_prompt_tokens(text)


class Timing:
    """Token timing with a batch-size dependent ITL; limits concurrent generations to max_running_requests."""

    def __init__(self, ttft_ms: float, itl_ms: float, itl_slope_ms: float, prefill_us_per_token: float,
                 max_running: int):
        self.ttft = ttft_ms / 1000.0
        self.itl = itl_ms / 1000.0
        self.slope = itl_slope_ms / 1000.0
        self.prefill = prefill_us_per_token / 1e6
        self.slots = threading.BoundedSemaphore(max(1, max_running))
        self.lock = threading.Lock()
        self.running = 0
        self.generated = 0
        self.started = time.monotonic()

    def stream(self, tokens: list[str], prompt_tokens: int) -> Iterator[str]:
        """Yield tokens at the configured pace (the first after TTFT), holding one running-request slot."""
        with self.slots:
            with self.lock:
                self.running += 1
            try:
                next_at = time.monotonic() + self.ttft + self.prefill * prompt_tokens
                for tok in tokens:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    with self.lock:
                        self.generated += 1
                        running = self.running
                    yield tok
                    next_at = max(next_at, time.monotonic()) + self.itl + self.slope * (running - 1)
            finally:
                with self.lock:
                    self.running -= 1

    def throughput(self) -> float:
        return self.generated / max(1e-6, time.monotonic() - self.started)
