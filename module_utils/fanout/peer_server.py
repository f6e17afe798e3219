# -*- coding: utf-8 -*-
"""Peer server of the fleet fan-out of model weights: serves, read-only, the files a host's own verified manifest
vouches for, to the other hosts of the fleet (they check every file against the Hub's sha256 themselves).

Runs on the target as a script (the model_peer module ships it with hf_verify.py into its run dir and starts it
under systemd-run):

    python3 model_peer_server.py --bind ADDR --port P --root DIR --model NAME [--model NAME2 ...]
        [--bundle-dir DIR] --token-sha256-file FILE --lifetime SECONDS --stats FILE [--ready-file FILE]
        [--max-connections N]

Routes (every request needs `Authorization: Bearer <token>`; sha256(token) must equal the token file's content,
else 401):
  GET /health                    {"ok": true, "models": [...], "pid": n}
  GET /index/<model>             {"model", "repo_id", "repo_type", "revision", "files": {path: {"size", "sha256"}}
                                  (vouched now), "progress": progress.json or null, "active": file GETs in flight}
  GET|HEAD /files/<model>/<path> the bytes of a vouched file (single Range -> 206; else 404 X-Error-Code: NotVouched)
  GET|HEAD /bundles/<name>       a regular file directly in --bundle-dir (same Range handling)
A file is vouched when its manifest record's size and mtime_ns equal the file's, checked on the open descriptor at
request time; a path that leaves the model directory (`..`, absolute, a symlink out), anything under .hf_model/ and
anything but a regular file are refused. The only file written is the stats file (and --ready-file when given).
Exits 0 after --lifetime seconds or on SIGTERM/SIGINT, with the final stats written.
"""
from __future__ import absolute_import, division, print_function

import argparse
import errno
import hashlib
import hmac
import json
import os
import re
import select
import selectors
import signal
import socket
import socketserver
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

if __package__:  # imported: ansible.module_utils.fanout.peer_server (model_peer's AnsiballZ payload, tests)
    from ansible.module_utils.hf.verify import Manifest
else:  # run as a script from the run dir, where no Ansible is: model_peer writes hf/verify.py beside it as hf_verify.py
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_verify import Manifest

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
RANGE_RE = re.compile(r"bytes=(\d*)-(\d*)\Z")
SOCKET_TIMEOUT = 60.0
SEND_CHUNK = 8 << 20
MAX_CONNECTIONS = 256
STATS_INTERVAL = 1.0
META_DIR = ".hf_model"


class RangeError(Exception):
    """The Range header asks for nothing this file can satisfy (416)."""


def parse_range(header, size):
    """(start, end inclusive) for a single `bytes=a-b`, `bytes=a-` or `bytes=-n`; None without a header; RangeError
    for anything else (several ranges, another unit, start past the end, a > b, an empty file)."""
    if header is None:
        return None
    m = RANGE_RE.match(header.strip().replace(" ", ""))
    if not m or (not m.group(1) and not m.group(2)):
        raise RangeError(header)
    first, last = m.group(1), m.group(2)
    if first:
        start = int(first)
        end = int(last) if last else size - 1
        if start >= size or end < start:
            raise RangeError(header)
        return start, min(end, size - 1)
    n = int(last)
    if n == 0 or size == 0:
        raise RangeError(header)
    return max(0, size - n), size - 1


def safe_relpath(rel):
    """True when `rel` is a relative path of plain segments that stays in the model dir and is not model metadata."""
    if not rel or "\0" in rel or rel.startswith("/"):
        return False
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return parts[0] != META_DIR


def inside(path, base):
    return path == base or path.startswith(base.rstrip("/") + "/")


