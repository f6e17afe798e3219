"""The one error base of this repository's module_utils: a failure that carries its message, its kind and its evidence.

A module turns any of them into the same fail_json shape (EvidenceError.fail_kwargs): `msg`, `kind` and the
evidence's keys (the file, the bytes done, the journal tail, the command's output ...), so an operator reads every
failure the same way. Each package keeps its own subclass (HubError, SyncError, ReadyError ...) for `except`
clauses that must tell them apart; the subclass names its default kind.
"""
from __future__ import annotations


class EvidenceError(Exception):
    """message: what went wrong, in words; kind: a short machine-readable class of failure ("timeout", "refused",
    "transfer" ...); evidence: a JSON-serialisable dict of what was seen."""

    default_kind = "error"

    def __init__(self, message="", kind=None, evidence=None, **more):
        super().__init__(message)
        self.message = str(message)
        self.kind = kind or self.default_kind
        self.evidence = dict(evidence or {}, **more)

    def fail_kwargs(self) -> dict:
        """Keyword arguments for AnsibleModule.fail_json: the evidence first, then msg and kind (never overridden)."""
        out = {k: v for k, v in self.evidence.items() if k not in ("msg", "kind")}
        out.update(msg=self.message, kind=self.kind)
        return out
