# -*- coding: utf-8 -*-
"""Resumable transfer of Hub files with hf_transfer: sparse-map bookkeeping, fill window, stall watchdog.

hf_transfer 0.1.9 downloads one URL into one file (a `Range: bytes=0-0` probe for the size, then `max_files`
parallel ranged chunks of `chunk_size`, each written at its offset once the whole chunk arrived), keeps no
state, deletes its output on error, holds the GIL while it runs and sets no read timeout. Resume is built
around it, not inside it:

* Lanes. Every hf_transfer call runs in a lane, a child process (the GIL and a hung transfer stay out of the
  watchdog's way; PR_SET_PDEATHSIG kills it with its parent). One file per lane; lanes work on different files.
* Bookkeeping = the file's own sparse map. A file is built in <dir>/.hf_model/parts/<id>/data, created empty, so
  every region hf_transfer has not written is a hole. hf_transfer writes a chunk only after receiving all of it,
  so after any interruption (stall, network error, SIGKILL, reboot: unflushed delayed-allocation pages come back
  as holes) the chunks that are complete are exactly the chunk ranges without a hole (SEEK_HOLE). Incomplete
  are the `max_files` chunks in flight (6 x 8 MiB = 48 MiB by default) plus finished chunks whose last write
  tokio still had queued in its blocking pool (hf_transfer drops its file without flushing); how many depends on
  how far the disk lags the network (bench/bench_models.py measures the total against 64 MiB).
  journal.json beside it pins what the bytes are (path, size, expected hash); a different file starts over.
  A hardlink data.keep survives hf_transfer's delete-on-error.
* First attempt: hf_transfer fetches the Hub URL directly (after our own probe has checked that the server honours
  Range and that its size is the tree's size). Resume: hf_transfer fetches a loopback *fill window* that stands
  for the same file: a chunk already on disk is answered 206 with an empty body (hf_transfer writes nothing), a
  chunk with a hole is forwarded upstream as an absolute Range request, checked (206, exact Content-Range, the
  tree's total, full length) and streamed through. So a rerun re-fetches only chunks with holes.
* A server that ignores Range (a proxy or cache answering a ranged GET with 200 and the whole body), sometimes or
  always. A 200 is usable only when its Content-Length is the tree's size (anything else is a size lie: fatal).
  hf_transfer must never see such an answer (it buffers a whole answer in memory, then writes it at the chunk's
  offset), so the answer is taken in our code, in bounded memory (1 MiB buffers, aligned 1 MiB writes):
  - probe answered 200: that very body is streamed into the file's holes (mode "stream", one connection, in a
    thread of this process); a file whose server ignored Range is probed again before each later attempt.
  - fill window answered 200 for a hole: either the needed slice is cut out of the body (the bytes before it are
    read and dropped, the rest is never read), or the whole body fills every hole of the file while the lane is
    retired (a takeover), whichever reads fewer bytes counting the other holes at their own size (ties: the whole
    body); after WHOLE_AFTER_IGNORED ignored Ranges on one attempt, always the whole body.
  - once any answer ignored Range, no file goes direct again in this run (every answer then passes our checks).
    A direct hf_transfer is also watched: its file growing past the tree's size (a whole body written at a chunk
    offset: the file is discarded) or its resident memory above LANE_RSS_BASE + 3 x connections x chunk (a whole
    body being buffered) kills it, and the file continues through the window.
  So a server that ignores Range on every request still completes, one stream per file. The count of answers
  that ignored Range is reported (stats range_ignored, range_ignored_files).
* Watchdog: no byte progress (the allocated bytes of the file for a direct transfer, the window's or the stream's
  byte counter otherwise) for `stall_timeout` seconds kills the lane (SIGKILL; a stream is aborted by shutting its
  socket) and retries that file in fill mode after exponential backoff (Retry-After for 429), at most `retries`
  times; then the run fails naming the file, the bytes done and the last error. ENOSPC and size lies fail at once
  (ENOSPC keeps the partial file for a later resume).
* Verification: a file is moved into place only when its hash matches (sha256 for LFS, git blob sha1 otherwise);
  hashing runs in a thread while lanes fetch the next files. A mismatch deletes the file and fetches it again, at
  most `hash_retries` times, then fails with both hashes.
"""
from __future__ import absolute_import, division, print_function

import errno
import hashlib
import http.client
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible.module_utils.hf.verify import Hasher, fsync_dir
from ansible.module_utils.hf.hub import file_url, validate_repo_type
from ansible.module_utils.fanout.sources import NoSource

MiB = 1 << 20
STATE_DIR = ".hf_model"
# Whole-body answers (a server that ignored Range) are read and written in aligned blocks of this size, so that an
# interruption never leaves a partly written block that the sparse map would count as data.
STREAM_BLOCK = MiB
# After this many answers that ignored Range during one attempt at a file, the window stops cutting slices and lets
# the next whole body fill the file.
WHOLE_AFTER_IGNORED = 3
# Resident memory a direct hf_transfer lane may hold besides its chunk buffers (3 x connections x chunk: chunks being
# received, their copy on completion, chunks queued for writing) before it is taken for buffering a whole body.
LANE_RSS_BASE = 256 * MiB

LANE_CODE = r"""
import ctypes, json, sys
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG: die with the parent
except Exception:
    pass
import hf_transfer
for line in sys.stdin:
    job = json.loads(line)
    kw = {}
    if job.get("retries"):
        kw["max_retries"] = job["retries"]
        kw["parallel_failures"] = job["parallel_failures"]
    if job.get("headers"):
        kw["headers"] = job["headers"]
    try:
        hf_transfer.download(job["url"], job["file"], job["max_files"], job["chunk_size"], **kw)
        out = {"id": job["id"], "ok": True}
    except Exception as err:
        out = {"id": job["id"], "ok": False, "error": str(err)}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"""


class FetchError(Exception):
    """Final failure of a transfer: names the file, the bytes done and the last error."""

    def __init__(self, msg, path=None, bytes_done=0, last_error=None, kind="transfer"):
        super(FetchError, self).__init__(msg)
        self.path = path
        self.bytes_done = bytes_done
        self.last_error = last_error
        self.kind = kind


class UpstreamError(Exception):
    def __init__(self, msg, fatal=False, retry_after=None):
        super(UpstreamError, self).__init__(msg)
        self.fatal = fatal
        self.retry_after = retry_after


class TakenOver(Exception):
    """A window request whose file is now filled by a whole-body stream: hf_transfer gets no answer (its lane is
    being retired)."""


def part_id(path):
    return hashlib.sha256(path.encode("utf-8")).hexdigest()[:20]


def write_json_atomic(path, obj, mode=0o600):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


_SYNC_FILE_RANGE = []


def start_writeback(fd):
    """Start writing the file's dirty pages to disk now, without waiting (sync_file_range SYNC_FILE_RANGE_WRITE):
    the fsync before a file is vouched for then finds little left to write. False where unsupported."""
    if not _SYNC_FILE_RANGE:
        try:
            import ctypes
            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            _SYNC_FILE_RANGE.append(fn)
        except (OSError, AttributeError):
            _SYNC_FILE_RANGE.append(None)
    fn = _SYNC_FILE_RANGE[0]
    return fn is not None and fn(fd, 0, 0, 2) == 0  # 2 = SYNC_FILE_RANGE_WRITE; offset 0, nbytes 0 = whole file


