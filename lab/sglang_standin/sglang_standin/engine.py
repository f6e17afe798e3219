"""Deterministic "model" of the stand-in: known answers for smoke prompts, pseudo-text otherwise, a speculative
acceptance model (how many tokens a verify step yields, per prompt class and drafter shape: README.md, "Speculative
decoding"), and token timing (TTFT, ITL growing with the number of running requests) so benchmarks measure
something realistic."""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from sglang_standin.logs import log

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
# The wrong_text fault's vocabulary: fluent-looking words of another story (with WORDS, about 130 distinct words, so
# a long wrong answer is no repetition the degenerate-output check would flag).
WRONG_WORDS = WORDS + (
    "a baker in the valley folded dough before dawn and carried warm loaves past orchards vineyards and quiet "
    "schools while children chased kites over meadows beneath violet clouds farmers mended fences painters "
    "sketched cathedrals musicians tuned violins librarians sorted maps of forgotten islands and old sailors "
    "argued about tides comets lanterns winter festivals honey saffron pepper silk and the price of wool"
).split()
# wrong_text: the first tokens of a pseudo-text answer are right, the ones from this position on are wrong.
WRONG_TEXT_AFTER = 3
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


def tokens_for(prompt: str, max_tokens: int, garbage: bool = False, wrong: bool = False) -> list[str]:
    """The output as a list of 'tokens' (each with its leading space), deterministic per prompt. garbage: U+FFFD and
    a loop; wrong (the wrong_text fault): known answers stay right (the smoke passes), pseudo-text turns into other
    fluent, non-repeating words from token WRONG_TEXT_AFTER on (a lossy config the degenerate check cannot see)."""
    max_tokens = max(1, int(max_tokens))
    if garbage:
        return (["\ufffd"] + [" the"] * (max_tokens - 1))[:max_tokens]
    known = answer(prompt)
    if known is not None:
        parts = known.split(" ")
        return [p if i == 0 else " " + p for i, p in enumerate(parts)][:max_tokens]
    right = _pseudo_text(prompt, max_tokens, WORDS)
    if not wrong:
        return right
    other = _pseudo_text("wrong text " + prompt, max_tokens, WRONG_WORDS)
    out = right[:WRONG_TEXT_AFTER]
    for i in range(WRONG_TEXT_AFTER, max_tokens):
        word = other[i].lstrip()
        if i == WRONG_TEXT_AFTER and word == right[i].lstrip():
            word = WRONG_WORDS[(WRONG_WORDS.index(word) + 1) % len(WRONG_WORDS)]
        out.append(word if i == 0 else " " + word)
    return out


def _pseudo_text(prompt: str, max_tokens: int, words: list) -> list[str]:
    """max_tokens words drawn from `words` by a generator seeded with the prompt's hash."""
    seed = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    out = []
    for i in range(max_tokens):
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        word = words[(seed >> 33) % len(words)]
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


# ---- speculative acceptance model (the stand-in's configured truth; README.md, "Speculative decoding")

