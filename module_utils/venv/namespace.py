"""The private mount namespace a venv is built in: the stage bind-mounted over the live path (``unshare --mount``).

The venv's scripts carry its absolute path in their shebangs, so it must be built AT the live path. To keep the live
venv untouched until the swap, every build step runs in a private mount namespace where the stage directory is
bind-mounted over the live path: inside, pip sees /opt/sglang/venv; the bytes land in <parent>/.venv.stage. Nothing
outside the namespace sees the half-built venv.
"""
from __future__ import annotations


def in_namespace(stage: str, live: str, argv: list[str]) -> list[str]:
    """argv that runs `argv` with stage bind-mounted over live in a private mount namespace."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", stage, live,
            *argv]
