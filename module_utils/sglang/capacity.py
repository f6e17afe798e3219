"""Whether a ready SGLang server's KV cache pool can hold the longest request it accepts (stdlib only).

A server is "ready" whatever the size of its KV pool. SGLang sizes the pool at start from `--mem-fraction-static` of
the GPU's total memory minus what is already in use, so memory held by another process (a leftover server, a second
one sharing the GPU) shrinks it silently: on the H200 (real 0.5.11, tests/fixtures/real_sglang/README.md) a DFLASH
server started beside two others got a 284-token pool, reported ready, answered every prompt longer than the pool
with 400 and died under a batch of 16 ("Out of memory. Try to lower your batch size."). A model with a long context
on small GPUs (Kimi K2.6 on 8x RTX PRO 6000) can also be left with a pool shorter than one full-context request.

real 0.5.11's /server_info (sglang/srt/entrypoints/http_server.py get_server_info: the server args plus the
scheduler's internal state) carries `max_total_num_tokens` (the pool, in tokens) and `max_req_input_len` (the longest
input it accepts: the context length minus a small reserve); both recorded in tests/fixtures/real_sglang/0.5.11.
"""
from __future__ import annotations

from ansible.module_utils.sglang import api as sglang_http


def judge(info, min_tokens=None):
    """{ok, pool_tokens, max_input_tokens, floor, floor_from, why} for /server_info's body.

    min_tokens: the floor in tokens; None = the server's own max_req_input_len (one longest request must fit);
    0 = no floor (the check only reports)."""
    info = info if isinstance(info, dict) else {}
    pool, longest = info.get("max_total_num_tokens"), info.get("max_req_input_len")
    out = {"ok": False, "pool_tokens": pool, "max_input_tokens": longest, "floor": None, "floor_from": "", "why": ""}
    if not isinstance(pool, int) or isinstance(pool, bool):
        out["why"] = "/server_info has no max_total_num_tokens (got %r): the pool size is unknown" % (pool,)
        return out
    if min_tokens is None:
        if not isinstance(longest, int) or isinstance(longest, bool):
            out["why"] = "/server_info has no max_req_input_len to size the floor from (got %r)" % (longest,)
            return out
        out["floor"], out["floor_from"] = longest, "the server's max_req_input_len"
    else:
        out["floor"], out["floor_from"] = int(min_tokens), "the setting"
    if pool < out["floor"]:
        out["why"] = ("the KV cache pool holds %d tokens, fewer than %d (%s): a long request is refused and a batch can "
                      "run the pool out (SGLang: 'Out of memory. Try to lower your batch size.'). The pool is sized "
                      "from --mem-fraction-static of the GPU minus the memory already in use at start: check for "
                      "another process on the GPU, raise --mem-fraction-static, or lower --context-length"
                      % (pool, out["floor"], out["floor_from"]))
        return out
    out["ok"] = True
    return out


def check(base_url, api_key=None, min_tokens=None, timeout=10.0):
    """judge() of the server's /server_info; a failed read is a failed check with the server's answer."""
    resp = sglang_http.call(base_url, "/server_info", api_key=api_key, timeout=timeout)
    if not resp.ok:
        out = judge({}, min_tokens)
        out["why"] = "GET /server_info: %s" % resp.describe()
        return out
    try:
        body = resp.json()
    except ValueError as exc:
        out = judge({}, min_tokens)
        out["why"] = "GET /server_info did not answer JSON: %s" % exc
        return out
    return judge(body, min_tokens)
