"""roles/sglang_service/files/.../launch.py: runs a module like `python -m`, adds --api-key from the environment,
keeps the key out of /proc/<pid>/cmdline and the environment of children, redacts it from everything the server
and its descendants write, and supervises the server: stop signals forwarded, exit status mapped (SGLang kills
itself with SIGKILL after a clean drain)."""
import importlib.util
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
LAUNCHER = ROOT / "roles/sglang_service/files/usr/local/libexec/sglang-service/launch.py"
KEY = "k-very-secret-0123456789abcdef"
PROBE = '''
import os, sys
print("argv", sys.argv[1:])
print("key-in-env", "SGLANG_SERVICE_API_KEY" in os.environ)
print("cmdline", open("/proc/self/cmdline", "rb").read().replace(b"\\0", b" ").decode())
sys.stderr.write("stderr sees %s\\n" % sys.argv[-1])
raise SystemExit(3)
'''

# A server-like probe: `probe_tree <mode> [--api-key K]`. It prints the key from itself, from a subprocess
# grandchild (key sent on stdin, never in a cmdline) and from a multiprocessing spawn grandchild (which gets
# sys.argv pickled over a pipe, like SGLang's scheduler gets server_args), in whole writes and in writes split
# with a flush and a pause. Then it prints "ready ..." and, by mode:
#   sglang  - on SIGTERM: "got SIGTERM", kill the grandchildren, then SIGKILL itself (real SGLang's drain end)
#   default - no handler: SIGTERM kills it
#   wait    - waits until killed
#   exit3   - exits 3 at once
TREE_PROBE = r'''
import multiprocessing, os, signal, subprocess, sys, time

KEY = sys.argv[-1] if "--api-key" in sys.argv else "no-key"


def split_write(fd, text, cuts):
    data, last = text.encode(), 0
    for cut in cuts:
        os.write(fd, data[last:cut])
        time.sleep(0.15)  # makes the launcher read the halves separately; the test itself waits for events
        last = cut
    os.write(fd, data[last:])


def leak(who, split_fd):
    """The line whole on fds 1 and 2, then once more on split_fd cut inside the key (3 writes, 2 pauses)."""
    line = f"{who}: server_args=ServerArgs(port=1, api_key='{KEY}', x=2)\n"
    os.write(1, line.encode())
    os.write(2, line.encode())
    start = line.index(KEY)
    split_write(split_fd, line, [start + 1, start + len(KEY) - 1])
    print(f"{who}: key-in-env {'SGLANG_SERVICE_API_KEY' in os.environ}", flush=True)


def mp_child(ready, parent_alive):
    leak("mp", 2)
    ready.set()
    try:
        parent_alive.recv()  # EOF once the probe is gone, however it died: no orphan left behind
    except EOFError:
        pass


SUB = ("import os, sys, time\n"
       "key = sys.stdin.readline().strip()\n"
       "os.write(2, ('sub: api_key=%s\\n' % key).encode())\n"
       "os.write(2, ('sub: split ' + key[:5]).encode()); time.sleep(0.15); os.write(2, (key[5:] + '\\n').encode())\n"
       "print('sub: key-in-env', 'SGLANG_SERVICE_API_KEY' in os.environ, flush=True)\n"
       "sys.stdin.read()\n")


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "exit3":
        raise SystemExit(3)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    alive_r, alive_w = ctx.Pipe(duplex=False)
    mp = ctx.Process(target=mp_child, args=(ready, alive_r), daemon=True)
    mp.start()
    ready.wait()  # one writer at a time, so the test can count whole lines
    # fd 2 inherited (its leaks go straight to the launcher); stdout a pipe back here, to know it is done
    sub = subprocess.Popen([sys.executable, "-c", SUB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sub.stdin.write(KEY + "\n")
    sub.stdin.flush()
    print(sub.stdout.readline().strip(), flush=True)
    leak("main", 1)

    def on_term(signum, frame):
        print("got SIGTERM", flush=True)
        for pid in (sub.pid, mp.pid):
            os.kill(pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    if mode == "sglang":
        signal.signal(signal.SIGTERM, on_term)
    print(f"ready child={os.getpid()} sub={sub.pid} mp={mp.pid}", flush=True)
    while True:
        signal.pause()
'''


def run(tmp_path, env_key=None):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("SGLANG_SERVICE_API_KEY", None)
    if env_key:
        env["SGLANG_SERVICE_API_KEY"] = env_key
    return subprocess.run([sys.executable, str(LAUNCHER), "probe_mod", "--port", "1"], capture_output=True, text=True,
                          env=env, timeout=30)


def test_key_appended_but_never_visible(tmp_path):
    proc = run(tmp_path, "k-very-secret")
    assert proc.returncode == 3  # the module's own exit status
    assert "k-very-secret" not in proc.stdout + proc.stderr
    assert "argv ['--port', '1', '--api-key', '[REDACTED]']" in proc.stdout
    assert "key-in-env False" in proc.stdout
    assert "cmdline" in proc.stdout and "--api-key" not in proc.stdout.split("cmdline", 1)[1]
    assert "stderr sees [REDACTED]" in proc.stderr


