"""Filters for the SGLang service: the ONE place that turns the structured server config into argv.

The unit template (ExecStart), the static validation rules (module_utils/sglang_rules.py) and the
target-side preflight (library/sglang_preflight.py gets the argv this produces) all go through here.

    sglang_argv(server, speculative, extra_args)  -> ["--model-path", "/srv/models/X", "--port", "30001", ...]
    sglang_exec_args(argv)                         -> one string, quoted for a systemd ExecStart= line
    sglang_environment(env)                        -> ['"KEY=value"', ...] for Environment= lines (sorted)
    sglang_validate(server, speculative, context)  -> [] or [{"rule", "reason", "source", "detail"}, ...]
    sglang_probe_url(server)                       -> http://127.0.0.1:PORT (or the bind address)
    sglang_model_id(server)                        -> the id /v1/models must list
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

# structured key -> (flag, kind). kind: "value" (emitted with its value unless None/""), "bool" (flag alone when
# true). Order is the argv order; it reproduces the hand deployment's command line for the nvlink profile.
SERVER_FLAGS = (
    ("model_path", "--model-path", "value"),
    ("tokenizer_path", "--tokenizer-path", "value"),
    ("served_model_name", "--served-model-name", "value"),
    ("port", "--port", "value"),
    ("host", "--host", "value"),
    ("tp_size", "--tp-size", "value"),
    ("pp_size", "--pp-size", "value"),
    ("dp_size", "--dp-size", "value"),
    ("ep_size", "--ep-size", "value"),
    ("nnodes", "--nnodes", "value"),
    ("node_rank", "--node-rank", "value"),
    ("dist_init_addr", "--dist-init-addr", "value"),
    ("mem_fraction_static", "--mem-fraction-static", "value"),
    ("context_length", "--context-length", "value"),
    ("max_running_requests", "--max-running-requests", "value"),
    ("max_total_tokens", "--max-total-tokens", "value"),
    ("chunked_prefill_size", "--chunked-prefill-size", "value"),
    ("page_size", "--page-size", "value"),
    ("num_continuous_decode_steps", "--num-continuous-decode-steps", "value"),
    ("disable_cuda_graph", "--disable-cuda-graph", "bool"),
    ("cuda_graph_max_bs", "--cuda-graph-max-bs", "value"),
    ("attention_backend", "--attention-backend", "value"),
    ("trust_remote_code", "--trust-remote-code", "bool"),
    ("grammar_backend", "--grammar-backend", "value"),
    ("dtype", "--dtype", "value"),
    ("quantization", "--quantization", "value"),
    ("kv_cache_dtype", "--kv-cache-dtype", "value"),
    ("moe_a2a_backend", "--moe-a2a-backend", "value"),
    ("enable_dp_attention", "--enable-dp-attention", "bool"),
    ("enable_metrics", "--enable-metrics", "bool"),
    ("random_seed", "--random-seed", "value"),
    ("watchdog_timeout", "--watchdog-timeout", "value"),
    ("log_level", "--log-level", "value"),
)
SERVER_KEYS = frozenset(k for k, _f, _t in SERVER_FLAGS)

# Speculative decoding: structured key -> flag, per algorithm. DDTREE uses the patched 0.5.11 build's flags
# (FACTS: the hand deployment); DFLASH and EAGLE3 use upstream 0.5.23's.
SPEC_FLAGS = {
    "NONE": (),
    "EAGLE3": (
        ("draft_model_path", "--speculative-draft-model-path", "value"),
        ("num_steps", "--speculative-num-steps", "value"),
        ("eagle_topk", "--speculative-eagle-topk", "value"),
        ("num_draft_tokens", "--speculative-num-draft-tokens", "value"),
    ),
    "DFLASH": (
        ("draft_model_path", "--speculative-draft-model-path", "value"),
        ("block_size", "--speculative-dflash-block-size", "value"),
        ("draft_window_size", "--speculative-draft-window-size", "value"),
    ),
    "DDTREE": (
        ("draft_model_path", "--speculative-draft-model-path", "value"),
        ("block_size", "--speculative-dflash-block-size", "value"),
        ("draft_window_size", "--speculative-dflash-draft-window-size", "value"),
        ("budget", "--speculative-ddtree-budget", "value"),
        ("topk_cap", "--speculative-ddtree-topk-cap", "value"),
        ("debug_metrics", "--speculative-ddtree-debug-metrics", "bool"),
    ),
}
SPEC_FLAGS["EAGLE"] = SPEC_FLAGS["EAGLE3"]
SPEC_KEYS = frozenset({"algorithm"} | {k for flags in SPEC_FLAGS.values() for k, _f, _t in flags})
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class SGLangConfigError(ValueError):
    """The structured config cannot be turned into argv (the validation rules explain why first)."""


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return str(value)


def _emit(table, config: dict) -> list[str]:
    argv: list[str] = []
    for key, flag, kind in table:
        value = config.get(key)
        if kind == "bool":
            if value is True or (isinstance(value, str) and value.lower() in ("true", "yes", "1")):
                argv.append(flag)
        elif value is not None and value != "":
            argv += [flag, _fmt(value)]
    return argv


def algorithm(speculative) -> str:
    return str((speculative or {}).get("algorithm") or "NONE").upper()


def sglang_argv(server: dict, speculative: dict | None = None, extra_args: dict | None = None) -> list[str]:
    """argv after `python -m <launch module>` (never contains the API key: the launcher adds it from the env)."""
    if not isinstance(server, dict):
        raise SGLangConfigError(f"server config must be a mapping, got {type(server).__name__}")
    if server.get("api_key"):
        raise SGLangConfigError("api_key does not belong in the server config (it comes from vault via the env file)")
    argv = _emit(SERVER_FLAGS, server)
    algo = algorithm(speculative)
    if algo not in SPEC_FLAGS:
        raise SGLangConfigError(f"unknown speculative algorithm {algo!r}; known: {', '.join(sorted(SPEC_FLAGS))}")
    if algo != "NONE":
        argv += ["--speculative-algorithm", algo] + _emit(SPEC_FLAGS[algo], speculative or {})
    for flag, value in (extra_args or {}).items():
        flag = flag if flag.startswith("--") else "--" + flag.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value not in (None, False, ""):
            argv += [flag, _fmt(value)]
    return argv


_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def _quote_systemd(word: str) -> str:
    """Quote one word for ExecStart=: % -> %%, $ -> $$, double quotes with backslash escapes when needed."""
    word = word.replace("%", "%%").replace("$", "$$")
    if word and _SAFE.match(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sglang_exec_args(argv: list) -> str:
    return " ".join(_quote_systemd(str(a)) for a in argv)


def sglang_environment(env: dict) -> list[str]:
    """Environment= values, sorted by key, each one double-quoted for systemd."""
    out = []
    for key in sorted(env or {}):
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(key)):
            raise SGLangConfigError(f"invalid environment variable name {key!r}")
        value = str(env[key]).replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'"{key}={value}"')
    return out


def sglang_probe_url(server: dict) -> str:
    host = str(server.get("host") or "127.0.0.1")
    if host in ("0.0.0.0", "::", "", "localhost"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{server.get('port') or 30000}"


def sglang_model_id(server: dict) -> str:
    return str(server.get("served_model_name") or server.get("model_path") or "")


def _rules_module():
    """module_utils/sglang_rules.py, loaded by path: filters run on the controller, outside ansible.module_utils."""
    name = "sglang_service_rules"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "module_utils" / "sglang_rules.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def sglang_validate(server: dict, speculative: dict | None = None, context: dict | None = None) -> list[dict]:
    """Every static rule the config breaks, as data: [{"rule", "reason", "source", "detail"}]."""
    ctx = dict(context or {})
    ctx["server"] = dict(server or {})
    ctx["speculative"] = dict(speculative or {})
    ctx["unknown_server_keys"] = sorted(set(ctx["server"]) - SERVER_KEYS)
    ctx["unknown_speculative_keys"] = sorted(set(ctx["speculative"]) - SPEC_KEYS)
    ctx["known_algorithms"] = sorted(SPEC_FLAGS)
    try:
        ctx["argv"] = sglang_argv(server, speculative, ctx.get("extra_args"))
    except SGLangConfigError as exc:
        ctx["argv"] = None
        ctx["argv_error"] = str(exc)
    return _rules_module().evaluate(ctx)


def sglang_violations_text(violations: list) -> str:
    return "\n".join(f"- [{v['rule']}] {v['reason']} ({v['detail']}) source: {v['source']}" for v in violations)


class FilterModule:
    def filters(self):
        return {
            "sglang_argv": sglang_argv,
            "sglang_exec_args": sglang_exec_args,
            "sglang_environment": sglang_environment,
            "sglang_validate": sglang_validate,
            "sglang_violations_text": sglang_violations_text,
            "sglang_probe_url": sglang_probe_url,
            "sglang_model_id": sglang_model_id,
        }
