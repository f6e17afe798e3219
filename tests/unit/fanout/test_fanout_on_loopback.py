"""LAN fan-out end to end on loopback: the test Hub, a real peer server (module_utils/fanout/peer_server.py) over a
seeder's verified copy, and receivers running module_utils/hf/model.sync with the tree the controller read once
(hf_hub.hub_tree) - real hf_transfer, real HTTP. The lab (tests/integration/test_fanout.py) does it on six hosts."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.testhub import HubProcess
from ansible.module_utils.hf.hub import hub_tree
from ansible.module_utils.hf.model import SyncError, sync
from tests.helpers.peer_server import server_script

ROOT = Path(__file__).resolve().parents[3]
SERVER = server_script()  # the script as model_peer lays it out on a host
TOKEN = "fan-out-token-0123456789"
REPO = "t/fan:shards=3,shard_size=3MiB"
MiB = 1 << 20


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with HubProcess(seed=5, repos=[REPO], cache_dir=str(tmp_path_factory.mktemp("hubcache"))) as h:
        yield h


def tree_of(hub):
    sha, files = hub_tree(hub.endpoint, "t/fan", "main")
    return {"sha": sha, "files": [f.as_dict() for f in files]}


def params(hub, dest, **kw):
    p = {"repo_id": "t/fan", "endpoint": hub.endpoint, "dest": str(dest), "stall_timeout": 5, "backoff": 0.1,
         "backoff_max": 0.5, "free_space_margin_mb": 0, "chunk_size_mb": 1, "connections": 2}
    p.update(kw)
    return p


class Peer:
    """The real peer server over `root`, serving model directory `model`, on 127.0.0.1."""

    def __init__(self, base: Path, root: Path, model: str):
        base.mkdir(parents=True, exist_ok=True)
        tok = base / "token.sha256"
        tok.write_text(hashlib.sha256(TOKEN.encode()).hexdigest() + "\n")
        ready = base / "ready.json"
        self.out = open(base / "server.out", "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--bind", "127.0.0.1", "--port", "0", "--root", str(root), "--model", model,
             "--token-sha256-file", str(tok), "--lifetime", "300", "--stats", str(base / "stats.json"),
             "--ready-file", str(ready)], stdout=self.out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, (base / "server.out").read_text()
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{json.loads(ready.read_text())['port']}"
        self.stats_path = base / "stats.json"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.out.close()
        return json.loads(self.stats_path.read_text())


def digests(d: Path) -> dict:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and ".hf_model" not in p.parts}


@pytest.fixture
def seeded(hub, tmp_path):
    """A seeder's verified copy (from the Hub) under tmp/seed/fan, its peer server, and the Hub's counters reset."""
    tree = tree_of(hub)
    seed = tmp_path / "seed" / "fan"
    sync(params(hub, seed, revision=tree["sha"], tree=tree))
    peer = Peer(tmp_path / "peer", seed.parent, "fan")
    hub.reset()
    yield tree, seed, peer
    peer.stop()


def receiver(hub, tree, peer, dest, **kw):
    peers = [{"name": "seed", "url": peer.url}, {"name": "me", "url": "http://127.0.0.1:9"}]
    return sync(params(hub, dest, revision=tree["sha"], tree=tree, peers=peers, peer_self="me", peer_token=TOKEN,
                       fanout=1, **kw))


def test_a_receiver_gets_every_byte_from_the_peer_and_none_from_the_hub(hub, seeded, tmp_path):
    tree, seed, peer = seeded
    got = receiver(hub, tree, peer, tmp_path / "r1" / "fan")
    total = sum(f["size"] for f in tree["files"])
    assert got["files_fetched"] == len(tree["files"])
    assert got["bytes_by_source"].get("seed", 0) >= total and "hub" not in got["bytes_by_source"], got
    assert got["fanout_parent"] == "seed" and got["fanout_position"] == 1
    assert digests(tmp_path / "r1" / "fan") == digests(seed)
    assert hub.stats()["bytes"] == 0  # the Hub served nothing: not even one file
    stats = peer.stop()
    assert stats["bytes_served"]["fan"] >= total
    again = receiver(hub, tree, peer, tmp_path / "r1" / "fan")  # a rerun moves nothing (the manifest vouches)
    assert again["changed"] is False and again["files_fetched"] == 0


def test_a_bad_copy_on_the_peer_is_caught_and_fetched_again_from_the_hub(hub, seeded, tmp_path):
    tree, seed, peer = seeded
    victim = max(tree["files"], key=lambda f: f["size"])
    path = seed / victim["path"]
    st = path.stat()
    with open(path, "r+b") as f:  # same size, same mtime: the seeder's manifest still vouches for it
        f.seek(st.st_size // 2)
        f.write(b"\xff" * 4096)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    got = receiver(hub, tree, peer, tmp_path / "r2" / "fan")
    assert [m["file"] for m in got["peer_hash_mismatches"]] == [victim["path"]]
    assert got["peer_hash_mismatches"][0]["peer"] == "seed"
    truth = {f["path"]: f["sha256"] for f in tree["files"] if f["sha256"]}
    mine = digests(tmp_path / "r2" / "fan")
    assert all(mine[p] == h for p, h in truth.items())  # every LFS file hash-correct, the victim included
    assert got["bytes_by_source"]["hub"] >= victim["size"]
    assert hub.stats()["bytes"] < 2 * victim["size"]  # only the victim came from the Hub


def test_a_dead_peer_sends_the_receiver_to_the_hub(hub, seeded, tmp_path):
    tree, seed, peer = seeded
    peer.stop()
    got = receiver(hub, tree, peer, tmp_path / "r3" / "fan")
    assert got["files_fetched"] == len(tree["files"]) and "seed" not in got["files_by_source"]
    assert digests(tmp_path / "r3" / "fan") == digests(seed)


def test_peers_without_the_controllers_tree_are_refused(hub, seeded, tmp_path):
    _tree, _seed, peer = seeded
    with pytest.raises(SyncError, match="never trusted for hashes"):
        sync(params(hub, tmp_path / "r4", peers=[{"name": "seed", "url": peer.url}, {"name": "me", "url": "x"}],
                    peer_self="me", peer_token=TOKEN))
    assert not (tmp_path / "r4").exists()
