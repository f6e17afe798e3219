#!/usr/bin/env python3
"""SGLang router launcher (installed by the sglang_router role; stdlib only, run by the router venv's python).

Usage (from the unit's ExecStart): <venv python> launch.py launch <smg launch flags...>
       (from the role's configure step):  <venv python> launch.py --check launch <smg launch flags...>

smg 1.13.0 takes its API key only as `--api-key K` (its parser, smg/router_args.py, reads no environment variable
for it), and an argv is world-readable in /proc/<pid>/cmdline. So the key comes from SGLANG_ROUTER_API_KEY (set
by systemd from a root-only EnvironmentFile), is blanked in the process's initial environment block and removed
from os.environ, and is handed to smg's own CLI entry point (smg.cli.main) in-process as an argument list: it is
in no unit file and in no process's argv. smg then renames the process to `smg::router` (setproctitle).

--check parses the same flags with smg's own parser (smg.launch_router.parse_router_args and
RouterArgs._validate_router_args, what `smg launch` runs before it starts) and prints one JSON line
{"ok", "version", "workers", "error"}; exit 0 when accepted, 2 when refused. Nothing is started or bound.
"""
import json
import os
import sys

KEY_ENV = "SGLANG_ROUTER_API_KEY"
EXIT_REFUSED = 2


def _scrub_environ_block(name: str) -> None:
    """Best effort: overwrite the value of `name` in the initial environment block (what /proc/<pid>/environ and a
    core dump show); os.environ.pop() alone only unlinks it."""
    try:
        import ctypes
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
        prefix = name.encode() + b"="
        i = 0
        while environ[i]:
            entry = ctypes.string_at(environ[i])
            if entry.startswith(prefix):
                ctypes.memset(environ[i] + len(prefix), ord("*"), len(entry) - len(prefix))
            i += 1
    except Exception:  # noqa: BLE001 - never fail a launch over this
        pass


def take_key() -> str:
    if KEY_ENV in os.environ:
        _scrub_environ_block(KEY_ENV)
    return os.environ.pop(KEY_ENV, "")


def check(args: list) -> int:
    """Parse and validate with smg's own parser; one JSON line; 0 accepted, 2 refused."""
    import contextlib
    import io
    from importlib.metadata import version
    out = {"ok": False, "version": version("smg"), "workers": [], "error": ""}
    err = io.StringIO()
    try:
        from smg.launch_router import parse_router_args
        with contextlib.redirect_stderr(err):
            router_args = parse_router_args(args)
            router_args._validate_router_args()
        out.update(ok=True, workers=list(router_args.worker_urls or []))
    except SystemExit:  # argparse: the message is on stderr
        lines = [line for line in err.getvalue().splitlines() if "error:" in line]
        out["error"] = lines[-1].split("error:", 1)[1].strip() if lines else "refused by smg's parser"
    except Exception as exc:  # noqa: BLE001 - smg's own validation errors, reported as they are
        out["error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out))
    return 0 if out["ok"] else EXIT_REFUSED


def main() -> int:
    argv = sys.argv[1:]
    checking = bool(argv) and argv[0] == "--check"
    if checking:
        argv = argv[1:]
    if not argv or argv[0] != "launch":
        sys.stderr.write("usage: launch.py [--check] launch <smg launch flags...>\n")
        return EXIT_REFUSED
    if "--api-key" in argv or any(a.startswith("--api-key=") for a in argv):
        sys.stderr.write("sglang-router launcher: --api-key on the command line is refused (it would be readable in "
                         f"/proc/<pid>/cmdline); put it in {KEY_ENV} (the root-only environment file)\n")
        return EXIT_REFUSED
    key = take_key()
    args = argv[1:] + (["--api-key", key] if key else [])
    if checking:
        return check(args)
    from smg.cli import main as smg_main
    smg_main(["launch"] + args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
