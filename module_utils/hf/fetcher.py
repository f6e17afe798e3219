# -*- coding: utf-8 -*-
"""Resumable transfer of Hub files with hf_transfer: the fetch loop (Fetcher), the entry point of a model's transfer.

hf_transfer 0.1.9 downloads one URL into one file (a `Range: bytes=0-0` probe for the size, then `max_files`
parallel ranged chunks of `chunk_size`, each written at its offset once the whole chunk arrived), keeps no
state, deletes its output on error, holds the GIL while it runs and sets no read timeout. Resume is built
around it, not inside it, by files of this package, one job each:

* lanes.py: every hf_transfer call runs in a lane, a child process; one file per lane.
* file_task.py and sparse.py: the bookkeeping is the partial file's own sparse map, so a rerun knows which chunks
  are complete without any state of hf_transfer's.
* upstream.py: our own HTTP to the Hub; whole_body.py: every answer checked (probe, check_range_answer) and the
  fallback for a server that ignores Range; window.py: the loopback fill window through which a resume re-fetches
  only the chunks that have holes; transfer_job.py: one attempt at one file.
* watchdog.py: no byte progress for `stall_timeout` seconds, or a direct transfer fed a whole body, kills the lane;
  retry_policy.py: backoff, retries, and when the run fails naming the file, the bytes done and the last error.
* verifier.py: a file is moved into place only when its hash matches; hashing runs in threads while lanes fetch.

This loop dispatches pending files to free lanes (direct on a first attempt, through the window on a resume, our
own stream for a whole body), reads the lanes' results, lets the watchdog judge the busy lanes, and applies the
events of the window, the streams and the verifiers. The count of answers that ignored Range is reported (stats
range_ignored, range_ignored_files).
"""
from __future__ import absolute_import, division, print_function

import errno
import http.client
import json
import os
import selectors
import socket
import sys
import threading
import time

from ansible.module_utils.fanout.sources import NoSource
from ansible.module_utils.hf.fetch_errors import FetchError, UpstreamError
from ansible.module_utils.hf.file_task import STATE_DIR, FileTask
from ansible.module_utils.hf.hub import file_url, validate_repo_type
from ansible.module_utils.hf.lanes import Lane
from ansible.module_utils.hf.retry_policy import RetryPolicy
from ansible.module_utils.hf.sparse import sparse_supported
from ansible.module_utils.hf.transfer_job import Job
from ansible.module_utils.hf.upstream import Upstream, response_socket
from ansible.module_utils.hf.verifier import Verifier
from ansible.module_utils.hf.watchdog import Watchdog
from ansible.module_utils.hf.whole_body import probe, stream_whole_body
from ansible.module_utils.hf.window import Window

MiB = 1 << 20


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
        self.inner_retries = inner_retries
        self.python = python or sys.executable
        self.progress = progress
        self.on_verified = on_verified
        self.clock = clock
        self.direct = direct
        self.next_id = 0
        self.events = []
        self.events_lock = threading.Lock()
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
        self.retry = RetryPolicy(retries, hash_retries, backoff, backoff_max, clock, sources, self.stats)
        self.watchdog = Watchdog(self.stall_timeout, max_files, chunk_size, self.stats, self._note_range_ignored,
                                 self._no_more_direct)
        self.verifier = None

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
        self.verifier = Verifier(self.lanes_n, self.stats, self.stats_lock, self._post, self.on_verified)
        self.verifier.start(tasks)
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
            self.verifier.stop()
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
                why = self.watchdog.inspect(lane, job, now)
                if why:
                    self._lane_died(lane, sel, lanes, window, why)
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
                self.retry.failed(t, str(err), err.fatal, err.retry_after)
                return True
            except (OSError, http.client.HTTPException) as err:
                t.data_url = None
                self.retry.failed(t, "locate %s: %s" % (t.remote.path, err), False, None)
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
            self.retry.failed(job.ftask, job.error or why, job.fatal, job.retry_after)

    def _note_range_ignored(self, t):
        with self.stats_lock:
            self.stats["range_ignored"] += 1
            t.range_ignored += 1
            files = self.stats["range_ignored_files"]
            if t.remote.path not in files and len(files) < 50:
                files.append(t.remote.path)
            self.direct_ok = False

    def _no_more_direct(self):
        self.direct_ok = False

    def _window_event(self, kind, job, info):
        """Called from window threads."""
        if kind == "range_ignored":
            self._note_range_ignored(job.ftask)
        else:
            self._post((kind, job, info))

    def _run_stream(self, job, conn, resp):
        err = None
        sock = response_socket(resp)
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
            if isinstance(err, socket.timeout):
                self.watchdog.stream_timed_out(job)  # the socket's read timeout (= stall_timeout) beat the watchdog
            if isinstance(err, UpstreamError):
                fatal = fatal or err.fatal
                retry_after = err.retry_after if err.retry_after is not None else retry_after
            elif isinstance(err, OSError) and err.errno == errno.ENOSPC:
                fatal = True
            msg = job.error or "%s: whole-body stream: %s" % (t.remote.path, err)
            if isinstance(err, OSError) and err.errno == errno.ENOSPC:
                msg = "No space left on device writing %s: %s" % (t.remote.path, err)
        self.retry.failed(t, msg, fatal, retry_after)

    def _finished(self, lane, msg, window):
        job = lane.job
        if job is None or msg.get("id") != job.id or job.mode == "stream":
            return  # (a taken-over job's hf_transfer result is moot: the stream reports)
        if job.mode == "direct":
            job.received += max(0, job.ftask.allocated() - job.alloc)
            why = self.watchdog.direct_guard(lane, job, memory=False)
            if why:
                job.error = why
        self._close_job(job, window)
        t = job.ftask
        t.restore()
        self._count_bytes(job)
        if job.overrun:
            t.wipe()  # hf_transfer wrote a whole body at a chunk's offset: nothing here can be trusted
            self.retry.failed(t, job.error, False, None)
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
        self.retry.failed(t, err, fatal, job.retry_after)

    def _count_bytes(self, job):
        self.stats["bytes_fetched"] += job.received
        name = job.ftask.source.name if job.ftask.source is not None else "hub"
        by = self.stats["bytes_by_source"]
        by[name] = by.get(name, 0) + job.received

    # -- events from the window, the streams and the verifiers --
    def _to_hash(self, t):
        self.verifier.submit(t)

    def _post(self, event):
        with self.events_lock:
            if self.closed:  # a stream thread ending after the run: the wake pipe is gone (its fd may be reused)
                return
            self.events.append(event)
            try:
                os.write(self.wake_w, b"x")
            except OSError:
                pass

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
            elif kind == "mismatch":
                self.retry.mismatch(t, info)

    def _report(self, tasks, lanes, final=False):
        if not self.progress:
            return
        done = 0
        for t in tasks:
            done += t.remote.size if t.state in ("complete", "hashing") else t.on_disk()
        running = [l.job.ftask.remote.path for l in lanes if l.job is not None]
        self.progress(done, running, self.stats, final)
