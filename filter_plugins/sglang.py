"""Filters for the SGLang service: the ONE place that turns the structured server config into argv.

The unit template (ExecStart), the static validation rules (module_utils/sglang/rules.py) and the target-side
preflight (library/sglang_preflight.py gets the argv this produces) all go through here. It knows no SGLang flag by
name: every flag, its kind (value or bare switch), its choices and its type come from the flag schema of the SGLang
version the host runs (schemas/sglang/<version>.json, extracted from the real parser; or the schema the venv role
extracted from the host's own venv), read by module_utils/sglang/schema.py.

    sglang_argv(server, speculative, extra_args, schema) -> ["--model-path", "/srv/models/X", "--port", "30001", ...]
    sglang_flag_problems(server, speculative, extra_args, schema) -> [{"flag", "version", "problem", ...}, ...]
    sglang_exec_args(argv)                         -> one string, quoted for a systemd ExecStart= line
    sglang_environment(env)                        -> ['"KEY=value"', ...] for Environment= lines (sorted)
    sglang_validate(server, speculative, context)  -> [] or [{"rule", "reason", "source", "detail"}, ...]
    sglang_probe_url(server)                       -> http://127.0.0.1:PORT (or the bind address)
    sglang_port(server)                            -> the port: its own, else SGLang's default from the schema
    sglang_model_id(server)                        -> the id /v1/models must list
    sglang_flag_value(server, flag, extra_args)    -> the value the argv gives one flag ("" when none)
    sglang_drafter_expectation(argv, schema)       -> {} or the DFlash drafter's path and the block size the server
                                                      would run, with its source (module_utils/sglang/drafter.py)

Structured keys name flags, not argparse dests (which differ between versions: 0.5.11's dest for --tp-size is
tensor_parallel_size): a server key `tp_size` is the flag `--tp-size`; a speculative key `k` is `--speculative-<k>`,
or else the algorithm family's `--speculative-<family>-<k>` (DFLASH: dflash; DDTREE: ddtree, then dflash; EAGLE,
EAGLE3, NEXTN: eagle; NGRAM: ngram), whichever the version's schema has first. So `draft_window_size` renders as
0.5.11's --speculative-dflash-draft-window-size and as 0.5.23's --speculative-draft-window-size, and a key that maps
to no flag of the version is refused, naming the flag, the version and the replacement when the schemas have one.
`schema` is a version with a committed schema ("0.5.23"), a schema dict, or "b64:" + base64 of a schema file (what
slurp returns for the host's extracted schema: no Jinja ever parses its text).
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import ansible.module_utils

# One import name on hosts and controller: the repository's module_utils joins ansible's package (ARCHITECTURE.md).
_MODULE_UTILS = str(Path(__file__).resolve().parents[1] / "module_utils")
ansible.module_utils.__path__ += [] if _MODULE_UTILS in ansible.module_utils.__path__ else [_MODULE_UTILS]
from ansible.module_utils.sglang import rules as rules_lib  # noqa: E402
from ansible.module_utils.sglang import endpoint  # noqa: E402
from ansible.module_utils.sglang import drafter as drafter_lib  # noqa: E402
from ansible.module_utils.sglang import schema as schema_lib  # noqa: E402
from ansible.module_utils.sglang.speculative import algorithm, flag_candidates, summary_from_config  # noqa: E402

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class SGLangConfigError(ValueError):
    """The structured config cannot be turned into argv (the validation rules explain why first)."""


_CACHE: dict = {}


def flag_schema(schema):
    """A FlagSchema from a version string, a schema dict, "b64:<base64 of the JSON file>" or a FlagSchema."""
    mod = schema_lib
    if isinstance(schema, mod.FlagSchema):
        return schema
    if schema is None or schema == "":
        raise SGLangConfigError("no SGLang flag schema given: the argv depends on the installed version "
                                f"(committed schemas: {', '.join(mod.available())})")
    if isinstance(schema, dict):
        key = "dict:" + hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
        if key not in _CACHE:
            _CACHE[key] = mod.from_dict(schema)
        return _CACHE[key]
    text = str(schema)
    if text not in _CACHE:
        try:
            if text.startswith("b64:"):
                _CACHE[text] = mod.from_dict(json.loads(base64.b64decode(text[4:])))
            else:
                _CACHE[text] = mod.load(text)
        except (mod.SchemaError, ValueError) as exc:
            raise SGLangConfigError(str(exc)) from exc
    return _CACHE[text]


def other_schemas(schema) -> list:
    """The committed schemas of the other versions: how another version's spelling is recognised and replaced."""
    mod = schema_lib
    return [flag_schema(v) for v in mod.available() if v != schema.version]


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _truthy(value) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in ("true", "yes", "1"))