CLASSES = ("random-ids", "code", "math", "repetitive", "prose")
# Per-draft-token acceptance probability per prompt class (SGLANG_STANDIN_ACCEPT_P overrides, JSON class -> p).
DEFAULT_ACCEPT_P = {"random-ids": 0.05, "prose": 0.55, "math": 0.65, "code": 0.75, "repetitive": 0.85}
CHAIN_ALGORITHMS = ("DFLASH", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# speculative_num_draft_tokens when neither --speculative-num-draft-tokens nor the DFLASH block size is set: a DFlash
# drafter's config has block_size 16 (DDTREE drafts DFLASH blocks too); EAGLE-style defaults resolve to 4.
DEFAULT_DRAFT_TOKENS = {"DFLASH": 16, "DDTREE": 16}
FALLBACK_DRAFT_TOKENS = 4
DDTREE_DEFAULT_BUDGET = 8
DDTREE_DEFAULT_TOPK = 4

_INTEGER = re.compile(r"[+-]?\d+")
# Code: syntax markers count 2 each, programming words 1 each; a prompt is code from 2 points on.
CODE_SYNTAX = tuple(re.compile(p, re.MULTILINE) for p in (
    r"```", r"#include\b", r"\bdef \w+\s*\(", r"^\s*(?:from [\w.]+ )?import [\w.]+", r"\};", r"[{}]", r"=>",
    r"\breturn\s+[^\s.?!]+\s*;", r"\b\w+\([^()\n]*\)\s*[:;{]", r"\b(?:console\.log|printf|println|print)\("))
CODE_WORDS = re.compile(
    r"(?<![\w+#])(?:python|javascript|typescript|java|c\+\+|c#|rust|golang|sql|bash|function|functions|code|"
    r"script|program|programming|compile|compiler|regex|json|api|class|method|variable|return|debug|implement|"
    r"snippet|algorithm|array|refactor)(?![\w+#])")
# Math: syntax markers (operators between numbers, "3x +", "x = 4", "x^2") count 2 each, math words 1 each, and a
# prompt of mostly digits and operators 2 more; a prompt is math from 2 points on (code wins a tie).
MATH_SYNTAX = tuple(re.compile(p) for p in (
    r"\d\s*[+*^×÷=<>]\s*\(?-?\d", r"\d\s+[-/]\s+\d", r"\b\d+[a-z]\s*[-+*/^=]", r"\b[a-z]\s*=\s*-?\d",
    r"\b[a-z]\^\d"))
MATH_WORDS = re.compile(
    r"\b(?:solve|equation|equations|compute|calculate|integral|derivative|sum|product|prove|theorem|algebra|"
    r"probability|factorial|prime|simplify|evaluate|fraction|percent|average|multiply|divide|polynomial|matrix|"
    r"square root|how many)\b")
MATH_CHARS = set("0123456789+-*/=^×÷()%<>")
REPETITIVE_MIN_WORDS = 24
REPETITIVE_MAX_TRIGRAM_RATIO = 0.5


def _code_score(low: str) -> int:
    return 2 * sum(1 for rx in CODE_SYNTAX if rx.search(low)) + len(set(CODE_WORDS.findall(low)))


def _math_score(low: str) -> int:
    chars = [c for c in low if not c.isspace()]
    dense = bool(chars) and sum(c in MATH_CHARS for c in chars) / len(chars) >= 0.3
    return (2 * sum(1 for rx in MATH_SYNTAX if rx.search(low)) + len(set(MATH_WORDS.findall(low)))
            + (2 if dense else 0))


def _repetitive(low: str) -> bool:
    """A long prompt that repeats itself: few distinct word trigrams (distinct words alone would flag long prose)."""
    words = re.findall(r"\w+", low)
    if len(words) < REPETITIVE_MIN_WORDS:
        return False
    trigrams = list(zip(words, words[1:], words[2:]))
    return len(set(trigrams)) / len(trigrams) <= REPETITIVE_MAX_TRIGRAM_RATIO


def text_class(text: str) -> str:
    """The prompt's class for the acceptance model: random-ids (token ids, as prompt_of renders them), repetitive,
    code, math, else prose."""
    items = text.split()
    if items and all(_INTEGER.fullmatch(w) for w in items):
        return "random-ids"
    low = text.lower()
    if _repetitive(low):
        return "repetitive"
    code, maths = _code_score(low), _math_score(low)
    if code >= 2 and code >= maths:
        return "code"
    if maths >= 2:
        return "math"
    return "prose"


def accept_probabilities() -> dict:
    """Class -> per-draft-token acceptance probability: the defaults, updated from SGLANG_STANDIN_ACCEPT_P."""
    out = dict(DEFAULT_ACCEPT_P)
    raw = os.environ.get("SGLANG_STANDIN_ACCEPT_P", "")
    if not raw:
        return out
    try:
        given = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"SGLANG_STANDIN_ACCEPT_P is not JSON: {exc}") from None
    if not isinstance(given, dict) or not set(given) <= set(CLASSES) or \
            not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in given.values()):
        raise ValueError(f"SGLANG_STANDIN_ACCEPT_P must map classes of {CLASSES} to numbers in [0, 1], got {raw!r}")
    out.update({k: float(v) for k, v in given.items()})
    return out


