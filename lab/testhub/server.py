"""HTTP side of the test Hub: the Hub API + resolve endpoint, and a separate LFS file server ("CDN").

Protocol (what huggingface_hub and hf_transfer need, see FACTS.md):
  GET  /api/models/{repo}/revision/{rev}[?blobs=true]        -> {"id", "sha", "siblings"}
  GET  /api/models/{repo}/tree/{rev}[/{dir}]?recursive=true   -> entries, paged with a Link: <...>; rel="next" header
  HEAD|GET /{repo}/resolve/{rev}/{path}                       -> non-LFS: bytes (Range -> 206);
                                                                 LFS: 302 to the file server, X-Linked-Etag/Size
  HEAD|GET /lfs/{sha256}?sig=...  (file server)               -> bytes, Range -> 206 with Content-Range
  Dataset repositories (spec type=dataset): the same under /api/datasets/{repo}/... and /datasets/{repo}/resolve/...
  (huggingface_hub repo_type="dataset"). A repository answers only under its own kind: a dataset asked for under
  /api/models/ (or a model under /api/datasets/) is 404 RepoNotFound, as on the real Hub.
  404s carry X-Error-Code: RepoNotFound | RevisionNotFound | EntryNotFound.
Test control (hub port only): GET/POST /_testhub/faults, GET /_testhub/stats, POST /_testhub/reset,
POST /_testhub/link {"rate_mbps": R, "conn_rate_mbps": C} (0 = unpaced).

Link pacing (off by default): file bytes leave at most at R MB/s summed over every connection (the client's NIC
or the CDN's share of it) and at most C MB/s on each connection (what one TCP stream from a CDN gets; the reason
hf_transfer opens several). Paced in SEND_STEP pieces, with at most one piece of burst.

Fault rules (dicts) apply to byte transfers (non-LFS resolve GET and file server GET) unless "where": "api"|"any":
  kind: drop (close the socket at `offset`), stall (stop sending at `offset`, socket open, for stall_s),
        status (answer `status`, default 503), 429 (with Retry-After: retry_after), flip (xor the byte at
        `offset`), truncate (206 whose body ends at `offset` while Content-Range claims the whole requested range),
        ignore_range (what some proxies and caches do: a *ranged* GET is answered 200 with the whole file, no
        Content-Range; unranged GETs never match. Options: `offset` (only ranged requests whose range covers that
        absolute offset match; default: any ranged request), `size_delta` (bytes added to (or, negative, cut from)
        the whole body and its Content-Length: another object than the tree's, e.g. a stale cached version;
        padding is zeros; default 0)). The whole body then passes through the other rules: a drop, stall, flip or
        truncate rule listed after it whose offset lies in the file applies to it too (a flaky link behind the
        proxy). norange is another name for ignore_range.
  path / repo: fnmatch globs (default "*"); offset: absolute file offset (default: middle of the file; for
  ignore_range: none); times: triggers left (default 1, -1 = forever).
"""
from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import re
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .repos import DEFAULT_REPOS, HashCache, Repo, RepoFile, build_repo, make_block

SEND_STEP = 1 << 20
RANGE_KINDS = ("ignore_range", "norange")  # answer a ranged GET with 200 + the whole file
BYTE_KINDS = ("drop", "stall", "flip", "truncate")  # act at an offset of the bytes sent


