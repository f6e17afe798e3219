#!/usr/bin/env python3
"""Extract the CLI flag schema of an installed SGLang (or the lab stand-in) from its real argparse parser.

    python sglang_schema_extract.py [--module sglang.srt.server_args] [--out FILE]

Run it with the python of the venv whose SGLang you want described (stdlib only here; the parser module is
imported from that venv). CUDA_VISIBLE_DEVICES is emptied before anything is imported: the extraction never
touches a GPU. The parser is built the way that version's own `prepare_server_args` builds it
(`argparse.ArgumentParser(prog="sglang serve")` + `ServerArgs.add_cli_args(parser)` in 0.5.11 and 0.5.23), or
with the module's `make_parser()` when it has one (the lab stand-in). Output: deterministic JSON (sorted keys,
indent 1), see schemas/sglang/README.md for the shape and for how deprecations and removals are read.

Never edit the resulting files by hand: regenerate them.
"""
from __future__ import annotations

import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before any import that could initialise CUDA

import argparse  # noqa: E402
import hashlib  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Run as a script, this file's folder (module_utils/) would come first on sys.path and could shadow modules the
# parser imports: the parser must see only its own venv.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

SCHEMA_FORMAT = 1
DEFAULT_MODULE = "sglang.srt.server_args"

_STD_ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "BooleanOptionalAction": "BooleanOptionalAction",
}
_SKIP_ACTIONS = ("help", "version")
_FLAG_RE = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_\-]*(?:\{[^}]*\}[A-Za-z0-9_\-]*)?")
_ADDR_RE = re.compile(r" at 0x[0-9a-fA-F]+")
# Help texts that say the flag itself is deprecated: "[Deprecated] ...", "Deprecated. ...", "(Deprecated: ...",
# "Deprecated: ...", "Note: --x is deprecated now...", "... --x is deprecated ...".
_DEPRECATED_HELP_RE = re.compile(r"^\s*[\[(]?\s*deprecated\b", re.IGNORECASE)
_REPLACEMENT_RE = re.compile(r"\b(?:use|instead of it use|replaced by|superseded by)\s+['\"`]?(--[A-Za-z0-9][A-Za-z0-9_\-{},]*)",
                             re.IGNORECASE)


def build_parser(module):
    """The parser exactly as the version's own launcher builds it."""
    if hasattr(module, "make_parser"):
        return module.make_parser()
    parser = argparse.ArgumentParser(prog="sglang serve")
    module.ServerArgs.add_cli_args(parser)
    return parser


def _distribution_of(module_name: str):
    import importlib.metadata as md

    top = module_name.split(".")[0]
    try:
        names = md.packages_distributions().get(top) or []
    except Exception:  # noqa: BLE001
        names = []
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            continue
    try:
        return top, md.version(top)
    except md.PackageNotFoundError:
        return None, None


def package_version(module, module_name: str, dist_version):
    """The installed package's version: the module's SGLANG_VERSION, else the top package's __version__ (the
    stand-in's own), else the distribution's metadata version."""
    if getattr(module, "SGLANG_VERSION", None):
        return str(module.SGLANG_VERSION)
    top = sys.modules.get(module_name.split(".")[0])
    if top is not None and getattr(top, "__version__", None):
        return str(top.__version__)
    if dist_version:
        return str(dist_version)
    raise SystemExit(f"cannot tell the version of {module_name}: no SGLANG_VERSION, __version__ or metadata")


def _type_name(tp):
    if tp is None:
        return None
    if tp is json.loads:
        return "json"
    for known in (int, float, str, bool):
        if tp is known:
            return known.__name__
    name = getattr(tp, "__name__", None) or type(tp).__name__
    return name


def json_safe(value):
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    enum_value = getattr(value, "value", None)
    if type(value).__module__ != "builtins" and isinstance(enum_value, (str, int, float)) and hasattr(value, "name"):
        return json_safe(enum_value)
    return _ADDR_RE.sub("", repr(value))


def _choices(action):
    if action.choices is None:
        return None
    if isinstance(action.choices, (set, frozenset)):
        return sorted((json_safe(c) for c in action.choices), key=repr)
    return [json_safe(c) for c in action.choices]


def _action_name(action) -> str:
    cls = type(action).__name__
    return _STD_ACTIONS.get(cls, cls)


def _help(action) -> str:
    text = action.help or ""
    if text == argparse.SUPPRESS:
        return ""
    return str(text)


def _ordered_flags(option_strings):
    longs = [s for s in option_strings if s.startswith("--")]
    shorts = [s for s in option_strings if not s.startswith("--")]
    return longs + shorts


def _expand_braces(text: str):
    m = re.search(r"\{([^}]*)\}", text)
    if not m:
        return [text]
    out = []
    for alt in m.group(1).split(","):
        out.extend(_expand_braces(text[:m.start()] + alt + text[m.end():]))
    return out


def _replacement_flag(text: str, own_flags, known_flags):
    """The first flag named in `text` (a new_flag= value or a help text) that is not the option itself, preferring
    one the parser knows; brace forms (--x-{a,b}) are expanded."""
    if not text:
        return None
    candidates = []
    for raw in _FLAG_RE.findall(text):
        for flag in _expand_braces(raw):
            flag = flag.split("=")[0].rstrip("-.,")
            if flag and flag not in own_flags and flag not in candidates:
                candidates.append(flag)
    for flag in candidates:
        if flag in known_flags:
            return flag
    return candidates[0] if candidates else None


