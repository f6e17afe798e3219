"""The lab: local Debian 12 hosts with systemd as PID 1, booted with systemd-nspawn on a bridge of our own.

A test double for bare-metal GPU hosts everywhere except the GPU. One lab = one bridge on an unused /24, an
HTTP proxy on its gateway address (the hosts' only way out, restricted to Debian and PyPI), and one nspawn
machine per inventory host. Several labs (LAB_NAME) can run side by side; each owns its state directory
.lab/<name>/ and everything listed in its state.json, and `down` removes exactly that.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE_ROOT = Path(os.environ.get("LAB_STATE_DIR", ROOT / ".lab"))
CACHE_DIR = Path(os.environ.get("LAB_CACHE", "/var/cache/sglang-lab"))
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
CGROUP_PARENT = "sglang-lab"
GLOBAL_LOCK = Path("/run/sglang-lab.lock")

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
# The hosts reach only these through the proxy.
PROXY_ALLOWED_DOMAINS = (
    r"^deb\.debian\.org$", r"^security\.debian\.org$", r"^pypi\.org$", r"^files\.pythonhosted\.org$",
)
PROXY_PORT = 3128
# Candidate subnets, 10.213.0.0/16 carved into /24s; the first unused one (by address, route and other lab) wins.
SUBNET_POOL = ipaddress.ip_network("10.213.0.0/16")
DEFAULT_HOSTS = ("b300-lab", "ct200-lab")
# The fleet lab (inventory/fleet-lab): six like hosts for the fan-out of weights (LAB_NAME of its own).
FLEET_HOSTS = tuple(f"fleet{i}" for i in range(1, 7))
# The router lab (inventory/router-lab): SGLang's router on router1 in front of two serving hosts.
ROUTER_LAB_HOSTS = ("router1", "serve1", "serve2")
# The multi-node lab (inventory/multinode-lab): one serving group of two ranks, mn0 (rank 0) and mn1.
MULTINODE_HOSTS = ("mn0", "mn1")
# Host sets by name, for `python -m lab up --hosts NAME` and LAB_HOSTS=NAME (molecule scenarios).
HOST_SETS = {"default": DEFAULT_HOSTS, "fleet": FLEET_HOSTS, "router": ROUTER_LAB_HOSTS, "multinode": MULTINODE_HOSTS}
# Test doubles the lab runs on its gateway for the whole lab's life (hosts reach them directly, no proxy):
# name -> (port, argv after `python -m`). "{gateway}", "{port}" and "{dir}" are filled in at start.
LAB_SERVICES = {
    "testhub": (8090, ["lab.testhub", "--bind", "{gateway}", "--port", "{port}", "--file-port", "8091",
                       "--seed", "0", "--ready-file", "{dir}/testhub.ready",
                       "--repo", "demo/Kimi-K2.6-tiny:shards=4,shard_size=8MiB",
                       "--repo", "demo/Kimi-K2.6-DFlash-tiny:shards=1,shard_size=4MiB",
                       "--repo", "lab/sharegpt-mini:type=dataset"]),
    # The operator's SGLang "fork" for the venv role's clone route (lab/gitfork.py): the stand-in with the lab's DDTree
    # patch committed, built from the working tree at start (fixed identity and dates: a stable sha), a bare repo
    # served with git's dumb HTTP protocol. It describes itself in {dir}/gitfork.json: lab_services.gitfork.url
    # (the repository URL) and .commit (branch ddtree; .base_commit: the stand-in without the patch).
    "gitfork": (8092, ["lab.gitfork", "--bind", "{gateway}", "--port", "{port}", "--dir", "{dir}/gitfork",
                       "--info", "{dir}/gitfork.json"]),
}


class LabError(Exception):
    """A problem the operator must fix; the message is one sentence saying what to do."""


@dataclass
class HostState:
    name: str
    address: str
    machine: str
    pid: int
    rootdir: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise LabError(f"`{' '.join(cmd)}` failed with exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def _pid_alive(pid: int, needle: str = "") -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    if stat.rsplit(")", 1)[1].split()[0] == "Z":
        return False
    return needle in cmdline


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine already has an address or a route in (all tables)."""
    nets: list[ipaddress.IPv4Network] = []
    addrs = json.loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]")
    for link in addrs:
        for info in link.get("addr_info", []):
            nets.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
    routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("default", "") or route.get("type") in ("broadcast", "local") and dst.startswith("127."):
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def subnet_in_use(subnet: ipaddress.IPv4Network) -> str | None:
    """Why `subnet` cannot be used (what overlaps it), or None when it is free."""
    for net in used_networks():
        if net.overlaps(subnet):
            return f"{net} is already configured on this machine"
    for other in STATE_ROOT.glob("*/state.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            if ipaddress.ip_network(json.loads(other.read_text())["subnet"]).overlaps(subnet):
                return f"lab {other.parent.name} uses it"
    return None


def host_set(name: str) -> tuple[str, ...]:
    """The hosts of a named set (HOST_SETS): how `--hosts` and LAB_HOSTS pick a lab's machines."""
    if name not in HOST_SETS:
        raise LabError(f"unknown host set {name!r}: one of {sorted(HOST_SETS)}")
    return HOST_SETS[name]


class Lab:
    def __init__(self, name: str | None = None, hosts: tuple[str, ...] | None = None, subnet: str | None = None):
        self.name = name or os.environ.get("LAB_NAME", "default")
        if not self.name.replace("-", "").replace("_", "").isalnum() or len(self.name) > 40:
            raise LabError(f"lab name {self.name!r} must be letters, digits, '-' or '_' (at most 40): pick another LAB_NAME.")
        self.hosts = hosts if hosts is not None else host_set(os.environ.get("LAB_HOSTS", "default"))
        self.requested_subnet = subnet or os.environ.get("LAB_SUBNET")
        self.dir = STATE_ROOT / self.name
        self.state_file = self.dir / "state.json"
        # Bridge, machine and cgroup names derive from the state directory, so two checkouts never share them.
        self.short = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:6]
        self.bridge = f"lab-{self.short}"

    # ------------------------------------------------------------------ state
    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.state_file)

    # ------------------------------------------------------------------ preflight
    @staticmethod
    def preflight() -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (it creates a bridge, cgroups and nspawn machines): run it as root, e.g. with sudo.")
        for tool, package in (("debootstrap", "debootstrap"), ("systemd-nspawn", "systemd-container"),
                              ("tinyproxy", "tinyproxy"), ("ip", "iproute2"), ("ssh", "openssh-client"),
                              ("ssh-keygen", "openssh-client")):
            if not shutil.which(tool):
                raise LabError(f"{tool} is not installed: run `apt-get install {package}` (or `make deps`) first.")
        for root in CGROUP_ROOTS:
            if not (root / "cgroup.procs").exists():
                raise LabError(f"{root} is not a mounted cgroup hierarchy: the lab needs the v1 systemd and the unified hierarchy mounted.")

    # ------------------------------------------------------------------ rootfs
    def rootfs(self, log=print) -> Path:
        """The cached Debian rootfs directory (debootstrap once, keyed by suite, mirror and package list).

        Hosts never write to it: each boots from an overlay (this directory below, the host's own upper layer
        above), so creating a host costs a mount, not a copy."""
        key = hashlib.sha256("\n".join((SUITE, MIRROR, *PACKAGES, *MASKED_UNITS, "v3")).encode()).hexdigest()[:12]
        final = CACHE_DIR / f"rootfs-{SUITE}-{key}"
        with _locked(CACHE_DIR / ".build.lock"):
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
            self._configure_rootfs(build)
            shutil.rmtree(final, ignore_errors=True)
            build.rename(final)
            log(f"lab: rootfs built in {time.monotonic() - started:.0f}s")
        return final

    @staticmethod
    def _configure_rootfs(root: Path) -> None:
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

    # ------------------------------------------------------------------ network
    def _pick_subnet(self) -> ipaddress.IPv4Network:
        if self.requested_subnet:
            try:
                net = ipaddress.ip_network(self.requested_subnet)
            except ValueError as exc:
                raise LabError(f"LAB_SUBNET {self.requested_subnet!r} is not a network ({exc}): give one like 10.213.7.0/24.") from exc
            why = subnet_in_use(net)
            if why:
                raise LabError(f"subnet {net} is already in use ({why}): pick a free one with LAB_SUBNET or omit it to let the lab choose.")
            return net
        start = int(self.short, 16) % 256
        for i in range(256):
            net = list(SUBNET_POOL.subnets(new_prefix=24))[(start + i) % 256]
            if subnet_in_use(net) is None:
                return net
        raise LabError(f"no free /24 left in {SUBNET_POOL}: run `python -m lab down` for labs you no longer need.")

    def _ensure_bridge(self, net: ipaddress.IPv4Network) -> str:
        gateway = str(next(net.hosts()))
        if _run(["ip", "link", "show", self.bridge], check=False).returncode != 0:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{gateway}/{net.prefixlen}", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        return gateway

    def _ensure_proxy(self, state: dict) -> None:
        self._stop_services(state)
        pid = state.get("proxy_pid", 0)
        if pid and _pid_alive(pid, "tinyproxy"):
            return
        pdir = self.dir / "proxy"
        pdir.mkdir(parents=True, exist_ok=True)
        os.chmod(pdir, 0o777)
        (pdir / "filter").write_text("\n".join(PROXY_ALLOWED_DOMAINS) + "\n")
        (pdir / "tinyproxy.conf").write_text(
            f'User nobody\nGroup nogroup\nPort {PROXY_PORT}\nListen {state["gateway"]}\nTimeout 600\n'
            f'LogFile "{pdir}/tinyproxy.log"\nLogLevel Connect\nMaxClients 200\n'
            f'Allow {state["subnet"]}\nConnectPort 443\nConnectPort 80\n'
            f'Filter "{pdir}/filter"\nFilterURLs Off\nFilterExtended On\nFilterDefaultDeny Yes\n'
            f'DisableViaHeader Yes\n')
        log = open(pdir / "stdout.log", "ab")
        proc = subprocess.Popen(["tinyproxy", "-d", "-c", str(pdir / "tinyproxy.conf")], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        state["proxy_pid"] = proc.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LabError(f"tinyproxy exited at start: {(pdir / 'stdout.log').read_text()[-400:]}")
            with contextlib.suppress(OSError), socket.create_connection((state["gateway"], PROXY_PORT), timeout=0.5):
                return
            time.sleep(0.05)
        raise LabError("tinyproxy did not start listening within 10s: see .lab/<name>/proxy/stdout.log.")

    def _ensure_services(self, state: dict) -> None:
        """Start the lab's test doubles (LAB_SERVICES) on the gateway; bounded wait until each listens."""
        services = state.setdefault("services", {})
        sdir = self.dir / "services"
        sdir.mkdir(parents=True, exist_ok=True)
        for name, (port, template) in LAB_SERVICES.items():
            current = services.get(name, {})
            if current.get("pid") and _pid_alive(current["pid"], template[0]):
                continue
            argv = [a.format(gateway=state["gateway"], port=port, dir=sdir) for a in template]
            log = open(sdir / f"{name}.log", "ab")
            proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=ROOT,
                                    env={**os.environ, "PYTHONPATH": str(ROOT), "TESTHUB_CACHE": str(CACHE_DIR / "testhub")})
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise LabError(f"lab service {name} exited at start: {(sdir / f'{name}.log').read_text()[-600:]}")
                with contextlib.suppress(OSError), socket.create_connection((state["gateway"], port), timeout=0.5):
                    break
                if time.monotonic() > deadline:
                    raise LabError(f"lab service {name} did not listen on {state['gateway']}:{port} within 60s.")
                time.sleep(0.1)
            services[name] = {"pid": proc.pid, "url": f"http://{state['gateway']}:{port}"}
            # a service may describe itself further in {dir}/<name>.json, written before it listens (gitfork: url, commit)
            with contextlib.suppress(OSError, ValueError):
                services[name].update(json.loads((sdir / f"{name}.json").read_text()))

    def _stop_services(self, state: dict) -> None:
        for name, svc in state.get("services", {}).items():
            pid = svc.get("pid", 0)
            needle = LAB_SERVICES.get(name, ("", [""]))[1][0]
            if pid and _pid_alive(pid, needle):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 5
                while _pid_alive(pid, needle) and time.monotonic() < deadline:
                    time.sleep(0.05)
                if _pid_alive(pid, needle):
                    os.kill(pid, signal.SIGKILL)

    # ------------------------------------------------------------------ hosts
    def _cgroup_dirs(self, machine: str) -> list[Path]:
        return [root / CGROUP_PARENT / machine for root in CGROUP_ROOTS]

    def _prepare_host(self, name: str, index: int, state: dict, lower: Path) -> HostState:
        net = ipaddress.ip_network(state["subnet"])
        address = str(list(net.hosts())[9 + index])
        machine = f"l{self.short}{index}"
        hostdir = self.dir / "machines" / name
        if hostdir.exists():
            self._unmount_under(hostdir)
            shutil.rmtree(hostdir)
        rootdir = hostdir / "root"
        for sub in ("upper", "work", "root"):
            (hostdir / sub).mkdir(parents=True)
        _run(["mount", "-t", "overlay", f"lab-{name}", "-o",
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
        _run(["ssh-keygen", "-q", "-A", "-f", str(rootdir)])
        return HostState(name=name, address=address, machine=machine, pid=0, rootdir=str(rootdir))

    def _boot(self, host: HostState) -> int:
        cg_dirs = self._cgroup_dirs(host.machine)
        for d in cg_dirs:
            d.mkdir(parents=True, exist_ok=True)

        def enter_cgroups() -> None:  # runs in the child before exec: nspawn keeps this cgroup (--keep-unit)
            for d in cg_dirs:
                (d / "cgroup.procs").write_text(str(os.getpid()))

        log = open(self.dir / f"{host.name}.log", "ab")
        proc = subprocess.Popen(
            ["systemd-nspawn", "--boot", "--register=no", "--keep-unit", f"--network-bridge={self.bridge}",
             f"--machine={host.machine}", f"--hostname={host.name}", "-D", host.rootdir, "--console=passive",
             "--link-journal=no", "--resolv-conf=off", "--timezone=off"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=enter_cgroups,
            env={**os.environ, "SYSTEMD_NSPAWN_TMPFS_TMP": "0"})
        return proc.pid

    def _wait_ready(self, host: HostState, state: dict, timeout: float = 90.0) -> None:
        """Bounded wait until sshd answers and systemd reports the boot finished."""
        deadline = time.monotonic() + timeout
        while True:
            if not _pid_alive(host.pid, "systemd-nspawn"):
                tail = (self.dir / f"{host.name}.log").read_text(errors="replace")[-1500:]
                raise LabError(f"{host.name} exited during boot; its console log ends with:\n{tail}")
            with contextlib.suppress(OSError), socket.create_connection((host.address, 22), timeout=0.5) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    break
            if time.monotonic() > deadline:
                raise LabError(f"{host.name} ({host.address}) did not answer SSH within {timeout:.0f}s: see {self.dir}/{host.name}.log.")
            time.sleep(0.1)
        left = max(5, int(deadline - time.monotonic()))
        proc = self.ssh(host.name, f"timeout {left} systemctl is-system-running --wait", state=state, check=False)
        if proc.stdout.strip() not in ("running", "degraded"):
            raise LabError(f"{host.name}: systemd did not finish booting ({proc.stdout.strip() or proc.stderr.strip()}).")

    def ssh(self, host: str, command: str, state: dict | None = None, check: bool = True, timeout: float = 120,
            **kw) -> subprocess.CompletedProcess:
        """Run `command` on a lab host as root over SSH (the same way Ansible connects)."""
        state = state or self.state()
        address = state["hosts"][host]["address"]
        cmd = ["ssh", "-i", state["ssh_key"], "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={state.get('known_hosts') or self.dir / 'known_hosts'}",
               "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", f"root@{address}", command]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise LabError(f"{host}: `{command}` failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
        return proc

    # ------------------------------------------------------------------ verbs
    def up(self, log=print) -> dict:
        self.preflight()
        started = time.monotonic()
        lower = self.rootfs(log=log)
        with _locked(GLOBAL_LOCK):
            state = self.state()
            if not state:
                net = self._pick_subnet()
                state = {"name": self.name, "bridge": self.bridge, "subnet": str(net), "hosts": {}}
            net = ipaddress.ip_network(state["subnet"])
            self.bridge = state["bridge"]  # a lab made by an older checkout keeps the names it recorded
            state["gateway"] = self._ensure_bridge(net)
            state["proxy_url"] = f"http://{state['gateway']}:{PROXY_PORT}"
            self.dir.mkdir(parents=True, exist_ok=True)
            key = self.dir / "id_ed25519"
            if not key.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sglang-lab-{self.name}", "-f", str(key)])
            state["ssh_key"] = str(key)
            self._save(state)
        self._ensure_proxy(state)
        self._save(state)
        self._ensure_services(state)
        self._save(state)
        # Allocate every host's address first so each /etc/hosts names its peers.
        to_boot: list[HostState] = []
        for index, name in enumerate(self.hosts):
            current = state["hosts"].get(name)
            if current and _pid_alive(current["pid"], "systemd-nspawn"):
                continue
            if current:
                self._stop_host(HostState(**current))
            net = ipaddress.ip_network(state["subnet"])
            state["hosts"][name] = {"name": name, "address": str(list(net.hosts())[9 + index]),
                                    "machine": f"l{self.short}{index}", "pid": 0, "rootdir": ""}
        for index, name in enumerate(self.hosts):
            if state["hosts"][name]["pid"] and _pid_alive(state["hosts"][name]["pid"], "systemd-nspawn"):
                continue
            host = self._prepare_host(name, index, state, lower)
            host.pid = self._boot(host)
            state["hosts"][name] = host.to_dict()
            self._save(state)
            to_boot.append(host)
        state["known_hosts"] = str(self._write_known_hosts(state))
        self._save(state)
        for host in to_boot:
            self._wait_ready(host, state)
        state["up_seconds"] = round(time.monotonic() - started, 2)
        self._save(state)
        if to_boot:
            log(f"lab {self.name}: {', '.join(h.name for h in to_boot)} up in {state['up_seconds']}s on {self.bridge} ({state['subnet']})")
        else:
            log(f"lab {self.name}: already up ({', '.join(state['hosts'])})")
        return state

    def _write_known_hosts(self, state: dict) -> Path:
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
        path = self.dir / "known_hosts"
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(lines))
        tmp.replace(path)
        return path

    def _cgroup_pids(self, machine: str) -> set[int]:
        pids: set[int] = set()
        for d in self._cgroup_dirs(machine):
            if d.exists():
                for procs in d.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _stop_host(self, host: HostState, timeout: float = 30.0) -> None:
        if host.pid and _pid_alive(host.pid, "systemd-nspawn"):
            os.kill(host.pid, signal.SIGTERM)  # nspawn asks the container's systemd to power off
            deadline = time.monotonic() + timeout
            while _pid_alive(host.pid, "systemd-nspawn") and time.monotonic() < deadline:
                time.sleep(0.1)
        # Whatever is left in the machine's cgroups (a stuck nspawn, strays) is killed, then the cgroups go.
        self._kill_all(host.machine)
        for d in self._cgroup_dirs(host.machine):
            if d.exists():
                for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                    with contextlib.suppress(OSError):
                        sub.rmdir()
                with contextlib.suppress(OSError):
                    d.rmdir()
        if host.rootdir:
            hostdir = Path(host.rootdir).parent
            self._unmount_under(hostdir)
            shutil.rmtree(hostdir, ignore_errors=True)

    # ------------------------------------------------------------------ link shaping and failures
    def _machine_pid(self, machine: str) -> int:
        """PID (in our namespace) of the machine's systemd: the process of its cgroup that runs systemd as init."""
        for pid in sorted(self._cgroup_pids(machine)):
            with contextlib.suppress(OSError, IndexError):
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                nspid = [ln for ln in status if ln.startswith("NSpid:")][0].split()
                if nspid[-1] == "1" and len(nspid) > 2:  # PID 1 inside its own PID namespace
                    return pid
        raise LabError(f"machine {machine}: no systemd (PID 1 of the container) found in its cgroup; is it up?")

    def set_link(self, host: str, mbit: float, state: dict | None = None) -> dict:
        """Shape one host's link on the lab bridge to `mbit` Mbit/s each way (tc tbf on both ends of its veth: the
        bridge side limits what the host receives, the host0 side inside its network namespace what it sends);
        0 removes the shaping. Returns what was set."""
        state = state or self.state()
        h = state["hosts"][host]
        veth = f"vb-{h['machine']}"[:15]
        pid = self._machine_pid(h["machine"])
        inside = ["nsenter", "-t", str(pid), "-n"]
        for prefix, dev in (([], veth), (inside, "host0")):
            _run(prefix + ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
            if mbit > 0:
                # burst >= rate/HZ and a few MTUs; latency bounds the queue (drops beyond it, TCP backs off)
                burst = max(32 * 1024, int(mbit * 1e6 / 8 / 100))
                _run(prefix + ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                               "burst", str(burst), "latency", "200ms"])
        return {"host": host, "veth": veth, "mbit": mbit}

    def kill_host(self, host: str, state: dict | None = None) -> None:
        """Pull the plug: SIGKILL every process of the machine (its services die mid-answer, its veth goes away).
        `up()` boots it again afresh."""
        state = state or self.state()
        machine = state["hosts"][host]["machine"]
        if not self._kill_all(machine):
            raise LabError(f"{host}: processes still alive after SIGKILL: {sorted(self._cgroup_pids(machine))[:10]}")

    def _kill_all(self, machine: str) -> bool:
        """SIGKILL every process in the machine's cgroups until none is left (bounded: 5 s); True when none is."""
        for _ in range(50):
            pids = self._cgroup_pids(machine)
            if not pids:
                return True
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        return not self._cgroup_pids(machine)

    @staticmethod
    def _unmount_under(path: Path) -> None:
        prefix = str(path.resolve())
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mnt in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)

    def down(self, log=print) -> None:
        state = self.state()
        if not state:
            log(f"lab {self.name}: not up")
            return
        for h in state.get("hosts", {}).values():
            self._stop_host(HostState(**h))
        self._stop_services(state)
        pid = state.get("proxy_pid", 0)
        if pid and _pid_alive(pid, "tinyproxy"):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _pid_alive(pid, "tinyproxy") and time.monotonic() < deadline:
                time.sleep(0.05)
            if _pid_alive(pid, "tinyproxy"):
                os.kill(pid, signal.SIGKILL)
        _run(["ip", "link", "del", state.get("bridge", self.bridge)], check=False)
        for root in CGROUP_ROOTS:
            with contextlib.suppress(OSError):
                (root / CGROUP_PARENT).rmdir()  # only when no other lab still uses it
        self._unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        log(f"lab {self.name}: down")

    def status(self) -> dict:
        state = self.state()
        report = {"name": self.name, "up": bool(state), "hosts": {}}
        if not state:
            return report
        report.update(subnet=state["subnet"], bridge=state["bridge"], gateway=state["gateway"],
                      proxy=state["proxy_url"], proxy_running=_pid_alive(state.get("proxy_pid", 0), "tinyproxy"),
                      services={n: {**s, "running": _pid_alive(s.get("pid", 0), LAB_SERVICES[n][1][0])}
                                for n, s in state.get("services", {}).items() if n in LAB_SERVICES})
        for name, h in state["hosts"].items():
            alive = _pid_alive(h["pid"], "systemd-nspawn")
            ssh_ok = False
            if alive:
                with contextlib.suppress(OSError), socket.create_connection((h["address"], 22), timeout=1) as s:
                    s.settimeout(2)
                    ssh_ok = s.recv(8).startswith(b"SSH-")
            report["hosts"][name] = {"address": h["address"], "pid": h["pid"], "running": alive, "ssh": ssh_ok}
        return report
