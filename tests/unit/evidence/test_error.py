"""module_utils/evidence/error.py: the one error base (message, kind, evidence) and the fail_json shape it gives."""
from __future__ import annotations

import json

from ansible.module_utils.evidence.error import EvidenceError


class TransferError(EvidenceError):
    default_kind = "transfer"


def test_message_kind_and_evidence_are_carried():
    err = EvidenceError("disk full", kind="enospc", evidence={"file": "a.safetensors"}, bytes_done=5)
    assert str(err) == "disk full" and err.message == "disk full" and err.kind == "enospc"
    assert err.evidence == {"file": "a.safetensors", "bytes_done": 5}


def test_a_subclass_names_its_default_kind():
    assert TransferError("stalled").kind == "transfer"
    assert TransferError("stalled", kind="timeout").kind == "timeout"
    assert EvidenceError("x").kind == "error" and EvidenceError("x").evidence == {}


def test_fail_kwargs_never_let_evidence_override_msg_or_kind():
    err = TransferError("stalled at 55 of 550 GB", evidence={"msg": "spoof", "kind": "spoof", "file": "f"})
    out = err.fail_kwargs()
    assert out == {"msg": "stalled at 55 of 550 GB", "kind": "transfer", "file": "f"}
    json.dumps(out)


def test_evidence_is_a_copy():
    ev = {"a": 1}
    err = EvidenceError("m", evidence=ev)
    ev["a"] = 2
    assert err.evidence == {"a": 1}
