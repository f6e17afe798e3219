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
POST /_testhub/link {"rate_mbps": R, "conn_rate_mbps": C} (0 = unpaced; pacing.py).
Byte transfers pass through the fault rules (faults.py) and the link pacing (pacing.py).

The handlers serve one TestHub (hub.py), passed to make_handler: its repositories, controls and statistics.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .faults import BYTE_KINDS, RANGE_KINDS
from .pacing import SEND_STEP, Pacer
from .repos import Repo, RepoFile


class HubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        return  # clients hanging up mid-transfer are normal here (and are what the faults provoke)


_API_RE = re.compile(r"^/api/(models|datasets)/([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/(.*))?$")
_API_KINDS = {"models": "model", "datasets": "dataset"}
_RESOLVE_RE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_DATASET_RESOLVE_RE = re.compile(r"^/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_LFS_RE = re.compile(r"^/lfs/([0-9a-f]{64})$")
_RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


def make_handler(hub, role: str):
    """The request handler class of one of the hub's two servers (role "hub": API, resolve and controls; "files":
    the LFS file server)."""
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
