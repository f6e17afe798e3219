"""The stand-in's answers (lab/sglang_standin/sglang_standin/engine.py): the wrong_text fault is fluent, wrong text
that the degenerate-output check passes and only the lossless gate (a comparison with the baseline) catches."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))

from sglang_standin import engine  # noqa: E402
from sglang_standin.local import LocalServer  # noqa: E402

from ansible.module_utils.sglang import api as sglang_http  # noqa: E402
from ansible.module_utils.sglang.degenerate import degenerate  # noqa: E402

PROMPTS = ["Tell me about the sea.", "Write a short poem about winter.", "def f(x): return x", "1001 2002 3003 4004",
           "Explain how a lighthouse works in detail, please."] + [f"prompt number {i} about anything" for i in range(40)]


@pytest.mark.parametrize("max_tokens", [8, 64, 256, 512])
def test_wrong_text_differs_from_token_3_and_is_not_degenerate(max_tokens):
    for prompt in PROMPTS:
        right = engine.tokens_for(prompt, max_tokens)
        wrong = engine.tokens_for(prompt, max_tokens, wrong=True)
        assert len(wrong) == len(right) == max_tokens
        assert wrong[:engine.WRONG_TEXT_AFTER] == right[:engine.WRONG_TEXT_AFTER]
        assert wrong[engine.WRONG_TEXT_AFTER] != right[engine.WRONG_TEXT_AFTER], prompt
        if max_tokens <= 256:     # the right pseudo-text draws from ~60 words: at 512 it counts as repetition
            assert degenerate("".join(right)) is None
        assert degenerate("".join(wrong)) is None, (prompt, degenerate("".join(wrong)))


def test_wrong_text_keeps_known_answers_so_the_smoke_passes():
    for prompt in ("What is the capital of France?", "What is 12 + 30?", "Repeat: blue bird"):
        assert engine.tokens_for(prompt, 16, wrong=True) == engine.tokens_for(prompt, 16)


def test_wrong_text_fault_on_generate():
    fast = {"SGLANG_STANDIN_LOAD_S": "0.3", "SGLANG_STANDIN_WARMUP_S": "0.3", "SGLANG_STANDIN_ITL_MS": "1"}
    base = ["--model-path", "/srv/models/Kimi-K2.6", "--host", "127.0.0.1"]
    body = {"text": "Tell me about the sea.", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    with LocalServer(base, env=dict(fast, SGLANG_STANDIN_FAULT="wrong_text")) as srv:
        srv.wait_for_line("fired up")
        out = json.loads(sglang_http.call(srv.url, "/generate", "POST", body).body)
    assert out["text"] == "".join(engine.tokens_for(body["text"], 8, wrong=True))
    assert out["text"] != "".join(engine.tokens_for(body["text"], 8)) and degenerate(out["text"]) is None
