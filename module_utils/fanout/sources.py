# -*- coding: utf-8 -*-
"""Where each file of a model comes from: the Hub, or peers of the fleet that hold a verified copy (LAN fan-out).

The fleet is an ordered list of hosts (index 0 = the seeder) arranged in a tree of fan-out F: the parent of host i
is host (i - 1) // F. Every host serves what its own manifest vouches for (module_utils/fanout/peer_server.py) while
it fetches, so a file moves down the tree as soon as it is verified on the level above (the tree is pipelined per
file, not per model). Hashes never come from a peer: every receiver checks every file against the Hub's tree,
which the controller read once (hf_tree) and handed to all hosts.

`SourceSet.pick(remote)` decides for one file, from what the poller last saw of each earlier host's index
(/index/<model>: vouched files with their sha256, fetch progress, transfers in flight):
  1. the seeder (index 0) always fetches from the Hub;
  2. the nearest ancestor still useful for the file (alive, not caught serving a bad copy of it, and holding it
     or still fetching) - when it holds the file, from it;
  3. while that ancestor is still fetching: from another earlier host that holds the file and has an upload slot
     free (fewer than F transfers in flight), else wait for the ancestor;
  4. no ancestor left (the seeder died, ...): from any earlier host that holds the file, else wait while an
     earlier host is still fetching (the lowest orphan falls through to 5, and the rest follow it);
  5. nobody earlier will ever have it: from the Hub (hub_fallback), else the run fails naming the peers' states.
A peer whose transfer failed cools down for `cooldown` seconds; a peer whose copy failed the hash check is never
asked for that file again. A peer is dead after `dead_after` seconds without an answer; a fetch whose progress did
not move for `stale_after` seconds counts as stopped.
"""
from __future__ import absolute_import, division, print_function

import threading
import time

from urllib.parse import quote

from ansible.module_utils.fanout.peer_unit import PeerError, peer_index
from ansible.module_utils.evidence.error import EvidenceError


class NoSource(EvidenceError):
    """No host of the fleet will ever hold the file and the Hub is not allowed."""


class Source(object):
    __slots__ = ("name", "kind", "url", "token", "index")

    def __init__(self, name, kind, url=None, token=None, index=-1):
        self.name = name
        self.kind = kind  # "hub" | "peer"
        self.url = (url or "").rstrip("/")
        self.token = token
        self.index = index

    @property
    def is_peer(self):
        return self.kind == "peer"

    def __repr__(self):
        return "Source(%s)" % self.name


class PeerView(object):
    """What the poller last saw of one peer."""

    def __init__(self, source):
        self.source = source
        self.alive = False
        self.seen = False  # answered at least once
        self.last_ok = None
        self.failures = 0  # consecutive failed polls
        self.files = {}
        self.revision = None
        self.fetching = False
        self.progress_state = None
        self.progress_key = None
        self.progress_moved = None
        self.active = 0
        self.error = None
        self.cool_until = 0.0
        self.bad = set()  # files whose copy from this peer failed the hash check

    def snapshot(self):
        return {"alive": self.alive, "files": len(self.files), "fetching": self.fetching,
                "state": self.progress_state, "active": self.active, "error": self.error,
                "bad_copies": sorted(self.bad)[:20]}


def parent_index(i, fanout):
    return (i - 1) // fanout if i > 0 else None


def ancestors(i, fanout):
    out = []
    j = parent_index(i, fanout)
    while j is not None:
        out.append(j)
        j = parent_index(j, fanout)
    return out