def runtime_accept_p() -> dict:
    """The run-time acceptance knob: JSON {class: p} (or {"*": p} for every class) read, on every request, from the
    file SGLANG_STANDIN_ACCEPT_FILE names; it wins over SGLANG_STANDIN_ACCEPT_P and SGLANG_STANDIN_ACCEPT_LENGTH for
    the classes it names. No variable, no file or an empty file: {} (the start-up model). A file that is not such
    JSON is logged and ignored (write it atomically: write a temporary file, then rename it)."""
    path = os.environ.get("SGLANG_STANDIN_ACCEPT_FILE", "")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            raw = fh.read().strip()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log(f"stand-in acceptance file {path}: {exc}; ignored")
        return {}
    if not raw:
        return {}
    try:
        given = json.loads(raw)
    except ValueError:
        given = None
    if not isinstance(given, dict) or not set(given) <= set(CLASSES) | {"*"} or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in given.values()):
        log(f"stand-in acceptance file {path}: not JSON mapping classes of {CLASSES} (or *) to p in [0, 1]: "
            f"{raw[:200]!r}; ignored")
        return {}
    out = {k: float(given["*"]) for k in CLASSES} if "*" in given else {}
    out.update({k: float(v) for k, v in given.items() if k != "*"})
    return out


def forced_accept_length() -> Optional[float]:
    """SGLANG_STANDIN_ACCEPT_LENGTH (legacy): one accept length for every class, or None."""
    raw = os.environ.get("SGLANG_STANDIN_ACCEPT_LENGTH", "")
    return float(raw) if raw else None


def _geometric(x: float, n: int) -> float:
    return sum(x ** i for i in range(n + 1))


