"""LAB FIXTURES ONLY: stub units for the GPU daemons a GPU host has (nvidia-persistenced, nvidia-fabricmanager), so
the sglang_service role finds them on lab hosts as on a real one (it orders its unit after them and, on an nvlink
host, Requires= the fabric manager). Each stub is a tiny long-running process; nothing of NVIDIA's runs. Never used
by a role: a test makes a stub present, absent or failed on one host (set_state), to see how the role treats it.

Every lab host gets both stubs, enabled, in its overlay before it boots (install): a B300 host has both, and the
brief's PCIe host (RTX PRO 6000) has a fabric manager installed that it does not need.
"""
from __future__ import annotations

import shlex
from pathlib import Path

STUB_UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service")
MODES = ("present", "absent", "failed")
UNIT_DIR = "etc/systemd/system"
WANTS_DIR = "etc/systemd/system/multi-user.target.wants"
FAILURE = "lab stub: simulated failure (NVSwitch fabric initialization failed)"


def unit_text(unit: str, mode: str = "present") -> str:
    """The stub's unit file: a sleeper when present, a process that exits 1 with a message when failed."""
    if mode == "failed":
        run = f"/bin/sh -c 'echo \"{FAILURE}\" >&2; exit 1'"
    else:
        run = "/bin/sh -c 'echo \"lab stub of %n running (no GPU here)\"; exec sleep infinity'"
    return (f"# LAB FIXTURE ONLY (lab/gpu_daemons.py): a stand-in for {unit}, not NVIDIA's daemon.\n"
            f"[Unit]\nDescription=LAB STUB of {unit}\n\n[Service]\nType=simple\nExecStart={run}\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def install(rootdir: str | Path) -> None:
    """Write both stubs, enabled, into a host's root filesystem before it boots (lab/machines.py prepare_host)."""
    root = Path(rootdir)
    (root / WANTS_DIR).mkdir(parents=True, exist_ok=True)
    for unit in STUB_UNITS:
        (root / UNIT_DIR / unit).write_text(unit_text(unit))
        link = root / WANTS_DIR / unit
        link.unlink(missing_ok=True)
        link.symlink_to(f"/{UNIT_DIR}/{unit}")


def state_command(unit: str, mode: str) -> str:
    """The shell command that puts the stub `unit` in `mode` on a running host: present (loaded, active), absent
    (not-found: the unit file gone) or failed (loaded, ActiveState failed, its message in the journal)."""
    if unit not in STUB_UNITS or mode not in MODES:
        raise ValueError(f"stub {unit!r} / mode {mode!r}: one of {STUB_UNITS} and one of {MODES}")
    path, link = f"/{UNIT_DIR}/{unit}", f"/{WANTS_DIR}/{unit}"
    if mode == "absent":
        return (f"systemctl stop {unit}; rm -f {path} {link}; systemctl daemon-reload; "
                f"systemctl reset-failed {unit} 2>/dev/null; true")
    write = f"printf %s {shlex.quote(unit_text(unit, mode))} > {path}; ln -sf {path} {link}; systemctl daemon-reload"
    if mode == "present":
        return f"{write}; systemctl reset-failed {unit} 2>/dev/null; systemctl restart {unit}"
    # failed: the start fails at once (Type=simple: systemctl returns, the unit then settles in failed)
    return (f"{write}; systemctl restart {unit}; for i in $(seq 50); do "
            f"[ \"$(systemctl show -p ActiveState --value {unit})\" = failed ] && exit 0; sleep 0.1; done; exit 1")
