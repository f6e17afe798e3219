"""The stand-in's process output, as real SGLang writes it: log lines on stderr, the scheduler's crash report (then
exit 1), and the SGLANG_STANDIN_* number knobs read from the environment (a bad value is logged and ignored)."""
from __future__ import annotations

import os
import sys
import time


def log(msg: str) -> None:
    """Like real SGLang's logging: on stderr (uvicorn's access lines are real SGLang's only stdout)."""
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def crash(where: str, detail: str) -> None:
    log(f"Scheduler hit an exception: Traceback (most recent call last):\n  File \"standin/{where}.py\", line 1\n"
        f"RuntimeError: {detail}")
    log("Received sigquit from a child process. It usually means the child failed.")
    os._exit(1)


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        log(f"ignoring {name}={raw!r}: not a number")
        return default
