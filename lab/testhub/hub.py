"""The in-process test Hub: the seeded repositories, the Hub API server and the LFS file server ("CDN") bound and
served from daemon threads, and the test controls they share (fault rules, link pacing, transfer statistics).

The HTTP protocol both servers speak is in handler.py, the fault rules in faults.py, the pacing in pacing.py.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from pathlib import Path

from .faults import take_rule
from .handler import HubServer, make_handler
from .pacing import Pacer
from .repos import DEFAULT_REPOS, HashCache, Repo, RepoFile, build_repo, make_block


class TestHub:
    """In-process test Hub. `start()` binds both servers and serves from daemon threads; `stop()` ends them."""

    __test__ = False  # not a pytest class

    def __init__(self, bind: str = "127.0.0.1", port: int = 0, file_port: int = 0, seed: int = 0,
                 repos: dict[str, dict] | None = None, page_size: int = 50, token: str | None = None,
                 cache_dir: str | Path | None = None, faults: list[dict] | None = None):
        self.bind = bind
        self.seed = seed
        self.page_size = page_size
        self.token = token
        self.secret = hashlib.sha256(f"testhub-{seed}-{time.time_ns()}".encode()).digest()
        block = make_block(seed)
        cache = HashCache(Path(cache_dir) / f"hashes-{seed}.json" if cache_dir else None)
        self.repos: dict[str, Repo] = {}
        for repo_id, spec in (repos if repos is not None else DEFAULT_REPOS).items():
            self.repos[repo_id] = build_repo(seed, block, cache, repo_id, spec)
        self.by_sha256: dict[str, tuple[Repo, RepoFile]] = {}
        for repo in self.repos.values():
            for f in repo.files:
                if f.lfs:
                    self.by_sha256[f.sha256] = (repo, f)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.faults: list[dict] = [dict(r) for r in faults or []]
        self.link: Pacer | None = None
        self.conn_rate = 0.0
        self.reset_stats()
        self.hub = HubServer((bind, port), make_handler(self, "hub"))
        self.files = HubServer((bind, file_port), make_handler(self, "files"))
        self.threads: list[threading.Thread] = []

    # ---- lifecycle -------------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self.hub.server_address[1]

    @property
    def file_port(self) -> int:
        return self.files.server_address[1]

    @property
    def endpoint(self) -> str:
        host = self.bind if self.bind not in ("0.0.0.0", "") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    def start(self) -> "TestHub":
        for srv in (self.hub, self.files):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for srv in (self.hub, self.files):
            if self.threads:  # shutdown() waits for serve_forever(): only when it runs
                srv.shutdown()
            srv.server_close()

    def __enter__(self) -> "TestHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- control ---------------------------------------------------------------------------------------
    def set_faults(self, rules: list[dict]) -> None:
        with self.lock:
            self.faults = [dict(r) for r in rules]

    def set_link(self, rate_mbps: float = 0.0, conn_rate_mbps: float = 0.0) -> dict:
        """Pace file bytes (see the module docstring); 0 = unpaced."""
        with self.lock:
            self.link = Pacer(rate_mbps * 1e6) if rate_mbps > 0 else None
            self.conn_rate = conn_rate_mbps * 1e6 if conn_rate_mbps > 0 else 0.0
        return {"rate_mbps": rate_mbps, "conn_rate_mbps": conn_rate_mbps}

    def reset_stats(self) -> None:
        with self.lock:
            self.stats = {"requests": 0, "bytes": 0, "by_path": {}, "faults": [], "file_auth_headers": 0,
                          "api": {}, "ranges": []}

    def snapshot(self) -> dict:
        with self.lock:
            return json.loads(json.dumps(self.stats))

    def count_bytes(self, repo_id: str, path: str, n: int) -> None:
        with self.lock:
            self.stats["bytes"] += n
            key = f"{repo_id}/{path}"
            self.stats["by_path"][key] = self.stats["by_path"].get(key, 0) + n

    def log_range(self, repo_id: str, path: str, start: int, end: int, sent_to: int) -> None:
        """Record a data GET: [start, end] asked for, bytes [start, sent_to) written to the socket."""
        with self.lock:
            self.stats["ranges"].append([f"{repo_id}/{path}", start, end, sent_to])
            del self.stats["ranges"][:-5000]

    def take_fault(self, where: str, repo_id: str, path: str, start: int, end: int, size: int,
                   ranged: bool = False, kinds: tuple[str, ...] | None = None) -> dict | None:
        """First matching rule for a request covering [start, end] (inclusive) of a file (`ranged`: it carried a
        Range header); consumes one trigger. `kinds` limits the rules considered (faults.py)."""
        with self.lock:
            fired = take_rule(self.faults, where, repo_id, path, start, end, size, ranged=ranged, kinds=kinds)
            if fired is not None:
                self.stats["faults"].append(fired)
                return fired
        return None

    def sign(self, sha256: str) -> str:
        return hmac.new(self.secret, sha256.encode(), "sha256").hexdigest()[:32]
