# -*- coding: utf-8 -*-
"""The failures of a model transfer: the final one (FetchError), one upstream answer's (UpstreamError), and the
signal that a window request was taken over by a whole-body stream (TakenOver)."""
from __future__ import absolute_import, division, print_function

from ansible.module_utils.evidence.error import EvidenceError


class FetchError(EvidenceError):
    """Final failure of a transfer: names the file, the bytes done and the last error."""

    default_kind = "transfer"

    def __init__(self, msg, path=None, bytes_done=0, last_error=None, kind="transfer"):
        super(FetchError, self).__init__(msg, kind=kind,
                                         evidence={"file": path, "bytes_done": bytes_done, "last_error": last_error})
        self.path = path
        self.bytes_done = bytes_done
        self.last_error = last_error


class UpstreamError(EvidenceError):
    """One answer from the Hub or a peer that cannot be used; fatal: no retry can help (a size lie, 404);
    retry_after: the seconds the server asked for (429, 5xx), or None."""

    default_kind = "upstream"

    def __init__(self, msg, fatal=False, retry_after=None):
        super(UpstreamError, self).__init__(msg, evidence={"fatal": fatal, "retry_after": retry_after})
        self.fatal = fatal
        self.retry_after = retry_after


class TakenOver(EvidenceError):
    """A window request whose file is now filled by a whole-body stream: hf_transfer gets no answer (its lane is
    being retired)."""

    default_kind = "taken_over"