def ddtree_width_depth(budget: Optional[int], topk: Optional[int]) -> tuple:
    """(children tried per depth, depth) of a DDTREE tree: min(topk, budget) and budget // that (at least 1)."""
    budget = max(1, int(budget or DDTREE_DEFAULT_BUDGET))
    width = max(1, min(int(topk or DDTREE_DEFAULT_TOPK), budget))
    return width, max(1, budget // width)


def draft_tokens(algorithm: str, num_draft_tokens: Optional[int] = None) -> int:
    """Tokens per verify step of a chain drafter (its draft length + 1): the given value or the default."""
    return max(1, int(num_draft_tokens or DEFAULT_DRAFT_TOKENS.get(algorithm.upper(), FALLBACK_DRAFT_TOKENS)))


def expected_accept_length(text_class: str, algorithm: Optional[str], num_draft_tokens: Optional[int] = None,
                           budget: Optional[int] = None, topk: Optional[int] = None,
                           p: Optional[float] = None) -> float:
    """Expected tokens per verify step (bonus token included). Chain drafters with L = num_draft_tokens - 1:
    sum_{i=0..L} p^i. DDTREE: q = 1 - (1-p)^width per depth, sum_{i=0..depth} q^i. NONE: 1. p defaults to the
    class's probability; without p, SGLANG_STANDIN_ACCEPT_LENGTH (when set) is the answer for every class."""
    algo = (algorithm or "NONE").upper()
    if algo == "NONE":
        return 1.0
    if p is None:
        p = runtime_accept_p().get(text_class)
    if p is None:
        forced = forced_accept_length()
        if forced is not None:
            return forced
        p = accept_probabilities()[text_class]
    if algo == "DDTREE":
        width, depth = ddtree_width_depth(budget, topk)
        return _geometric(1 - (1 - p) ** width, depth)
    return _geometric(p, draft_tokens(algo, num_draft_tokens) - 1)


def step_sizes(n_tokens: int, accept_length: float, max_step: Optional[int] = None) -> list[int]:
    """Tokens per verify step after the first (prefill) token: round(n / E) steps (at least enough for max_step
    tokens a step), the n - 1 tokens spread evenly over them, so n / len(steps) is E as closely as integers allow."""
    rest = int(n_tokens) - 1
    if rest <= 0:
        return []
    k = max(1, round(n_tokens / max(1.0, accept_length)))
    if max_step:
        k = max(k, math.ceil(rest / max_step))
    k = min(k, rest)
    return [(i + 1) * rest // k - i * rest // k for i in range(k)]


@dataclass(frozen=True)
class SpecShape:
    """A server's speculative decoding shape (algorithm, draft tokens per step, DDTREE budget and topk cap)."""
    algorithm: str
    num_draft_tokens: int
    budget: Optional[int] = None
    topk: Optional[int] = None

    @classmethod
    def resolve(cls, algorithm: Optional[str], num_draft_tokens: Optional[int] = None,
                budget: Optional[int] = None, topk: Optional[int] = None) -> Optional["SpecShape"]:
        """The shape with defaults filled in; None without speculative decoding."""
        algo = (algorithm or "NONE").upper()
        if algo == "NONE":
            return None
        if algo != "DDTREE":
            return cls(algo, draft_tokens(algo, num_draft_tokens))
        width, _depth = ddtree_width_depth(budget, topk)
        return cls(algo, draft_tokens(algo, num_draft_tokens), int(budget or DDTREE_DEFAULT_BUDGET), width)

    @property
    def max_step(self) -> int:
        """Most tokens one verify step yields: the accepted path plus the bonus token."""
        if self.algorithm == "DDTREE":
            return ddtree_width_depth(self.budget, self.topk)[1] + 1
        return self.num_draft_tokens

    @property
    def drafts_per_step(self) -> int:
        """Draft tokens proposed per verify step (meta_info spec_proposed_drafts / spec_verify_ct)."""
        return self.budget if self.algorithm == "DDTREE" else self.num_draft_tokens - 1

    @property
    def verify_width(self) -> int:
        """Tokens the target model verifies per step (what a step's batching cost scales with)."""
        return self.budget + 1 if self.algorithm == "DDTREE" else self.num_draft_tokens

    def expected(self, klass: str) -> float:
        return expected_accept_length(klass, self.algorithm, self.num_draft_tokens, self.budget, self.topk)

    def schedule(self, n_tokens: int, klass: str) -> list[int]:
        """The verify steps of an n-token generation of a prompt of that class (a forced accept length above the
        shape's max_step widens the steps rather than miss its figure)."""
        e = self.expected(klass)
        return step_sizes(n_tokens, e, max(self.max_step, math.ceil(e)))


# ---- timing

class Timing:
    """Token timing with a batch-size dependent ITL; limits concurrent generations to max_running_requests.
    Autoregressive (verify_width 0): a token every itl + slope*(running-1). Speculative: a verify step every
    itl*(1+draft_cost) + slope*(running-1)*verify_width, yielding that step's tokens at once."""

    def __init__(self, ttft_ms: float, itl_ms: float, itl_slope_ms: float, prefill_us_per_token: float,
                 max_running: int, verify_width: int = 0, draft_cost: float = 0.0, on_shrink=None):
        self.ttft = ttft_ms / 1000.0
        self.itl = itl_ms / 1000.0
        self.slope = itl_slope_ms / 1000.0
        self.prefill = prefill_us_per_token / 1e6
        self.verify_width = verify_width
        self.draft_cost = draft_cost
        self.slots = threading.BoundedSemaphore(max(1, max_running))
        self.lock = threading.Lock()
        self.running = 0
        self.waiting = 0  # requests waiting for a running slot (SGLang's waiting queue)
        self.peak = 0  # the largest batch since the server was last idle
        self.on_shrink = on_shrink  # called (peak, running) each time a request leaves a batch
        self.generated = 0
        self.started = time.monotonic()

    def step_seconds(self, running: int) -> float:
        """Duration of one decode forward (a token, or a verify step) with that many requests running."""
        if not self.verify_width:
            return self.itl + self.slope * (running - 1)
        return self.itl * (1 + self.draft_cost) + self.slope * (running - 1) * self.verify_width

    def stream(self, groups: list[list[str]], prompt_tokens: int) -> Iterator[list[str]]:
        """Yield token groups at the configured pace (the first after TTFT, then one per forward), holding one
        running-request slot (counted as waiting until a slot is free)."""
        with self.lock:
            self.waiting += 1
        try:
            self.slots.acquire()
        finally:
            with self.lock:
                self.waiting -= 1
        try:
            with self.lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            try:
                next_at = time.monotonic() + self.ttft + self.prefill * prompt_tokens
                for group in groups:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    with self.lock:
                        self.generated += len(group)
                        running = self.running
                    yield group
                    next_at = max(next_at, time.monotonic()) + self.step_seconds(running)
            finally:
                with self.lock:
                    self.running -= 1
                    peak, running = self.peak, self.running
                    if running == 0:
                        self.peak = 0
                if self.on_shrink is not None:
                    self.on_shrink(peak, running)
        finally:
            self.slots.release()

    def throughput(self) -> float:
        return self.generated / max(1e-6, time.monotonic() - self.started)
