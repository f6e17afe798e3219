"""The lab's one error: a problem the operator must fix (LabError), on the repository's error base."""
from __future__ import annotations

import local_module_utils

local_module_utils.install()
from ansible.module_utils.evidence.error import EvidenceError  # noqa: E402


class LabError(EvidenceError):
    """A problem the operator must fix; the message is one sentence saying what to do."""

    default_kind = "lab"