def has_hole(fd, start, end):
    """True when [start, end] (inclusive) of the file is not entirely written (a hole, or beyond EOF)."""
    try:
        return os.lseek(fd, start, os.SEEK_HOLE) <= end
    except OSError as err:
        if err.errno == errno.ENXIO:
            return True
        raise


def rss_bytes(pid):
    """Resident memory of a process (0 when unknown)."""
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def data_bytes(fd, size):
    """Bytes of [0, size) that are written (not holes)."""
    total, pos = 0, 0
    while pos < size:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno == errno.ENXIO:
                break
            raise
        if d >= size:
            break
        h = min(os.lseek(fd, d, os.SEEK_HOLE), size)
        total += h - d
        pos = h
    return total


def sparse_supported(directory):
    """Does this filesystem report holes? (Without it resume cannot tell written chunks from holes.)"""
    path = os.path.join(directory, ".sparse-probe.%d" % os.getpid())
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, 8 * MiB)
            os.pwrite(fd, b"x" * 4096, 4 * MiB)
            return os.lseek(fd, 0, os.SEEK_DATA) >= MiB
        finally:
            os.close(fd)
            os.unlink(path)
    except OSError:
        return False


# ---- upstream HTTP ----------------------------------------------------------------------------------------------

class Upstream:
    """Ranged GETs against the Hub / its file server, with a small keep-alive connection pool and env proxies."""

    def __init__(self, token=None, timeout=60.0, direct_hosts=()):
        self.token = token
        self.timeout = timeout
        self.lock = threading.Lock()
        self.pool = {}
        self.proxies = urllib.request.getproxies()
        self.direct_hosts = set(direct_hosts)  # fleet peers: never through a proxy

    def _new_conn(self, scheme, netloc):
        conn, absolute = self._make_conn(scheme, netloc)
        conn.hf_absolute = absolute
        return conn

    def _make_conn(self, scheme, netloc):
        host, _, port = netloc.rpartition(":") if netloc.count(":") == 1 else (netloc, "", "")
        port = int(port) if port else (443 if scheme == "https" else 80)
        host = host or netloc
        proxy = None if host.strip("[]") in self.direct_hosts or urllib.request.proxy_bypass(host) \
            else self.proxies.get(scheme)
        if proxy:
            p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if scheme == "https":
                conn = http.client.HTTPSConnection(p.hostname, p.port or 80, timeout=self.timeout)
                conn.set_tunnel(host, port)
                return conn, False
            return http.client.HTTPConnection(p.hostname, p.port or 80, timeout=self.timeout), True
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return cls(host, port, timeout=self.timeout), False

    def _get_conn(self, scheme, netloc):
        with self.lock:
            free = self.pool.get((scheme, netloc))
            if free:
                return free.pop()
        return self._new_conn(scheme, netloc)

    def _put_conn(self, scheme, netloc, conn):
        with self.lock:
            self.pool.setdefault((scheme, netloc), []).append(conn)

    def request(self, method, url, headers, auth=False):
        """-> (conn_key, conn, response). The caller reads the body, then release()s or discards the conn."""
        u = urllib.parse.urlsplit(url)
        target = u.path + ("?" + u.query if u.query else "")
        h = {"User-Agent": "sglang-deploy-hf_model/1"}
        h.update(headers)
        token = auth if isinstance(auth, str) else (self.token if auth else None)
        if token:
            h["Authorization"] = "Bearer %s" % token
        for attempt in (0, 1):
            conn = self._get_conn(u.scheme, u.netloc)
            try:
                conn.request(method, url if conn.hf_absolute else target, headers=h)
                return (u.scheme, u.netloc), conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()  # a stale keep-alive connection: retry once on a fresh one
                if attempt:
                    raise
        raise UpstreamError("unreachable")

    def release(self, key, conn, resp):
        if resp.will_close:
            conn.close()
        else:
            self._put_conn(key[0], key[1], conn)

    def close(self):
        with self.lock:
            for conns in self.pool.values():
                for c in conns:
                    c.close()
            self.pool = {}

    def locate(self, url, size):
        """Follow the resolve URL's same-host redirects (HEAD, token sent) to the URL that serves the bytes. A
        cross-host redirect (the LFS file server / CDN) ends the walk: that URL is fetched without the token."""
        origin = urllib.parse.urlsplit(url).netloc
        for _ in range(6):
            key, conn, resp = self.request("HEAD", url, {}, auth=urllib.parse.urlsplit(url).netloc == origin)
            resp.read()
            self.release(key, conn, resp)
            if resp.status in (301, 302, 303, 307, 308):
                linked = resp.getheader("X-Linked-Size")
                if linked is not None and linked.isdigit() and int(linked) != size:
                    raise UpstreamError("size lie: tree says %d bytes, resolve says X-Linked-Size %s" % (size, linked),
                                        fatal=True)
                nxt = urllib.parse.urljoin(url, resp.getheader("Location") or "")
                if urllib.parse.urlsplit(nxt).netloc != origin:
                    return nxt, False
                url = nxt
                continue
            if resp.status == 200:
                length = resp.getheader("Content-Length")
                if length is not None and length.isdigit() and int(length) != size:
                    raise UpstreamError("size lie: tree says %d bytes, server says Content-Length %s" % (size, length),
                                        fatal=True)
                return url, True
            if resp.status == 429 or resp.status >= 500:
                raise UpstreamError("HEAD %s: HTTP %d" % (url.split("?")[0], resp.status),
                                    retry_after=_float(resp.getheader("Retry-After")))
            raise UpstreamError("HEAD %s: HTTP %d %s" % (url.split("?")[0], resp.status,
                                                        resp.getheader("X-Error-Code") or ""),
                                fatal=resp.status in (401, 403, 404, 410))
        raise UpstreamError("too many redirects for %s" % url, fatal=True)


