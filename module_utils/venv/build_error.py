"""The venv build's one error: a build, clone, flag schema or provenance step failed, with what it saw.

Raised by module_utils/venv/build.py, clone.py, flag_schema.py and provenance.py; the venv_build and venv_provenance
modules turn it into fail_json.
"""
from __future__ import annotations

from ansible.module_utils.evidence.error import EvidenceError


class BuildError(EvidenceError):
    """A build step failed; carries the command and its output tail."""

    default_kind = "build"
