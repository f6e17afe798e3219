"""The text of one of our modules, to ship to a host and run there as a standalone script (the fleet peer server and
hf_verify beside it, the torch probe, the flag schema extractor). Read through the module's loader, so it works the
same from a checkout and from inside an AnsiballZ payload (zipimport)."""
from __future__ import annotations

import inspect

from ansible.module_utils.evidence.error import EvidenceError


class SourceError(EvidenceError):
    default_kind = "source"


def module_source(mod) -> str:
    """The whole source text of an imported module; SourceError when its loader cannot give it."""
    try:
        text = inspect.getsource(mod)
    except (OSError, TypeError) as exc:
        raise SourceError("cannot read the source of %s (loader %r): %s"
                          % (getattr(mod, "__name__", mod), getattr(mod, "__loader__", None), exc),
                          evidence={"module": getattr(mod, "__name__", str(mod))}) from exc
    if not text:
        raise SourceError("the source of %s is empty" % getattr(mod, "__name__", mod))
    return text
