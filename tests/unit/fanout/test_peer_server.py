"""module_utils/fanout/peer_server.py: the real server (a subprocess running the script) on 127.0.0.1, serving a
temporary models dir whose manifests are made with hf_verify.Manifest.record: auth, the index of what is vouched
now, Range, HEAD, refusals of every way out of the model dir, bundles, stats, lifetime and SIGTERM."""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible.module_utils.hf.hub import RemoteFile
from ansible.module_utils.hf.verify import Manifest
from ansible.module_utils.fanout.peer_server import RangeError, parse_range, safe_relpath
from tests.helpers.peer_server import server_script

ROOT = Path(__file__).resolve().parents[3]
SERVER = server_script()  # the script as model_peer lays it out on a host
TOKEN = "peer-token-0123456789abcdef"
REV = "c" * 40
MiB = 1 << 20


def sha(data):
    return hashlib.sha256(data).hexdigest()


def record(manifest, model_dir, rel, key=None):
    """Record the file at model_dir/rel under `key` (default rel), as hf_sync does after its hash matched."""
    local = os.path.join(model_dir, rel)
    data = Path(local).read_bytes()
    manifest.record(RemoteFile(key or rel, len(data), sha256=sha(data)), local, sha(data), REV)


def make_tree(base):
    """root/m1 (files, a symlink in and one out, a FIFO, hostile manifest keys), root/m2, root/m3 (not served),
    root/outside.bin, bundles/. -> dict of paths and contents."""
    root = base / "root"
    m1 = root / "m1"
    (m1 / ".hf_model").mkdir(parents=True)
    (m1 / "sub").mkdir()
    files = {"a.bin": os.urandom(300 * 1024), "sub/b.txt": b"hello peer\n", "empty.bin": b"",
             "mtime.bin": os.urandom(4096), "size.bin": os.urandom(4096), "big.bin": os.urandom(MiB) * 24,
             "unvouched.bin": b"never verified"}
    for rel, data in files.items():
        (m1 / rel).write_bytes(data)
    (root / "outside.bin").write_bytes(b"outside the model dir")
    os.symlink("a.bin", m1 / "link_in")
    os.symlink("../outside.bin", m1 / "link_out")
    os.mkfifo(m1 / "fifo")
    progress = {"state": "running", "bytes_done": 5, "bytes_total": 10, "files_done": 1, "files_total": 2,
                "updated": 1.0, "pid": 1}
    (m1 / ".hf_model" / "progress.json").write_text(json.dumps(progress))
    man = Manifest(str(m1 / ".hf_model" / "manifest.json"), "org/m1", REV)
    for rel in ("a.bin", "sub/b.txt", "empty.bin", "mtime.bin", "size.bin", "big.bin", "link_in", "link_out"):
        record(man, str(m1), rel)
    st = os.stat(m1 / "fifo")
    man.files["fifo"] = {"size": 0, "sha256": sha(b""), "blob_sha1": None, "mtime_ns": st.st_mtime_ns,
                         "revision": REV}
    # hostile keys: each names a real file whose size and mtime are the recorded ones
    record(man, str(m1), "../outside.bin")
    record(man, str(m1), str(root / "outside.bin"), key=str(root / "outside.bin"))
    record(man, str(m1), ".hf_model/progress.json")
    man.save()
    m2 = root / "m2"
    (m2 / ".hf_model").mkdir(parents=True)
    (m2 / "c.bin").write_bytes(os.urandom(7777))
    man2 = Manifest(str(m2 / ".hf_model" / "manifest.json"), "org/m2", REV)
    record(man2, str(m2), "c.bin")
    man2.save()
    m3 = root / "m3"
    (m3 / ".hf_model").mkdir(parents=True)
    (m3 / "d.bin").write_bytes(b"not served")
    man3 = Manifest(str(m3 / ".hf_model" / "manifest.json"), "org/m3", REV)
    record(man3, str(m3), "d.bin")
    man3.save()
    bundles = base / "bundles"
    bundles.mkdir()
    (bundles / "cache-1.tar").write_bytes(os.urandom(50000))
    (bundles / ".hidden").write_bytes(b"x")
    os.symlink("cache-1.tar", bundles / "link.tar")
    (bundles / "subdir").mkdir()
    return {"root": root, "m1": m1, "m2": m2, "files": files, "progress": progress, "bundles": bundles,
            "c.bin": (m2 / "c.bin").read_bytes(), "bundle": (bundles / "cache-1.tar").read_bytes()}