def _spec_flag(schema, algo: str, key: str) -> str:
    """The flag a speculative key names in this version: the first candidate the schema has; else another version's
    spelling, else the algorithm family's (which the problems then report as unknown, with any replacement)."""
    candidates = flag_candidates(algo, key)
    for flag in candidates:
        if schema.lookup(flag):
            return flag
    others = [f for f in candidates if any(o.lookup(f) for o in other_schemas(schema))]
    return (others or candidates[1:2] or candidates)[0]  # no schema has it: name the algorithm family's spelling


def _words_for(schema, flag: str, value) -> list[str]:
    """argv words for one flag and its structured value: a bare switch when the flag takes none."""
    hit = schema.lookup(flag)
    option = hit[1] if hit else {}
    if option.get("nargs") == 0 or (not option and isinstance(value, bool)):
        if option.get("action") == "BooleanOptionalAction" and value is False:
            return ["--no-" + flag[2:]]
        return [flag] if _truthy(value) else []
    if value is None or value == "":
        return []
    if isinstance(value, (list, tuple)):
        return [flag] + [_fmt(v) for v in value] if value else []
    return [flag, _fmt(value)]


def _order(schema, flag: str) -> int:
    hit = schema.lookup(flag)
    return hit[1].get("order", 10 ** 6) if hit else 10 ** 6


def render(server: dict, speculative: dict | None, extra_args: dict | None, schema) -> list[str]:
    """argv after `python -m <launch module>`, in the parser's own order (never contains the API key: the
    launcher adds it from the env). Keys the version lacks are rendered anyway: flag_problems() reports them."""
    if not isinstance(server, dict):
        raise SGLangConfigError(f"server config must be a mapping, got {type(server).__name__}")
    if server.get("api_key"):
        raise SGLangConfigError("api_key does not belong in the server config (it comes from vault via the env file)")
    schema = flag_schema(schema)
    pairs = [(_server_flag(key), value) for key, value in server.items()]
    algo = algorithm(speculative)
    if algo != "NONE":
        pairs.append(("--speculative-algorithm", algo))
        pairs += [(_spec_flag(schema, algo, key), value) for key, value in (speculative or {}).items()
                  if key != "algorithm"]
    argv: list[str] = []
    for flag, value in sorted(pairs, key=lambda fv: _order(schema, fv[0])):
        argv += _words_for(schema, flag, value)
    for flag, value in (extra_args or {}).items():
        argv += _words_for(schema, _extra_flag(flag), value)
    return argv


def _server_flag(key: str) -> str:
    """The flag a server key names (`tp_size` -> `--tp-size`)."""
    return "--" + key.replace("_", "-")


def _extra_flag(key: str) -> str:
    """The flag an extra_args key names: as written when it starts with --, else like a server key."""
    return key if key.startswith("--") else _server_flag(key)


def sglang_flag_value(server: dict, flag: str, extra_args: dict | None = None) -> str:
    """The value the rendered argv gives `flag` ("" when it gives none): an extra_args entry wins over a server key,
    as the later word does in the parser. For the checks that follow what the server runs (the smoke's reasoning
    and tool-call parsers), without the version's schema (smoke.yml also runs outside a full play)."""
    value = None
    for key, v in (server or {}).items():
        value = v if _server_flag(key) == flag else value
    for key, v in (extra_args or {}).items():
        value = v if _extra_flag(key) == flag else value
    return "" if value is None or value is False else _fmt(value)


def flag_problems(server: dict, speculative: dict | None = None, extra_args: dict | None = None,
                  schema=None) -> list[dict]:
    """What the version's parser would refuse or warn about in the rendered argv (module_utils/sglang/schema)."""
    schema = flag_schema(schema)
    argv = render(server, speculative, extra_args, schema)
    return schema_lib.check_argv(schema, argv, other_schemas(schema))


