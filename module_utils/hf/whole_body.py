# -*- coding: utf-8 -*-
"""Checking a ranged answer, and the fallback for a server that ignores Range: its whole body, taken in our own code.

A server that ignores Range (a proxy or cache answering a ranged GET with 200 and the whole body), sometimes or
always. A 200 is usable only when its Content-Length is the tree's size (anything else is a size lie: fatal).
hf_transfer must never see such an answer (it buffers a whole answer in memory, then writes it at the chunk's
offset), so the answer is taken in our code, in bounded memory (1 MiB buffers, aligned 1 MiB writes):
- probe answered 200: that very body is streamed into the file's holes (mode "stream", one connection, in a
  thread of this process); a file whose server ignored Range is probed again before each later attempt.
- fill window answered 200 for a hole: either the needed slice is cut out of the body (the bytes before it are
  read and dropped, the rest is never read), or the whole body fills every hole of the file while the lane is
  retired (a takeover), whichever reads fewer bytes counting the other holes at their own size (ties: the whole
  body; prefer_whole_body); see module_utils/hf/window.py.
- once any answer ignored Range, no file goes direct again in this run (every answer then passes our checks); a
  direct hf_transfer is watched for it too (module_utils/hf/watchdog.py).
So a server that ignores Range on every request still completes, one stream per file.
"""
from __future__ import absolute_import, division, print_function

import os

from ansible.module_utils.hf.fetch_errors import UpstreamError
from ansible.module_utils.hf.sparse import has_hole, holes
from ansible.module_utils.hf.upstream import retry_after_seconds

MiB = 1 << 20
# Whole-body answers (a server that ignored Range) are read and written in aligned blocks of this size, so that an
# interruption never leaves a partly written block that the sparse map would count as data.
STREAM_BLOCK = MiB


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


def check_range_answer(resp, ft, a, b):
    """True for a 206 for exactly bytes a-b of a file of the tree's size; False for a 200 carrying the whole file
    (the server ignored Range) whose Content-Length is the tree's size; UpstreamError otherwise (fatal for a size
    lie, including a 200 of another length)."""
    path = ft.remote.path
    if resp.status == 429 or resp.status >= 500:
        raise UpstreamError("HTTP %d for %s bytes %d-%d" % (resp.status, path, a, b),
                            retry_after=retry_after_seconds(resp.getheader("Retry-After")))
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