def _float(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# ---- the loopback fill window ----------------------------------------------------------------------------------------

class Job:
    """One hf_transfer call (one file) in a lane."""

    def __init__(self, jid, ftask, mode):
        self.id = jid
        self.ftask = ftask
        self.mode = mode  # "direct" | "fill" | "stream" (a whole-body answer written by our own code)
        self.length = ftask.remote.size
        self.received = 0  # bytes from upstream through the window
        self.skipped = 0  # bytes answered from disk (already written)
        self.last_progress = time.monotonic()
        self.alloc = 0
        self.error = None
        self.fatal = False
        self.retry_after = None
        self.aborted = False
        self.probed = False
        self.range_ignored = 0  # answers to this job's ranged requests that were a whole body (200)
        self.overrun = False  # a direct hf_transfer wrote past the tree's size: the partial file is discarded
        self.stall_noted = False
        self.retired = threading.Event()  # set once the job's hf_transfer is gone (taken over, or the job ended)
        self.socks = set()
        self.lane = None
        self.fd = None
        self.lock = threading.Lock()

    def touch(self, n):
        with self.lock:
            self.received += n
            self.last_progress = time.monotonic()

    def abort(self):
        with self.lock:
            self.aborted = True
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        return  # a client (hf_transfer) that hangs up is reported through the job, not on stderr


class Window:
    """Loopback HTTP server standing for files being resumed (paths carry a random secret, so other local users
    cannot fetch through it). A chunk already on disk is answered with an empty 206; a chunk with a hole is
    forwarded upstream and checked. A whole-body answer (Range ignored) is cut to the slice asked for, or fills the
    whole file (see the module docstring); notify(kind, job, info) tells the fetcher: "range_ignored",
    "takeover" (retire the job's lane: the body now fills the file), "stream_end" (info: None or the error)."""

    def __init__(self, upstream, stall_timeout, notify=None):
        self.upstream = upstream
        self.stall_timeout = stall_timeout
        self.notify = notify or (lambda kind, job, info: None)
        self.secret = secrets.token_hex(16)
        self.jobs = {}
        self.lock = threading.Lock()
        window = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def do_GET(self):
                window.handle(self)

        self.handler = Handler
        self.server = None  # bound on the first fill job: a first download never needs the window

    def url(self, job):
        return "http://127.0.0.1:%d/%s/%d" % (self.server.server_address[1], self.secret, job.id)

    def add(self, job):
        with self.lock:
            if self.server is None:
                self.server = _QuietServer(("127.0.0.1", 0), self.handler)
                threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
            self.jobs[job.id] = job

    def remove(self, job):
        with self.lock:
            self.jobs.pop(job.id, None)

    def close(self):
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    @staticmethod
    def _reply(h, status, length=0, headers=None):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(length))
        h.end_headers()

    def handle(self, h):
        parts = h.path.strip("/").split("/")
        job = None
        if len(parts) == 2 and secrets.compare_digest(parts[0], self.secret) and parts[1].isdigit():
            with self.lock:
                job = self.jobs.get(int(parts[1]))
        if job is not None and job.mode == "stream" and not job.aborted:
            self._hold(h, job)
            return
        if job is None or job.aborted:
            self._reply(h, 404)
            h.close_connection = True
            return
        rng = (h.headers.get("Range") or "").strip()
        if rng == "bytes=0-0" and not job.probed:
            # hf_transfer's size probe (always its first request): answered locally, its body is never written.
            job.probed = True
            self._reply(h, 206, 1, {"Content-Range": "bytes 0-0/%d" % job.length})
            h.wfile.write(b"\0")
            return
        if not rng.startswith("bytes=") or "-" not in rng:
            self._reply(h, 416)
            return
        a, _, b = rng[6:].partition("-")
        try:
            a = int(a)
            b = min(int(b), job.length - 1) if b else job.length - 1  # hf_transfer asks one byte past the end
        except ValueError:
            self._reply(h, 416)
            return
        if a >= job.length or a > b:
            self._reply(h, 416, headers={"Content-Range": "bytes */%d" % job.length})
            return
        if not has_hole(job.fd, a, b):
            with job.lock:
                job.skipped += b - a + 1
                job.last_progress = time.monotonic()
            self._reply(h, 206, 0, {"Content-Range": "bytes %d-%d/%d" % (a, b, job.length)})
            return
        try:
            self._forward(h, job, a, b)
        except TakenOver:
            self._hold(h, job)  # no answer: hf_transfer's lane is retired, the stream reports for the job
        except UpstreamError as err:
            if job.mode == "stream":
                self._hold(h, job)  # a request still in flight when the job was taken over: moot
                return
            job.error = str(err)
            job.fatal = job.fatal or err.fatal
            if err.retry_after is not None:
                job.retry_after = err.retry_after
            h.close_connection = True
            try:
                self._reply(h, 502)
            except OSError:
                pass
        except (OSError, http.client.HTTPException) as err:
            if job.mode == "stream":
                self._hold(h, job)
                return
            if job.error is None:
                job.error = "%s at %s offset %d: %s" % (
                    "stalled (no bytes for %ss)" % self.stall_timeout if isinstance(err, socket.timeout)
                    else "connection error", job.ftask.remote.path, a, err)
            h.close_connection = True

    def _hold(self, h, job):
        """A request for a job that a whole-body stream took over: answer nothing until hf_transfer is killed (an
        error answer would make it delete the file it is writing, the one the stream fills), then hang up."""
        deadline = time.monotonic() + 120
        while not job.retired.wait(0.5) and not job.aborted and time.monotonic() < deadline:
            pass
        h.close_connection = True

    def _forward(self, h, job, a, b):
        """Answer chunk [a, b]: written regions are read back from the partial file, only the holes are fetched
        upstream (so a chunk whose last write was lost costs just that hole)."""
        pieces = hole_map(job.fd, a, b)  # [(start, end, is_hole)]
        first = True
        for start, end, hole in pieces:
            if hole:
                self._fetch_into(h, job, start, end, a, b, first)
            else:
                if first:
                    self._reply(h, 206, b - a + 1, {"Content-Range": "bytes %d-%d/%d" % (a, b, job.length)})
                pos = start
                while pos <= end:
                    data = os.pread(job.fd, min(1 << 20, end - pos + 1), pos)
                    if not data:
                        raise UpstreamError("%s: partial file shrank at %d" % (job.ftask.remote.path, pos))
                    h.wfile.write(data)
                    pos += len(data)
                    with job.lock:
                        job.skipped += len(data)
                        job.last_progress = time.monotonic()
            first = False

    def _fetch_into(self, h, job, start, end, a, b, first):
        ft = job.ftask
        url, auth = ft.data_url
        key, conn, resp = self.upstream.request("GET", url, {"Range": "bytes=%d-%d" % (start, end)}, auth=auth)
        ok = False
        try:
            ranged = check_range_answer(resp, ft, start, end)
            n = end - start + 1
            sock = _resp_sock(resp)
            with job.lock:
                if sock is not None:
                    job.socks.add(sock)
            buf = bytearray(STREAM_BLOCK)
            view = memoryview(buf)
            if not ranged:
                # a whole body (Content-Length checked): fill the file from it, or cut the slice out of it
                self.notify("range_ignored", job, (start, end))
                if self._claim_whole(job, start, end):
                    self.notify("takeover", job, None)
                    err = None
                    try:
                        stream_whole_body(job, resp)
                    except Exception as e:  # pylint: disable=broad-except
                        err = e
                    self.notify("stream_end", job, err)
                    raise TakenOver()
                skip = start
                while skip > 0:
                    if job.aborted:
                        raise UpstreamError("aborted")
                    got = resp.readinto(view[:min(len(buf), skip)])
                    if not got:
                        raise UpstreamError("%s: whole-body answer (Range ignored) ended at %d, before the %d-%d "
                                            "wanted (truncated)" % (ft.remote.path, start - skip, start, end))
                    skip -= got
                    job.touch(got)
            if first:
                self._reply(h, 206, b - a + 1, {"Content-Range": "bytes %d-%d/%d" % (a, b, job.length)})
            left = n
            while left > 0:
                if job.aborted:
                    raise UpstreamError("aborted")
                got = resp.readinto(view[:min(len(buf), left)])
                if not got:
                    raise UpstreamError("%s: connection closed after %d of %d bytes at offset %d (truncated)"
                                        % (ft.remote.path, n - left, n, start + n - left))
                h.wfile.write(view[:got])
                left -= got
                job.touch(got)
            ok = ranged  # the rest of a whole body is never read: that connection cannot be reused
        finally:
            with job.lock:
                job.socks.discard(_resp_sock(resp))
            if ok:
                self.upstream.release(key, conn, resp)
            else:
                conn.close()

    @staticmethod
    def _claim_whole(job, start, end):
        """A whole body answered the forwarded request for hole [start, end]: does it fill the file (True: the job
        becomes a stream, its lane is retired) or is the slice cut out of it (False)? Raises TakenOver when another
        request already took the job over."""
        with job.lock:
            if job.mode == "stream":
                raise TakenOver()
            job.range_ignored += 1
            whole = job.range_ignored >= WHOLE_AFTER_IGNORED or prefer_whole_body(
                job.fd, job.length, start, end)
            if whole:
                job.mode = "stream"
            return whole


