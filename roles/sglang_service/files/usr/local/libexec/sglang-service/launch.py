#!/usr/bin/env python3
"""SGLang service launcher (installed by the sglang_service role).

Usage (from the unit's ExecStart): <venv python> launch.py <module> <server flags...>

Runs <module> exactly like `python -m <module> <flags...>`, after appending `--api-key <key>` when the
environment carries SGLANG_SERVICE_API_KEY (from the root-only EnvironmentFile). The key therefore never
appears in the unit file or in the process's command line (/proc/<pid>/cmdline is world-readable), and it is
removed from the environment before the server starts its workers.
"""
import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: launch.py <module> [server flags...]")
    module, args = sys.argv[1], sys.argv[2:]
    key = os.environ.pop("SGLANG_SERVICE_API_KEY", "")
    if key:
        args += ["--api-key", key]
    sys.argv = [module] + args
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