class Stats(object):
    """Counters of the server, written atomically (tmp + rename) by write()."""

    def __init__(self, path, models, bundles):
        self.path = path
        self.lock = threading.Lock()
        self.bytes_served = dict((m, 0) for m in models)
        if bundles:
            self.bytes_served["bundles"] = 0
        self.files_served = dict((m, 0) for m in models)
        self.requests = 0
        self.unauthorized = 0
        self.started = time.time()
        self.dirty = True

    def add(self, key, **counts):
        with self.lock:
            for name, n in counts.items():
                if name == "bytes":
                    self.bytes_served[key] = self.bytes_served.get(key, 0) + n
                elif name == "files":
                    self.files_served[key] = self.files_served.get(key, 0) + n
                else:
                    setattr(self, name, getattr(self, name) + n)
            self.dirty = True

    def snapshot(self):
        with self.lock:
            self.dirty = False
            return {"bytes_served": dict(self.bytes_served), "files_served": dict(self.files_served),
                    "requests": self.requests, "unauthorized": self.unauthorized, "started": self.started,
                    "updated": time.time(), "pid": os.getpid()}

    def write(self):
        data = self.snapshot()
        tmp = "%s.tmp.%d" % (self.path, os.getpid())
        try:
            with open(tmp, "w") as f:
                json.dump(data, f, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as err:
            sys.stderr.write("model_peer_server: cannot write stats %s: %s\n" % (self.path, err))
            return False
        return True


class Model(object):
    """One served model directory: its manifest (reloaded when the file changes) and its in-flight GETs."""

    def __init__(self, root, name):
        self.name = name
        self.dir = os.path.join(root, name)
        self.manifest_path = os.path.join(self.dir, META_DIR, "manifest.json")
        self.progress_path = os.path.join(self.dir, META_DIR, "progress.json")
        self.lock = threading.Lock()
        self._key = None
        self._manifest = Manifest(self.manifest_path)
        self.active = 0

    def manifest(self):
        try:
            st = os.stat(self.manifest_path)
        except OSError:
            return Manifest(self.manifest_path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self.lock:
            if key != self._key:
                self._manifest = Manifest.load(self.manifest_path)
                self._key = key
            return self._manifest

    def progress(self):
        try:
            with open(self.progress_path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def resolve(self, rel, manifest):
        """(real path, record) when `rel` is a safe path the manifest has a record for and its real path stays in
        the model dir; else None. The size/mtime rule is checked by the caller on what it opens or stats."""
        if not safe_relpath(rel) or not isinstance(manifest.files.get(rel), dict):
            return None
        base = os.path.realpath(self.dir)
        real = os.path.realpath(os.path.join(base, rel))
        if not inside(real, base) or real == base or inside(real, os.path.join(base, META_DIR)):
            return None
        return real, manifest.files[rel]

    def vouched(self):
        """{path: {"size", "sha256"}} of every file vouched for now."""
        manifest = self.manifest()
        out = {}
        for rel in sorted(manifest.files):
            hit = self.resolve(rel, manifest)
            if hit is None:
                continue
            try:
                st = os.stat(hit[0])
            except (OSError, ValueError):
                continue
            rec = manifest.vouches_stat(rel, st) if stat.S_ISREG(st.st_mode) else None
            if rec is not None:
                out[rel] = {"size": rec.get("size"), "sha256": rec.get("sha256")}
        return out

    def open_vouched(self, rel):
        """(fd, size, record) of the vouched file `rel`, checked on the open descriptor; None when not vouched."""
        manifest = self.manifest()
        hit = self.resolve(rel, manifest)
        if hit is None:
            return None
        try:
            fd = os.open(hit[0], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except (OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
            rec = manifest.vouches_stat(rel, st) if stat.S_ISREG(st.st_mode) else None
        except OSError:
            rec = None
        if rec is None:
            os.close(fd)
            return None
        return fd, st.st_size, rec


class PeerServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128  # a fleet's receivers connect at once (5, the default, drops SYNs: 1 s retries)

    def __init__(self, bind, port, root, models, token_sha256, stats_path, bundle_dir=None,
                 socket_timeout=SOCKET_TIMEOUT, max_connections=MAX_CONNECTIONS):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.root = root
        self.models = dict((m, Model(root, m)) for m in models)
        self.model_names = list(models)
        self.bundle_dir = bundle_dir
        self.token_sha256 = token_sha256
        self.socket_timeout = socket_timeout
        self.stats = Stats(stats_path, models, bool(bundle_dir))
        ThreadingHTTPServer.__init__(self, (bind, port), Handler)

    def server_bind(self):
        # HTTPServer.server_bind would resolve the address's name (socket.getfqdn): seconds on a host without DNS
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):
        """One thread per connection, at most max_connections of them: past that, 503 and close."""
        if not self.slots.acquire(blocking=False):
            try:  # drain what already came (closing on unread bytes would send a reset in place of the answer)
                request.setblocking(False)
                try:
                    request.recv(65536)
                except OSError:
                    pass
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            ThreadingHTTPServer.process_request(self, request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            ThreadingHTTPServer.process_request_thread(self, request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address):
        err = sys.exc_info()[1]
        sys.stderr.write("model_peer_server: %s: %s: %s\n" % (client_address, type(err).__name__, err))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglang-model-peer/1"
    sys_version = ""

    def setup(self):
        self.timeout = self.server.socket_timeout
        BaseHTTPRequestHandler.setup(self)
        # headers and a small body go out as two writes: without this, Nagle + the peer's delayed ACK add ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- plumbing --
    def log_request(self, code="-", size="-"):
        if isinstance(code, int) and code >= 400 and code != 404:
            BaseHTTPRequestHandler.log_request(self, code, size)

    def __getattr__(self, name):
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _reply(self, code, body=b"", headers=None, head=False):
        if isinstance(body, (dict, list)):
            body = (json.dumps(body, sort_keys=True) + "\n").encode()
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _authorized(self):
        auth = self.headers.get("Authorization") or ""
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return False
        digest = hashlib.sha256(token.strip().encode("utf-8", "surrogateescape")).hexdigest()
        return hmac.compare_digest(digest, self.server.token_sha256)

    def _begin(self):
        """Count the request and check its token; False when it was answered (401)."""
        self.server.stats.add(None, requests=1)
        if self._authorized():
            return True
        self.server.stats.add(None, unauthorized=1)
        self._reply(401, {"error": "unauthorized"}, {"WWW-Authenticate": "Bearer"}, head=self.command == "HEAD")
        return False

    def _not_allowed(self):
        self.close_connection = True  # a body we do not read must not be parsed as the next request
        if not self._begin():
            return
        self._reply(405, {"error": "method not allowed"}, {"Allow": "GET, HEAD", "Connection": "close"},
                    head=self.command == "HEAD")

    # -- routes --
    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        if not self._begin():
            return
        raw = urlsplit(self.path).path
        if raw == "/health":
            return self._reply(200, {"ok": True, "models": self.server.model_names, "pid": os.getpid()}, head=head)
        for prefix, route in (("/index/", self._index), ("/files/", self._file), ("/bundles/", self._bundle)):
            if raw.startswith(prefix):
                return route(raw[len(prefix):], head)
        return self._reply(404, {"error": "not found"}, {"X-Error-Code": "NotFound"}, head=head)

    def _index(self, rest, head):
        model = self.server.models.get(unquote(rest))
        if model is None:
            return self._reply(404, {"error": "unknown model"}, {"X-Error-Code": "UnknownModel"}, head=head)
        manifest = model.manifest()
        body = {"model": model.name, "repo_id": manifest.repo_id, "repo_type": manifest.repo_type,
                "revision": manifest.revision, "files": model.vouched(), "progress": model.progress(),
                "active": model.active}
        return self._reply(200, body, head=head)

    def _file(self, rest, head):
        name, sep, quoted = rest.partition("/")
        model = self.server.models.get(unquote(name))
        opened = model.open_vouched(unquote(quoted)) if (model is not None and sep) else None
        if opened is None:
            return self._reply(404, {"error": "not vouched"}, {"X-Error-Code": "NotVouched"}, head=head)
        fd, size, rec = opened
        try:
            extra = {"ETag": '"%s"' % rec.get("sha256")} if rec.get("sha256") else {}
            self._send_file(fd, size, model, model.name, head, extra)
        finally:
            os.close(fd)

    def _bundle(self, rest, head):
        name = unquote(rest)
        fd = None
        if self.server.bundle_dir and NAME_RE.match(name):
            try:
                fd = os.open(os.path.join(self.server.bundle_dir, name),
                             os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    fd = None
            except (OSError, ValueError):
                fd = None
        if fd is None:
            return self._reply(404, {"error": "no such bundle"}, {"X-Error-Code": "NotFound"}, head=head)
        try:
            self._send_file(fd, os.fstat(fd).st_size, None, "bundles", head, {})
        finally:
            os.close(fd)

    # -- bodies --
    def _send_file(self, fd, size, model, key, head, extra):
        try:
            rng = parse_range(self.headers.get("Range"), size)
        except RangeError:
            return self._reply(416, {"error": "range not satisfiable"},
                               {"Content-Range": "bytes */%d" % size, "Accept-Ranges": "bytes"}, head=head)
        start, end = rng if rng else (0, size - 1)
        length = end - start + 1 if size else 0
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        for k, v in extra.items():
            self.send_header(k, v)
        if rng:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.send_header("Content-Length", str(length))
        if head:
            self.end_headers()
            return
        if model is not None:
            with model.lock:
                model.active += 1
            self.server.stats.add(key, files=1)
        try:
            self.end_headers()
            sent = self._sendfile(fd, start, length, key)
            if sent < length:  # the file shrank under us: the promised length cannot be kept
                self.close_connection = True
        except OSError as err:  # reset, broken pipe, the 60 s socket timeout
            self.close_connection = True
            if err.errno not in (errno.EPIPE, errno.ECONNRESET) and not isinstance(err, socket.timeout):
                self.log_error("sending %s: %s", self.path, err)
        finally:
            if model is not None:
                with model.lock:
                    model.active -= 1

    def _sendfile(self, fd, offset, count, key):
        """os.sendfile of count bytes from offset, waiting for the (non-blocking, timed) socket; -> bytes sent."""
        sock = self.connection
        out = sock.fileno()
        timeout = sock.gettimeout()
        sent = 0
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_WRITE)
            while sent < count:
                try:
                    n = os.sendfile(out, fd, offset + sent, min(SEND_CHUNK, count - sent))
                except BlockingIOError:
                    if not sel.select(timeout):
                        raise socket.timeout("client read nothing for %ss" % timeout)
                    continue
                if n == 0:
                    break
                sent += n
                self.server.stats.add(key, bytes=n)
        return sent


def read_token_sha256(path):
    with open(path) as f:
        value = f.read().strip().lower()
    if not re.match(r"[0-9a-f]{64}\Z", value):
        raise ValueError("%s does not hold a sha256 hex digest" % path)
    return value


def parse_args(argv):
    ap = argparse.ArgumentParser(description="Serve the vouched files of model directories to fleet peers.")
    ap.add_argument("--bind", required=True, help="IP address to listen on (the fleet network address)")
    ap.add_argument("--port", type=int, required=True, help="TCP port (0: any free port, see --ready-file)")
    ap.add_argument("--root", required=True, help="directory holding the model directories")
    ap.add_argument("--model", action="append", required=True, help="model directory name under --root (repeat)")
    ap.add_argument("--bundle-dir", help="directory whose regular files are served under /bundles/")
    ap.add_argument("--token-sha256-file", required=True, help="file holding sha256(token) in hex")
    ap.add_argument("--lifetime", type=float, required=True, help="seconds to serve before exiting 0")
    ap.add_argument("--stats", required=True, help="stats file (JSON, rewritten atomically)")
    ap.add_argument("--ready-file", help="written (JSON: port, pid) once listening")
    ap.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                    help="connections served at once (one thread each); more get 503")
    ap.add_argument("--socket-timeout", type=float, default=SOCKET_TIMEOUT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bad = [m for m in args.model if not NAME_RE.match(m)]
    if bad:
        ap.error("bad model name(s) %s: want [A-Za-z0-9][A-Za-z0-9._-]*" % bad)
    if args.bind in ("0.0.0.0", "::", ""):
        ap.error("refusing the wildcard address %r: bind to the fleet network address" % args.bind)
    if args.lifetime <= 0:
        ap.error("--lifetime must be > 0")
    if args.max_connections < 1:
        ap.error("--max-connections must be >= 1")
    return args


def write_json_atomic(path, data):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def serve(args):
    """Serve until the lifetime ends or SIGTERM/SIGINT; -> exit status."""
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    reason = []

    def on_signal(signum, _frame):
        reason.append(signal.Signals(signum).name)
        try:
            os.write(wfd, b"x")
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    token_sha256 = read_token_sha256(args.token_sha256_file)
    server = PeerServer(args.bind, args.port, args.root, args.model, token_sha256, args.stats,
                        bundle_dir=args.bundle_dir, socket_timeout=args.socket_timeout,
                        max_connections=args.max_connections)
    stop = threading.Event()

    def stats_loop():
        while not stop.wait(STATS_INTERVAL):
            if server.stats.dirty:
                server.stats.write()

    server.stats.write()
    threads = [threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True),
               threading.Thread(target=stats_loop, daemon=True)]
    for t in threads:
        t.start()
    port = server.server_address[1]
    if args.ready_file:
        write_json_atomic(args.ready_file, {"port": port, "pid": os.getpid()})
    print("model_peer_server: pid %d serving %s from %s on %s port %d for %ss" % (
        os.getpid(), ",".join(args.model), args.root, args.bind, port, args.lifetime), flush=True)
    deadline = time.monotonic() + args.lifetime
    while not reason:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            reason.append("lifetime")
            break
        try:
            select.select([rfd], [], [], remaining)
        except InterruptedError:  # pragma: no cover - PEP 475 retries select itself
            pass
    server.shutdown()
    server.server_close()
    stop.set()
    threads[1].join(timeout=5)
    server.stats.write()
    print("model_peer_server: exiting (%s): %s" % (reason[0], json.dumps(server.stats.snapshot(), sort_keys=True)),
          flush=True)
    return 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return serve(args)
    except (OSError, ValueError) as err:
        sys.stderr.write("model_peer_server: %s: %s\n" % (type(err).__name__, err))
        return 2


if __name__ == "__main__":
    sys.exit(main())