def holes(fd, size):
    """[(start, end)] (inclusive) of every hole in [0, size) (beyond EOF counts as a hole)."""
    if size <= 0:
        return []
    return [(s, e) for s, e, hole in hole_map(fd, 0, size - 1) if hole]


def prefer_whole_body(fd, size, start, end):
    """A whole body answered the ranged request for hole [start, end]: read it up to the file's last hole and fill
    every hole from it (True), or cut out [start, end] and fetch the other holes by Range (False)? Fewer bytes read
    wins; a tie goes to the whole body (this server just showed that it ignores Range)."""
    gaps = holes(fd, size)
    if not gaps:
        return False
    missing = sum(e - s + 1 for s, e in gaps)
    others = max(0, missing - (end - start + 1))
    return gaps[-1][1] + 1 <= end + 1 + others


def _open_part(ft, flags):
    """The partial file, or its hardlink when a dying hf_transfer has just deleted it (same inode)."""
    try:
        return os.open(ft.data, flags)
    except FileNotFoundError:
        return os.open(ft.keep, flags)


def _write_all(fd, view, offset):
    while len(view):
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n


def stream_whole_body(job, resp):
    """Write a whole-body answer (200, Content-Length already checked to be the tree's size) into every hole of the
    job's file, reading in aligned STREAM_BLOCK blocks (only blocks that have a hole are written) and stopping after
    the last hole. Progress goes to job.touch (the watchdog); job.abort() (the socket is shut) ends it."""
    ft = job.ftask
    size = ft.remote.size
    rfd = _open_part(ft, os.O_RDONLY)
    try:
        wfd = _open_part(ft, os.O_WRONLY)
    except OSError:
        os.close(rfd)
        raise
    try:
        gaps = holes(rfd, size)
        stop = gaps[-1][1] + 1 if gaps else 0
        buf = bytearray(STREAM_BLOCK)
        view = memoryview(buf)
        pos = 0
        while pos < stop:
            want = min(STREAM_BLOCK, size - pos)
            have = 0
            while have < want:
                if job.aborted:
                    raise UpstreamError("aborted")
                got = resp.readinto(view[have:want])
                if not got:
                    raise UpstreamError("%s: whole-body answer (Range ignored) closed after %d of %d bytes (truncated)"
                                        % (ft.remote.path, pos + have, size))
                have += got
                job.touch(got)
            if has_hole(rfd, pos, pos + want - 1):
                _write_all(wfd, view[:want], pos)
            pos += want
    finally:
        os.close(wfd)
        os.close(rfd)


def hole_map(fd, a, b):
    """Split [a, b] into (start, end, is_hole) pieces (inclusive ends)."""
    out = []
    pos = a
    while pos <= b:
        try:
            d = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            d = b + 1
        if d > pos:
            out.append((pos, min(d, b + 1) - 1, True))
            pos = min(d, b + 1)
            continue
        hend = min(os.lseek(fd, pos, os.SEEK_HOLE), b + 1)
        out.append((pos, hend - 1, False))
        pos = hend
    return out


def check_range_answer(resp, ft, a, b):
    """True for a 206 for exactly bytes a-b of a file of the tree's size; False for a 200 carrying the whole file
    (the server ignored Range) whose Content-Length is the tree's size; UpstreamError otherwise (fatal for a size
    lie, including a 200 of another length)."""
    path = ft.remote.path
    if resp.status == 429 or resp.status >= 500:
        raise UpstreamError("HTTP %d for %s bytes %d-%d" % (resp.status, path, a, b),
                            retry_after=_float(resp.getheader("Retry-After")))
    if resp.status in (401, 403):
        ft.data_url_stale = True  # a signed URL expired? locate again on retry
        raise UpstreamError("HTTP %d for %s" % (resp.status, path))
    if resp.status == 200:
        cl = resp.getheader("Content-Length")
        if cl is None or not cl.strip().isdigit():
            raise UpstreamError("server ignored Range (200 instead of 206) for %s bytes %d-%d and sent no "
                                "Content-Length: the whole body cannot be checked against the tree's %d bytes"
                                % (path, a, b, ft.remote.size))
        if int(cl) != ft.remote.size:
            raise UpstreamError("size lie: server ignored Range (200 instead of 206) for %s bytes %d-%d with "
                                "Content-Length %s, the tree says %d bytes; refused" % (path, a, b, cl.strip(),
                                                                                      ft.remote.size), fatal=True)
        return False
    if resp.status != 206:
        raise UpstreamError("HTTP %d for %s" % (resp.status, path), fatal=resp.status in (404, 410))
    cr = resp.getheader("Content-Range") or ""
    want = "bytes %d-%d/%d" % (a, b, ft.remote.size)
    if cr != want:
        total = cr.rpartition("/")[2]
        lie = total.isdigit() and int(total) != ft.remote.size
        raise UpstreamError("%s: Content-Range %r, expected %r%s" % (
            path, cr, want, " (size lie: the tree says %d bytes)" % ft.remote.size if lie else ""), fatal=lie)
    cl = resp.getheader("Content-Length")
    if cl is not None and cl != str(b - a + 1):
        raise UpstreamError("%s: Content-Length %s for a %d-byte range (truncated answer)" % (path, cl, b - a + 1))
    return True


def _resp_sock(resp):
    fp = getattr(resp, "fp", None)
    raw = getattr(fp, "raw", None)
    return getattr(raw, "_sock", None)


# ---- lanes --------------------------------------------------------------------------------------------------------

# hf_transfer buffers each chunk (chunk_size bytes) in fresh heap memory; with glibc's default thresholds every
# chunk is a new mmap that the kernel zero-fills page by page and unmaps after the write. Keeping such buffers in
# the heap (reused, not returned to the kernel) halves the lane's page faults and its system CPU time, which is
# what a loaded 2-core host runs short of. Values set in the environment win.
LANE_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * MiB), "MALLOC_TRIM_THRESHOLD_": str(256 * MiB),
                   "MALLOC_ARENA_MAX": "2"}


def lane_env(no_proxy=()):
    env = dict(os.environ)
    for k, v in LANE_MALLOC_ENV.items():
        env.setdefault(k, v)
    if no_proxy:  # fleet peers are reached directly, never through the host's proxy
        for key in ("no_proxy", "NO_PROXY"):
            env[key] = ",".join([x for x in [env.get(key, "")] if x] + list(no_proxy))
    return env