class SourceSet(object):
    def __init__(self, hub, peers, self_name, fanout, model, sha, token, hub_fallback=True, index_fn=None,
                 clock=time.monotonic, poll_interval=1.0, dead_after=6.0, grace=90.0, stale_after=90.0,
                 cooldown=5.0, poll_timeout=2.0):
        if fanout < 1:
            raise ValueError("fanout must be >= 1, got %r" % (fanout,))
        names = [p["name"] for p in peers]
        if self_name not in names:
            raise ValueError("this host (%s) is not in the fan-out order %s" % (self_name, names))
        if len(set(names)) != len(names):
            raise ValueError("the fan-out order names a host twice: %s" % names)
        self.hub = hub
        self.fanout = int(fanout)
        self.model = model
        self.sha = sha
        self.hub_fallback = hub_fallback
        self.index_fn = index_fn or peer_index
        self.clock = clock
        self.poll_interval = poll_interval
        self.dead_after = dead_after
        self.grace = grace
        self.stale_after = stale_after
        self.cooldown = cooldown
        self.poll_timeout = poll_timeout
        self.me = names.index(self_name)
        self.order = names
        self.sources = [Source(p["name"], "peer", p["url"], token, i) for i, p in enumerate(peers)]
        # only earlier hosts can be sources (later ones get it after us, or from our ancestors)
        self.views = [PeerView(s) for s in self.sources[:self.me]]
        self.started = clock()
        self.lock = threading.RLock()
        self.stop_ev = threading.Event()
        self.thread = None
        self.expected = {}  # path -> (size, sha256 or None)

    # -- topology --
    @property
    def is_root(self):
        return self.me == 0

    def parent(self):
        j = parent_index(self.me, self.fanout)
        return None if j is None else self.order[j]

    def no_proxy_hosts(self):
        hosts = []
        for v in self.views:
            netloc = v.source.url.split("://", 1)[-1].split("/", 1)[0]
            host = netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 or netloc.startswith("[") else netloc
            hosts.append(host.strip("[]"))
        return hosts

    def expect(self, remotes):
        self.expected = dict((r.path, (r.size, r.sha256)) for r in remotes)

    # -- polling --
    def start(self):
        if self.views and self.thread is None:
            self.poll_all()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def stop(self):
        self.stop_ev.set()
        if self.thread is not None:
            self.thread.join(timeout=self.poll_timeout * len(self.views) + 5)

    def _run(self):
        while not self.stop_ev.wait(self.poll_interval):
            self.poll_all()

    def poll_all(self):
        for v in self.views:
            self.poll(v)

    def poll(self, v):
        now = self.clock()
        try:
            idx = self.index_fn(v.source.url, self.model, v.source.token, timeout=self.poll_timeout)
        except PeerError as err:
            with self.lock:
                v.failures += 1
                v.error = str(err)[:300]
                if v.last_ok is None or now - v.last_ok >= self.dead_after or v.failures >= 3:
                    v.alive = False
            return
        files = {}
        for path, rec in (idx.get("files") or {}).items():
            files[path] = (rec.get("size"), rec.get("sha256"))
        prog = idx.get("progress") or {}
        key = (prog.get("state"), prog.get("bytes_done"), prog.get("files_done"), prog.get("updated"))
        with self.lock:
            v.alive = True
            v.seen = True
            v.last_ok = now
            v.failures = 0
            v.error = None
            v.files = files
            v.revision = idx.get("revision")
            v.active = int(idx.get("active") or 0)
            if key != v.progress_key:
                v.progress_key = key
                v.progress_moved = now
            v.progress_state = prog.get("state")
            same_commit = prog.get("sha") in (None, self.sha)
            v.fetching = bool(prog) and prog.get("state") == "running" and same_commit and \
                now - (v.progress_moved or now) < self.stale_after

    # -- decisions --
    def _has(self, v, path):
        if path in v.bad or path not in v.files:
            return False
        size, sha256 = v.files[path]
        want_size, want_sha = self.expected.get(path, (size, None))
        return size == want_size and (want_sha is None or sha256 == want_sha)

    def _useful(self, v, path, now):
        """Alive and will serve a good copy of `path`: holds it, is fetching, or has not started yet (grace)."""
        if not v.alive and v.seen:
            return False
        if path in v.bad:
            return False
        if not v.seen:
            return now - self.started < self.grace and v.failures < 3
        if self._has(v, path) or v.fetching:
            return True
        return v.progress_state is None and now - self.started < self.grace

    def _ready(self, v, path, now):
        return v.alive and now >= v.cool_until and self._has(v, path)

    def pick(self, remote):
        """-> a Source to fetch `remote` from now, or None to wait (an earlier host will have it)."""
        if self.is_root:
            return self.hub
        now = self.clock()
        path = remote.path
        with self.lock:
            anc = None
            for j in ancestors(self.me, self.fanout):
                v = self.views[j]
                if self._useful(v, path, now):
                    anc = v
                    break
            holders = [v for v in self.views if self._ready(v, path, now)]
            if anc is not None:
                if self._ready(anc, path, now):
                    return anc.source
                spare = [v for v in holders if v.active < self.fanout]
                if spare:
                    return min(spare, key=lambda v: (v.active, v.source.index)).source
                return None
            if holders:
                return min(holders, key=lambda v: (v.active, v.source.index)).source
            if any(self._useful(v, path, now) for v in self.views):
                return None
            if self.hub_fallback:
                return self.hub
            raise NoSource("%s: no earlier host of the fan-out holds or will hold it and hub_fallback is off; "
                           "peers: %s" % (path, self.describe()["peers"]))

    def failed(self, source, path, err):
        if not source.is_peer:
            return
        with self.lock:
            v = self.views[source.index]
            v.cool_until = self.clock() + self.cooldown
            v.error = str(err)[:300]
        self.poll(self.views[source.index])  # dead or alive: know it before the next pick

    def mismatch(self, source, path):
        if source.is_peer:
            with self.lock:
                self.views[source.index].bad.add(path)

    def file_url(self, source, remote):
        """(url, token) a peer serves `remote` at."""
        return "%s/files/%s/%s" % (source.url, quote(self.model, safe=""), quote(remote.path)), source.token

    def describe(self):
        with self.lock:
            return {"position": self.me, "parent": self.parent(), "fanout": self.fanout,
                    "peers": dict((v.source.name, v.snapshot()) for v in self.views)}
