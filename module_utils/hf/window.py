# -*- coding: utf-8 -*-
"""The loopback fill window: a local HTTP server that stands for a file being resumed, so hf_transfer re-fetches only
the chunks that have holes.

The first attempt at a file has hf_transfer fetch the Hub URL directly (after our own probe checked that the server
honours Range and that its size is the tree's size). A resume has hf_transfer fetch the window instead: a chunk
already on disk is answered 206 with an empty body (hf_transfer writes nothing), a chunk with a hole is forwarded
upstream as an absolute Range request, checked (206, exact Content-Range, the tree's total, full length) and streamed
through. A whole-body answer (the server ignored Range) is cut to the slice asked for, or fills the whole file while
hf_transfer's lane is retired (module_utils/hf/whole_body.py says which and why).
"""
from __future__ import absolute_import, division, print_function

import http.client
import os
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible.module_utils.hf.fetch_errors import TakenOver, UpstreamError
from ansible.module_utils.hf.sparse import has_hole, hole_map
from ansible.module_utils.hf.upstream import response_socket
from ansible.module_utils.hf.whole_body import STREAM_BLOCK, check_range_answer, prefer_whole_body, stream_whole_body

# After this many answers that ignored Range during one attempt at a file, the window stops cutting slices and lets
# the next whole body fill the file.
WHOLE_AFTER_IGNORED = 3


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        return  # a client (hf_transfer) that hangs up is reported through the job, not on stderr


class Window:
    """Loopback HTTP server standing for files being resumed (paths carry a random secret, so other local users
    cannot fetch through it). A chunk already on disk is answered with an empty 206; a chunk with a hole is
    forwarded upstream and checked. A whole-body answer (Range ignored) is cut to the slice asked for, or fills the
    whole file (see module_utils/hf/whole_body.py); notify(kind, job, info) tells the fetcher: "range_ignored",
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
            sock = response_socket(resp)
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
                job.socks.discard(response_socket(resp))
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
