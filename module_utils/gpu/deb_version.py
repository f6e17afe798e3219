"""Debian package version comparison, as dpkg does it: pure, stdlib only.

A port of dpkg's lib/dpkg/version.c (``parseversion`` and ``verrevcmp`` / ``dpkg_version_compare``), the rule
``dpkg --compare-versions`` applies (Debian policy 5.6.12): a version is ``[epoch:]upstream[-revision]``; the epoch
compares as a number (absent = 0), then the upstream version, then the revision (absent = ""),
each by ``verrevcmp``: alternating runs of non-digits, compared character by character with ``~`` before
everything (even the end of the string), the end of the string next, then letters, then every other character (by
its code), and runs of digits compared as numbers (leading zeros ignored).

    compare("13.0.96-1", "13.0.88-1")   -> 1      (> 0: the first is newer)
    compare("1.0~rc1", "1.0")           -> -1
    compare("1:0.9", "2.0")             -> 1      (the epoch wins)
"""
from __future__ import annotations

import re

from ansible.module_utils.evidence.error import EvidenceError

VERSION_RE = re.compile(r"^(?:(?P<epoch>[0-9]+):)?(?P<rest>[0-9][A-Za-z0-9.+~:-]*)$")


class DebVersionError(EvidenceError, ValueError):
    """Not a Debian version string."""


def parse(version: str) -> tuple[int, str, str]:
    """(epoch, upstream, revision) of a Debian version; the revision is what follows the LAST hyphen."""
    text = str(version or "").strip()
    m = VERSION_RE.match(text)
    if not m:
        raise DebVersionError(f"not a Debian version: {version!r}")
    rest = m.group("rest")
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    if "-" in rest and not revision:
        raise DebVersionError(f"not a Debian version (empty revision): {version!r}")
    if ":" in upstream and not m.group("epoch"):
        raise DebVersionError(f"not a Debian version (a colon without an epoch): {version!r}")
    return int(m.group("epoch") or 0), upstream, revision


def _order(ch: str) -> int:
    """dpkg's order() of one character of a non-digit run: ~ first, then (the end), letters, then the rest."""
    if ch == "~":
        return -1
    if ch.isdigit():
        return 0
    if ch.isascii() and ch.isalpha():
        return ord(ch)
    return ord(ch) + 256


def verrevcmp(a: str, b: str) -> int:
    """dpkg's verrevcmp: <0, 0, >0 as a sorts before, with or after b (upstream parts or revisions)."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as version a is older than, equal to or newer than b (``dpkg --compare-versions a lt|eq|gt b``)."""
    ea, ua, ra = parse(a)
    eb, ub, rb = parse(b)
    if ea != eb:
        return 1 if ea > eb else -1
    result = verrevcmp(ua, ub) or verrevcmp(ra, rb)
    return (result > 0) - (result < 0)
