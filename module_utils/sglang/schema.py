"""SGLang CLI flag schemas per version (schemas/sglang/<version>.json), and an argv check against them.

The schema files are extracted from the real argparse parser of each SGLang version by
module_utils/sglang/schema_extract.py (see schemas/sglang/README.md); nothing here knows a flag by name. Stdlib
only: importable as `ansible.module_utils.sglang.schema` and by path (filter_plugins load it with importlib).

    schema = load("0.5.11")
    schema.lookup("--speculative-algorithm=EAGLE")   # -> ("speculative_algorithm", {...option...})
    check_argv(schema, argv, others=[load("0.5.23")])  # -> [{"flag", "version", "problem", "detail", "replacement"}]

Replacements for a flag the version lacks are derived from the schemas only, in this order: the same dest in
this version; the other version's deprecated_by chain (or an old spelling this version still has that the other
deprecates in favour of the flag); an option with identical normalised help text; the flag of this version whose
name differs from the unknown one by exactly one added or dropped word and that the other version does not have (ties: the one
the parser registers first, the others named in the detail).
"""
from __future__ import annotations

import json
import os
import re

from ansible.module_utils.evidence.error import EvidenceError

SCHEMA_FORMAT = 1
SCHEMA_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "schemas", "sglang"))
PROBLEMS = ("unknown", "deprecated", "removed", "invalid_choice", "missing_value", "bad_type", "missing_required")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class SchemaError(EvidenceError, ValueError):
    pass


def _version_key(version: str):
    parts = []
    for piece in re.split(r"[.+\-]", version):
        parts.append((0, int(piece), "") if piece.isdigit() else (1, 0, piece))
    return parts


def available(path: str | None = None) -> list:
    """Versions with a schema file in `path` (default SCHEMA_DIR), oldest first."""
    folder = path or SCHEMA_DIR
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted((n[:-5] for n in names if n.endswith(".json")), key=_version_key)


def load(version: str, path: str | None = None) -> "FlagSchema":
    """The schema of `version`: `path` is a schema file, or a folder holding <version>.json (default SCHEMA_DIR)."""
    version = str(version)
    if path and os.path.isfile(path):
        file = path
    else:
        folder = path or SCHEMA_DIR
        file = os.path.join(folder, f"{version}.json")
        if not os.path.isfile(file):
            have = ", ".join(available(folder)) or "none"
            raise SchemaError(f"no SGLang flag schema for version {version} in {folder} (available: {have}); "
                              "extract one with module_utils/sglang/schema_extract.py on that version's venv")
    with open(file, encoding="utf-8") as fh:
        schema = from_dict(json.load(fh))
    if path and os.path.isfile(path) and schema.version != version:
        raise SchemaError(f"{file} is the schema of SGLang {schema.version}, not {version}")
    return schema


def from_dict(d: dict) -> "FlagSchema":
    if not isinstance(d, dict) or "options" not in d or "sglang_version" not in d:
        raise SchemaError("not an SGLang flag schema (needs sglang_version and options)")
    if d.get("schema_format") != SCHEMA_FORMAT:
        raise SchemaError(f"schema_format {d.get('schema_format')!r} is not {SCHEMA_FORMAT}")
    return FlagSchema(d)


