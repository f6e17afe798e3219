#!/usr/bin/env python3
"""SGLang service launcher and supervisor (installed by the sglang_service role; stdlib only).

Usage (from the unit's ExecStart): <venv python> launch.py <module> <server flags...>

The launcher forks. The child runs <module> in-process exactly like `python -m <module> <flags...>` (runpy),
after appending `--api-key <key>` when the environment carried SGLANG_SERVICE_API_KEY (from the root-only
EnvironmentFile): the key is in neither the unit file nor any /proc/<pid>/cmdline (world-readable), and it is
removed from the environment before the server starts its workers. The child's fds 1 and 2 are pipes to the
parent, so everything the server and every descendant (scheduler, detokenizer: multiprocessing spawn children
inherit fds 1/2) writes passes the parent, which copies it to its own stdout/stderr with the key (raw, or
escaped as a repr or JSON would) replaced by [REDACTED]: SGLang prints `api_key='...'` in its
`server_args=ServerArgs(...)` line from several processes (sgl-project/sglang#37457). A key split across two
reads is still caught: the parent holds back the end of what it read while that end could be the start of the
key (never more than len(key)-1 bytes), until more arrives or the pipe closes; nothing else is buffered, so log
lines reach the journal when they are written.

The parent (systemd's main process; the unit says KillMode=mixed) forwards SIGTERM, SIGINT and SIGHUP to the
child and exits once the child is reaped:
  - 0 when a stop signal was forwarded and the child then died by SIGKILL (real SGLang drains, then kills its
    whole process tree including itself with SIGKILL: status -9 even after a clean drain), by the forwarded
    stop signal itself (e.g. SIGTERM while loading, before SGLang installs its handler) or exited 0;
  - 128+N when the child died by any other signal N, e.g. SIGKILL without a stop request (the OOM killer's: 137,
    a failure);
  - the child's exit code otherwise.
Without a key it supervises the same way and redacts nothing.

Before anything starts, the launcher checks that the venv it runs from is the one the unit was rendered for:
the unit carries SGLANG_SERVICE_VENV_HASH (the venv's content hash when the role rendered it) and every venv
swap writes the new venv's verified content hash into <venv>/.sglang-venv-digest in the stage, before the
rename. A different or missing digest exits EXIT_WRONG_VENV (78) with both hashes named, and the unit's
RestartPreventExitStatus=78 keeps systemd from retrying: an automatic restart can never load a new venv under
the old unit's flags; only the service role (which re-renders the unit and proves readiness) starts it.
"""
import os
import runpy
import select
import signal
import sys
import time

KEY_ENV = "SGLANG_SERVICE_API_KEY"
VENV_HASH_ENV = "SGLANG_SERVICE_VENV_HASH"
VENV_DIGEST_NAME = ".sglang-venv-digest"
EXIT_WRONG_VENV = 78  # EX_CONFIG
MASK = b"[REDACTED]"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# After the child is reaped, its descendants may still hold the pipes (and write their last words): keep
# copying until EOF, or until the pipes stay quiet this long, or at most DRAIN_MAX_S (systemd kills what is left).
DRAIN_IDLE_S = 2.0
DRAIN_MAX_S = 10.0


class Redactor:
    """Replaces secrets in a byte stream fed in arbitrary chunks."""

    def __init__(self, *secrets: bytes):
        self.secrets = sorted({x for x in secrets if x}, key=len, reverse=True)  # longest first
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        data = self.held + data
        for secret in self.secrets:
            data = data.replace(secret, MASK)
        keep = max(self._prefix_tail(data, secret) for secret in self.secrets)
        self.held = data[len(data) - keep:] if keep else b""
        return data[:len(data) - keep]

    @staticmethod
    def _prefix_tail(data: bytes, secret: bytes) -> int:
        """Length of the longest end of data that is a proper prefix of secret (0 if none)."""
        for n in range(min(len(secret) - 1, len(data)), 0, -1):
            if data.endswith(secret[:n]):
                return n
        return 0

    def close(self) -> bytes:
        """At EOF: what was held back. A held-back end of 4+ bytes is a truncated key, not log text: masked."""
        held, self.held = self.held, b""
        return MASK if len(held) >= 4 else held


def key_forms(key: str) -> list:
    """The key as the server may print it: raw, inside a Python repr (SGLang's `api_key='...'` is a dataclass
    repr: a backslash or quote in the key is escaped there) and inside JSON."""
    import json
    return [form.encode() for form in (key, repr(key)[1:-1], json.dumps(key)[1:-1])]


def _write_all(fd: int, data: bytes) -> bool:
    """Write everything; False when the fd is gone (the caller then drops further output but keeps reading)."""
    while data:
        try:
            data = data[os.write(fd, data):]
        except InterruptedError:
            continue
        except OSError:
            return False
    return True


def log(msg: str) -> None:
    _write_all(2, f"sglang-service launcher: {msg}\n".encode())


def _scrub_environ_block(name: str) -> None:
    """Best effort: overwrite the value of `name` in the process's initial environment block, the memory that
    /proc/<pid>/environ shows and systemd-coredump copies into the journal (COREDUMP_ENVIRON) after a crash;
    os.environ.pop() alone only unlinks it. Done before the fork, so the server's process is clean too."""
    try:
        import ctypes
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
        prefix = name.encode() + b"="
        i = 0
        while environ[i]:
            entry = ctypes.string_at(environ[i])
            if entry.startswith(prefix):
                ctypes.memset(environ[i] + len(prefix), ord("*"), len(entry) - len(prefix))
            i += 1
    except Exception:  # noqa: BLE001 - never fail a launch over this
        pass


