"""``pip check`` after a build, with the requirements a flavour deliberately leaves unmet (stdlib only).

Every build runs ``pip check``: a local package or fork installed with ``--no-deps`` that needs something outside the
lock fails the build, named by pip. A flavour carried onto a GPU image (``image-torch-0511``: SGLang 0.5.11's wheels
beyond the image's torch) holds what SGLang imports and serves with, not every distribution its metadata names
(anthropic, outlines, modelscope, flash-attn-4, ...; and the image's timm is not the ==1.0.16 it pins): the role's
``venv_pip_check_exempt`` names those requirements. pip's lines about them (``X requires Y, which is not installed.``
and ``X has requirement Y==1, but you have Y 2.``, pip/_internal/commands/check.py) are then kept as evidence and
the check passes; any other line - another missing or conflicting requirement, a line this parser does not know -
fails the build as before.
"""
from __future__ import annotations

import re

from ansible.module_utils.venv.lock import canonical_name

_LINE_RE = re.compile(r"^\S+ \S+ (?:requires (?P<missing>[A-Za-z0-9._-]+)|has requirement "
                      r"(?P<conflict>[A-Za-z0-9._-]+))")


def unexempted(output: str, exempt: list[str] | tuple = ()) -> tuple[list[str], list[str]]:
    """(lines that fail the build, lines about exempt requirements) of pip check's output."""
    names = {canonical_name(n) for n in exempt}
    failing, tolerated = [], []
    for line in output.splitlines():
        line = line.strip()
        if not line or line == "No broken requirements found.":
            continue
        m = _LINE_RE.match(line)
        name = canonical_name(m.group("missing") or m.group("conflict")) if m else ""
        (tolerated if name and name in names else failing).append(line)
    return failing, tolerated
