"""Target-side flag preflight: ask the installed server's own parser whether an argv is accepted.

Runs `<venv python> -c <snippet> <argv...>`; the snippet imports `<module>.prepare_server_args` (upstream:
sglang.srt.server_args, which needs the venv's torch; the lab stand-in: sglang_standin.server_args) and calls it.
argparse rejections exit 2 with the parser's message on stderr; semantic checks raise (exit 1). Nothing is
started, written or restarted. Stdlib only.
"""
from __future__ import annotations

import os
import subprocess

OK_MARKER = "SGLANG_PREFLIGHT_ACCEPTED"
SNIPPET = (
    "import importlib, sys\n"
    "mod = importlib.import_module(sys.argv[1])\n"
    "getattr(mod, sys.argv[2])(sys.argv[3:])\n"
    f"print({OK_MARKER!r})\n"
)
# Placeholder put in place of the real key: the preflight checks the flag is accepted, never sees the secret.
API_KEY_PLACEHOLDER = "preflight-placeholder-key"


def command(python: str, module: str, argv: list[str], function: str = "prepare_server_args",
            with_api_key: bool = False) -> list[str]:
    argv = [str(a) for a in argv]
    if with_api_key:
        argv += ["--api-key", API_KEY_PLACEHOLDER]
    return [python, "-c", SNIPPET, module, function] + argv


def check(python: str, module: str, argv: list[str], function: str = "prepare_server_args",
          with_api_key: bool = False, timeout: float = 300.0, env: dict | None = None, run=subprocess.run) -> dict:
    """{"accepted": bool, "rc": int, "message": str (the parser's complaint, or "")}"""
    cmd = command(python, module, argv, function, with_api_key)
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    except FileNotFoundError:
        return {"accepted": False, "rc": 127, "message": f"{python} not found (is the venv installed?)"}
    except subprocess.TimeoutExpired:
        return {"accepted": False, "rc": 124, "message": f"the parser did not answer within {timeout:.0f}s"}
    accepted = proc.returncode == 0 and OK_MARKER in proc.stdout
    message = "" if accepted else summarize(proc.stderr or proc.stdout)
    return {"accepted": accepted, "rc": proc.returncode, "message": message}


def summarize(stderr: str, max_lines: int = 12) -> str:
    """The useful end of a parser complaint: argparse's 'error:' line, or the exception line of a traceback."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error: " in ln or ln.startswith(("ValueError", "AssertionError",
                                                                          "ModuleNotFoundError", "ImportError",
                                                                          "TypeError", "Exception"))]
    head = errors[-1] if errors else (lines[-1] if lines else "(no output)")
    tail = "\n".join(lines[-max_lines:])
    return head if head == tail else f"{head}\n--- parser output (last lines) ---\n{tail}"