def _run_child(module: str, args: list, out_w: int, err_w: int, close_fds: list, saved: dict, mask) -> None:
    """In the forked child: fds 1/2 become the pipes, signals as they were, then the module like `python -m`."""
    signal.set_wakeup_fd(-1)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    for fd in close_fds:
        if fd > 2:
            os.close(fd)
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    sys.argv = [module] + args
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _exit_status(status: int, stop_signal: int):
    """(launcher exit code, log line or None) from the child's wait status."""
    stop = _signame(stop_signal) if stop_signal else ""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = _signame(sig)
        if stop_signal and sig in (signal.SIGKILL, stop_signal):
            return 0, (f"server ended by {name} after {stop} was forwarded (real SGLang kills itself with SIGKILL "
                       f"after draining): clean stop, exit 0")
        why = f"after {stop} was forwarded" if stop_signal else "without a stop request"
        return 128 + sig, f"server killed by {name} {why}: exit {128 + sig}"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1
    if stop_signal and code == 0:
        return 0, f"server exited 0 after {stop} was forwarded: clean stop, exit 0"
    return code, None


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def supervise(pid: int, pipes: dict, wake_r: int, state: dict) -> int:
    """Copy the child's pipes (redacted) until EOF, reap the child, return the launcher's exit code."""
    poller = select.poll()
    for fd in list(pipes) + [wake_r]:
        poller.register(fd, select.POLLIN)
    status = None
    reaped_at = last_data = None
    alive_out = {1: True, 2: True}
    while pipes:
        if status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status, state["reaped"] = st, True
                reaped_at = last_data = time.monotonic()
        timeout = None
        if reaped_at is not None:
            now = time.monotonic()
            left = min(last_data + DRAIN_IDLE_S, reaped_at + DRAIN_MAX_S) - now
            if left <= 0:
                break
            timeout = left * 1000
        for fd, _ev in poller.poll(timeout):
            if fd == wake_r:  # a signal (SIGCHLD or a stop signal) woke us up; the loop re-checks the child
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
                continue
            if fd not in pipes:
                continue
            target, redactor = pipes[fd]
            try:
                data = os.read(fd, 65536)
            except InterruptedError:
                continue
            except OSError:  # treated as EOF
                data = b""
            if data:
                last_data = time.monotonic()
                out = redactor.feed(data)
            else:
                out = redactor.close()
                poller.unregister(fd)
                os.close(fd)
                del pipes[fd]
            if out and alive_out[target]:
                alive_out[target] = _write_all(target, out)
    for fd, (target, redactor) in pipes.items():  # drain timed out: what was held back, then give up on them
        out = redactor.close()
        if out and alive_out[target]:
            _write_all(target, out)
    if status is None:
        _pid, status = os.waitpid(pid, 0)
        state["reaped"] = True
    code, line = _exit_status(status, state["stop"])
    if line:
        log(line)
    return code


def venv_mismatch(prefix: str, expected: str) -> str:
    """Why the venv at prefix is not the one the unit was rendered for ("" = it is, or the unit names none)."""
    if not expected:
        return ""
    path = os.path.join(prefix, VENV_DIGEST_NAME)
    try:
        with open(path, encoding="ascii") as fh:
            found = fh.read().strip()
    except OSError as exc:
        return (f"{path} is unreadable ({exc.strerror}): the venv carries no content hash, the unit was rendered "
                f"for {expected}")
    if found != expected:
        return f"the venv at {prefix} has content hash {found}, the unit was rendered for {expected}"
    return ""


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: launch.py <module> [server flags...]")
    why = venv_mismatch(sys.prefix, os.environ.get(VENV_HASH_ENV, ""))
    if why:
        log(f"refusing to start: {why}; the venv was replaced after this unit was rendered. Rerun the service role "
            f"(playbooks/service.yml), which renders the unit for the live venv and proves it ready.")
        sys.exit(EXIT_WRONG_VENV)
    module, args = sys.argv[1], sys.argv[2:]
    if KEY_ENV in os.environ:
        _scrub_environ_block(KEY_ENV)
    key = os.environ.pop(KEY_ENV, "")
    if key:
        args += ["--api-key", key]
    forms = key_forms(key) if key else []

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    state = {"pid": 0, "stop": 0, "reaped": False}

    def forward(signum, _frame):
        state["stop"] = signum
        if state["pid"] and not state["reaped"]:
            try:
                os.kill(state["pid"], signum)
            except ProcessLookupError:
                pass

    # Handlers go in before the fork with the signals blocked, so none is lost or run in the wrong process.
    watched = STOP_SIGNALS + (signal.SIGCHLD,)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    saved = {s: signal.getsignal(s) for s in watched}
    for s in STOP_SIGNALS:
        if saved[s] != signal.SIG_IGN:  # ignored (e.g. nohup's SIGHUP): stays ignored, like before
            signal.signal(s, forward)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a Python handler, so the wakeup fd hears SIGCHLD
    signal.set_wakeup_fd(wake_w)
    sys.stdout.flush()
    sys.stderr.flush()

    pid = os.fork()
    if pid == 0:
        _run_child(module, args, out_w, err_w, [out_r, err_r, out_w, err_w, wake_r, wake_w], saved, mask)
        return  # the child ends like `python -m <module>`: normal interpreter exit, SystemExit, traceback
    state["pid"] = pid
    os.close(out_w)
    os.close(err_w)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    code = supervise(pid, {out_r: (1, Redactor(*forms)), err_r: (2, Redactor(*forms))}, wake_r, state)
    sys.exit(code)


if __name__ == "__main__":
    main()
