"""What of real SGLang's HTTP surface depends on the emulated version (the version of the flag schema): whether
/ready exists, which paths need no API key, and the fixed values its answers carry."""
from __future__ import annotations

from sglang_standin import server_args as _server_args

# The SGLang version the stand-in emulates (the version of its flag schema); HTTP details differ per version.
SGLANG_VERSION = getattr(_server_args, "SGLANG_VERSION", None) or "0.5.11"


def _version_tuple(v: str) -> tuple:
    out = []
    for piece in v.replace("+", ".").split("."):
        if not piece.isdigit():
            break
        out.append(int(piece))
    return tuple(out)


# /ready: only from 0.5.23 on (0.5.11 answers 404). Open without the key (sglang/srt/utils/auth.py,
# decide_request_auth): paths starting with /health or /metrics, and /ready where it exists.
HAS_READY = _version_tuple(SGLANG_VERSION) >= (0, 5, 23)
OPEN_PREFIXES = ("/health", "/metrics") + (("/ready",) if HAS_READY else ())
WEIGHT_VERSION = "default"
EOS_TOKEN_ID = 2  # what meta_info.finish_reason.matched / matched_stop name when the model stopped by itself
