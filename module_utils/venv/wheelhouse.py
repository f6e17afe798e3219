"""An offline wheelhouse: a directory ON THE HOST holding the wheels of a flavour's lock (stdlib only; runs on the host
in the venv role's preflight, library/venv_wheelhouse.py, before anything changes).

With a wheelhouse every pip step of a build runs with ``--no-index --find-links <dir>`` (``pip_args``): no index is
contacted. The lock's hashes still apply (``--require-hashes``): the wheelhouse only says where the files are, the lock
which bytes are accepted. ``check`` refuses, before the build, a wheelhouse that is missing or that lacks a wheel for a
lock line that applies to the host (its environment marker evaluated for the host's venv_python, ``marker_env``),
naming the packages, and a wheelhouse whose only wheel of a line has bytes the lock does not list, naming the file.
Whether a wheel's tags fit the host is pip's decision (it then says it found no matching distribution, naming it).
"""
from __future__ import annotations

import hashlib
import os
import re

from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv.lock import canonical_name

# PEP 427: {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$", re.I)
# What the marker evaluator needs of the host's interpreter (PEP 508 environment markers), printed as JSON.
MARKER_ENV_CODE = (
    "import json, os, platform, sys\n"
    "print(json.dumps({'python_version': '.'.join(platform.python_version_tuple()[:2]),"
    " 'python_full_version': platform.python_version(), 'os_name': os.name, 'sys_platform': sys.platform,"
    " 'platform_machine': platform.machine(), 'platform_system': platform.system(),"
    " 'platform_release': platform.release(), 'implementation_name': sys.implementation.name,"
    " 'platform_python_implementation': platform.python_implementation(), 'extra': ''}))\n")
_TOKEN_RE = re.compile(r"\s*(?:(?P<paren>[()])|(?P<op>===|==|!=|<=|>=|<|>|not\s+in\b|in\b)|(?P<bool>and\b|or\b)"
                       r"|(?P<str>'[^']*'|\"[^\"]*\")|(?P<var>[A-Za-z_][A-Za-z0-9_.]*))")
VERSION_VARS = ("python_version", "python_full_version", "implementation_version")


def pip_args(wheelhouse: str) -> list[str]:
    """What every pip step gets with a wheelhouse: pip contacts no index (PIP_INDEX_URL and the lock's index lines
    are ignored) and finds the files in the directory."""
    return ["--no-index", "--find-links", wheelhouse] if wheelhouse else []


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.findall(r"[0-9]+|[a-z]+", text.lower())[:4])


def _compare(left: str, op: str, right: str, version: bool) -> bool:
    if op in ("in", "not in"):
        return (left in right) == (op == "in")
    if version and op not in ("===",):
        a, b = _version_key(left), _version_key(right)
    else:
        a, b = left, right
    return {"==": a == b, "===": left == right, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b,
            }[op]


def marker_applies(marker: str, env: dict) -> bool:
    """PEP 508 marker (as lock lines carry them: comparisons joined by and/or, parentheses) evaluated for env.
    "" applies everywhere. A marker this evaluator cannot read raises BuildError (never a silent guess)."""
    if not marker.strip():
        return True
    tokens, pos = [], 0
    while pos < len(marker):
        m = _TOKEN_RE.match(marker, pos)
        if not m or m.end() == pos:
            if not marker[pos:].strip():
                break
            raise BuildError(f"cannot read the environment marker {marker!r} at {marker[pos:]!r}")
        kind = m.lastgroup
        value = m.group(kind)
        tokens.append((kind, " ".join(value.split()) if kind == "op" else value))
        pos = m.end()

    def atom(i):
        kind, value = tokens[i]
        if kind == "str":
            return value[1:-1], False, i + 1
        if kind == "var":
            if value not in env:
                raise BuildError(f"unknown variable {value!r} in the environment marker {marker!r}")
            return str(env[value]), value in VERSION_VARS, i + 1
        raise BuildError(f"cannot read the environment marker {marker!r}")

    def comparison(i):
        if tokens[i] == ("paren", "("):
            value, i = expr(i + 1)
            if i >= len(tokens) or tokens[i] != ("paren", ")"):
                raise BuildError(f"unbalanced parentheses in the environment marker {marker!r}")
            return value, i + 1
        left, lver, i = atom(i)
        if i >= len(tokens) or tokens[i][0] != "op":
            raise BuildError(f"cannot read the environment marker {marker!r}")
        op = tokens[i][1]
        right, rver, i = atom(i + 1)
        return _compare(left, op, right, lver or rver), i

    def conjunction(i):
        value, i = comparison(i)
        while i < len(tokens) and tokens[i] == ("bool", "and"):
            other, i = comparison(i + 1)
            value = value and other
        return value, i

    def expr(i):
        value, i = conjunction(i)
        while i < len(tokens) and tokens[i] == ("bool", "or"):
            other, i = conjunction(i + 1)
            value = value or other
        return value, i

    value, end = expr(0)
    if end != len(tokens):
        raise BuildError(f"cannot read the environment marker {marker!r}")
    return value


def wheels(directory: str) -> dict:
    """{(canonical name, version): [file names]} of the wheels in directory (other files are not pip's business)."""
    out: dict = {}
    for name in sorted(os.listdir(directory)):
        m = WHEEL_RE.match(name)
        if m and os.path.isfile(os.path.join(directory, name)):
            out.setdefault((canonical_name(m.group("name")), m.group("version").lower()), []).append(name)
    return out


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check(directory: str, lock: dict, env: dict) -> dict:
    """The wheelhouse holds a wheel with the lock's bytes for every lock line that applies to env. Returns
    {"wheels": n, "needed": n, "skipped": [lines whose marker does not apply]}; BuildError naming every missing
    package and every file with other bytes."""
    if not directory or not os.path.isabs(directory):
        raise BuildError(f"venv_wheelhouse {directory!r} must be an absolute directory on the host")
    if not os.path.isdir(directory):
        raise BuildError(f"the wheelhouse {directory} does not exist on the host (copy the wheels there first: "
                         "roles/venv/README.md 'Offline (air-gapped) builds: wheelhouse')")
    found = wheels(directory)
    missing, other_bytes, skipped, needed = [], [], [], 0
    for entry in lock["entries"]:
        line = f"{entry['name']}=={entry['version']}"
        if not marker_applies(entry["marker"], env):
            skipped.append(f"{line} ; {entry['marker']}")
            continue
        needed += 1
        files = found.get((entry["name"], entry["version"].lower()), [])
        if not files:
            missing.append(line)
            continue
        digests = {f: "sha256:" + file_sha256(os.path.join(directory, f)) for f in files}
        if not any(d in entry["hashes"] for d in digests.values()):
            other_bytes.extend(f"{f} (sha256 {d[7:19]}..., not in the lock's hashes of {line})"
                               for f, d in digests.items())
    problems = []
    if missing:
        problems.append(f"no wheel for {len(missing)} lock line(s) that apply to this host: {', '.join(missing)}")
    if other_bytes:
        problems.append(f"wheel(s) with other bytes than the lock's: {', '.join(other_bytes)}")
    if problems:
        raise BuildError(f"the wheelhouse {directory}: " + "; ".join(problems) + ". Nothing was changed.")
    return {"wheels": sum(len(v) for v in found.values()), "needed": needed, "skipped": skipped}