class Server:
    def __init__(self, base, models=("m1", "m2"), bundles=True, lifetime=120, extra=()):
        self.base = base
        self.stats = base / "stats.json"
        self.ready = base / "ready.json"
        tok = base / "token.sha256"
        tok.write_text(sha(TOKEN.encode()) + "\n")
        argv = [sys.executable, str(SERVER), "--bind", "127.0.0.1", "--port", "0", "--root", str(base / "root"),
                "--token-sha256-file", str(tok), "--lifetime", str(lifetime), "--stats", str(self.stats),
                "--ready-file", str(self.ready)] + list(extra)
        for m in models:
            argv += ["--model", m]
        if bundles:
            argv += ["--bundle-dir", str(base / "bundles")]
        self.out = base / "server.out"
        with open(self.out, "w") as out:  # a file, not a pipe: a full pipe would block the server's threads
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("server did not get ready: rc=%s %s" % (self.proc.poll(), self.output()))
            time.sleep(0.01)
        self.port = json.loads(self.ready.read_text())["port"]

    def output(self):
        return self.out.read_text()

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=20)


def req(conn, path, method="GET", headers=None, token=TOKEN):
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = "Bearer " + token
    conn.request(method, path, headers=h)
    r = conn.getresponse()
    body = r.read()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), body


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("peer"))


@pytest.fixture(scope="module")
def server(tree):
    s = Server(tree["root"].parent)
    yield s
    s.stop()


@pytest.fixture
def conn(server):
    c = server.conn()
    yield c
    c.close()


# -- pure helpers --------------------------------------------------------------------------------------------------

