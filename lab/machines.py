"""The lab's machines: one systemd-nspawn container per host, booted from an overlay on the cached rootfs into
cgroups of the lab's own, reached over SSH with the lab's key and known_hosts; link shaping and pulling the plug
for the failure tests, and stopping a machine down to its last process, mount and directory."""
from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lab import gpu_daemons, zip_pyc
from lab.error import LabError
from lab.paths import CACHE_DIR, CGROUP_PARENT, CGROUP_ROOTS
from lab.system import pid_alive, run, unmount_under


@dataclass
class HostState:
    name: str
    address: str
    machine: str
    pid: int
    rootdir: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def cgroup_dirs(machine: str) -> list[Path]:
    return [root / CGROUP_PARENT / machine for root in CGROUP_ROOTS]


def cgroup_pids(machine: str) -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(machine):
        if d.exists():
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in procs.read_text().split())
    return pids


def prepare_host(name: str, index: int, state: dict, lower: Path, hostdir: Path, machine: str) -> HostState:
    """The host's root filesystem in hostdir: an overlay on `lower` with its own hostname, /etc/hosts (its peers
    by name), host0 address, proxy settings, the lab's SSH key, freshly made host keys, the stub GPU daemons
    (lab/gpu_daemons.py) and the zipimport code cache's hook (lab/zip_pyc.py)."""
    net = ipaddress.ip_network(state["subnet"])
    address = str(list(net.hosts())[9 + index])
    if hostdir.exists():
        unmount_under(hostdir)
        shutil.rmtree(hostdir)
    rootdir = hostdir / "root"
    for sub in ("upper", "work", "root"):
        (hostdir / sub).mkdir(parents=True)
    run(["mount", "-t", "overlay", f"lab-{name}", "-o",
         f"lowerdir={lower},upperdir={hostdir / 'upper'},workdir={hostdir / 'work'}", str(rootdir)])
    etc = rootdir / "etc"
    (etc / "hostname").write_text(f"{name}\n")
    peers = "".join(f"{h['address']}\t{h['name']}\n" for h in state["hosts"].values() if h["name"] != name)
    (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n{address}\t{name}\n{peers}"
                               f"{state['gateway']}\tlab-gateway\n::1\tlocalhost ip6-localhost ip6-loopback\n")
    (etc / "systemd/network/10-host0.network").write_text(
        f"[Match]\nName=host0\n\n[Network]\nAddress={address}/{net.prefixlen}\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n")
    proxy = state["proxy_url"]
    no_proxy = f"localhost,127.0.0.1,::1,{state['gateway']},{state['subnet']}"
    (etc / "environment").write_text(
        f"http_proxy={proxy}\nhttps_proxy={proxy}\nHTTP_PROXY={proxy}\nHTTPS_PROXY={proxy}\n"
        f"no_proxy={no_proxy}\nNO_PROXY={no_proxy}\n"
        "PIP_CERT=/etc/ssl/certs/ca-certificates.crt\nREQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt\n"
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt\n")
    (etc / "apt/apt.conf.d/90lab-proxy").write_text(
        f'Acquire::http::Proxy "{proxy}";\nAcquire::https::Proxy "{proxy}";\n'
        # apt ignores no_proxy: repositories the lab serves on its gateway are reached directly.
        f'Acquire::http::Proxy::{state["gateway"]} "DIRECT";\n'
        'Acquire::Retries "3";\nAPT::Install-Recommends "false";\n')
    pub = Path(state["ssh_key"] + ".pub").read_text()
    auth = rootdir / "root/.ssh/authorized_keys"
    auth.write_text(pub)
    os.chmod(auth, 0o600)
    run(["ssh-keygen", "-q", "-A", "-f", str(rootdir)])
    gpu_daemons.install(rootdir)  # lab fixtures: stub nvidia-persistenced / nvidia-fabricmanager units
    zip_pyc.install(rootdir)      # lab infrastructure: AnsiballZ imports compiled once, not per task
    return HostState(name=name, address=address, machine=machine, pid=0, rootdir=str(rootdir))


def boot(host: HostState, bridge: str, log_path: Path) -> int:
    """Start the machine's systemd-nspawn on the bridge, inside the machine's cgroups; returns its PID."""
    cg_dirs = cgroup_dirs(host.machine)
    for d in cg_dirs:
        d.mkdir(parents=True, exist_ok=True)

    def enter_cgroups() -> None:  # runs in the child before exec: nspawn keeps this cgroup (--keep-unit)
        for d in cg_dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    log = open(log_path, "ab")
    proc = subprocess.Popen(
        ["systemd-nspawn", "--boot", "--register=no", "--keep-unit", f"--network-bridge={bridge}",
         f"--machine={host.machine}", f"--hostname={host.name}", "-D", host.rootdir, "--console=passive",
         "--link-journal=no", "--resolv-conf=off", "--timezone=off",
         # the compiled-code cache of AnsiballZ imports, shared by every lab host (lab/zip_pyc.py)
         f"--bind={zip_pyc.host_dir(CACHE_DIR)}:{zip_pyc.GUEST_DIR}"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=enter_cgroups,
        env={**os.environ, "SYSTEMD_NSPAWN_TMPFS_TMP": "0"})
    return proc.pid


def wait_ready(host: HostState, state: dict, lab_dir: Path, timeout: float = 90.0) -> None:
    """Bounded wait until sshd answers and systemd reports the boot finished."""
    deadline = time.monotonic() + timeout
    while True:
        if not pid_alive(host.pid, "systemd-nspawn"):
            tail = (lab_dir / f"{host.name}.log").read_text(errors="replace")[-1500:]
            raise LabError(f"{host.name} exited during boot; its console log ends with:\n{tail}")
        with contextlib.suppress(OSError), socket.create_connection((host.address, 22), timeout=0.5) as s:
            s.settimeout(2)
            if s.recv(64).startswith(b"SSH-"):
                break
        if time.monotonic() > deadline:
            raise LabError(f"{host.name} ({host.address}) did not answer SSH within {timeout:.0f}s: see {lab_dir}/{host.name}.log.")
        time.sleep(0.1)
    left = max(5, int(deadline - time.monotonic()))
    proc = ssh(state, lab_dir, host.name, f"timeout {left} systemctl is-system-running --wait", check=False)
    if proc.stdout.strip() not in ("running", "degraded"):
        raise LabError(f"{host.name}: systemd did not finish booting ({proc.stdout.strip() or proc.stderr.strip()}).")


def ssh(state: dict, lab_dir: Path, host: str, command: str, check: bool = True, timeout: float = 120,
        **kw) -> subprocess.CompletedProcess:
    """Run `command` on a lab host as root over SSH (the same way Ansible connects)."""
    address = state["hosts"][host]["address"]
    cmd = ["ssh", "-i", state["ssh_key"], "-o", "StrictHostKeyChecking=yes",
           "-o", f"UserKnownHostsFile={state.get('known_hosts') or lab_dir / 'known_hosts'}",
           "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", f"root@{address}", command]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise LabError(f"{host}: `{command}` failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc


def ssh_answers(address: str) -> bool:
    """Whether sshd greets on the host's port 22 (for `python -m lab status`)."""
    with contextlib.suppress(OSError), socket.create_connection((address, 22), timeout=1) as s:
        s.settimeout(2)
        return s.recv(8).startswith(b"SSH-")
    return False


def write_known_hosts(state: dict, lab_dir: Path) -> Path:
    """The lab's own known_hosts: every host's address with the public host keys made for it at creation
    (read from its root filesystem, never from the network), so every SSH login to a lab host checks its key
    (StrictHostKeyChecking=yes), exactly as production logins do with the operator's known_hosts."""
    lines = []
    for h in state["hosts"].values():
        etc_ssh = Path(h["rootdir"]) / "etc/ssh"
        keys = sorted(etc_ssh.glob("ssh_host_*_key.pub"))
        if not keys:
            raise LabError(f"{h['name']}: no host keys under {etc_ssh}")
        for pub in keys:
            kind, blob = pub.read_text().split()[:2]
            lines.append(f"{h['address']} {kind} {blob}\n")
    path = lab_dir / "known_hosts"
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(path)
    return path


def stop_host(host: HostState, timeout: float = 30.0) -> None:
    if host.pid and pid_alive(host.pid, "systemd-nspawn"):
        os.kill(host.pid, signal.SIGTERM)  # nspawn asks the container's systemd to power off
        deadline = time.monotonic() + timeout
        while pid_alive(host.pid, "systemd-nspawn") and time.monotonic() < deadline:
            time.sleep(0.1)
    # Whatever is left in the machine's cgroups (a stuck nspawn, strays) is killed, then the cgroups go.
    kill_all(host.machine)
    for d in cgroup_dirs(host.machine):
        if d.exists():
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()
    if host.rootdir:
        hostdir = Path(host.rootdir).parent
        unmount_under(hostdir)
        shutil.rmtree(hostdir, ignore_errors=True)


# ---------------------------------------------------------------------- link shaping and failures
def machine_pid(machine: str) -> int:
    """PID (in our namespace) of the machine's systemd: the process of its cgroup that runs systemd as init."""
    for pid in sorted(cgroup_pids(machine)):
        with contextlib.suppress(OSError, IndexError):
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            nspid = [ln for ln in status if ln.startswith("NSpid:")][0].split()
            if nspid[-1] == "1" and len(nspid) > 2:  # PID 1 inside its own PID namespace
                return pid
    raise LabError(f"machine {machine}: no systemd (PID 1 of the container) found in its cgroup; is it up?")


def set_link(state: dict, host: str, mbit: float) -> dict:
    """Shape one host's link on the lab bridge to `mbit` Mbit/s each way (tc tbf on both ends of its veth: the
    bridge side limits what the host receives, the host0 side inside its network namespace what it sends);
    0 removes the shaping. Returns what was set."""
    h = state["hosts"][host]
    veth = f"vb-{h['machine']}"[:15]
    pid = machine_pid(h["machine"])
    inside = ["nsenter", "-t", str(pid), "-n"]
    for prefix, dev in (([], veth), (inside, "host0")):
        run(prefix + ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        if mbit > 0:
            # burst >= rate/HZ and a few MTUs; latency bounds the queue (drops beyond it, TCP backs off)
            burst = max(32 * 1024, int(mbit * 1e6 / 8 / 100))
            run(prefix + ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                          "burst", str(burst), "latency", "200ms"])
    return {"host": host, "veth": veth, "mbit": mbit}


def kill_host(state: dict, host: str) -> None:
    """Pull the plug: SIGKILL every process of the machine (its services die mid-answer, its veth goes away).
    `up()` boots it again afresh."""
    machine = state["hosts"][host]["machine"]
    if not kill_all(machine):
        raise LabError(f"{host}: processes still alive after SIGKILL: {sorted(cgroup_pids(machine))[:10]}")


def kill_all(machine: str) -> bool:
    """SIGKILL every process in the machine's cgroups until none is left (bounded: 5 s); True when none is."""
    for _ in range(50):
        pids = cgroup_pids(machine)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    return not cgroup_pids(machine)
