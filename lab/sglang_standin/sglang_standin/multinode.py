"""Multi-node serving as real SGLang 0.5.11 does it, in miniature (tests/fixtures/real_sglang/multinode-0.5.11.md).

Real: the process of global rank 0 (node 0) hosts torch's TCPStore on the --dist-init-addr port and waits until every
rank connected; the other nodes retry connecting, bounded by the dist timeout; once formed, every scheduler loop
broadcasts over gloo, so a dead member is noticed at once and every node's process ends (SIGQUIT -> kill_process_tree
-> SIGKILL, exit -9). Ranks >= 1 serve no API, only a dummy /ping, /health, /health_generate.

The stand-in's group: node 0 listens on the dist-init port (all addresses, like the TCPStore daemon) and speaks a line
protocol of JSON objects with the other nodes (`join` -> `joined` | `refused`, then `go` when all joined, `hb`
heartbeats both ways, `abort`). Knobs: SGLANG_STANDIN_DIST_TIMEOUT_S (the join bound; else --dist-timeout; else 20 s:
real is 600 s), SGLANG_STANDIN_DIST_LOST_S (a member silent that long is lost; default 5 s).
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_LOST_S = 5.0
# real log lines (sglang/srt/entrypoints/engine.py:1187, managers/tokenizer_manager.py:2739)
LAUNCH_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
RUNNING_SIGQUIT = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."


class GroupError(Exception):
    """The group could not form or broke: `kind` is the real exception's type, str() its message."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default