def test_vouches_stat_is_the_size_and_mtime_rule(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"12345")
    m = Manifest(str(tmp_path / "manifest.json"))
    m.record(RemoteFile("f", 5, sha256=sha(b"12345")), str(f), sha(b"12345"), REV)
    assert m.vouches_stat("f", os.stat(f))["sha256"] == sha(b"12345")
    assert m.vouches_stat("g", os.stat(f)) is None
    st = os.stat(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    assert m.vouches_stat("f", os.stat(f)) is None
    m.record(RemoteFile("f", 5, sha256=sha(b"12345")), str(f), sha(b"12345"), REV)
    f.write_bytes(b"123456")
    os.utime(f, ns=(st.st_atime_ns, m.files["f"]["mtime_ns"]))
    assert m.vouches_stat("f", os.stat(f)) is None  # same mtime, other size


def test_parse_range():
    assert parse_range(None, 10) is None
    assert parse_range("bytes=0-0", 10) == (0, 0)
    assert parse_range("bytes=2-5", 10) == (2, 5)
    assert parse_range("bytes=2-", 10) == (2, 9)
    assert parse_range("bytes=5-99", 10) == (5, 9)
    assert parse_range("bytes=-3", 10) == (7, 9)
    assert parse_range("bytes=-30", 10) == (0, 9)
    for bad in ("bytes=10-", "bytes=5-2", "bytes=0-1,3-4", "items=0-1", "bytes=-", "bytes=-0", "bytes=a-b"):
        with pytest.raises(RangeError):
            parse_range(bad, 10)
    with pytest.raises(RangeError):
        parse_range("bytes=0-", 0)


def test_safe_relpath():
    assert safe_relpath("a.bin") and safe_relpath("sub/b.txt") and safe_relpath("x/.hf_model")
    for bad in ("", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/.", ".hf_model/manifest.json",
                ".hf_model", "a\0b"):
        assert not safe_relpath(bad), bad


# -- auth, health, index -------------------------------------------------------------------------------------------

def test_every_route_needs_the_token(conn):
    for path in ("/health", "/index/m1", "/files/m1/a.bin", "/bundles/cache-1.tar", "/nope"):
        for token in (None, "wrong-token-0123456789", TOKEN + "x", ""):
            status, headers, body = req(conn, path, token=token)
            assert status == 401, (path, token)
            assert headers["www-authenticate"] == "Bearer" and len(body) < 64
            assert int(headers["content-length"]) == len(body)
    conn.request("GET", "/health", headers={"Authorization": "Basic " + TOKEN})
    r = conn.getresponse()
    r.read()
    assert r.status == 401
    status, _, body = req(conn, "/health")
    assert status == 200
    health = json.loads(body)
    assert health == {"ok": True, "models": ["m1", "m2"], "pid": health["pid"]} and health["pid"] > 0


def test_index_lists_exactly_the_vouched_files(tree, conn):
    status, headers, body = req(conn, "/index/m1")
    assert status == 200 and headers["content-type"] == "application/json"
    idx = json.loads(body)
    assert idx["model"] == "m1" and idx["repo_id"] == "org/m1" and idx["repo_type"] == "model"
    assert idx["revision"] == REV and idx["progress"] == tree["progress"] and idx["active"] == 0
    files = tree["files"]
    want = {"a.bin", "sub/b.txt", "empty.bin", "mtime.bin", "size.bin", "big.bin", "link_in"}
    assert set(idx["files"]) == want
    for rel in want - {"link_in"}:
        assert idx["files"][rel] == {"size": len(files[rel]), "sha256": sha(files[rel])}
    assert idx["files"]["link_in"] == idx["files"]["a.bin"]  # a symlink that stays inside the model dir
    status, _, body = req(conn, "/index/m2")
    assert status == 200 and set(json.loads(body)["files"]) == {"c.bin"} and json.loads(body)["progress"] is None
    for unknown in ("/index/m3", "/index/nope", "/index/", "/index/..%2fm1"):
        status, headers, _ = req(conn, unknown)
        assert status == 404 and headers["x-error-code"] == "UnknownModel", unknown


def test_a_file_changed_after_verification_is_no_longer_served(tree, conn):
    m1 = tree["m1"]
    for rel in ("mtime.bin", "size.bin"):
        status, _, body = req(conn, "/files/m1/" + rel)
        assert status == 200 and body == tree["files"][rel]
    st = os.stat(m1 / "mtime.bin")
    with open(m1 / "mtime.bin", "r+b") as f:  # same size, new bytes, new mtime
        f.write(b"\xff" * 16)
    os.utime(m1 / "mtime.bin", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with open(m1 / "size.bin", "ab") as f:
        f.write(b"x")
    idx = json.loads(req(conn, "/index/m1")[2])
    assert "mtime.bin" not in idx["files"] and "size.bin" not in idx["files"] and "a.bin" in idx["files"]
    for rel in ("mtime.bin", "size.bin"):
        for method in ("GET", "HEAD"):
            status, headers, body = req(conn, "/files/m1/" + rel, method=method)
            assert status == 404 and headers["x-error-code"] == "NotVouched", (rel, method)
            assert tree["files"][rel][:16] not in body


def test_a_new_manifest_is_picked_up(tmp_path):
    t = make_tree(tmp_path)
    s = Server(tmp_path)
    try:
        c = s.conn()
        assert "c.bin" in json.loads(req(c, "/index/m2")[2])["files"]
        man = Manifest.load(str(t["m2"] / ".hf_model" / "manifest.json"))
        man.forget("c.bin")
        man.save()
        assert json.loads(req(c, "/index/m2")[2])["files"] == {}
        assert req(c, "/files/m2/c.bin")[0] == 404
    finally:
        s.stop()


# -- bodies --------------------------------------------------------------------------------------------------------

def test_ranges(tree, conn):
    data = tree["files"]["a.bin"]
    size = len(data)
    status, headers, body = req(conn, "/files/m1/a.bin")
    assert status == 200 and body == data and int(headers["content-length"]) == size
    assert headers["accept-ranges"] == "bytes" and headers["etag"] == '"%s"' % sha(data)
    cases = [("bytes=10-19", 10, 19), ("bytes=0-0", 0, 0), ("bytes=%d-" % (size - 100), size - 100, size - 1),
             ("bytes=1000-", 1000, size - 1), ("bytes=-500", size - 500, size - 1),
             ("bytes=%d-%d" % (size - 5, size + 50), size - 5, size - 1)]
    for rng, a, b in cases:
        status, headers, body = req(conn, "/files/m1/a.bin", headers={"Range": rng})
        assert status == 206, rng
        assert headers["content-range"] == "bytes %d-%d/%d" % (a, b, size), rng
        assert body == data[a:b + 1] and int(headers["content-length"]) == b - a + 1, rng
    for rng in ("bytes=%d-" % size, "bytes=%d-%d" % (size + 1, size + 9), "bytes=0-1,5-6", "bytes=9-3"):
        status, headers, body = req(conn, "/files/m1/a.bin", headers={"Range": rng})
        assert status == 416 and headers["content-range"] == "bytes */%d" % size, rng
        assert int(headers["content-length"]) == len(body) and data[:16] not in body
    status, headers, body = req(conn, "/files/m1/empty.bin")
    assert status == 200 and body == b"" and headers["content-length"] == "0"
    status, headers, _ = req(conn, "/files/m1/empty.bin", headers={"Range": "bytes=0-0"})
    assert status == 416 and headers["content-range"] == "bytes */0"
    status, _, body = req(conn, "/files/m1/sub%2Fb.txt")  # the slash quoted too
    assert status == 200 and body == tree["files"]["sub/b.txt"]


def test_head_answers_the_headers_of_get_and_keeps_the_connection(tree, conn):
    size = len(tree["files"]["a.bin"])
    status, headers, body = req(conn, "/files/m1/a.bin", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) == size
    sock = conn.sock
    status, headers, body = req(conn, "/files/m1/a.bin", method="HEAD", headers={"Range": "bytes=5-9"})
    assert status == 206 and headers["content-range"] == "bytes 5-9/%d" % size and headers["content-length"] == "5"
    status, _, body = req(conn, "/files/m1/sub/b.txt")
    assert status == 200 and body == tree["files"]["sub/b.txt"]
    assert conn.sock is sock  # HTTP/1.1 keep-alive: one connection for all three


def test_nothing_outside_the_vouched_files_is_served(tree, conn):
    root, m1 = tree["root"], tree["m1"]
    man = Manifest.load(str(m1 / ".hf_model" / "manifest.json"))
    hostile = {"../outside.bin": root / "outside.bin", str(root / "outside.bin"): root / "outside.bin",
               ".hf_model/progress.json": m1 / ".hf_model" / "progress.json", "link_out": m1 / "link_out"}
    for key, path in hostile.items():  # the size/mtime rule alone would vouch for each of them
        assert man.vouches_stat(key, os.stat(path)) is not None, key
    paths = ["/files/m1/../outside.bin", "/files/m1/%2e%2e/outside.bin", "/files/m1/%2E%2E%2Foutside.bin",
             "/files/m1/sub/../../outside.bin", "/files/m1//" + str(root / "outside.bin").lstrip("/"),
             "/files/m1/%2F" + str(root / "outside.bin").lstrip("/"), "/files/m1/.hf_model/manifest.json",
             "/files/m1/.hf_model/progress.json", "/files/m1/%2ehf_model/progress.json", "/files/m1/link_out",
             "/files/m1/fifo", "/files/m1/unvouched.bin", "/files/m1/sub", "/files/m1/", "/files/m1",
             "/files/m1/nope.bin", "/files/m3/d.bin", "/files/../m1/a.bin", "/files/m1/./a.bin",
             "/files/m1/a.bin%00"]
    for path in paths:
        for method in ("GET", "HEAD"):
            status, headers, body = req(conn, path, method=method)
            assert status == 404 and headers["x-error-code"] == "NotVouched", (path, method)
            assert b"outside the model dir" not in body and b"never verified" not in body
    assert req(conn, "/files/m1/link_in")[2] == tree["files"]["a.bin"]


def test_bundles(tree, conn):
    data = tree["bundle"]
    status, headers, body = req(conn, "/bundles/cache-1.tar")
    assert status == 200 and body == data
    status, headers, body = req(conn, "/bundles/cache-1.tar", headers={"Range": "bytes=100-199"})
    assert status == 206 and body == data[100:200] and headers["content-range"] == "bytes 100-199/%d" % len(data)
    status, headers, _ = req(conn, "/bundles/cache-1.tar", headers={"Range": "bytes=%d-" % len(data)})
    assert status == 416 and headers["content-range"] == "bytes */%d" % len(data)
    assert req(conn, "/bundles/cache-1.tar", method="HEAD")[1]["content-length"] == str(len(data))
    for path in ("/bundles/.hidden", "/bundles/link.tar", "/bundles/subdir", "/bundles/nope", "/bundles/",
                 "/bundles/..%2Froot%2Foutside.bin", "/bundles/../root/outside.bin", "/bundles/sub/x"):
        status, headers, _ = req(conn, path)
        assert status == 404 and headers["x-error-code"] == "NotFound", path


def test_other_paths_and_methods(conn):
    for path in ("/", "/nope", "/health/x", "/index"):
        status, headers, body = req(conn, path)
        assert status == 404 and int(headers["content-length"]) == len(body), path
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "FOO"):
        status, headers, body = req(conn, "/files/m1/a.bin", method=method)
        assert status == 405 and headers["allow"] == "GET, HEAD", method
        assert int(headers["content-length"]) == len(body)


def test_active_counts_the_file_gets_in_flight(tree, server, conn):
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", server.port))
    slow_conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    slow_conn.sock = slow
    slow_conn.request("GET", "/files/m1/big.bin", headers={"Authorization": "Bearer " + TOKEN})
    r = slow_conn.getresponse()  # headers in, 24 MiB still to come: the transfer is in flight
    assert r.status == 200
    assert json.loads(req(conn, "/index/m1")[2])["active"] == 1
    assert json.loads(req(conn, "/index/m2")[2])["active"] == 0
    assert r.read() == tree["files"]["big.bin"]
    slow_conn.close()
    deadline = time.monotonic() + 20
    while json.loads(req(conn, "/index/m1")[2])["active"] != 0:
        assert time.monotonic() < deadline, "active never came back to 0"
        time.sleep(0.01)


def test_a_stalled_client_does_not_hold_a_thread(tmp_path):
    t = make_tree(tmp_path)
    s = Server(tmp_path, extra=["--socket-timeout", "0.5"])
    try:
        idle = socket.create_connection(("127.0.0.1", s.port))
        idle.settimeout(20)
        assert idle.recv(1) == b""  # the server hung up on a client that sent nothing
        idle.close()
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", s.port))
        stalled.sendall(b"GET /files/m1/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                        % TOKEN.encode())
        c = s.conn()
        deadline = time.monotonic() + 20
        seen = False
        while True:  # in flight, then given up by the server although the client never closed
            active = json.loads(req(c, "/index/m1")[2])["active"]
            seen = seen or active == 1
            if seen and active == 0:
                break
            assert time.monotonic() < deadline, "the stalled transfer was never given up"
            time.sleep(0.02)
        stalled.close()
        assert s.stop() == 0
        stats = json.loads(s.stats.read_text())
        assert 0 < stats["bytes_served"]["m1"] < len(t["files"]["big.bin"])
    finally:
        s.stop()


def test_connections_are_bounded(tmp_path):
    make_tree(tmp_path)
    s = Server(tmp_path, models=("m1",), bundles=False, extra=["--max-connections", "2"])
    try:
        held = [s.conn() for _ in range(2)]
        for c in held:  # each holds its thread (keep-alive) after one answer
            assert req(c, "/health")[0] == 200
        extra = socket.create_connection(("127.0.0.1", s.port), timeout=20)
        answer = b""
        while True:  # sent at once, before any request, then closed
            chunk = extra.recv(4096)
            if not chunk:
                break
            answer += chunk
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503 ") and b"Content-Length: 0\r\n" in answer
        assert b"Retry-After: 1\r\n" in answer
        held[0].close()
        deadline = time.monotonic() + 20
        while True:  # the closed connection's slot comes back
            c = s.conn()
            status = req(c, "/health")[0]
            c.close()
            if status == 200:
                break
            assert time.monotonic() < deadline, "the slot never came back"
            time.sleep(0.02)
        held[1].close()
    finally:
        assert s.stop() == 0


# -- stats, lifetime, signals --------------------------------------------------------------------------------------

def snapshot(path):
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, path)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def test_stats_count_bytes_exactly_and_sigterm_writes_them(tmp_path):
    t = make_tree(tmp_path)
    before = snapshot(t["root"]), snapshot(t["bundles"])
    s = Server(tmp_path)
    c = s.conn()
    a = t["files"]["a.bin"]
    assert req(c, "/files/m1/a.bin")[2] == a
    assert req(c, "/files/m1/a.bin", headers={"Range": "bytes=100-109"})[0] == 206
    assert req(c, "/files/m1/a.bin", method="HEAD")[0] == 200
    assert req(c, "/files/m1/a.bin", headers={"Range": "bytes=%d-" % len(a)})[0] == 416
    assert req(c, "/files/m2/c.bin")[2] == t["c.bin"]
    assert req(c, "/bundles/cache-1.tar", headers={"Range": "bytes=0-999"})[0] == 206
    assert req(c, "/files/m1/unvouched.bin")[0] == 404
    assert req(c, "/health", token="wrong-token-0123456789")[0] == 401
    assert req(c, "/index/m1")[0] == 200
    c.close()
    deadline = time.monotonic() + 20
    while True:  # written while serving (at most once a second)
        try:
            stats = json.loads(s.stats.read_text())
        except (OSError, ValueError):
            stats = {}
        if stats.get("requests") == 9:
            break
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    assert s.stop() == 0
    stats = json.loads(s.stats.read_text())
    assert stats["bytes_served"] == {"m1": len(a) + 10, "m2": len(t["c.bin"]), "bundles": 1000}
    assert stats["files_served"] == {"m1": 2, "m2": 1}
    assert stats["requests"] == 9 and stats["unauthorized"] == 1 and stats["pid"] == s.proc.pid
    assert stats["started"] <= stats["updated"]
    assert "exiting (SIGTERM)" in s.output()
    assert (snapshot(t["root"]), snapshot(t["bundles"])) == before  # read-only
    assert sorted(os.listdir(tmp_path)) == ["bundles", "ready.json", "root", "server.out", "stats.json",
                                          "token.sha256"]


def test_lifetime_ends_the_server_with_its_stats(tmp_path):
    make_tree(tmp_path)
    t0 = time.monotonic()
    s = Server(tmp_path, models=("m1",), bundles=False, lifetime=0.5)
    assert s.proc.wait(timeout=20) == 0
    assert time.monotonic() - t0 >= 0.5
    stats = json.loads(s.stats.read_text())
    assert stats["pid"] == s.proc.pid and stats["bytes_served"] == {"m1": 0} and stats["requests"] == 0
    assert "exiting (lifetime)" in s.output()


def test_without_bundle_dir_there_are_no_bundles(tmp_path):
    make_tree(tmp_path)
    s = Server(tmp_path, models=("m1",), bundles=False)
    try:
        c = s.conn()
        status, headers, _ = req(c, "/bundles/cache-1.tar")
        assert status == 404 and headers["x-error-code"] == "NotFound"
        assert json.loads(req(c, "/health")[2])["models"] == ["m1"]
        assert req(c, "/index/m2")[0] == 404
    finally:
        assert s.stop() == 0
    assert json.loads(s.stats.read_text())["bytes_served"] == {"m1": 0}


@pytest.mark.parametrize("args, message", [
    (["--bind", "0.0.0.0"], "wildcard"), (["--bind", "::"], "wildcard"), (["--model", "../x"], "bad model"),
    (["--lifetime", "0"], "lifetime")])
def test_cli_refuses_bad_input(tmp_path, args, message):
    base = ["--bind", "127.0.0.1", "--port", "0", "--root", str(tmp_path), "--model", "m1",
            "--token-sha256-file", str(tmp_path / "t"), "--lifetime", "5", "--stats", str(tmp_path / "s")]
    proc = subprocess.run([sys.executable, str(SERVER)] + base + args, capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and message in proc.stderr


def test_a_bad_token_file_is_an_error_not_an_open_server(tmp_path):
    (tmp_path / "t").write_text("not a digest")
    proc = subprocess.run([sys.executable, str(SERVER), "--bind", "127.0.0.1", "--port", "0", "--root",
                           str(tmp_path), "--model", "m1", "--token-sha256-file", str(tmp_path / "t"),
                           "--lifetime", "5", "--stats", str(tmp_path / "s")], capture_output=True, text=True,
                          timeout=20)
    assert proc.returncode == 2 and "sha256" in proc.stderr
