#!/usr/bin/env python3
"""SGLang service launcher (installed by the sglang_service role).

Usage (from the unit's ExecStart): <venv python> launch.py <module> <server flags...>

Runs <module> exactly like `python -m <module> <flags...>`, after appending `--api-key <key>` when the
environment carries SGLANG_SERVICE_API_KEY (from the root-only EnvironmentFile). So the key is never in the
unit file nor in the process's command line (/proc/<pid>/cmdline is world-readable), and it is removed from
the environment before the server starts its workers. SGLang logs its resolved server_args, api_key included
(sgl-project/sglang#37457): this process's stdout/stderr are wrapped so the key reaches the journal as
[REDACTED].
"""
import io
import os
import runpy
import sys


class _Redacting(io.TextIOBase):
    """A text stream that replaces one secret before writing to the wrapped stream."""

    def __init__(self, stream, secret: str):
        super().__init__()
        self._stream = stream
        self._secret = secret

    def write(self, text):
        self._stream.write(text.replace(self._secret, "[REDACTED]"))
        return len(text)

    def flush(self):
        self._stream.flush()

    def fileno(self):
        return self._stream.fileno()

    def isatty(self):
        return self._stream.isatty()

    def writable(self):
        return True

    @property
    def encoding(self):
        return self._stream.encoding

    @property
    def buffer(self):
        return self._stream.buffer


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: launch.py <module> [server flags...]")
    module, args = sys.argv[1], sys.argv[2:]
    key = os.environ.pop("SGLANG_SERVICE_API_KEY", "")
    if key:
        args += ["--api-key", key]
        sys.stdout = _Redacting(sys.stdout, key)
        sys.stderr = _Redacting(sys.stderr, key)
    sys.argv = [module] + args
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
