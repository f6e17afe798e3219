"""Known-answer smoke test of an SGLang server through its OpenAI-compatible API (stdlib only).

Each prompt is sent at temperature 0; its answer must match `expect` (a case-insensitive regex) and must not
be degenerate (empty, U+FFFD replacement characters, repetition loops). One streamed generation measures
decode tok/s and TTFT; `/server_info` gives the speculative accept length.
"""
from __future__ import annotations

import re

from ansible.module_utils.sglang import api as sglang_http
from ansible.module_utils.sglang.degenerate import degenerate

DEFAULT_PROMPTS = (
    {"prompt": "What is the capital of France? Answer with one word.", "expect": r"\bParis\b"},
    {"prompt": "What is 17 + 25? Answer with only the number.", "expect": r"\b42\b"},
    {"prompt": "Repeat exactly: blue harbour lantern", "expect": r"blue harbour lantern"},
)
THROUGHPUT_PROMPT = "Write a short story about a lighthouse keeper and a storm."


def chat_once(base_url: str, model: str, prompt: str, api_key: str | None, max_tokens: int, timeout: float):
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
               "max_tokens": max_tokens}
    resp = sglang_http.call(base_url, "/v1/chat/completions", "POST", payload, api_key=api_key, timeout=timeout)
    if not resp.ok:
        return None, resp.describe()
    try:
        return resp.json()["choices"][0]["message"]["content"] or "", None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return None, f"unexpected reply {resp.body[:200]!r}: {exc}"


def run(base_url: str, model: str, api_key: str | None = None, prompts=DEFAULT_PROMPTS, max_tokens: int = 32,
        throughput_tokens: int = 128, timeout: float = 120.0, min_tok_s: float = 0.0) -> dict:
    """Returns {"ok", "failures": [...], "answers": [...], "tok_s", "ttft_s", "accept_length"}."""
    answers, failures = [], []
    for item in prompts:
        text, error = chat_once(base_url, model, item["prompt"], api_key, int(item.get("max_tokens", max_tokens)),
                                timeout)
        entry = {"prompt": item["prompt"], "expect": item.get("expect", ""), "output": text, "error": error}
        if error:
            entry["verdict"] = f"request failed: {error}"
        elif degenerate(text) and not item.get("allow_degenerate"):
            entry["verdict"] = degenerate(text)
        elif item.get("expect") and not re.search(item["expect"], text, re.IGNORECASE):
            entry["verdict"] = f"answer does not match {item['expect']!r}"
        else:
            entry["verdict"] = "ok"
        answers.append(entry)
        if entry["verdict"] != "ok":
            failures.append(f"{item['prompt']!r} -> {text!r}: {entry['verdict']}")

    result = {"answers": answers, "tok_s": None, "ttft_s": None, "completion_tokens": None, "accept_length": None,
              "throughput_output": None}
    if throughput_tokens > 0:
        st = sglang_http.stream(base_url, "/v1/chat/completions", {
            "model": model, "messages": [{"role": "user", "content": THROUGHPUT_PROMPT}], "temperature": 0,
            "max_tokens": throughput_tokens, "stream_options": {"include_usage": True}}, api_key=api_key,
            timeout=timeout)
        result["throughput_output"] = st.text[:500]
        if st.error:
            failures.append(f"streamed generation failed: {st.error}")
        else:
            tokens = (st.usage or {}).get("completion_tokens") or st.chunks
            decode_time = st.elapsed - (st.ttft or 0.0)
            result.update(completion_tokens=tokens, ttft_s=round(st.ttft or 0.0, 4),
                          tok_s=round((tokens - 1) / decode_time, 2) if tokens > 1 and decode_time > 0 else None)
            why = degenerate(st.text)
            if why:
                failures.append(f"streamed generation is degenerate: {why}: {st.text[:200]!r}")
            if min_tok_s and (result["tok_s"] or 0) < min_tok_s:
                failures.append(f"decode speed {result['tok_s']} tok/s below the minimum {min_tok_s}")
    info = sglang_http.call(base_url, "/server_info", api_key=api_key, timeout=timeout)
    if info.ok:
        try:
            result["accept_length"] = sglang_http.accept_length(info.json())
        except ValueError:
            pass
    result["failures"] = failures
    result["ok"] = not failures
    return result
