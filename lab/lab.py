"""The lab: local Debian 12 hosts with systemd as PID 1, booted with systemd-nspawn on a bridge of our own.

A test double for bare-metal GPU hosts everywhere except the GPU. One lab = one bridge on an unused /24, an
HTTP proxy on its gateway address (the hosts' only way out, restricted to Debian and PyPI), and one nspawn
machine per inventory host. Several labs (LAB_NAME) can run side by side; each owns its state directory
.lab/<name>/ and everything listed in its state.json, and `down` removes exactly that.

This file is the Lab object that ties the parts together (its state file and the up/down/status verbs); the parts
are lab/network.py (subnet, bridge, proxy), lab/rootfs.py, lab/services.py (test doubles on the gateway),
lab/machines.py (the nspawn hosts) and lab/gpu_daemons.py (stub GPU daemon units on them).
"""
from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import shutil
import time
from pathlib import Path

from lab import gpu_daemons, machines, network, services
from lab.error import LabError
from lab.host_sets import host_set
from lab.machines import HostState
from lab.paths import CGROUP_PARENT, CGROUP_ROOTS, GLOBAL_LOCK, STATE_ROOT
from lab.rootfs import rootfs
from lab.system import locked, pid_alive, run, unmount_under


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

    @staticmethod
    def rootfs(log=print) -> Path:
        """The cached Debian rootfs directory (lab/rootfs.py)."""
        return rootfs(log=log)

    # ------------------------------------------------------------------ hosts
    def ssh(self, host: str, command: str, state: dict | None = None, check: bool = True, timeout: float = 120,
            **kw):
        """Run `command` on a lab host as root over SSH (the same way Ansible connects)."""
        return machines.ssh(state or self.state(), self.dir, host, command, check=check, timeout=timeout, **kw)

    def set_link(self, host: str, mbit: float, state: dict | None = None) -> dict:
        """Shape one host's link on the lab bridge to `mbit` Mbit/s each way; 0 removes the shaping (lab/machines.py)."""
        return machines.set_link(state or self.state(), host, mbit)

    def gpu_daemon(self, host: str, unit: str, mode: str, state: dict | None = None) -> None:
        """Put a stub GPU daemon (lab/gpu_daemons.py: nvidia-persistenced / nvidia-fabricmanager) of one host in
        `mode`: present (running), absent (not installed) or failed. Lab fixtures only."""
        self.ssh(host, gpu_daemons.state_command(unit, mode), state=state)

    def kill_host(self, host: str, state: dict | None = None) -> None:
        """Pull the plug: SIGKILL every process of the machine. `up()` boots it again afresh."""
        machines.kill_host(state or self.state(), host)

    # ------------------------------------------------------------------ verbs
    def up(self, log=print) -> dict:
        self.preflight()
        started = time.monotonic()
        lower = self.rootfs(log=log)
        with locked(GLOBAL_LOCK):
            state = self.state()
            if not state:
                net = network.pick_subnet(self.requested_subnet, self.short)
                state = {"name": self.name, "bridge": self.bridge, "subnet": str(net), "hosts": {}}
            net = ipaddress.ip_network(state["subnet"])
            self.bridge = state["bridge"]  # a lab made by an older checkout keeps the names it recorded
            state["gateway"] = network.ensure_bridge(self.bridge, net)
            state["proxy_url"] = f"http://{state['gateway']}:{network.PROXY_PORT}"
            self.dir.mkdir(parents=True, exist_ok=True)
            key = self.dir / "id_ed25519"
            if not key.exists():
                run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"sglang-lab-{self.name}", "-f", str(key)])
            state["ssh_key"] = str(key)
            self._save(state)
        services.stop_services(state)
        network.ensure_proxy(state, self.dir / "proxy")
        self._save(state)
        services.ensure_services(state, self.dir / "services")
        self._save(state)
        # Allocate every host's address first so each /etc/hosts names its peers.
        to_boot: list[HostState] = []
        for index, name in enumerate(self.hosts):
            current = state["hosts"].get(name)
            if current and pid_alive(current["pid"], "systemd-nspawn"):
                continue
            if current:
                machines.stop_host(HostState(**current))
            net = ipaddress.ip_network(state["subnet"])
            state["hosts"][name] = {"name": name, "address": str(list(net.hosts())[9 + index]),
                                    "machine": f"l{self.short}{index}", "pid": 0, "rootdir": ""}
        for index, name in enumerate(self.hosts):
            if state["hosts"][name]["pid"] and pid_alive(state["hosts"][name]["pid"], "systemd-nspawn"):
                continue
            host = machines.prepare_host(name, index, state, lower, self.dir / "machines" / name,
                                         f"l{self.short}{index}")
            host.pid = machines.boot(host, self.bridge, self.dir / f"{host.name}.log")
            state["hosts"][name] = host.to_dict()
            self._save(state)
            to_boot.append(host)
        state["known_hosts"] = str(machines.write_known_hosts(state, self.dir))
        self._save(state)
        for host in to_boot:
            machines.wait_ready(host, state, self.dir)
        state["up_seconds"] = round(time.monotonic() - started, 2)
        self._save(state)
        if to_boot:
            log(f"lab {self.name}: {', '.join(h.name for h in to_boot)} up in {state['up_seconds']}s on {self.bridge} ({state['subnet']})")
        else:
            log(f"lab {self.name}: already up ({', '.join(state['hosts'])})")
        return state

    def down(self, log=print) -> None:
        state = self.state()
        if not state:
            log(f"lab {self.name}: not up")
            return
        for h in state.get("hosts", {}).values():
            machines.stop_host(HostState(**h))
        services.stop_services(state)
        network.stop_proxy(state)
        network.remove_bridge(state.get("bridge", self.bridge))
        for root in CGROUP_ROOTS:
            with contextlib.suppress(OSError):
                (root / CGROUP_PARENT).rmdir()  # only when no other lab still uses it
        unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        log(f"lab {self.name}: down")

    def boot(self) -> tuple:
        """This boot of the lab's hosts (their nspawn pids): what a test converged on one boot is gone on the next."""
        return tuple(sorted((name, host.get("pid")) for name, host in self.state().get("hosts", {}).items()))

    def status(self) -> dict:
        state = self.state()
        report = {"name": self.name, "up": bool(state), "hosts": {}}
        if not state:
            return report
        report.update(subnet=state["subnet"], bridge=state["bridge"], gateway=state["gateway"],
                      proxy=state["proxy_url"], proxy_running=network.proxy_running(state),
                      services=services.services_status(state))
        for name, h in state["hosts"].items():
            alive = pid_alive(h["pid"], "systemd-nspawn")
            ssh_ok = machines.ssh_answers(h["address"]) if alive else False
            report["hosts"][name] = {"address": h["address"], "pid": h["pid"], "running": alive, "ssh": ssh_ok}
        return report