def deprecation_of(action, known_flags):
    """(deprecated, removed, deprecated_by, note) as the real parser states them.

    - Action classes named Deprecated* (both versions' argparse actions): deprecated. `DeprecatedAction` is the
      retired-flag shape: it stores nothing (a no-op warning) or, with `error_message=` (0.5.23), stops the launch:
      removed. DeprecatedStoreTrueAction / DeprecatedStoreConstAction / DeprecatedAliasStoreAction still translate
      the value: deprecated, not removed. `new_flag=` or `error_message=` names the replacement.
    - Help texts that start with "[Deprecated]", "Deprecated", "(Deprecated", or say "--flag is deprecated":
      deprecated; the replacement is the flag after "use" in that text.
    """
    cls = type(action).__name__
    own = set(action.option_strings)
    help_text = _help(action)
    by_class = cls.startswith("Deprecated")
    by_help = bool(_DEPRECATED_HELP_RE.search(help_text)) or any(
        re.search(re.escape(f) + r"['\"`]?\s+is\s+deprecated", help_text, re.IGNORECASE) for f in own)
    if not (by_class or by_help):
        return False, False, None, None
    removed = cls == "DeprecatedAction"
    sources = [getattr(action, "new_flag", None), getattr(action, "error_message", None)]
    note = next((s for s in sources if s), None)
    replacement = None
    for src in sources:
        replacement = _replacement_flag(src or "", own, known_flags)
        if replacement:
            break
    if replacement is None:
        m = _REPLACEMENT_RE.search(help_text)
        if m:
            replacement = _replacement_flag(m.group(1), own, known_flags)
    return True, removed, replacement, note or (help_text or None)


def _source_files(module, parser):
    """Files the parser is built from: the module itself, the modules of its action classes and type callables,
    and (0.5.23) every file of the `arg_groups` package next to it."""
    files = set()
    mod_file = getattr(module, "__file__", None)
    if mod_file:
        files.add(Path(mod_file).resolve())
        arg_groups = Path(mod_file).resolve().parent / "arg_groups"
        if arg_groups.is_dir():
            files.update(p.resolve() for p in arg_groups.rglob("*.py"))
    for action in parser._actions:
        for obj in (type(action), action.type):
            m = sys.modules.get(getattr(obj, "__module__", "") or "")
            f = getattr(m, "__file__", None)
            if f and m.__name__.split(".")[0] == module.__name__.split(".")[0]:
                files.add(Path(f).resolve())
    top = sys.modules.get(module.__name__.split(".")[0])
    base = Path(top.__file__).resolve().parent.parent if getattr(top, "__file__", None) else None
    out = {}
    for f in sorted(files):
        try:
            rel = f.relative_to(base).as_posix() if base else f.name
        except ValueError:
            rel = f.name
        out[rel] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _option_key(dest, flags, taken):
    if dest not in taken:
        return dest
    base = flags[0].lstrip("-").replace("-", "_") if flags else dest
    key, n = base, 2
    while key in taken:
        key, n = f"{base}_{n}", n + 1
    return key


def extract(module_name: str = DEFAULT_MODULE) -> dict:
    module = importlib.import_module(module_name)
    parser = build_parser(module)
    known_flags = {s for a in parser._actions for s in a.option_strings}
    dist, dist_version = _distribution_of(module_name)
    options = {}
    # Actions that share a dest with a non-deprecated one (old spellings registered separately) get their own key.
    actions = [a for a in parser._actions if a.option_strings and _action_name(a) not in _SKIP_ACTIONS]
    position = {id(a): i for i, a in enumerate(actions)}
    order = sorted(actions, key=lambda a: deprecation_of(a, known_flags)[0])  # non-deprecated claim the dest
    for action in order:
        flags = _ordered_flags(action.option_strings)
        deprecated, removed, deprecated_by, note = deprecation_of(action, known_flags)
        entry = {
            "dest": action.dest,
            "flags": flags,
            "action": _action_name(action),
            "nargs": action.nargs,
            "order": position[id(action)],
            "type": _type_name(action.type),
            "choices": _choices(action),
            "default": json_safe(action.default),
            "required": bool(action.required),
            "help": _help(action),
            "deprecated": deprecated,
            "deprecated_by": deprecated_by,
            "deprecation": note if deprecated else None,
            "removed": removed,
        }
        options[_option_key(action.dest, flags, options)] = entry
    return {
        "schema_format": SCHEMA_FORMAT,
        "sglang_version": package_version(module, module_name, dist_version),
        "source": {
            "module": module_name,
            "distribution": dist,
            "version": dist_version,
            "files_sha256": _source_files(module, parser),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "parser": "make_parser()" if hasattr(module, "make_parser")
            else 'ArgumentParser(prog="sglang serve") + ServerArgs.add_cli_args',
        },
        "options": options,
    }


def dumps(schema: dict) -> str:
    return json.dumps(schema, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def emit(text: str, out: str | None) -> None:
    """Write to the file `out`, or to stdout."""
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", default=DEFAULT_MODULE)
    ap.add_argument("--out", help="write here (default: stdout)")
    args = ap.parse_args(argv)
    emit(dumps(extract(args.module)), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