def dist_timeout(args) -> float:
    """The join bound: SGLANG_STANDIN_DIST_TIMEOUT_S, else --dist-timeout (real: torch's timeout), else 20 s."""
    if os.environ.get("SGLANG_STANDIN_DIST_TIMEOUT_S"):
        return _env_float("SGLANG_STANDIN_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S)
    return float(args.dist_timeout) if args.dist_timeout else DEFAULT_TIMEOUT_S


def lost_after() -> float:
    return _env_float("SGLANG_STANDIN_DIST_LOST_S", DEFAULT_LOST_S)


def parse_addr(addr: str) -> tuple:
    """host:port like sglang's NetworkAddress.parse ([v6]:port; a bare v6 address is refused): ValueError if bad."""
    if not addr:
        raise ValueError("Empty address string")
    if addr.startswith("["):
        close = addr.find("]")
        if close == -1 or not addr[close + 1:].startswith(":"):
            raise ValueError(f"Expected [host]:port, got {addr!r}")
        host, port = addr[1:close], addr[close + 2:]
    else:
        if ":" not in addr:
            raise ValueError(f"Missing port in address (expected host:port): {addr!r}")
        host, port = addr.rsplit(":", 1)
        if not host or ":" in host:
            raise ValueError(f"Invalid host in address: {addr!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Invalid port in address: {addr!r}")
    return host, int(port)


def is_multinode(args) -> bool:
    return (args.nnodes or 1) > 1 or (args.node_rank or 0) != 0


def shape(args) -> dict:
    """What every node must agree on; world = GPU ranks (tp * pp), as torch counts them."""
    nnodes, tp, pp = args.nnodes or 1, args.tp_size or 1, args.pp_size or 1
    return {"nnodes": nnodes, "tp_size": tp, "pp_size": pp, "world_size": tp * pp}


def die(err: GroupError, log: Callable[[str], None], running: bool = False) -> None:
    """End this node as real SGLang does: the scheduler's traceback, the main process's SIGQUIT line, then
    kill_process_tree SIGKILLs the process itself (exit status -9)."""
    log(f"Scheduler hit an exception: Traceback (most recent call last):\n"
        f"  File \"standin/multinode.py\", line 1, in init_torch_distributed\n{err.kind}: {err}")
    log(RUNNING_SIGQUIT if running else LAUNCH_SIGQUIT)
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _send(sock: socket.socket, lock: threading.Lock, obj: dict) -> bool:
    try:
        with lock:
            sock.sendall((json.dumps(obj) + "\n").encode())
        return True
    except OSError:
        return False


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"[{host.removeprefix('::ffff:')}]:{port}"
    except OSError:
        return "[unknown]"


def _lost_error(sock_peer: str, exc: Optional[BaseException], lost_s: float, who: str) -> GroupError:
    """gloo's messages for a peer that is gone (measured, see the fixture), plus the lost node rank."""
    if isinstance(exc, socket.timeout):
        msg = (f"[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
               f"{int(lost_s * 1000)}ms for recv operation to complete")
    elif isinstance(exc, ConnectionResetError):
        msg = (f"[../third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error {sock_peer}: Connection reset by "
               f"peer. This is typically caused by a remote worker hanging or bugs in the application.")
    else:
        msg = (f"[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer {sock_peer}. This is "
               f"typically caused by a remote worker crashing.")
    return GroupError("RuntimeError", f"{msg} (stand-in: lost {who})")


class _Lines:
    """Newline-framed JSON objects from a socket with a per-read timeout (the loss bound)."""

    def __init__(self, sock: socket.socket, timeout: float):
        self.sock, self.buf = sock, b""
        sock.settimeout(timeout)

    def read(self) -> dict:
        """The next object; raises socket.timeout / OSError, or EOFError when the peer closed."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise EOFError  # not our protocol: treat like a broken connection
        return obj


class Group:
    """One node's membership of the serving group. form() blocks until the group formed (True), the stop event was
    set (False), or raises GroupError; after that a lost member calls on_lost(GroupError) once, from a thread."""

    def __init__(self, args, log: Callable[[str], None], stop: threading.Event):
        self.args, self.log, self.stop = args, log, stop
        self.shape = shape(args)
        self.rank = args.node_rank or 0
        addr = args.dist_init_addr or f"{args.host or '127.0.0.1'}:{args.nccl_port or 0}"
        self.host, self.port = parse_addr(addr)
        self.timeout = dist_timeout(args)
        self.lost_s = lost_after()
        self.hb_s = max(0.05, self.lost_s / 5)
        self.on_lost: Optional[Callable[[GroupError], None]] = None
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._error: Optional[GroupError] = None
        self._formed = False
        self._fired = False
        self._members: dict = {}  # rank 0: node rank -> (sock, send lock)
        self._listener: Optional[socket.socket] = None
        self._sock: Optional[socket.socket] = None  # ranks >= 1: the connection to node 0
        self._send_lock = threading.Lock()

    # ---- shared
    def _fail(self, err: GroupError) -> None:
        """Before the group formed: form() raises it; after: on_lost, once."""
        with self._lock:
            if self._fired:
                return
            self._fired = True
            formed = self._formed
            self._error = err
        self._changed.set()
        if formed and self.on_lost is not None:
            self.on_lost(err)

    def _per_node(self) -> int:
        return max(1, self.shape["world_size"] // self.shape["nnodes"])

    def _wait(self, deadline: float, done: Callable[[], bool]) -> bool:
        """Wait for done() (re-checked on every change); False if the stop event came first; GroupError on error."""
        while True:
            with self._lock:
                if self._error is not None:
                    raise self._error
                if done():
                    return True
            if self.stop.is_set():
                return False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._changed.wait(min(remaining, 0.2))
            self._changed.clear()

    def form(self) -> bool:
        started = time.monotonic()
        self.log("Init torch distributed begin.")
        ok = self._form_rank0(started) if self.rank == 0 else self._form_member(started)
        if ok:
            peers = self.shape["world_size"] - 1
            self.log(f"[Gloo] Rank {self.rank * self._per_node()} is connected to {peers} peer ranks. Expected number "
                     f"of connected peer ranks is : {peers}")
            self.log(f"Init torch distributed ends. elapsed={time.monotonic() - started:.2f} s, mem usage=0.00 GB")
        return ok

    def close(self) -> None:
        for sock in [self._listener, self._sock] + [m[0] for m in self._members.values()]:
            if sock is not None:
                try:
                    sock.close()
                except OSError:
                    pass

    # ---- node 0: the store's side
    def _form_rank0(self, started: float) -> bool:
        listener = None
        for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            sock = None
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind((addr, self.port))
                listener = sock
                break
            except OSError as exc:
                if sock is not None:
                    sock.close()
                if exc.errno == errno.EADDRINUSE:  # torch's TCPStore message
                    raise GroupError("torch.distributed.DistNetworkError", (
                        f"The server socket has failed to listen on any local network address. port: {self.port}, "
                        f"useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")) from None
        if listener is None:
            raise GroupError("torch.distributed.DistNetworkError",
                             f"The server socket has failed to listen on any local network address. port: {self.port}")
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self.log(f"stand-in: node rank 0 waits at port {self.port} for {self.shape['nnodes'] - 1} more node(s) "
                 f"(bound {self.timeout:.1f}s)")
        threading.Thread(target=self._accept_loop, daemon=True, name="dist-accept").start()
        threading.Thread(target=self._heartbeat_rank0, daemon=True, name="dist-hb").start()
        want = set(range(1, self.shape["nnodes"]))
        try:
            if not self._wait(started + self.timeout, lambda: want <= set(self._members)):
                return False
        except TimeoutError:
            joined = (1 + len(self._members)) * self._per_node()
            missing = sorted(want - set(self._members))
            raise GroupError("torch.distributed.DistStoreError", (
                f"Timed out after {int(time.monotonic() - started)} seconds waiting for clients. "
                f"{joined}/{self.shape['world_size']} clients joined. (stand-in: node ranks {missing} never joined)"))
        with self._lock:  # a loss from now on goes to on_lost; one that came before is raised here
            if self._error is not None:
                raise self._error
            self._formed = True
            members = list(self._members.values())
        for sock, lock in members:
            _send(sock, lock, {"op": "go"})
        return True

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve_member, args=(conn,), daemon=True, name="dist-member").start()

    def _refuse(self, conn: socket.socket, lock: threading.Lock, reason: str, code: str = "refused") -> None:
        _send(conn, lock, {"op": "refused", "code": code, "reason": reason})
        conn.close()

    def _serve_member(self, conn: socket.socket) -> None:
        lock = threading.Lock()
        lines = _Lines(conn, self.lost_s)
        peer = _peer(conn)
        try:
            hello = lines.read()
        except (OSError, EOFError):
            conn.close()
            return
        if hello.get("op") != "join":
            return self._refuse(conn, lock, "not a join")
        rank, theirs = hello.get("node_rank"), hello.get("shape") or {}
        mine = self.shape
        if not isinstance(rank, int) or not 1 <= rank < mine["nnodes"]:
            # real: that process fails at once (gloo "rank < size"); node 0 is unharmed and keeps waiting
            reason = (f"node rank {rank!r} from {peer} is not in [1, {mine['nnodes'] - 1}] (--nnodes "
                      f"{mine['nnodes']} on node 0)")
            self.log(f"ERROR stand-in: refused a join: {reason}")
            return self._refuse(conn, lock, reason, code="bad_rank")
        if any(theirs.get(k) != mine[k] for k in ("nnodes", "tp_size", "pp_size")):
            reason = (f"node rank {rank} from {peer} has nnodes={theirs.get('nnodes')} tp_size={theirs.get('tp_size')} "
                      f"pp_size={theirs.get('pp_size')}, node rank 0 has nnodes={mine['nnodes']} "
                      f"tp_size={mine['tp_size']} pp_size={mine['pp_size']}: every node must be started with the same "
                      f"--nnodes, --tp-size, --pp-size")
            return self._abort(conn, lock, reason)
        with self._lock:
            formed = self._formed
            other = self._members.get(rank)
            if other is None and not formed:
                self._members[rank] = (conn, lock)
                count = len(self._members) + 1
        if formed:
            reason = f"node rank {rank} from {peer} came after the group formed: node rank {rank} is already in it"
            self.log(f"ERROR stand-in: refused a join: {reason}")
            return self._refuse(conn, lock, reason)
        if other is not None:
            reason = (f"node rank {rank} joined twice (from {_peer(other[0])} and from {peer}): two nodes were started "
                      f"with --node-rank {rank}")
            return self._abort(conn, lock, reason)
        self.log(f"stand-in: node rank {rank} joined from {peer} ({count}/{mine['nnodes']} nodes)")
        _send(conn, lock, {"op": "joined", "count": count})
        self._changed.set()
        self._read_member(rank, conn, lines, peer)

    def _abort(self, conn: socket.socket, lock: threading.Lock, reason: str) -> None:
        """A join that breaks the group (duplicate rank, mismatched shape): every member and node 0 end (real: all
        of them time out)."""
        self._refuse(conn, lock, reason)
        with self._lock:
            members = list(self._members.values())
        for sock, mlock in members:
            _send(sock, mlock, {"op": "abort", "reason": reason})
        self._fail(GroupError("RuntimeError", f"stand-in: the group cannot form: {reason}"))

    def _read_member(self, rank: int, conn: socket.socket, lines: _Lines, peer: str) -> None:
        while True:
            try:
                lines.read()
            except (OSError, EOFError) as exc:
                if self._fired:
                    return
                self._fail(_lost_error(peer, exc, self.lost_s, f"node rank {rank}"))
                return

    def _heartbeat_rank0(self) -> None:
        while not self._fired:
            with self._lock:
                members = list(self._members.values())
            for sock, lock in members:
                _send(sock, lock, {"op": "hb"})
            time.sleep(self.hb_s)

    # ---- nodes >= 1: the store's clients
    def _form_member(self, started: float) -> bool:
        deadline = started + self.timeout
        logged = False
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(0.1, deadline - time.monotonic()))
                break
            except OSError as exc:
                if not logged:
                    self.log(f"[W socket.cpp] The client socket cannot be initialized to connect to "
                             f"[{self.host}]:{self.port} (errno: {exc.errno} - {exc.strerror}); retrying for "
                             f"{self.timeout:.1f}s")
                    logged = True
            if self.stop.wait(0.1):
                return False
            if time.monotonic() >= deadline:
                raise GroupError("torch.distributed.DistNetworkError", (
                    f"The client socket has timed out after {int(self.timeout * 1000)}ms while trying to connect to "
                    f"({self.host}, {self.port})."))
        self._sock = sock
        peer = _peer(sock)
        lines = _Lines(sock, self.lost_s)
        _send(sock, self._send_lock, {"op": "join", "node_rank": self.rank, "shape": self.shape, "pid": os.getpid()})
        threading.Thread(target=self._heartbeat_member, daemon=True, name="dist-hb").start()
        threading.Thread(target=self._read_rank0, args=(lines, peer), daemon=True, name="dist-rank0").start()
        try:
            return self._wait(deadline, lambda: self._formed)
        except TimeoutError:
            raise GroupError("torch.distributed.DistStoreError", (
                f"wait timeout after {int(self.timeout * 1000)}ms, keys: /default_pg/0//cpu//0/"
                f"{self.shape['world_size'] - 1} (stand-in: the group did not form: other nodes missing)")) from None

    def _read_rank0(self, lines: _Lines, peer: str) -> None:
        while True:
            try:
                msg = lines.read()
            except (OSError, EOFError) as exc:
                if not self._fired:
                    self._fail(_lost_error(peer, exc, self.lost_s, "node rank 0"))
                return
            op = msg.get("op")
            if op == "go":
                with self._lock:
                    self._formed = True
                self._changed.set()
            elif op == "joined":
                self.log(f"stand-in: node rank {self.rank} joined node rank 0 at {self.host}:{self.port} "
                         f"({msg.get('count')}/{self.shape['nnodes']} nodes)")
            elif op in ("refused", "abort"):
                reason = msg.get("reason") or op
                if msg.get("code") == "bad_rank":  # real: gloo's own check fails on that process
                    global_rank = self.rank * self._per_node()
                    err = GroupError("RuntimeError", f"[enforce fail at ../third_party/gloo/gloo/context.cc:23] rank < "
                                                     f"size. {global_rank} vs {self.shape['world_size']} "
                                                     f"(stand-in: {reason})")
                else:
                    err = GroupError("RuntimeError", f"stand-in: the group cannot form: {reason}")
                self._fail(err)
                return

    def _heartbeat_member(self) -> None:
        while not self._fired and self._sock is not None:
            if not _send(self._sock, self._send_lock, {"op": "hb"}):
                return
            time.sleep(self.hb_s)


def dummy_health_server(host: str, port: int, enable_metrics: bool, log: Callable[[str], None]) -> ThreadingHTTPServer:
    """Ranks >= 1: real's launch_dummy_health_check_server (sglang/srt/utils/common.py:2524): GET /ping, /health,
    /health_generate -> 200 with an empty body, always; /metrics only with --enable-metrics; no API key; anything else
    FastAPI's 404. Serves from a daemon thread; returns the server."""
    routes = {"/ping", "/health", "/health_generate"}

    class Dummy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"

        def log_message(self, fmt, *a):
            pass

        def _reply(self, status: int, body: bytes = b"", ctype: Optional[str] = None) -> None:
            self.send_response(status)
            if ctype:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            if path in routes or (enable_metrics and path == "/metrics"):
                if method != "GET":
                    return self._reply(405, b'{"detail":"Method Not Allowed"}', "application/json")
                if path == "/metrics":
                    return self._reply(200, b"", "text/plain; version=0.0.4; charset=utf-8")
                return self._reply(200)
            return self._reply(404, b'{"detail":"Not Found"}', "application/json")

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

        def do_PUT(self):
            self._route("PUT")

        def do_DELETE(self):
            self._route("DELETE")

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    httpd = Server((host, port), Dummy)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    log(f"Dummy health check server started in background thread at {host}:{port}")
    return httpd