def test_without_key_argv_untouched(tmp_path):
    proc = run(tmp_path)
    assert "argv ['--port', '1']" in proc.stdout


def test_usage_without_module():
    proc = subprocess.run([sys.executable, str(LAUNCHER)], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "usage" in proc.stderr


# ---- the supervisor


class Launched:
    """The launcher running probe_tree; stdout read line by line (waiting for events), stderr collected."""

    def __init__(self, tmp_path, mode: str, key: str | None = KEY):
        (tmp_path / "probe_tree.py").write_text(TREE_PROBE)
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        env.pop("SGLANG_SERVICE_API_KEY", None)
        if key:
            env["SGLANG_SERVICE_API_KEY"] = key
        self.proc = subprocess.Popen([sys.executable, str(LAUNCHER), "probe_tree", mode], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out: list[bytes] = []
        self.err = b""
        self._err_thread = threading.Thread(target=self._read_err, daemon=True)
        self._err_thread.start()

    def _read_err(self):
        self.err = self.proc.stderr.read()

    def wait_for(self, prefix: bytes) -> bytes:
        """The first stdout line starting with prefix (a readline per line: blocks until the probe prints it)."""
        for line in iter(self.proc.stdout.readline, b""):
            self.out.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"launcher stdout ended before {prefix!r}: {b''.join(self.out)!r} {self.err!r}")

    def finish(self) -> int:
        rest = self.proc.stdout.read()
        self.out.append(rest)
        rc = self.proc.wait(timeout=30)
        self._err_thread.join(timeout=30)
        return rc

    @property
    def output(self) -> bytes:
        return b"".join(self.out) + self.err

    def pids(self) -> dict:
        line = self.wait_for(b"ready ").decode().split()[1:]
        return {k: int(v) for k, v in (item.split("=") for item in line)}


def test_sigterm_is_forwarded_and_sglang_style_sigkill_after_it_is_a_clean_stop(tmp_path):
    launched = Launched(tmp_path, "sglang")
    pids = launched.pids()
    launched.proc.send_signal(signal.SIGTERM)
    assert launched.wait_for(b"got SIGTERM")  # the child received the SIGTERM the launcher got
    assert launched.finish() == 0
    assert b"clean stop, exit 0" in launched.err and b"SIGKILL after SIGTERM was forwarded" in launched.err
    assert not os.path.exists(f"/proc/{pids['child']}")  # reaped: the launcher did not exit before it


def test_key_never_reaches_the_output_from_any_process_even_split(tmp_path):
    launched = Launched(tmp_path, "sglang")
    launched.pids()
    launched.proc.send_signal(signal.SIGTERM)
    assert launched.finish() == 0
    out = launched.output
    assert KEY.encode() not in out
    # every writer got through, redacted: main process, spawn grandchild and subprocess grandchild, both fds
    for who in (b"main", b"mp"):
        assert out.count(who + b": server_args=ServerArgs(port=1, api_key='[REDACTED]', x=2)\n") == 3, out
    assert out.count(b"sub: api_key=[REDACTED]\n") == 1 and b"sub: split [REDACTED]\n" in out
    assert b"main: key-in-env False" in out and b"mp: key-in-env False" in out and b"sub: key-in-env False" in out
    # nor any fragment long enough to matter
    assert KEY[: len(KEY) // 2].encode() not in out and KEY[len(KEY) // 2:].encode() not in out


def test_key_in_no_cmdline_and_no_environment_of_the_tree(tmp_path):
    launched = Launched(tmp_path, "sglang")
    pids = launched.pids()
    tree = [launched.proc.pid] + list(pids.values())
    cmdlines = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdlines[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                pass
    assert all(pid in cmdlines for pid in tree)
    assert [pid for pid, cmd in cmdlines.items() if KEY.encode() in cmd] == []
    for pid in tree:  # /proc/<pid>/environ (what systemd-coredump would record) of launcher, child, grandchildren
        assert KEY.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), pid
    launched.proc.send_signal(signal.SIGTERM)
    assert launched.finish() == 0
    assert b"main: key-in-env False" in launched.output


def test_sigkill_without_a_stop_request_is_a_failure_137(tmp_path):
    launched = Launched(tmp_path, "wait")
    pids = launched.pids()
    os.kill(pids["child"], signal.SIGKILL)  # what the OOM killer does: must not read as a clean stop
    assert launched.finish() == 137
    assert b"killed by SIGKILL without a stop request: exit 137" in launched.err


def test_sigterm_death_after_forwarding_is_a_clean_stop(tmp_path):
    launched = Launched(tmp_path, "default")  # e.g. SIGTERM while loading, before SGLang installs its handler
    launched.pids()
    launched.proc.send_signal(signal.SIGTERM)
    assert launched.finish() == 0
    assert b"ended by SIGTERM after SIGTERM was forwarded" in launched.err


def test_sigterm_to_the_child_directly_is_not_a_stop_request(tmp_path):
    launched = Launched(tmp_path, "default")
    pids = launched.pids()
    os.kill(pids["child"], signal.SIGTERM)
    assert launched.finish() == 128 + signal.SIGTERM


def test_child_exit_code_is_passed_through(tmp_path):
    launched = Launched(tmp_path, "exit3")
    assert launched.finish() == 3
    assert b"clean stop" not in launched.err


@pytest.mark.parametrize("mode, rc", [("sglang", 0), ("wait", 137)])
def test_without_a_key_same_supervision_nothing_redacted(tmp_path, mode, rc):
    launched = Launched(tmp_path, mode, key=None)
    pids = launched.pids()
    if mode == "sglang":
        launched.proc.send_signal(signal.SIGTERM)
    else:
        os.kill(pids["child"], signal.SIGKILL)
    assert launched.finish() == rc
    assert b"[REDACTED]" not in launched.output
    assert launched.output.count(b"api_key='no-key'") == 6


# ---- the redaction itself, chunk by chunk


def _launcher_module():
    spec = importlib.util.spec_from_file_location("sglang_service_launch", LAUNCHER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_redactor_catches_the_key_split_at_every_position():
    launch = _launcher_module()
    text = f"a line\nserver_args=ServerArgs(api_key='{KEY}') and again {KEY}{KEY}\n".encode()
    for cut in range(len(text) + 1):
        r = launch.Redactor(KEY.encode())
        out = r.feed(text[:cut]) + r.feed(text[cut:]) + r.close()
        assert out == text.replace(KEY.encode(), b"[REDACTED]"), cut


def test_redactor_holds_back_only_a_possible_key_start():
    launch = _launcher_module()
    r = launch.Redactor(b"secret-key")
    assert r.feed(b"plain line\n") == b"plain line\n"  # nothing held: logs stay timely
    assert r.feed(b"api_key='sec") == b"api_key='"  # "sec" could start the key: held
    assert r.feed(b"ond line\n") == b"second line\n"  # it did not
    assert r.feed(b"key=secret-k") == b"key="
    assert r.close() == b"[REDACTED]"  # a stream ending in most of the key: masked, not printed
    assert launch.Redactor(b"").feed(b"x") == b"x"


def test_redactor_also_catches_the_key_as_repr_and_json_escape_it():
    import json

    launch = _launcher_module()
    key = "k\\ey'with\"quotes-and-\u00e9"
    r = launch.Redactor(*launch.key_forms(key))
    text = f"server_args=ServerArgs(api_key={key!r}) {json.dumps({'api_key': key})} raw {key}\n".encode()
    out = r.feed(text[:40]) + r.feed(text[40:]) + r.close()
    assert out.count(b"[REDACTED]") == 3, out
    assert not [form for form in launch.key_forms(key) if form in out]


def test_key_printed_in_an_argv_repr_with_a_backslash_is_redacted(tmp_path):
    proc = run(tmp_path, "k\\very-secret")
    assert "very-secret" not in proc.stdout + proc.stderr
    assert "'--api-key', '[REDACTED]']" in proc.stdout


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("launcher-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


@pytest.mark.parametrize("recorded,expected,runs", [
    ("sha256:aaa", "sha256:aaa", True),     # the venv the unit was rendered for: the module runs
    ("sha256:bbb", "sha256:aaa", False),    # another venv swapped in behind the unit: refused, 78
    (None, "sha256:aaa", False),            # a venv without a record (not put there by the venv role): refused
    ("sha256:bbb", None, True),             # a unit that names no venv hash (rendered by hand): not checked
])
def test_the_launcher_starts_only_the_venv_its_unit_was_rendered_for(tmp_path, tiny_venv, recorded, expected, runs):
    (tmp_path / "probe_mod.py").write_text(PROBE)
    digest = tiny_venv / ".sglang-venv-digest"
    digest.unlink(missing_ok=True)
    if recorded:
        digest.write_text(recorded + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("SGLANG_SERVICE_VENV_HASH", None)
    if expected:
        env["SGLANG_SERVICE_VENV_HASH"] = expected
    proc = subprocess.run([str(tiny_venv / "bin/python"), str(LAUNCHER), "probe_mod", "--port", "1"],
                          capture_output=True, text=True, env=env, timeout=30)
    if runs:
        assert proc.returncode == 3 and "argv ['--port', '1']" in proc.stdout, proc.stderr
    else:
        assert proc.returncode == 78 and "argv" not in proc.stdout, (proc.stdout, proc.stderr)
        assert "refusing to start" in proc.stderr and expected in proc.stderr
        assert (recorded or "carries no content hash") in proc.stderr