class FlagSchema:
    def __init__(self, data: dict):
        self.data = data
        self.version = str(data["sglang_version"])
        self.options = data["options"]
        self._by_flag = {}
        for key, option in self.options.items():
            for flag in option.get("flags") or ():
                self._by_flag.setdefault(flag, (key, option))
        self._by_dest = {}
        for key, option in sorted(self.options.items(), key=lambda kv: kv[1].get("order", 0)):
            dest = option.get("dest", key)
            current = self._by_dest.get(dest)
            if current is None or (current[1].get("deprecated") and not option.get("deprecated")):
                self._by_dest[dest] = (key, option)

    def __repr__(self):
        return f"<FlagSchema SGLang {self.version}: {len(self.options)} options>"

    @property
    def flags(self) -> set:
        return set(self._by_flag)

    def lookup(self, flag: str):
        """(key, option) for `--flag` or `--flag=value`, else None. The key is the dest (an old spelling that shares
        its dest with a newer flag has a key of its own; option["dest"] is argparse's dest)."""
        if not isinstance(flag, str):
            return None
        hit = self._by_flag.get(flag)
        if hit is None and flag.startswith("--") and "=" in flag:
            hit = self._by_flag.get(flag.split("=", 1)[0])
        return hit

    def option_for_dest(self, dest: str):
        hit = self._by_dest.get(dest)
        return hit[1] if hit else None

    def flag_of(self, dest: str):
        """The canonical flag of a dest (the non-deprecated option when old and new spellings share it)."""
        option = self.option_for_dest(dest)
        if option is None and dest in self.options:
            option = self.options[dest]
        return option["flags"][0] if option and option.get("flags") else None

    def is_bool(self, flag: str) -> bool:
        """True when the flag takes no value (store_true and friends); KeyError for a flag the version lacks."""
        hit = self.lookup(flag)
        if hit is None:
            raise KeyError(f"{flag} is not a flag of SGLang {self.version}")
        return hit[1].get("nargs") == 0

    def choices(self, flag: str):
        hit = self.lookup(flag)
        if hit is None:
            raise KeyError(f"{flag} is not a flag of SGLang {self.version}")
        return hit[1].get("choices")


# ----------------------------------------------------------------------------------------------------------------
# Replacement derivation (data only)