def sglang_argv(server: dict, speculative: dict | None = None, extra_args: dict | None = None,
                schema=None) -> list[str]:
    """The argv, refused (SGLangConfigError) when the version's schema refuses any of it."""
    schema = flag_schema(schema)
    fatal = [p for p in flag_problems(server, speculative, extra_args, schema) if p["problem"] != "deprecated"]
    if fatal:
        raise SGLangConfigError("; ".join(p["detail"] for p in fatal))
    return render(server, speculative, extra_args, schema)


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


def sglang_probe_url(server: dict, schema=None) -> str:
    """http://HOST:PORT the service answers at from its own host (module_utils/sglang/endpoint.py)."""
    try:
        return endpoint.probe_url(server, flag_schema(schema) if schema not in (None, "") else None)
    except schema_lib.SchemaError as exc:
        raise SGLangConfigError(str(exc)) from exc


def sglang_port(server: dict, schema=None) -> int:
    """The port the server config listens on: its own, else SGLang's --port default from the flag schema (the one
    home of the port fallback: module_utils/sglang/endpoint.py)."""
    try:
        return endpoint.listen_port(server, flag_schema(schema) if schema not in (None, "") else None)
    except schema_lib.SchemaError as exc:
        raise SGLangConfigError(str(exc)) from exc


def sglang_model_id(server: dict) -> str:
    return str(server.get("served_model_name") or server.get("model_path") or "")


def sglang_validate(server: dict, speculative: dict | None = None, context: dict | None = None) -> list[dict]:
    """Every static rule the config breaks, as data: [{"rule", "reason", "source", "detail"}]. context["schema"] names
    the version's flag schema (see flag_schema); the flag problems it finds are rules too."""
    ctx = dict(context or {})
    ctx["server"] = dict(server or {})
    ctx["speculative"] = dict(speculative or {})
    try:
        schema = flag_schema(ctx.get("schema"))
        ctx["sglang_version"] = schema.version
        ctx["argv"] = render(server, speculative, ctx.get("extra_args"), schema)
        ctx["flag_problems"] = schema_lib.check_argv(schema, ctx["argv"], other_schemas(schema))
        option = schema.lookup("--speculative-algorithm")
        ctx["known_algorithms"] = (["NONE"] + list(option[1]["choices"])) if option and option[1].get("choices") \
            else None
    except SGLangConfigError as exc:
        ctx["argv"] = None
        ctx["argv_error"] = str(exc)
        ctx["flag_problems"] = []
    return rules_lib.evaluate(ctx)


def sglang_violations_text(violations: list) -> str:
    return "\n".join(f"- [{v['rule']}] {v['reason']} ({v['detail']}) source: {v['source']}" for v in violations)


def sglang_spec_summary(speculative: dict | None, server: dict | None = None) -> dict:
    """{algorithm, budget, topk, block_size, cuda_graph} of what a structured config runs (module_utils/sglang/
    speculative.py: the same table the report reads a server's argv back with)."""
    return summary_from_config(speculative, server)


def sglang_drafter_expectation(argv: list, schema=None) -> dict:
    """What the host's drafter check compares (library/sglang_drafter_check.py): {} when the argv's algorithm drafts
    no DFlash blocks, else {algorithm, draft_model_path, block_size (None: the drafter's own), source}."""
    return drafter_lib.expectation(argv, flag_schema(schema))


class FilterModule:
    def filters(self):
        return {
            "sglang_argv": sglang_argv,
            "sglang_flag_problems": flag_problems,
            "sglang_exec_args": sglang_exec_args,
            "sglang_environment": sglang_environment,
            "sglang_validate": sglang_validate,
            "sglang_violations_text": sglang_violations_text,
            "sglang_probe_url": sglang_probe_url,
            "sglang_port": sglang_port,
            "sglang_model_id": sglang_model_id,
            "sglang_flag_value": sglang_flag_value,
            "sglang_spec_summary": sglang_spec_summary,
            "sglang_drafter_expectation": sglang_drafter_expectation,
        }
