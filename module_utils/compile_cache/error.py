# -*- coding: utf-8 -*-
"""The compile cache's error: a real failure (I/O, a broken probe, a partial key) that the module fails with."""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.evidence.error import EvidenceError


class CompileCacheError(EvidenceError):
    """A real failure (I/O, a broken probe): the module fails with it. Mismatches and corruption are not errors."""

    default_kind = "compile_cache"
