"""lab/network.py: a tinyproxy left by a killed run of the same lab is found by its config path (and only that one)."""
from __future__ import annotations

from pathlib import Path

from lab import network


def fake_proc(root: Path, procs: dict) -> str:
    for pid, argv in procs.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (root / "self").mkdir()
    return str(root)


def test_an_orphan_proxy_of_this_lab_is_found_by_its_config_path(tmp_path):
    pdir = tmp_path / ".lab" / "bench" / "proxy"
    proc = fake_proc(tmp_path / "proc", {
        11715: ["tinyproxy", "-d", "-c", str(pdir / "tinyproxy.conf")],                      # the orphan
        11716: ["/usr/bin/tinyproxy", "-d", "-c", str(tmp_path / ".lab/other/proxy/tinyproxy.conf")],  # another lab's
        11717: ["python3", "-m", "lab.testhub", str(pdir / "tinyproxy.conf")],               # not a tinyproxy
    })
    assert network.orphan_proxies(pdir, proc=proc) == [11715]
    assert network.orphan_proxies(tmp_path / ".lab" / "nothing" / "proxy", proc=proc) == []
