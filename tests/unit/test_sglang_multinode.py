"""The multi-node modules, library/sglang_net_preflight.py and library/sglang_group_ready.py, run as their own
processes on 127.0.0.1 (their module_utils are tested in tests/unit/multinode/).
"""
import ast
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.ansible_module import module_command

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ================================================================ the modules
def _docs(name):
    src = (ROOT / "library" / f"{name}.py").read_text()
    docs = {t.targets[0].id: yaml.safe_load(t.value.value) for t in ast.parse(src).body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    return src, docs


@pytest.mark.parametrize("name", ["sglang_group_ready", "sglang_net_preflight"])
def test_module_docs_parse_and_match_argument_spec(name):
    src, docs = _docs(name)
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == name and all(isinstance(d, str) for d in doc["description"])
    assert docs["EXAMPLES"][0]["name"] and all(isinstance(r["description"], str) for r in docs["RETURN"].values())
    spec = set(re.findall(r"^\s{12}([a-z_0-9]+)=dict\(", src, re.M))
    assert spec == set(doc["options"]), (spec, set(doc["options"]))


def test_group_ready_example_reads_the_named_ranks_journal():
    _src, docs = _docs("sglang_group_ready")
    rescue = docs["EXAMPLES"][0]["rescue"][0]
    assert rescue["delegate_to"] == "{{ group.failed_rank }}" and "journalctl -u sglang.service -n 80" in \
        rescue["ansible.builtin.command"]


def start_module(name, args, tmp_path, check=False):
    argfile = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    return subprocess.Popen(module_command(name, argfile),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def finish(proc):
    out, err = proc.communicate(timeout=30)
    assert out, err
    return json.loads(out)


needs_ip = pytest.mark.skipif(shutil.which("ip") is None and not os.path.exists("/sbin/ip"), reason="no iproute2")


@needs_ip
def test_net_preflight_module_rank0_and_rank1_on_loopback(tmp_path):
    port = free_port()
    common = {"rank0_address": "127.0.0.1", "dist_init_port": port, "token": "run9"}
    rank0 = start_module("sglang_net_preflight", dict(common, listen=True, name="r0", expected_peers=["r1"],
                                                      listen_seconds=20), tmp_path)
    rank1 = start_module("sglang_net_preflight", dict(common, name="r1", retry_interval=0.05, connect_attempts=300),
                         tmp_path)
    a, b = finish(rank0), finish(rank1)
    assert not a.get("failed") and not b.get("failed"), (a.get("msg"), b.get("msg"))
    assert a["reach"] == "listened" and [p["name"] for p in a["peers"]] == ["r1"] and a["seconds"] < 15
    assert a["port_in_use"] is False and a["interface"] == "lo" and a["address"] == "127.0.0.1"
    assert b["reach"] == "handshake" and b["socket_env"] == {"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert not a["changed"] and not b["changed"] and b["problems"] == []
    assert set(a["facts"]) == {"driver", "cuda", "venv_hash"}


@needs_ip
def test_net_preflight_module_reports_this_hosts_facts(tmp_path):
    (tmp_path / "digest").write_text("d1\n")
    out = finish(start_module("sglang_net_preflight", {
        "rank0_address": "127.0.0.1", "dist_init_port": free_port(), "cuda_home": str(tmp_path / "no-cuda"),
        "venv_digest_path": str(tmp_path / "digest"), "gpus_expected": False}, tmp_path, check=True))
    assert not out.get("failed"), out.get("msg")
    assert out["facts"]["venv_hash"] == "d1" and out["facts"]["cuda"] == "none"
    assert out["facts"]["driver"] == (out["facts"]["driver"] if os.path.exists("/sys/module/nvidia/version")
                                      else "none")


@needs_ip
def test_net_preflight_module_check_mode_reads_only_and_reports_every_problem(tmp_path):
    port = free_port()
    facts = {"r0": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "a"},
             "r1": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "b"}}
    out = finish(start_module("sglang_net_preflight", {
        "rank0_address": "127.0.0.1", "dist_init_port": port, "listen": True, "expected_peers": ["r1"],
        "environment": {"NCCL_SOCKET_IFNAME": "eth0"}, "rank_facts": facts}, tmp_path, check=True))
    assert out["failed"] and out["reach"] == "skipped" and out["interface"] == "lo"
    assert len(out["problems"]) == 2 and "NCCL_SOCKET_IFNAME=eth0" in out["msg"]
    assert "venv_hash differs across ranks: 'a' on r0; 'b' on r1" in out["msg"]
    assert out["mismatches"][0]["key"] == "venv_hash" and out["port_in_use"] is False
    ok = finish(start_module("sglang_net_preflight", {"rank0_address": "127.0.0.1", "dist_init_port": port},
                             tmp_path, check=True))
    assert not ok.get("failed") and ok["reach"] == "skipped" and ok["attempts"] == 0  # no connect in check mode


def test_group_ready_module_refuses_bad_ranks_before_touching_systemd(tmp_path):
    out = finish(start_module("sglang_group_ready", {
        "name": "sglang.service", "url": "http://127.0.0.1:1", "ranks": [
            {"name": "r1", "url": "http://127.0.0.1:2"}, {"name": "r1", "url": "http://127.0.0.1:3"}]}, tmp_path))
    assert out["failed"] and "rank 'r1' is listed twice" in out["msg"]
    out = finish(start_module("sglang_group_ready", {
        "name": "sglang.service", "url": "http://127.0.0.1:1", "rank_dead_after": 0,
        "ranks": [{"name": "r1", "url": "http://127.0.0.1:2"}]}, tmp_path))
    assert out["failed"] and "rank_dead_after" in out["msg"]
