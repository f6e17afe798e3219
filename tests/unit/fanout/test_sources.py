"""module_utils/fanout/sources.py: which source each file comes from in the LAN fan-out (fake peer indexes, fake clock)."""
from __future__ import annotations

import pytest

from ansible.module_utils.hf.hub import RemoteFile
from ansible.module_utils.fanout.sources import NoSource, Source, SourceSet, ancestors, parent_index
from ansible.module_utils.fanout.peer_unit import PeerError

SHA = "a" * 40
A = RemoteFile("a.safetensors", 10, sha256="1" * 64)
B = RemoteFile("b.safetensors", 20, sha256="2" * 64)
HUB = Source("hub", "hub", "http://hub", None)


class Fleet:
    """Index answers per peer url; a missing url = the peer is dead (connection refused)."""

    def __init__(self):
        self.answers = {}
        self.now = 100.0

    def host(self, name, files=(), state="running", moved=0, active=0, sha=SHA):
        prog = {"state": state, "sha": sha, "bytes_done": moved, "updated": moved} if state else None
        self.answers[f"http://{name}"] = {"revision": SHA, "active": active, "progress": prog,
                                         "files": {f.path: {"size": f.size, "sha256": f.sha256} for f in files}}

    def kill(self, name):
        self.answers.pop(f"http://{name}", None)

    def index(self, url, model, token, timeout=10):
        assert model == "Kimi" and token == "tok" * 6
        if url not in self.answers:
            raise PeerError(f"{url}: connection refused")
        return self.answers[url]

    def clock(self):
        return self.now


def sources(fleet, me, n=6, fanout=2, **kw):
    peers = [{"name": f"h{i}", "url": f"http://h{i}"} for i in range(n)]
    s = SourceSet(HUB, peers, f"h{me}", fanout, "Kimi", SHA, "tok" * 6, index_fn=fleet.index, clock=fleet.clock,
                  **kw)
    s.expect([A, B])
    s.poll_all()
    return s


def test_tree_shape():
    assert [parent_index(i, 2) for i in range(7)] == [None, 0, 0, 1, 1, 2, 2]
    assert [parent_index(i, 1) for i in range(4)] == [None, 0, 1, 2]
    assert ancestors(5, 2) == [2, 0]


def test_seeder_fetches_from_the_hub_and_others_from_their_parent_once_it_holds_the_file():
    fleet = Fleet()
    for i in range(6):
        fleet.host(f"h{i}")
    assert sources(fleet, 0).pick(A) is HUB
    s = sources(fleet, 3)
    assert s.parent() == "h1"
    assert s.pick(A) is None  # the parent is still fetching: wait
    fleet.host("h1", files=[A])
    s.poll_all()
    assert s.pick(A).name == "h1"
    assert s.pick(B) is None


def test_another_holder_with_a_free_slot_serves_while_the_parent_is_behind():
    fleet = Fleet()
    for i in range(6):
        fleet.host(f"h{i}")
    fleet.host("h0", files=[A, B], active=2)  # busy: both slots taken
    fleet.host("h2", files=[A], active=0)
    s = sources(fleet, 3)  # parent h1 holds nothing yet
    assert s.pick(A).name == "h2"
    assert s.pick(B) is None  # h0 holds B but has no free slot: wait for h1


def test_a_copy_that_failed_the_hash_check_is_never_taken_from_that_peer_again():
    fleet = Fleet()
    for i in range(6):
        fleet.host(f"h{i}")
    fleet.host("h0", files=[A], state="done")
    s = sources(fleet, 1)
    assert s.pick(A).name == "h0"
    s.mismatch(s.pick(A), A.path)
    assert s.pick(A) is HUB  # nobody else earlier: the Hub
    assert s.describe()["peers"]["h0"]["bad_copies"] == [A.path]


def test_seeder_death_the_lowest_orphan_goes_to_the_hub_the_others_follow_it():
    fleet = Fleet()
    for i in range(6):
        fleet.host(f"h{i}")
    fleet.host("h0", files=[A])
    orphans = {i: sources(fleet, i, dead_after=0.0) for i in (1, 2, 3)}
    assert orphans[1].pick(A).name == "h0"
    fleet.kill("h0")
    for s in orphans.values():
        for _ in range(3):
            s.poll_all()
    assert orphans[1].pick(A) is HUB  # no earlier host left
    assert orphans[2].pick(A) is None  # h1 will have it
    assert orphans[3].pick(A) is None  # its parent h1 will have it
    fleet.host("h1", files=[A])
    for s in orphans.values():
        s.poll_all()
    assert orphans[2].pick(A).name == "h1" and orphans[3].pick(A).name == "h1"


def test_without_hub_fallback_a_file_nobody_will_hold_fails_naming_the_peers():
    fleet = Fleet()
    fleet.host("h0", state="failed")
    s = sources(fleet, 1, n=2, hub_fallback=False)
    with pytest.raises(NoSource, match="h0"):
        s.pick(A)


def test_a_peer_that_has_not_started_yet_is_waited_for_within_the_grace_only():
    fleet = Fleet()
    fleet.host("h0", state=None)  # server up, its fetch not started
    s = sources(fleet, 1, n=2, grace=30.0)
    assert s.pick(A) is None
    fleet.now += 31
    s.poll_all()
    assert s.pick(A) is HUB


def test_a_fetch_whose_progress_stopped_moving_is_not_waited_for():
    fleet = Fleet()
    fleet.host("h0", moved=5)
    s = sources(fleet, 1, n=2, stale_after=60.0)
    assert s.pick(A) is None
    fleet.now += 30
    s.poll_all()
    assert s.pick(A) is None  # same progress, but not stale yet
    fleet.now += 31
    s.poll_all()
    assert s.pick(A) is HUB


def test_a_copy_of_other_bytes_or_another_commit_is_not_a_holder():
    fleet = Fleet()
    fleet.host("h0", files=[RemoteFile(A.path, A.size, sha256="f" * 64)], state="done")
    assert sources(fleet, 1, n=2).pick(A) is HUB
    fleet.host("h0", state="running", sha="b" * 40)  # fetching another revision: it will not hold ours
    assert sources(fleet, 1, n=2, grace=0.0).pick(A) is HUB


def test_a_failed_transfer_cools_the_peer_down():
    fleet = Fleet()
    fleet.host("h0", files=[A], state="done")
    fleet.host("h1", files=[A], state="done")
    s = sources(fleet, 2, n=3, fanout=1, cooldown=5.0)  # chain: parent h1
    first = s.pick(A)
    assert first.name == "h1"
    s.failed(first, A.path, "reset by peer")
    assert s.pick(A).name == "h0"
    fleet.now += 6
    assert s.pick(A).name == "h1"


def test_bad_input():
    with pytest.raises(ValueError, match="fanout"):
        SourceSet(HUB, [{"name": "h0", "url": "http://h0"}], "h0", 0, "Kimi", SHA, "t")
    with pytest.raises(ValueError, match="not in the fan-out order"):
        SourceSet(HUB, [{"name": "h0", "url": "http://h0"}], "h9", 1, "Kimi", SHA, "t")
