"""The lab hosts' Debian root filesystem: built once with debootstrap into the cache (keyed by suite, mirror and
package list) and configured for systemd-nspawn; hosts boot from an overlay on it and never write to it."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from lab.error import LabError
from lab.paths import CACHE_DIR
from lab.system import locked

SUITE = "bookworm"
MIRROR = os.environ.get("LAB_MIRROR", "http://deb.debian.org/debian")
# Packages of every lab host: what a freshly installed bare-metal Debian host has, plus what roles expect.
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "sudo", "iproute2",
    "ca-certificates", "curl", "patch", "zstd", "rsync", "procps", "gnupg",
)
# Units that make no sense in a container or would take the dpkg lock behind a test's back.
MASKED_UNITS = (
    "apt-daily.timer", "apt-daily-upgrade.timer", "apt-daily.service", "apt-daily-upgrade.service",
    "console-getty.service", "getty@tty1.service", "e2scrub_all.timer", "fstrim.timer",
    "systemd-timesyncd.service", "dpkg-db-backup.timer",
)


def rootfs(log=print) -> Path:
    """The cached Debian rootfs directory (debootstrap once, keyed by suite, mirror and package list).

    Hosts never write to it: each boots from an overlay (this directory below, the host's own upper layer
    above), so creating a host costs a mount, not a copy."""
    key = hashlib.sha256("\n".join((SUITE, MIRROR, *PACKAGES, *MASKED_UNITS, "v3")).encode()).hexdigest()[:12]
    final = CACHE_DIR / f"rootfs-{SUITE}-{key}"
    with locked(CACHE_DIR / ".build.lock"):
        if (final / "etc/os-release").exists():
            return final
        build = CACHE_DIR / f"build-{key}"
        shutil.rmtree(build, ignore_errors=True)
        log(f"lab: building the {SUITE} rootfs with debootstrap (once; about a minute) into {final}")
        started = time.monotonic()
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(build), MIRROR],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise LabError(f"debootstrap failed (exit {proc.returncode}); check the Debian mirror {MIRROR} is reachable: "
                           f"{proc.stdout[-600:]}{proc.stderr[-600:]}")
        configure_rootfs(build)
        shutil.rmtree(final, ignore_errors=True)
        build.rename(final)
        log(f"lab: rootfs built in {time.monotonic() - started:.0f}s")
    return final


def configure_rootfs(root: Path) -> None:
    etc = root / "etc"
    for unit in MASKED_UNITS:
        link = etc / "systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # networkd configures host0 from a per-host file written at boot time.
    wants = etc / "systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "systemd-networkd.service").unlink(missing_ok=True)
    (wants / "systemd-networkd.service").symlink_to("/lib/systemd/system/systemd-networkd.service")
    (etc / "systemd/network").mkdir(parents=True, exist_ok=True)
    # Host keys are made per host at creation, never shared through the cache.
    for key in (etc / "ssh").glob("ssh_host_*"):
        key.unlink()
    (etc / "ssh/sshd_config.d").mkdir(exist_ok=True)
    (etc / "ssh/sshd_config.d/lab.conf").write_text(
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\nMaxStartups 64:30:128\n")
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    (etc / "apt/sources.list").write_text(
        f"deb {MIRROR} {SUITE} main\ndeb {MIRROR} {SUITE}-updates main\n"
        f"deb http://deb.debian.org/debian-security {SUITE}-security main\n")
    # Trust whatever CAs this controller trusts (an intercepting egress proxy included) for HTTPS through the proxy.
    local_cas = Path("/usr/local/share/ca-certificates")
    if local_cas.is_dir():
        target = root / "usr/local/share/ca-certificates"
        target.mkdir(parents=True, exist_ok=True)
        for crt in local_cas.glob("*.crt"):
            shutil.copy2(crt, target / crt.name)
        subprocess.run(["chroot", str(root), "update-ca-certificates"], capture_output=True, check=False)
