"""The lab itself: real hosts, systemd as PID 1, isolation, clean teardown, clear refusals, inventories."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.lab import Lab
from lab.paths import CGROUP_PARENT, CGROUP_ROOTS

ROOT = Path(__file__).resolve().parents[2]
LAB_NAME = "itest"


def _footprint(lab: Lab) -> dict:
    """Everything this lab could leave behind on this machine (its bridge and veths, mounts under its directory, its
    machines' cgroups, its nspawn, proxy and test-double processes). Only this lab's: other labs may be up meanwhile
    (the suite runs two workers)."""
    mine = f"l{lab.short}"
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout)
    live = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z" and (str(lab.dir) in cmd or mine in cmd or lab.bridge in cmd):
            live.append(cmd)
    return {
        "links": sorted(link["ifname"] for link in links if link["ifname"] == lab.bridge or mine in link["ifname"]),
        "mounts": sorted(line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                         if line.split()[1].startswith(str(lab.dir))),
        "cgroups": sorted(str(p) for root in CGROUP_ROOTS for p in (root / CGROUP_PARENT).glob(f"{mine}*")),
        "processes": sorted(live),
    }


def _lab_cli(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=300, **kw)


def test_up_is_real_idempotent_and_down_leaves_nothing():
    lab = Lab("labtest")
    before = _footprint(lab)
    try:
        state = lab.up(log=lambda *_: None)
        up = _footprint(lab)
        up_links, up_procs = up["links"], up["processes"]
        for name, host in state["hosts"].items():
            out = lab.ssh(name, "cat /proc/1/comm; systemctl is-system-running; hostname; "
                                "grep -c \"$(hostname)\" /etc/hosts; cat /proc/self/cgroup | grep -c name=systemd").stdout.split()
            assert out[0] == "systemd", f"{name}: PID 1 is {out[0]}"
            assert out[1] == "running", f"{name}: systemd state {out[1]}"
            assert out[2] == name and int(out[3]) >= 1
            for root in CGROUP_ROOTS:
                assert (root / CGROUP_PARENT / host["machine"]).is_dir(), f"{name} has no cgroup under {root}"
        pids = {n: h["pid"] for n, h in state["hosts"].items()}
        again = lab.up(log=lambda *_: None)
        assert {n: h["pid"] for n, h in again["hosts"].items()} == pids, "a second `up` restarted running hosts"
        status = _lab_cli("status", "--name", "labtest")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert all(h["ssh"] for h in report["hosts"].values())
        assert report["services"]["testhub"]["running"]
        # The lab's test Hub answers the hosts on the gateway, without the proxy.
        hub = lab.ssh("b300-lab", f"curl -s --noproxy '*' {state['services']['testhub']['url']}/api/models/demo/Kimi-K2.6/revision/main")
        assert json.loads(hub.stdout)["id"] == "demo/Kimi-K2.6"
    finally:
        lab.down(log=lambda *_: None)
    assert _footprint(lab) == before
    assert before == {"links": [], "mounts": [], "cgroups": [], "processes": []}
    assert lab.bridge.startswith("lab-") and up_links and up_procs, "the footprint saw none of the up lab's things"
    assert not lab.dir.exists()
    assert _lab_cli("status", "--name", "labtest").returncode == 3


def test_hosts_reach_only_the_gateway_proxy(lab):
    state = lab.state()
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0", "the controller forwards packets"
    subnet = ipaddress.ip_network(state["subnet"])
    for name in state["hosts"]:
        routes = lab.ssh(name, "ip -4 -j route show table all").stdout
        for route in json.loads(routes):
            dst = route.get("dst", "")
            assert dst != "default", f"{name} has a default route: {route}"
            if route.get("type") not in ("local", "broadcast") and not dst.startswith("127."):
                assert ipaddress.ip_network(dst if "/" in dst else f"{dst}/32").subnet_of(subnet), route
        # `ip route get` asks the kernel without sending a packet: an outside address has no route at all.
        probe = lab.ssh(name, "ip route get 192.0.2.1", check=False)
        assert probe.returncode != 0 and "unreachable" in probe.stderr.lower(), probe.stdout + probe.stderr
        # The proxy forwards only to the Debian and PyPI allow-list; anything else is refused at the gateway.
        refused = lab.ssh(name, f"curl -s -o /dev/null -w '%{{http_code}}' -x {state['proxy_url']} http://example.com/",
                          check=False)
        assert refused.stdout == "403", refused.stdout + refused.stderr
        env = lab.ssh(name, "cat /etc/environment").stdout
        assert f"http_proxy={state['proxy_url']}" in env and state["gateway"] in env


def test_hosts_install_from_debian_through_the_proxy(lab):
    out = lab.ssh("ct200-lab", "apt-get update -qq && apt-cache policy jq | sed -n 2p", timeout=240)
    assert "Installed" in out.stdout, out.stdout + out.stderr


def test_host_keys_are_pinned_and_a_different_key_is_refused(lab, tmp_path):
    """Every login checks the host's key: the lab's known_hosts holds exactly the keys each host was given at
    creation, and an Ansible run that knows another key for the address is refused before any task runs."""
    state = lab.state()
    pinned = Path(state["known_hosts"]).read_text().splitlines()
    for name, host in state["hosts"].items():
        served = lab.ssh(name, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
        assert f"{host['address']} {served[0]} {served[1]}" in pinned, (name, served, pinned)
    # a known_hosts naming another ed25519 key for b300-lab's address (what a replaced or spoofed host looks like)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"{state['hosts']['b300-lab']['address']} {other[0]} {other[1]}\n")
    env = {**os.environ, "LAB_NAME": lab.name, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT),
           "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o ControlPath=none"}   # no reused master connection
    ansible = [str(Path(sys.executable).parent / "ansible"), "-i", "inventory/lab", "b300-lab", "-m", "ansible.builtin.ping"]
    common = "-o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o LogLevel=ERROR"
    bad = subprocess.run(ansible + ["-e", json.dumps({"ansible_ssh_common_args": common.format(wrong)})],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert bad.returncode != 0 and "Host key verification failed" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    good = subprocess.run(ansible, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert good.returncode == 0 and '"ping": "pong"' in good.stdout, good.stdout + good.stderr


@pytest.mark.parametrize("case", ["subnet_in_use", "not_root", "no_debootstrap"])
def test_bad_input_fails_with_one_clear_sentence(case, lab, tmp_path):
    env = {}
    pre = []
    args = ["up", "--name", "badinput"]
    if case == "subnet_in_use":
        args += ["--subnet", lab.state()["subnet"]]
        expect = "already in use"
    elif case == "not_root":
        pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        expect = "needs root"
    else:
        bindir = tmp_path / "bin"
        bindir.mkdir()
        for tool in ("systemd-nspawn", "tinyproxy", "ip", "ssh", "ssh-keygen"):
            (bindir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
        env["PATH"] = str(bindir)
        expect = "debootstrap is not installed"
    proc = subprocess.run([*pre, sys.executable, "-m", "lab", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=60)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expect in lines[0], proc.stderr
    assert not (ROOT / ".lab" / "badinput").exists() or case == "not_root"


PROBE_VARS = ["deploy_host_group", "deploy_gpu_count", "deploy_gpu_compute_capability", "venv_flavour",
              "deploy_venv_path", "deploy_models_root"]


def test_site_and_role_playbooks_see_the_same_group_vars(playbook, tmp_path):
    probe = ("---\n- name: Probe\n  hosts: lab\n  gather_facts: false\n  tasks:\n"
             "    - name: Dump profile\n      ansible.builtin.debug:\n"
             f"        msg: \"{{{{ {{{', '.join(f'{v!r}: {v}' for v in PROBE_VARS)}}} }}}}\"\n")
    site_level = ROOT / ".vars_probe_site.yml"
    role_level = ROOT / "playbooks" / ".vars_probe.yml"
    try:
        site_level.write_text(probe)
        role_level.write_text(probe)
        seen = {}
        for path in (site_level, role_level):
            run = playbook(str(path.relative_to(ROOT)))
            assert run.rc == 0, run.stdout[-2000:]
            seen[path.name] = {r["_host"]: r["msg"] for r in run.results("Dump profile")}
    finally:
        site_level.unlink(missing_ok=True)
        role_level.unlink(missing_ok=True)
    assert seen[site_level.name] == seen[role_level.name]
    by_host = seen[site_level.name]
    assert by_host["b300-lab"]["deploy_host_group"] == "nvlink"
    assert by_host["ct200-lab"]["deploy_host_group"] == "pcie"
    # The lab profile wins over nvlink/pcie (ansible_group_priority): lab hosts declare no GPU.
    assert by_host["b300-lab"]["deploy_gpu_count"] == 0 and by_host["b300-lab"]["venv_flavour"] == "lab"


def test_production_inventory_parses_with_profiles():
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", "inventory/production", "--list"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert proc.returncode == 0, proc.stderr
    inv = json.loads(proc.stdout)
    assert inv["b300"]["hosts"] == ["b300-01.example.internal", "b300-02.example.internal"]
    hv = inv["_meta"]["hostvars"]
    assert hv["b300-01.example.internal"]["deploy_host_group"] == "nvlink"
    assert hv["b300-01.example.internal"]["deploy_gpu_compute_capability"] == "10.3"
    assert hv["ct200-01.example.internal"]["deploy_host_group"] == "pcie"
    # nothing of the lab's test doubles reaches a production host
    assert all(v.get("venv_flavour") != "lab" and "sglang_service_launch_module" not in v
               and not v.get("sglang_service_env_lab") for v in hv.values()), hv