def _norm_help(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", (text or "").lower()).split())


def _words(flag: str) -> tuple:
    return tuple(w for w in re.split(r"[-_]+", flag.lstrip("-").lower()) if w)


def _usable(option) -> bool:
    return bool(option) and not option.get("removed")


def _canonical(schema: FlagSchema, flag: str):
    """The flag `schema` would have the operator write for `flag` (itself, or what it deprecates it in favour of)."""
    seen = set()
    while flag and flag not in seen:
        seen.add(flag)
        hit = schema.lookup(flag)
        if hit is None:
            return None
        option = hit[1]
        if option.get("deprecated") and option.get("deprecated_by") and schema.lookup(option["deprecated_by"]):
            flag = option["deprecated_by"]
            continue
        if option.get("removed"):
            return None
        if option.get("deprecated"):
            return option["flags"][0]
        return schema.flag_of(option.get("dest", hit[0]))
    return None


def _name_candidates(schema: FlagSchema, flag: str, source: FlagSchema, source_option: dict):
    """Flags of `schema` whose name differs from `flag` by exactly one word (added or dropped), sharing at
    least two words, taking a value iff the source option does, and absent from `source` (a flag both versions have
    is a different flag, not a respelling)."""
    want = set(_words(flag))
    takes_value = source_option.get("nargs") != 0
    found = []
    for key, option in sorted(schema.options.items(), key=lambda kv: kv[1].get("order", 0)):
        if not _usable(option) or option.get("deprecated"):
            continue
        if (option.get("nargs") != 0) != takes_value:
            continue
        canonical = option["flags"][0]
        if any(source.lookup(f) for f in option["flags"]):
            continue
        have = set(_words(canonical))
        if len(want & have) < 2:
            continue
        if len(have ^ want) == 1:
            found.append(canonical)
    return found


def find_replacement(schema: FlagSchema, flag: str, others=()):
    """(replacement or None, how, alternatives, source_version) for a flag `schema` does not have."""
    name = flag.split("=", 1)[0]
    sources = [o for o in others if o is not schema and o.version != schema.version and o.lookup(name)]
    for source in sources:
        key, option = source.lookup(name)
        dest = option.get("dest", key)
        negative = option.get("action") == "BooleanOptionalAction" and name.startswith("--no-")
        # 1. same dest (not for the --no-x half of a BooleanOptionalAction: that is "leave the flag out")
        mine = schema.option_for_dest(dest)
        if _usable(mine) and not negative:
            return _canonical(schema, mine["flags"][0]) or mine["flags"][0], "same dest", [], source.version
        # 2. deprecated_by chains, both ways
        by = option.get("deprecated_by")
        if by:
            target = _canonical(schema, by)
            if target:
                return target, f"{source.version} deprecates it in favour of {by}", [], source.version
            by_hit = source.lookup(by)
            if by_hit:
                mine = schema.option_for_dest(by_hit[1].get("dest", by_hit[0]))
                if _usable(mine):
                    return mine["flags"][0], f"{source.version} deprecates it in favour of {by}", [], source.version
        for old in source.options.values():
            if old.get("deprecated_by") in option["flags"]:
                for old_flag in old["flags"]:
                    if _usable(schema.lookup(old_flag) and schema.lookup(old_flag)[1]):
                        return old_flag, f"{source.version} deprecates {old_flag} in favour of it", [], source.version
        # 3. identical help text
        text = _norm_help(option.get("help"))
        if len(text.split()) >= 4:
            same = [o["flags"][0] for o in schema.options.values()
                    if _usable(o) and _norm_help(o.get("help")) == text
                    and not any(source.lookup(f) for f in o["flags"])]
            if len(same) == 1:
                return same[0], "same help text", [], source.version
        # 4. the name, one word apart
        names = _name_candidates(schema, name, source, option)
        if names:
            how = "name one word apart" + (" (ambiguous: first registered)" if len(names) > 1 else "")
            return names[0], how, names[1:], source.version
    return None, None, [], (sources[0].version if sources else None)


# ----------------------------------------------------------------------------------------------------------------
# argv walk

def _flag_like(word: str) -> bool:
    if not isinstance(word, str) or not word.startswith("-") or word == "-":
        return False
    if _NEGATIVE_NUMBER.match(word):
        return False
    if " " in word and "=" not in word.split(" ", 1)[0]:
        return False
    return True


def _problem(schema, flag, problem, detail, replacement=None):
    return {"flag": flag, "version": schema.version, "problem": problem, "detail": detail, "replacement": replacement}


def _type_error(option, value):
    kind = option.get("type")
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json":
            json.loads(value)
    except (TypeError, ValueError):
        return f"{kind} value expected"
    return None


def _choice_ok(option, value) -> bool:
    choices = option.get("choices")
    if choices is None:
        return True
    kind = option.get("type")
    try:
        typed = int(value) if kind == "int" else float(value) if kind == "float" else value
    except (TypeError, ValueError):
        typed = value
    return typed in choices or str(value) in [str(c) for c in choices]


def _consume(argv, i, nargs):
    """Values taken by an option at argv[i] with `nargs` (argparse's rules for these flags): (values, next index)."""
    rest = argv[i + 1:]
    if nargs == 0:
        return [], i + 1
    if nargs is None or nargs == "?" and rest and not _flag_like(rest[0]):
        if nargs is None and (not rest or _flag_like(rest[0])):
            return None, i + 1
        return [rest[0]], i + 2
    if nargs == "?":
        return [], i + 1
    if nargs == "...":
        return list(rest), len(argv)
    if isinstance(nargs, int):
        taken = []
        for word in rest[:nargs]:
            if _flag_like(word):
                break
            taken.append(word)
        return (taken if len(taken) == nargs else None), i + 1 + len(taken)
    taken = []
    for word in rest:
        if _flag_like(word):
            break
        taken.append(word)
    if nargs == "+" and not taken:
        return None, i + 1
    return taken, i + 1 + len(taken)


def check_argv(schema: FlagSchema, argv, others=()) -> list:
    """Problems of `argv` (SGLang server arguments, without the program) for `schema`'s version, each
    {"flag", "version", "problem", "detail", "replacement"}; `others` are the schemas of other versions, used to
    recognise another version's spelling and to name this version's replacement for it."""
    argv = [str(w) for w in (argv or [])]
    problems = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            for stray in argv[i + 1:]:
                problems.append(_problem(schema, stray, "unknown",
                                         f"{stray}: SGLang {schema.version} takes no positional arguments"))
            break
        if not _flag_like(word):
            problems.append(_problem(schema, word, "unknown",
                                     f"{word!r} follows no flag that takes it: SGLang {schema.version} would refuse "
                                     "it as an unrecognized argument"))
            i += 1
            continue
        name, eq, attached = word.partition("=") if word.startswith("--") else (word, "", "")
        hit = schema.lookup(name)
        if hit is None:
            replacement, how, alternatives, source = find_replacement(schema, name, others)
            spelled = f" (the SGLang {source} spelling)" if source else ""
            detail = f"{name} is not a flag of SGLang {schema.version}{spelled}"
            if replacement:
                detail += f"; SGLang {schema.version} spells it {replacement}"
                if alternatives:
                    detail += f" (or {', '.join(alternatives)})"
                detail += f" [derived: {how}]"
            else:
                detail += f"; SGLang {schema.version} has no replacement for it"
            abbrev = sorted(f for f in schema.flags if f.startswith(name) and name.startswith("--"))
            if abbrev:
                detail += (f"; argparse would read it as an abbreviation of {abbrev[0]}" if len(abbrev) == 1
                           else f"; argparse finds it ambiguous ({', '.join(abbrev)})")
            problems.append(_problem(schema, name, "unknown", detail, replacement))
            nargs = None
            if source:
                nargs = next(o for o in others if o.version == source).lookup(name)[1].get("nargs")
            if eq:
                i += 1
            elif source and nargs == 0:
                i += 1
            else:
                _, i = _consume(argv, i, "*")
            continue
        key, option = hit
        if option.get("removed"):
            by = option.get("deprecated_by")
            problems.append(_problem(
                schema, name, "removed",
                f"{name} was removed in SGLang {schema.version} (the parser keeps it only to warn or refuse)"
                + (f"; use {by}" if by else "; it has no replacement")
                + (f" (the parser says: {option.get('deprecation') or option.get('help')})"
                   if option.get("deprecation") or option.get("help") else ""), by))
        elif option.get("deprecated"):
            by = option.get("deprecated_by")
            note = option.get("deprecation") or option.get("help") or ""
            problems.append(_problem(
                schema, name, "deprecated",
                f"{name} is deprecated in SGLang {schema.version}" + (f"; use {by}" if by else "")
                + (f" (the parser says: {note})" if note else ""), by))
        nargs = option.get("nargs")
        if eq:
            if nargs == 0:
                problems.append(_problem(schema, name, "bad_type",
                                         f"{name} takes no value in SGLang {schema.version}, got {attached!r}"))
                values = []
            else:
                values = [attached]
            i += 1
        else:
            values, i = _consume(argv, i, nargs)
            if values is None:
                problems.append(_problem(schema, name, "missing_value",
                                         f"{name} needs a value (nargs={nargs!r}) in SGLang {schema.version}"))
                continue
        for value in values:
            error = _type_error(option, value)
            if error:
                problems.append(_problem(schema, name, "bad_type",
                                         f"{name} {value!r}: {error} in SGLang {schema.version}"))
            elif not _choice_ok(option, value):
                problems.append(_problem(
                    schema, name, "invalid_choice",
                    f"{name} {value!r} is not a choice of SGLang {schema.version} "
                    f"(choose from {', '.join(map(str, option['choices']))})"))
    given = {w.split("=", 1)[0] for w in argv if _flag_like(w)}
    for option in schema.options.values():
        if option.get("required") and not given & set(option.get("flags") or ()):
            flags = "/".join(option["flags"])
            problems.append(_problem(schema, option["flags"][0], "missing_required",
                                     f"SGLang {schema.version} requires {flags}"))
    return problems
