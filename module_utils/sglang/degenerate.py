"""Whether a model's generated text is degenerate: empty, U+FFFD replacement characters, or a repetition loop.

The one detector both judges use: the smoke's known-answer check (sglang/smoke.py) and the bench's sampled outputs
(loadgen), so a config the smoke passes is held to the same rule under load. Thresholds were set on real SGLang
0.5.11 outputs (tests/fixtures/real_sglang/), not on the stand-in.
"""
from __future__ import annotations


def degenerate(text: str, min_tokens_for_loop: int = 12, max_repeats: int = 6, max_unit: int = 20) -> str | None:
    """Why the text is degenerate, or None. Loops: a unit of n words repeated back to back - 6 times for n <= 2
    (max_repeats), 4 times for n <= 6, 3 times up to max_unit words (real SGLang with a 135M model looped on a
    6-word line, "Abe aria, aria of the sea,", that a 4-word window missed) - or, for longer texts, fewer than 20%
    distinct words."""
    if not text or not text.strip():
        return "empty output"
    if "\ufffd" in text:
        return f"{text.count(chr(0xFFFD))} replacement character(s) U+FFFD"
    words = text.split()
    if len(words) >= min_tokens_for_loop:
        for n in range(1, max_unit + 1):
            need = max_repeats if n <= 2 else 4 if n <= 6 else 3
            for i in range(0, len(words) - n * need + 1):
                gram = words[i:i + n]
                if all(words[i + k * n:i + (k + 1) * n] == gram for k in range(1, need)):
                    return f"repetition loop: {' '.join(gram)!r} repeated {need}+ times"
        if len(words) >= 40 and len(set(words)) / len(words) < 0.2:
            return f"repetition: only {len(set(words))} distinct words in {len(words)}"
    return None