class Lane:
    def __init__(self, python, no_proxy=()):
        self.proc = subprocess.Popen([python, "-c", LANE_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, close_fds=True, env=lane_env(no_proxy))
        self.job = None
        self.buf = b""

    def send(self, job, spec):
        self.job = job
        job.lane = self
        self.proc.stdin.write((json.dumps(spec) + "\n").encode())
        self.proc.stdin.flush()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


# ---- per-file state -------------------------------------------------------------------------------------------------

class FileTask:
    def __init__(self, remote, dest_dir, parts_root):
        self.remote = remote
        self.final = os.path.join(dest_dir, remote.path)
        self.dir = os.path.join(parts_root, part_id(remote.path))
        self.data = os.path.join(self.dir, "data")
        self.keep = os.path.join(self.dir, "data.keep")
        self.journal = os.path.join(self.dir, "journal.json")
        self.state = "pending"  # pending | running | hashing | complete
        self.attempts = 0
        self.not_before = 0.0
        self.data_url = None
        self.data_url_stale = False
        self.hash_failures = 0
        self.source = None  # module_utils/fanout/sources.Source of the current attempt (None: the Hub, no fan-out)
        self.peer_attempts = 0
        self.range_ignored = 0  # answers for this file that ignored Range (it is probed again before each attempt)
        self.last_error = None
        self.hash_lock = threading.Lock()
        self.hasher = None
        self.hashed_to = 0

    def advance_hash(self, limit=None):
        """Hash the written prefix of data beyond what is hashed already (bytes hf_transfer wrote are final: a
        direct transfer writes each range once, a fill rewrites the same bytes). Returns bytes hashed.
        The hashed pages stay cached: dropping them (POSIX_FADV_DONTNEED) was measured to slow the download here
        (freed page-cache memory comes back cold for hf_transfer's next writes: 0.59x -> 0.88x median of curl),
        and the server's model load reads these files right after; the kernel reclaims clean pages as needed."""
        with self.hash_lock:
            if self.hasher is None:
                self.hasher = Hasher(self.remote.size, git=not self.remote.lfs)
                self.hashed_to = 0
            try:
                fd = os.open(self.data, os.O_RDONLY)
            except OSError:
                return 0
            try:
                end = self.remote.size
                if self.hashed_to < end:
                    try:
                        end = min(end, os.lseek(fd, self.hashed_to, os.SEEK_HOLE))
                    except OSError:
                        end = self.hashed_to
                if limit is not None:
                    end = min(end, self.hashed_to + limit)
                start = self.hashed_to
                buf = bytearray(4 * MiB)
                view = memoryview(buf)
                while self.hashed_to < end:
                    n = os.preadv(fd, [view[:min(len(buf), end - self.hashed_to)]], self.hashed_to)
                    if not n:
                        break
                    self.hasher.update(view[:n])
                    self.hashed_to += n
                return self.hashed_to - start
            finally:
                os.close(fd)

    def start_writeback(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return
        try:
            start_writeback(fd)
        finally:
            os.close(fd)

    def reset_hash(self):
        with self.hash_lock:
            self.hasher = None
            self.hashed_to = 0

    def _expect(self):
        return {"path": self.remote.path, "size": self.remote.size, "hash": list(self.remote.expected)}

    def load(self, sparse_ok=True):
        """Recover what an earlier run left; returns the bytes already on disk."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        try:
            with open(self.journal) as f:
                j = json.load(f)
        except (OSError, ValueError):
            j = None
        if not j or any(j.get(k) != v for k, v in self._expect().items()) or not sparse_ok:
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            write_json_atomic(self.journal, self._expect())
        if not os.path.exists(self.data) and os.path.exists(self.keep):
            os.rename(self.keep, self.data)
        for name in os.listdir(self.dir):
            if name not in ("data", "journal.json"):
                os.unlink(os.path.join(self.dir, name))
        return self.on_disk()

    def on_disk(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return 0
        try:
            return data_bytes(fd, self.remote.size)
        finally:
            os.close(fd)

    def allocated(self):
        try:
            return min(self.remote.size, os.stat(self.data).st_blocks * 512)
        except OSError:
            return 0

    def complete_on_disk(self):
        try:
            fd = os.open(self.data, os.O_RDONLY)
        except OSError:
            return self.remote.size == 0
        try:
            return os.fstat(fd).st_size == self.remote.size and (
                self.remote.size == 0 or not has_hole(fd, 0, self.remote.size - 1))
        finally:
            os.close(fd)

    def prepare(self):
        """Make sure data exists (empty, sparse) and has its safety hardlink."""
        fd = os.open(self.data, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        try:
            os.unlink(self.keep)
        except OSError:
            pass
        os.link(self.data, self.keep)

    def restore(self):
        """After hf_transfer deleted data on error, bring it back from the hardlink."""
        if not os.path.exists(self.data) and os.path.exists(self.keep):
            os.rename(self.keep, self.data)
        else:
            try:
                os.unlink(self.keep)
            except OSError:
                pass

    def wipe(self):
        self.reset_hash()
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        write_json_atomic(self.journal, self._expect())


# ---- the fetcher ----------------------------------------------------------------------------------------------------

class Fetcher:
    """Fetch `remotes` (RemoteFile list) into dest_dir. on_verified(remote, final_path, sha256) is called for every
    file whose hash matched and that was moved into place. repo_type "dataset" fetches from
    {endpoint}/datasets/{repo_id}/resolve/... (a model from {endpoint}/{repo_id}/resolve/...)."""

    def __init__(self, endpoint, repo_id, sha, dest_dir, token=None, lanes=2, max_files=6, chunk_size=8 * MiB,
                 stall_timeout=60.0, retries=5, hash_retries=2, backoff=2.0, backoff_max=60.0, inner_retries=3,
                 python=None, progress=None, on_verified=None, clock=time.monotonic, direct=True, repo_type="model",
                 sources=None):
        if hash_retries < 0 or retries < 0 or lanes < 1 or max_files < 1 or chunk_size < MiB:
            raise ValueError("bad transfer settings")
        self.repo_type = validate_repo_type(repo_type)
        self.endpoint = endpoint.rstrip("/")
        self.repo_id = repo_id
        self.sha = sha
        self.dest_dir = dest_dir
        self.parts_root = os.path.join(dest_dir, STATE_DIR, "parts")
        self.token = token
        self.lanes_n = lanes
        self.max_files = max_files
        self.chunk_size = chunk_size
        self.stall_timeout = float(stall_timeout)
        self.retries = retries
        self.hash_retries = hash_retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.inner_retries = inner_retries
        self.python = python or sys.executable
        self.progress = progress
        self.on_verified = on_verified
        self.clock = clock
        self.direct = direct
        self.next_id = 0
        self.events = []
        self.events_lock = threading.Lock()
        self.place_lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.closed = False
        self.stream_threads = []
        self.direct_ok = True  # False once any answer ignored Range: every later answer passes our checks
        self.sources = sources  # module_utils/fanout/sources.SourceSet (LAN fan-out) or None (every file from the Hub)
        self.no_proxy = tuple(sources.no_proxy_hosts()) if sources is not None else ()
        self.stats = {"files": 0, "attempts": 0, "failures": 0, "stalls": 0, "hash_mismatches": 0,
                      "bytes_fetched": 0, "bytes_resumed": 0, "errors": [], "sparse": True,
                      "range_ignored": 0, "range_ignored_files": [], "streams": 0,
                      "bytes_by_source": {}, "files_by_source": {}, "peer_failures": 0, "peer_hash_mismatches": []}

    def url_for(self, remote):
        return file_url(self.endpoint, self.repo_id, self.sha, remote.path, self.repo_type)

    def run(self, remotes):
        os.makedirs(self.parts_root, mode=0o700, exist_ok=True)
        sparse_ok = sparse_supported(self.parts_root)
        self.stats["sparse"] = sparse_ok
        tasks = []
        for r in remotes:
            t = FileTask(r, self.dest_dir, self.parts_root)
            self.stats["bytes_resumed"] += t.load(sparse_ok)
            tasks.append(t)
        self.sparse_ok = sparse_ok
        upstream = Upstream(self.token, timeout=self.stall_timeout, direct_hosts=self.no_proxy)
        if self.sources is not None:
            self.sources.expect(remotes)
            self.sources.start()
        window = Window(upstream, self.stall_timeout, notify=self._window_event)
        self.wake_r, self.wake_w = os.pipe()
        self.closed = False
        self.stream_threads = []
        self.queue = []
        self.queue_cv = threading.Condition()
        # one verifier per lane: files finishing together are fsynced and hashed in parallel, not queued
        hashers = [threading.Thread(target=self._hasher, daemon=True) for _ in range(max(1, self.lanes_n))]
        for hasher in hashers:
            hasher.start()
        self.follow_stop = threading.Event()
        follower = threading.Thread(target=self._follow, args=(tasks,), daemon=True)
        follower.start()
        lanes = []
        try:
            lanes = [Lane(self.python, self.no_proxy) for _ in range(min(self.lanes_n, max(1, len(tasks))))]
            self._loop(tasks, upstream, window, lanes)
        finally:
            for lane in lanes:
                if lane.job is not None:
                    lane.job.abort()
                lane.kill()
                if lane.job is not None:
                    lane.job.ftask.restore()
            self.follow_stop.set()
            follower.join(timeout=600)
            with self.queue_cv:
                self.queue.extend([None] * len(hashers))
                self.queue_cv.notify_all()
            for hasher in hashers:
                hasher.join(timeout=3600)
            for thread in self.stream_threads:
                thread.join(timeout=30)  # aborted above: their sockets are shut
            window.close()
            upstream.close()
            if self.sources is not None:
                self.sources.stop()
                self.stats["fanout"] = self.sources.describe()
            with self.events_lock:
                self.closed = True
            os.close(self.wake_r)
            os.close(self.wake_w)
            self._report(tasks, lanes, final=True)
        return self.stats

    # -- main loop: dispatch, lane results, watchdog, hash results --
    def _loop(self, tasks, upstream, window, lanes):
        sel = selectors.DefaultSelector()
        for lane in lanes:
            sel.register(lane.proc.stdout, selectors.EVENT_READ, lane)
        sel.register(self.wake_r, selectors.EVENT_READ, None)
        self._ctx = (sel, lanes, window)  # for events that retire a lane or end a job (_drain_events)
        for t in tasks:
            if t.complete_on_disk():  # every byte arrived before an interruption (or a 0-byte file)
                self._to_hash(t)
        last_report = 0.0
        while True:
            self._drain_events()
            if all(t.state == "complete" for t in tasks):
                return
            for lane in lanes:
                if lane.job is None:
                    if not self._dispatch(lane, tasks, upstream, window):
                        break
            for key, _ in sel.select(timeout=0.5):
                lane = key.data
                if lane is None:
                    os.read(self.wake_r, 4096)
                    continue
                data = os.read(lane.proc.stdout.fileno(), 65536)
                if not data:
                    self._lane_died(lane, sel, lanes, window, "lane process exited")
                    continue
                lane.buf += data
                while b"\n" in lane.buf:
                    line, lane.buf = lane.buf.split(b"\n", 1)
                    self._finished(lane, json.loads(line.decode()), window)
            now = self.clock()
            for lane in list(lanes):
                job = lane.job
                if job is None:
                    continue
                if job.mode == "direct":
                    # hf_transfer writes a chunk once all of it arrived: progress = allocated bytes of the file
                    alloc = job.ftask.allocated()
                    if alloc != job.alloc:
                        job.received += max(0, alloc - job.alloc)
                        job.alloc = alloc
                        job.last_progress = now
                    why = self._direct_guard(lane, job)
                    if why:
                        job.error = why
                        self._lane_died(lane, sel, lanes, window, why)
                        continue
                with job.lock:
                    idle = now - job.last_progress
                if idle > self.stall_timeout and job.mode == "stream":
                    # our own stream (no lane process to kill): shut its socket; it ends and reports stream_end
                    if not job.stall_noted:
                        job.stall_noted = True
                        self.stats["stalls"] += 1
                        job.error = job.error or "stalled: no byte progress for %.0fs on %s (whole-body stream)" % (
                            idle, job.ftask.remote.path)
                        job.abort()
                    continue
                if idle > self.stall_timeout:
                    self.stats["stalls"] += 1
                    job.error = job.error or "stalled: no byte progress for %.0fs on %s (%s mode)" % (
                        idle, job.ftask.remote.path, job.mode)
                    self._lane_died(lane, sel, lanes, window, job.error)
            if now - last_report >= 1.0:
                last_report = now
                self._report(tasks, lanes)

    def _dispatch(self, lane, tasks, upstream, window):
        now = self.clock()
        for t in tasks:
            if t.state != "pending" or t.not_before > now:
                continue
            if self.sources is not None:
                try:
                    src = self.sources.pick(t.remote)
                except NoSource as err:
                    raise FetchError(str(err), path=t.remote.path, bytes_done=t.on_disk(), last_error=str(err),
                                     kind="no_source")
                if src is None:
                    continue  # an earlier host of the fan-out will hold it: wait for it
                if src is not t.source:
                    t.source = src
                    t.data_url = self.sources.file_url(src, t.remote) if src.is_peer else None
                    t.data_url_stale = False
            whole = None
            try:
                if t.data_url is None or t.data_url_stale or t.range_ignored:
                    if t.data_url is None or t.data_url_stale:
                        t.data_url = upstream.locate(self.url_for(t.remote), t.remote.size)
                        t.data_url_stale = False
                    whole = probe(upstream, t)  # again before every attempt at a file whose server ignored Range
            except UpstreamError as err:
                self._fail(t, str(err), err.fatal, err.retry_after)
                return True
            except (OSError, http.client.HTTPException) as err:
                t.data_url = None
                self._fail(t, "locate %s: %s" % (t.remote.path, err), False, None)
                return True
            resume = t.on_disk() > 0
            if whole is not None:
                self._note_range_ignored(t)
                mode = "stream"
            elif resume or not self.direct or not self.direct_ok:
                mode = "fill"
            else:
                mode = "direct"
            try:
                t.prepare()
            except BaseException:
                if whole is not None:
                    whole[0].close()
                raise
            self.next_id += 1
            job = Job(self.next_id, t, mode)
            job.last_progress = self.clock()
            t.state = "running"
            self.stats["attempts"] += 1
            if mode == "stream":
                # the probe's own answer is the whole file: stream it into the holes (the lane process idles)
                self.stats["streams"] += 1
                lane.job = job
                job.lane = lane
                thread = threading.Thread(target=self._run_stream, args=(job,) + whole, daemon=True)
                self.stream_threads.append(thread)
                thread.start()
                return True
            spec = {"id": job.id, "file": t.data, "max_files": self.max_files,
                    "chunk_size": self.chunk_size}
            if mode == "direct":
                # The URL located above, not the resolve URL: hf_transfer re-sends the token to any redirect
                # target on the same host name (it ignores the port), so it gets the token only for Hub-served
                # bytes and never for the LFS file server.
                url, auth = t.data_url
                spec["url"] = url
                token = auth if isinstance(auth, str) else (self.token if auth else None)
                if token:
                    spec["headers"] = {"authorization": "Bearer %s" % token}
                if self.inner_retries:
                    spec["retries"] = self.inner_retries
                    spec["parallel_failures"] = self.max_files
                job.alloc = t.allocated()
            else:
                job.fd = os.open(t.data, os.O_RDONLY)
                window.add(job)
                spec["url"] = window.url(job)
            lane.send(job, spec)
            return True
        return False

    def _close_job(self, job, window):
        job.retired.set()
        window.remove(job)
        if job.fd is not None:
            os.close(job.fd)
            job.fd = None
        if job.lane is not None and job.lane.job is job:
            job.lane.job = None

    def _replace_lane(self, lane, sel, lanes):
        """Kill a lane's process and put a fresh one in its place (the job, if any, is the caller's business)."""
        try:
            sel.unregister(lane.proc.stdout)
        except (KeyError, ValueError):
            pass
        lane.kill()
        fresh = Lane(self.python, self.no_proxy)
        lanes[lanes.index(lane)] = fresh
        sel.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)
        return fresh

    def _lane_died(self, lane, sel, lanes, window, why):
        job = lane.job
        fresh = self._replace_lane(lane, sel, lanes)
        if job is not None and job.mode == "stream":
            # a taken-over job's hf_transfer went away: the stream goes on and reports for the job
            fresh.job = job
            job.lane = fresh
            return
        if job is not None:
            job.abort()
            self._close_job(job, window)
            job.ftask.restore()
            if job.overrun:
                job.ftask.wipe()  # hf_transfer wrote a whole body at a chunk's offset: nothing here can be trusted
            self._count_bytes(job)
            self._fail(job.ftask, job.error or why, job.fatal, job.retry_after)

    def _direct_guard(self, lane, job, memory=True):
        """A direct hf_transfer that got a whole body for a chunk (a server ignoring Range): its file grows past the
        tree's size once it wrote it, its memory grows while it buffers it (checked when `memory`). Returns why the
        lane must die, or None. Either way no later file goes direct in this run."""
        t = job.ftask
        try:
            length = os.stat(t.data).st_size
        except OSError:
            length = 0
        if length > t.remote.size:
            job.overrun = True
            self._note_range_ignored(t)
            return ("%s: the file grew to %d bytes, past the tree's %d: the server answered a ranged request with the "
                    "whole body (Range ignored); the partial file is discarded and fetched again through checked "
                    "requests" % (t.remote.path, length, t.remote.size))
        if not memory:
            return None
        bound = LANE_RSS_BASE + 3 * self.max_files * self.chunk_size
        rss = rss_bytes(lane.proc.pid)
        if rss > bound:
            self.direct_ok = False
            return ("%s: hf_transfer held %d MiB, more than the %d MiB its chunks need: an answer larger than the "
                    "range asked for (a server ignoring Range?); fetched again through checked requests"
                    % (t.remote.path, rss // MiB, bound // MiB))
        return None

    def _note_range_ignored(self, t):
        with self.stats_lock:
            self.stats["range_ignored"] += 1
            t.range_ignored += 1
            files = self.stats["range_ignored_files"]
            if t.remote.path not in files and len(files) < 50:
                files.append(t.remote.path)
            self.direct_ok = False

    def _window_event(self, kind, job, info):
        """Called from window threads."""
        if kind == "range_ignored":
            self._note_range_ignored(job.ftask)
        else:
            self._post((kind, job, info))

    def _run_stream(self, job, conn, resp):
        err = None
        sock = _resp_sock(resp)
        with job.lock:
            if sock is not None:
                job.socks.add(sock)
        try:
            stream_whole_body(job, resp)
        except Exception as e:  # pylint: disable=broad-except
            err = e
        finally:
            with job.lock:
                job.socks.discard(sock)
            conn.close()
        self._post(("stream_end", job, err))

    def _takeover(self, job):
        """The window took a fill job over (a whole body now fills the file): retire its hf_transfer."""
        sel, lanes, _window = self._ctx
        lane = job.lane
        if lane is None or lane.job is not job or lane not in lanes:
            return
        self.stats["streams"] += 1
        fresh = self._replace_lane(lane, sel, lanes)
        job.retired.set()  # hf_transfer is dead: the requests the window holds for it can hang up
        fresh.job = job
        job.lane = fresh
        job.ftask.restore()

    def _stream_ended(self, job, err):
        _sel, _lanes, window = self._ctx
        self._close_job(job, window)
        t = job.ftask
        t.restore()
        self._count_bytes(job)
        fatal = job.fatal
        retry_after = job.retry_after
        if err is None and job.error is None:
            if t.complete_on_disk():
                self._to_hash(t)
                return
            msg = "%s: the whole-body stream ended with holes left" % t.remote.path
        else:
            if isinstance(err, socket.timeout) and not job.stall_noted:
                job.stall_noted = True  # the socket's read timeout (= stall_timeout) beat the watchdog to it
                self.stats["stalls"] += 1
                job.error = job.error or "stalled: no byte progress for %.0fs on %s (whole-body stream)" % (
                    self.stall_timeout, t.remote.path)
            if isinstance(err, UpstreamError):
                fatal = fatal or err.fatal
                retry_after = err.retry_after if err.retry_after is not None else retry_after
            elif isinstance(err, OSError) and err.errno == errno.ENOSPC:
                fatal = True
            msg = job.error or "%s: whole-body stream: %s" % (t.remote.path, err)
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                msg = "No space left on device writing %s: %s" % (t.remote.path, err)
        self._fail(t, msg, fatal, retry_after)

    def _finished(self, lane, msg, window):
        job = lane.job
        if job is None or msg.get("id") != job.id or job.mode == "stream":
            return  # (a taken-over job's hf_transfer result is moot: the stream reports)
        if job.mode == "direct":
            job.received += max(0, job.ftask.allocated() - job.alloc)
            why = self._direct_guard(lane, job, memory=False)
            if why:
                job.error = why
        self._close_job(job, window)
        t = job.ftask
        t.restore()
        self._count_bytes(job)
        if job.overrun:
            t.wipe()  # hf_transfer wrote a whole body at a chunk's offset: nothing here can be trusted
            self._fail(t, job.error, False, None)
            return
        if msg.get("ok") and job.error is None:
            if t.complete_on_disk():
                self._to_hash(t)
                return
            missing = t.remote.size - t.on_disk()
            st = os.statvfs(t.dir)
            if st.f_bavail * st.f_frsize < missing:
                # tokio writes in the background: hf_transfer can "succeed" after a write hit ENOSPC
                err = "No space left on device: %s still misses %d bytes, %d free" % (
                    t.remote.path, missing, st.f_bavail * st.f_frsize)
            else:
                err = "hf_transfer finished %s but holes remain (short answer from the server?)" % t.remote.path
        else:
            err = job.error or msg.get("error") or "unknown error"
        if " 403 " in err or " 401 " in err or "403 Forbidden" in err:
            t.data_url_stale = True  # a signed URL may have expired: locate again before the retry
        fatal = job.fatal or "No space left on device" in err or "os error 28" in err
        self._fail(t, err, fatal, job.retry_after)

    def _count_bytes(self, job):
        self.stats["bytes_fetched"] += job.received
        name = job.ftask.source.name if job.ftask.source is not None else "hub"
        by = self.stats["bytes_by_source"]
        by[name] = by.get(name, 0) + job.received

    def _fail(self, t, err, fatal, retry_after):
        src = t.source
        local_disk = "No space left" in (err or "") or "os error 28" in (err or "")
        if src is not None and src.is_peer and not local_disk and \
                t.peer_attempts < self.retries + 2 * len(self.sources.views):
            # a peer that died, lost the file or stalled: another source next (no backoff, no Hub retry spent)
            self.stats["peer_failures"] += 1
            self.stats["errors"].append("%s (from peer %s)" % (err, src.name))
            del self.stats["errors"][:-20]
            t.last_error = err
            t.peer_attempts += 1
            t.state = "pending"
            t.not_before = self.clock()
            self.sources.failed(src, t.remote.path, err)
            return
        self.stats["failures"] += 1
        self.stats["errors"].append(err)
        del self.stats["errors"][:-20]
        t.last_error = err
        t.attempts += 1
        t.state = "pending"
        if fatal or t.attempts > self.retries:
            kind = "enospc" if ("No space left" in err or "os error 28" in err) else "transfer"
            done = t.on_disk()
            raise FetchError("%s: giving up after %d attempt(s); %d of %d bytes on disk; last error: %s"
                             % (t.remote.path, t.attempts, done, t.remote.size, err),
                             path=t.remote.path, bytes_done=done, last_error=err, kind=kind)
        delay = retry_after if retry_after is not None else min(self.backoff_max, self.backoff * 2 ** (t.attempts - 1))
        t.not_before = self.clock() + delay

    # -- hashing thread --
    def _to_hash(self, t):
        t.state = "hashing"
        with self.queue_cv:
            self.queue.append(t)
            self.queue_cv.notify()

    def _post(self, event):
        with self.events_lock:
            if self.closed:  # a stream thread ending after the run: the wake pipe is gone (its fd may be reused)
                return
            self.events.append(event)
            try:
                os.write(self.wake_w, b"x")
            except OSError:
                pass

    def _follow(self, tasks):
        """Hash files while they arrive and keep their written bytes moving to disk, so that what is left to do
        after the last byte (hash the rest, fsync) is short."""
        last_writeback = 0.0
        while not self.follow_stop.is_set():
            busy = False
            writeback = time.monotonic() - last_writeback >= 0.25
            for t in tasks:
                if t.state == "running":
                    if writeback:
                        t.start_writeback()
                    if t.hashed_to < t.remote.size:
                        busy = t.advance_hash(limit=64 * MiB) > 0 or busy
            if writeback:
                last_writeback = time.monotonic()
            if not busy:
                self.follow_stop.wait(0.05)

    def _hasher(self):
        while True:
            with self.queue_cv:
                while not self.queue:
                    self.queue_cv.wait()
                t = self.queue.pop(0)
            if t is None:
                return
            try:
                self._verify_and_place(t)
            except Exception as err:  # pylint: disable=broad-except
                self._post(("error", t, err))

    def _verify_and_place(self, t):
        if t.remote.size == 0 and not os.path.exists(t.data):
            open(t.data, "wb").close()
        fd = os.open(t.data, os.O_RDONLY)
        try:
            start_writeback(fd)  # the disk writes the tail while the rest is hashed from the page cache
            t.advance_hash()  # the rest of what the follower has not hashed yet
            os.fsync(fd)
        finally:
            os.close(fd)
        h = t.hasher
        if t.hashed_to != t.remote.size:
            self._post(("mismatch", t, "%s: only %d of %d bytes readable for hashing" % (t.remote.path, t.hashed_to,
                                                                                       t.remote.size)))
            return
        algo, want = t.remote.expected
        got = h.digests()[algo]
        if got != want:
            self._post(("mismatch", t, "%s: %s mismatch, expected %s, got %s" % (t.remote.path, algo, want, got)))
            return
        with self.place_lock:  # verifiers hash in parallel; placing and the manifest update go one at a time
            parent = os.path.dirname(t.final)
            os.makedirs(parent, mode=0o755, exist_ok=True)
            os.chmod(t.data, 0o644)
            if os.path.isdir(t.final) and not os.path.islink(t.final):
                raise OSError("%s: a directory is in the way" % t.final)
            os.replace(t.data, t.final)
            fsync_dir(parent)
            shutil.rmtree(t.dir, ignore_errors=True)
            name = t.source.name if t.source is not None else "hub"
            with self.stats_lock:
                self.stats["files_by_source"][name] = self.stats["files_by_source"].get(name, 0) + 1
            if self.on_verified:
                self.on_verified(t.remote, t.final, h.digests()["sha256"])
        self._post(("done", t, None))

    def _drain_events(self):
        with self.events_lock:
            events, self.events = self.events, []
        for kind, t, info in events:
            if kind == "takeover":
                self._takeover(t)  # t is the Job here
            elif kind == "stream_end":
                self._stream_ended(t, info)
            elif kind == "done":
                t.state = "complete"
                self.stats["files"] += 1
            elif kind == "error":
                kind_ = "enospc" if getattr(info, "errno", None) == errno.ENOSPC else "io"
                raise FetchError("%s: %s while verifying" % (t.remote.path, info), path=t.remote.path,
                                 bytes_done=t.on_disk(), last_error=str(info), kind=kind_)
            elif kind == "mismatch" and t.source is not None and t.source.is_peer:
                # a peer served a bad copy: never ask it for this file again; fetch it from another source
                self.stats["hash_mismatches"] += 1
                self.stats["peer_hash_mismatches"].append({"file": t.remote.path, "peer": t.source.name,
                                                           "detail": info})
                self.stats["errors"].append("%s (copy from peer %s)" % (info, t.source.name))
                self.sources.mismatch(t.source, t.remote.path)
                t.wipe()
                t.state = "pending"
                t.source = None
                t.data_url = None
            elif kind == "mismatch":
                self.stats["hash_mismatches"] += 1
                self.stats["errors"].append(info)
                t.hash_failures += 1
                t.wipe()
                t.state = "pending"
                t.attempts = 0
                if t.hash_failures > self.hash_retries:
                    raise FetchError(info + " (after %d fetches; the file was deleted)" % t.hash_failures,
                                     path=t.remote.path, bytes_done=0, last_error=info, kind="hash")

    def _report(self, tasks, lanes, final=False):
        if not self.progress:
            return
        done = 0
        for t in tasks:
            done += t.remote.size if t.state in ("complete", "hashing") else t.on_disk()
        running = [l.job.ftask.remote.path for l in lanes if l.job is not None]
        self.progress(done, running, self.stats, final)


def probe(upstream, t):
    """Before handing a URL to hf_transfer: one ranged GET (bytes=0-0) must come back 206 with the tree's total size
    (a size lie is refused). Returns None then. A server that ignored Range answered 200 with the whole file: when
    its Content-Length is the tree's size, (conn, resp) of that answer is returned, unread, for the caller to
    stream into the file (hf_transfer must never get such a URL: it buffers every answer whole)."""
    if t.remote.size == 0:
        return None
    url, auth = t.data_url
    key, conn, resp = upstream.request("GET", url, {"Range": "bytes=0-0"}, auth=auth)
    try:
        if not check_range_answer(resp, t, 0, 0):
            return conn, resp
        body = resp.read(2)
        if len(body) != 1:
            raise UpstreamError("%s: probe got %d bytes, expected 1" % (t.remote.path, len(body)))
    except BaseException:
        conn.close()
        raise
    upstream.release(key, conn, resp)
    return None


def kill_pid(pid, grace=10.0):
    """SIGTERM, then SIGKILL after `grace` seconds; True once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True