class Pacer:
    """Holds a byte stream to `rate` bytes/s: take(n) returns once n more bytes fit in the schedule."""

    def __init__(self, rate: float, burst: int = SEND_STEP):
        self.rate = float(rate)
        self.burst_s = burst / self.rate
        self.lock = threading.Lock()
        self.due = time.monotonic()

    def take(self, n: int, stop: threading.Event) -> None:
        with self.lock:
            now = time.monotonic()
            self.due = max(self.due, now - self.burst_s) + n / self.rate
            wait = self.due - now - self.burst_s
        if wait > 0:
            stop.wait(wait)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        return  # clients hanging up mid-transfer are normal here (and are what the faults provoke)


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
        self.hub = _Server((bind, port), _make_handler(self, "hub"))
        self.files = _Server((bind, file_port), _make_handler(self, "files"))
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
        Range header); consumes one trigger. `kinds` limits the rules considered."""
        with self.lock:
            for rule in self.faults:
                if rule.get("times", 1) == 0:
                    continue
                rw = rule.get("where", "file")
                if rw != "any" and rw != where:
                    continue
                if not fnmatch.fnmatchcase(repo_id, rule.get("repo", "*")):
                    continue
                if not fnmatch.fnmatchcase(path, rule.get("path", "*")):
                    continue
                kind = rule["kind"]
                if kinds is not None and kind not in kinds:
                    continue
                if kind in BYTE_KINDS:
                    off = rule.get("offset")
                    off = size // 2 if off is None else int(off)
                    if not (start <= off <= end):
                        continue
                if kind in RANGE_KINDS:
                    if not ranged:
                        continue
                    if rule.get("offset") is not None and not (start <= int(rule["offset"]) <= end):
                        continue
                if rule.get("times", 1) > 0:
                    rule["times"] = rule.get("times", 1) - 1
                fired = dict(rule, repo_id=repo_id, file=path, start=start, end=end)
                self.stats["faults"].append(fired)
                return fired
        return None

    def sign(self, sha256: str) -> str:
        return hmac.new(self.secret, sha256.encode(), "sha256").hexdigest()[:32]


_API_RE = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/(.*))?$")
_API_KINDS = {"models": "model", "datasets": "dataset"}
_RESOLVE_RE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_DATASET_RESOLVE_RE = re.compile(r"^/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_LFS_RE = re.compile(r"^/lfs/([0-9a-f]{64})$")
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _make_handler(hub: TestHub, role: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "testhub/1"

        def log_message(self, fmt, *args):  # quiet
            return

        # ---- helpers ----------------------------------------------------------------------------------
        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body and not head:
                self.wfile.write(body)

        def _json(self, status: int, obj, headers: dict | None = None) -> None:
            h = {"Content-Type": "application/json"}
            h.update(headers or {})
            self._send(status, json.dumps(obj).encode(), h, head=self.command == "HEAD")

        def _error(self, status: int, code: str | None, msg: str) -> None:
            h = {"X-Error-Code": code} if code else {}
            if code:
                h["X-Error-Message"] = msg
            self._json(status, {"error": msg}, h)

        def _base(self) -> str:
            host = self.headers.get("Host") or f"{hub.bind}:{hub.port}"
            return f"http://{host}"

        def _authorized(self) -> bool:
            if not hub.token:
                return True
            return self.headers.get("Authorization", "") == f"Bearer {hub.token}"

        def _repo_rev(self, repo_id: str, rev: str, repo_type: str = "model") -> tuple[Repo | None, str | None]:
            repo = hub.repos.get(repo_id)
            if repo is None or repo.repo_type != repo_type:  # a repository answers only under its own kind
                self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}")
                return None, None
            rev = unquote(rev)
            sha = repo.branches.get(rev) or (rev if rev == repo.sha else None)
            if sha is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None, None
            return repo, sha

        def _api_fault(self, repo_id: str, path: str) -> bool:
            rule = hub.take_fault("api", repo_id, path, 0, 0, 0)
            return self._simple_fault(rule)

        def _simple_fault(self, rule: dict | None) -> bool:
            if not rule:
                return False
            if rule["kind"] == "429":
                self._json(429, {"error": "rate limited"}, {"Retry-After": str(rule.get("retry_after", 1))})
                return True
            if rule["kind"] == "status":
                self._error(int(rule.get("status", 503)), None, "injected failure")
                return True
            return False

        # ---- verbs ------------------------------------------------------------------------------------
        def do_HEAD(self):
            self._dispatch(head=True)

        def do_GET(self):
            self._dispatch(head=False)

        def do_POST(self):
            path = urlsplit(self.path).path
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if role == "hub" and path == "/_testhub/faults":
                hub.set_faults(json.loads(body or b"[]"))
                return self._json(200, {"faults": hub.faults})
            if role == "hub" and path == "/_testhub/link":
                req = json.loads(body or b"{}")
                return self._json(200, hub.set_link(float(req.get("rate_mbps", 0)), float(req.get("conn_rate_mbps", 0))))
            if role == "hub" and path == "/_testhub/reset":
                hub.reset_stats()
                return self._json(200, {"ok": True})
            self._error(404, None, "not found")

        def _dispatch(self, head: bool) -> None:
            try:
                if role == "files":
                    self._files(head)
                else:
                    self._hub(head)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                self.close_connection = True

        def _hub(self, head: bool) -> None:
            with hub.lock:
                hub.stats["requests"] += 1
            split = urlsplit(self.path)
            path = split.path
            query = parse_qs(split.query)
            if path == "/_testhub/faults":
                return self._json(200, {"faults": hub.faults})
            if path == "/_testhub/stats":
                return self._json(200, hub.snapshot())
            if not self._authorized():
                return self._error(401, "RepoNotFound", "Invalid credentials")
            m = _API_RE.match(path)
            if m:
                collection, repo_id, kind, rev, sub = m.groups()
                with hub.lock:
                    hub.stats["api"][kind] = hub.stats["api"].get(kind, 0) + 1
                if self._api_fault(repo_id, kind):
                    return None
                repo, sha = self._repo_rev(repo_id, rev, _API_KINDS[collection])
                if repo is None:
                    return None
                if kind == "revision":
                    return self._revision(repo, sha, query)
                return self._tree(repo, sha, rev, unquote(sub or "").strip("/"), query)
            m = _DATASET_RESOLVE_RE.match(path)
            repo_type = "dataset"
            if not m:
                m = _RESOLVE_RE.match(path)
                repo_type = "model"
            if m:
                repo_id, rev, fpath = m.groups()
                repo, sha = self._repo_rev(repo_id, rev, repo_type)
                if repo is None:
                    return None
                f = repo.file(unquote(fpath))
                if f is None:
                    return self._error(404, "EntryNotFound", f"{fpath} does not exist on {rev}")
                return self._resolve(repo, sha, f, head)
            return self._error(404, None, "not found")

        def _revision(self, repo: Repo, sha: str, query: dict) -> None:
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for f in repo.files:
                s = {"rfilename": f.tree_path or f.path}
                if blobs:
                    s.update(size=f.tree_size if f.tree_size is not None else f.size, blobId=f.blob_sha1)
                    if f.lfs:
                        s["lfs"] = {"sha256": f.sha256, "size": s["size"], "pointerSize": 134}
                siblings.append(s)
            info = {"id": repo.repo_id}
            if repo.repo_type == "model":
                info["modelId"] = repo.repo_id  # a dataset's answer has no modelId
            info.update(sha=sha, private=bool(hub.token), siblings=siblings)
            self._json(200, info)

        def _tree(self, repo: Repo, sha: str, rev: str, sub: str, query: dict) -> None:
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries = []
            dirs = set()
            for f in sorted(repo.files, key=lambda x: x.tree_path or x.path):
                p = f.tree_path or f.path
                if sub and not p.startswith(sub + "/"):
                    continue
                rel = p[len(sub) + 1:] if sub else p
                parts = rel.split("/")
                if not recursive and len(parts) > 1:
                    dirs.add((sub + "/" if sub else "") + parts[0])
                    continue
                for i in range(1, len(parts)):
                    dirs.add((sub + "/" if sub else "") + "/".join(parts[:i]))
                size = f.tree_size if f.tree_size is not None else f.size
                e = {"type": "file", "oid": f.blob_sha1, "size": size, "path": p}
                if f.lfs:
                    e["lfs"] = {"oid": f.sha256, "size": size, "pointerSize": 134}
                entries.append(e)
            for d in sorted(dirs):
                if not d or d.startswith("/") or ".." in d.split("/"):
                    continue
                entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d})
            entries.sort(key=lambda e: e["path"])
            cursor = int(query.get("cursor", ["0"])[0] or 0)
            page = entries[cursor:cursor + hub.page_size]
            headers = {}
            nxt = cursor + hub.page_size
            if nxt < len(entries):
                url = (f"{self._base()}/api/{repo.repo_type}s/{repo.repo_id}/tree/{quote(rev, safe='')}"
                       + (f"/{quote(sub, safe='')}" if sub else "")
                       + f"?recursive={'true' if recursive else 'false'}&expand=false&cursor={nxt}")
                headers["Link"] = f'<{url}>; rel="next"'
            self._json(200, page, headers)

        def _resolve(self, repo: Repo, sha: str, f: RepoFile, head: bool) -> None:
            common = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
            if f.lfs:
                host = (self.headers.get("Host") or hub.bind).rsplit(":", 1)[0]
                loc = f"http://{host}:{hub.file_port}/lfs/{f.sha256}?sig={hub.sign(f.sha256)}"
                size = f.tree_size if f.tree_size is not None else f.size
                common.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": size, "ETag": f'"{f.blob_sha1}"',
                               "Location": loc})
                return self._send(302, b"", common, head=True)
            common["ETag"] = f'"{f.blob_sha1}"'
            self._serve(repo, f, head, common)

        def _files(self, head: bool) -> None:
            split = urlsplit(self.path)
            m = _LFS_RE.match(split.path)
            if self.headers.get("Authorization"):
                with hub.lock:
                    hub.stats["file_auth_headers"] += 1
            if not m:
                return self._error(404, None, "not found")
            sig = parse_qs(split.query).get("sig", [""])[0]
            if not hmac.compare_digest(sig, hub.sign(m.group(1))):
                return self._error(403, None, "bad signature")
            found = hub.by_sha256.get(m.group(1))
            if not found:
                return self._error(404, None, "no such object")
            repo, f = found
            self._serve(repo, f, head, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

        def _serve(self, repo: Repo, f: RepoFile, head: bool, headers: dict) -> None:
            size = f.size
            rng = self.headers.get("Range")
            start, end, partial = 0, size - 1, False
            if rng:
                m = _RANGE_RE.match(rng.strip())
                if not m or (not m.group(1) and not m.group(2)):
                    return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                else:  # suffix range
                    start, end = max(0, size - int(m.group(2))), size - 1
                if start >= size or start > end:
                    return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head=head)
                partial = True
            rule = None if head else hub.take_fault("file", repo.repo_id, f.path, start, max(start, end), size,
                                                    ranged=partial)
            if rule and rule["kind"] in ("429", "status"):
                extra = {"Retry-After": str(rule.get("retry_after", 1))} if rule["kind"] == "429" else {}
                status = 429 if rule["kind"] == "429" else int(rule.get("status", 503))
                return self._send(status, b'{"error": "injected"}', dict(extra, **{"Content-Type": "application/json"}))
            body_end = None  # absolute end (exclusive) of a whole body that is not the file's size (size_delta)
            if rule and rule["kind"] in RANGE_KINDS:
                start, end, partial = 0, size - 1, False
                body_end = max(0, size + int(rule.get("size_delta", 0)))
                rule = hub.take_fault("file", repo.repo_id, f.path, 0, max(0, size - 1), size, kinds=BYTE_KINDS)
            length = end - start + 1 if size else 0
            if body_end is not None:
                length = body_end
            h = dict(headers)
            cut = None  # absolute offset where the body stops early
            if partial:
                h["Content-Range"] = f"bytes {start}-{end}/{size}"
            if rule and rule["kind"] == "truncate":
                off = rule.get("offset")
                off = size // 2 if off is None else int(off)
                length = off - start
                cut = off
            self.send_response(206 if partial else 200)
            for k, v in h.items():
                self.send_header(k, str(v))
            self.send_header("Content-Length", str(length))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if head or length == 0:
                return
            stop_at = (end + 1 if body_end is None else body_end) if cut is None else cut
            if rule and rule["kind"] in ("drop", "stall"):
                off = rule.get("offset")
                stop_at = size // 2 if off is None else int(off)
            flip = None
            if rule and rule["kind"] == "flip":
                off = rule.get("offset")
                flip = size // 2 if off is None else int(off)
            pos = start
            link = hub.link
            own = Pacer(hub.conn_rate) if hub.conn_rate else None
            while pos < stop_at:
                n = min(SEND_STEP, stop_at - pos)
                for pacer in (link, own):
                    if pacer is not None:
                        pacer.take(n, hub.stop_event)
                data = f.content.read(pos, n)
                if len(data) < n:  # a whole body longer than the file (size_delta > 0): zeros
                    data = bytes(data) + b"\0" * (n - len(data))
                if flip is not None and pos <= flip < pos + n:
                    b = bytearray(bytes(data))
                    b[flip - pos] ^= 0xFF
                    data = bytes(b)
                self.wfile.write(data)
                hub.count_bytes(repo.repo_id, f.path, len(data))
                pos += n
            hub.log_range(repo.repo_id, f.path, start, end, pos)
            if rule and rule["kind"] == "stall":
                self.wfile.flush()
                hub.stop_event.wait(float(rule.get("stall_s", 3600)))
            if rule and rule["kind"] in ("drop", "stall"):
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if cut is not None:
                self.close_connection = True

    return Handler
