"""systemd unit state through `systemctl show`, the bounded stop of a unit, the journal of one invocation or one
unit, and who owns a listening port: the one home of this repository's systemd facts.

Stdlib only (runs on the target with the system python3). Every function that runs a command takes a `run`
callable (argv -> (rc, stdout, stderr)) so tests can feed recorded output without systemd.
"""
from __future__ import annotations

import os
import pwd
import subprocess
import time
from dataclasses import dataclass, field

from ansible.module_utils.evidence.error import EvidenceError

SHOW_PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "MainPID", "InvocationID", "NRestarts", "ExecMainStatus",
    "ExecMainCode", "ExecMainPID", "Result", "ControlGroup", "ExecMainStartTimestampMonotonic",
    "ActiveEnterTimestampMonotonic", "ExecMainExitTimestampMonotonic", "Transient",
)
# ActiveState values of a unit that has not settled in inactive or failed (it runs, or is on its way up or down).
LIVE_STATES = ("active", "activating", "deactivating", "reloading", "refreshing")
# ExecMainCode values (CLD_* from waitid): 1 exited, 2 killed, 3 dumped.
EXIT_CODES = {"1": "exited", "2": "killed", "3": "dumped core", "0": ""}


def default_run(argv, timeout=15.0):
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} timed out after {timeout}s"
    return proc.returncode, proc.stdout, proc.stderr


@dataclass
class UnitState:
    unit: str
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    main_pid: int = 0
    invocation_id: str = ""
    n_restarts: int = 0
    exec_main_status: int = 0
    exec_main_code: str = ""
    exec_main_pid: int = 0
    result: str = ""
    control_group: str = ""
    transient: bool = False
    raw: dict = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.active_state == "active" and self.sub_state == "running" and self.main_pid > 0

    @property
    def loaded(self) -> bool:
        return self.load_state == "loaded"

    @property
    def live(self) -> bool:
        """Not settled in inactive or failed: running, starting, stopping or reloading."""
        return self.active_state in LIVE_STATES

    @property
    def gone(self) -> bool:
        """Nothing to stop: not loaded and inactive (or unknown to systemd)."""
        return not self.loaded and self.active_state in ("", "inactive")

    @property
    def exit_description(self) -> str:
        how = EXIT_CODES.get(self.exec_main_code, self.exec_main_code)
        if not how:
            return f"result={self.result or '?'}"
        what = f"signal {self.exec_main_status}" if how in ("killed", "dumped core") else f"status {self.exec_main_status}"
        return f"main process {how} with {what} (result={self.result or '?'})"

    def summary(self) -> dict:
        return {"active_state": self.active_state, "sub_state": self.sub_state, "main_pid": self.main_pid,
                "invocation_id": self.invocation_id, "n_restarts": self.n_restarts, "result": self.result,
                "exec_main_status": self.exec_main_status, "exec_main_code": EXIT_CODES.get(self.exec_main_code,
                                                                                          self.exec_main_code)}


def _to_int(value: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def parse_show(unit: str, text: str) -> UnitState:
    """Parse `systemctl show -p A -p B ...` output (KEY=VALUE lines). systemctl separates units by an empty line:
    only the first unit's block is read, so a second unit's values never overwrite this one's."""
    raw = {}
    for line in text.splitlines():
        if not line.strip():
            if raw:
                break
            continue
        key, sep, value = line.partition("=")
        if sep:
            raw[key.strip()] = value.strip()
    return UnitState(
        unit=unit, load_state=raw.get("LoadState", ""), active_state=raw.get("ActiveState", ""),
        sub_state=raw.get("SubState", ""), main_pid=_to_int(raw.get("MainPID")),
        invocation_id=raw.get("InvocationID", ""), n_restarts=_to_int(raw.get("NRestarts")),
        exec_main_status=_to_int(raw.get("ExecMainStatus")), exec_main_code=raw.get("ExecMainCode", ""),
        exec_main_pid=_to_int(raw.get("ExecMainPID")), result=raw.get("Result", ""),
        control_group=raw.get("ControlGroup", ""), transient=raw.get("Transient") == "yes", raw=raw)


class SystemdError(EvidenceError, RuntimeError):
    """A systemctl call that failed, or a unit that would not stop."""

    default_kind = "systemd"


class StopTimeout(SystemdError):
    """The unit is still live after SIGTERM and SIGKILL; .state is the last UnitState seen."""

    default_kind = "timeout"

    def __init__(self, message, state):
        SystemdError.__init__(self, message, unit_state=state.summary())
        self.state = state


def show(unit: str, run=default_run, systemctl: str = "systemctl") -> UnitState:
    argv = [systemctl, "show", unit, "--no-pager"] + [f"--property={p}" for p in SHOW_PROPERTIES]
    rc, out, err = run(argv)
    if rc != 0:
        raise SystemdError(f"`{' '.join(argv[:3])}` failed (rc={rc}): {(err or '').strip()[-300:]}")
    return parse_show(unit, out)


def split_blocks(text: str) -> list[str]:
    """The per-unit blocks of a multi-unit `systemctl show` (KEY=VALUE lines; an empty line between units)."""
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def parse_show_many(units: list[str], text: str) -> dict:
    """{unit: UnitState} from `systemctl show U1 U2 ... -p Id -p ...`: one block per unit, in the order asked (a unit
    systemd does not know still gets its block, LoadState=not-found). Never --value: without the KEY= names the
    empty line between units is indistinguishable from a value, and values shift from one unit to the next.
    SystemdError when the blocks do not match the units (count, or an Id that names another asked unit)."""
    blocks = split_blocks(text)
    if len(blocks) != len(units):
        raise SystemdError(f"systemctl show answered {len(blocks)} block(s) for {len(units)} unit(s) {units}",
                           output=text[-600:])
    out = {}
    for unit, block in zip(units, blocks):
        state = parse_show(unit, block)
        shown = state.raw.get("Id", "")
        if shown and shown != unit and shown in units:
            raise SystemdError(f"systemctl show answered unit {shown} where {unit} was asked", output=text[-600:])
        out[unit] = state
    return out


def show_many(units: list[str], run=default_run, systemctl: str = "systemctl") -> dict:
    """{unit: UnitState} of several units in one `systemctl show` (parse_show_many)."""
    units = list(units)
    if not units:
        return {}
    argv = [systemctl, "show", *units, "--no-pager"] + [f"--property={p}" for p in SHOW_PROPERTIES]
    rc, out, err = run(argv)
    if rc != 0:
        raise SystemdError(f"`{systemctl} show {' '.join(units)}` failed (rc={rc}): {(err or '').strip()[-300:]}")
    return parse_show_many(units, out)


def systemctl(action: str, unit: str, run=default_run, no_block: bool = True) -> None:
    argv = ["systemctl", action] + (["--no-block"] if no_block else []) + [unit]
    rc, _out, err = run(argv)
    if rc != 0:
        raise SystemdError(f"`{' '.join(argv)}` failed (rc={rc}): {err.strip()[-300:]}")


def stop_and_wait(unit: str, run=default_run, timeout: float = 15.0, clock=time.monotonic, sleep=time.sleep,
                  poll: float = 0.1) -> bool:
    """Stop the unit if there is anything to stop, bounded: `systemctl stop --no-block` (SIGTERM), `systemctl kill
    --signal=SIGKILL` after `timeout`, StopTimeout 5 s later; a failed unit is reset so its name is free, and a
    transient --collect unit is given up to 3 s to unload. The stop/kill/reset calls' own exit codes are not checked:
    the unit's state, polled through show(), is the judge. -> whether the unit was live."""
    state = show(unit, run)
    if state.gone:
        return False
    was_live = state.live
    deadline = clock() + timeout
    killed = False
    if was_live:
        run(["systemctl", "stop", "--no-block", unit])
        while True:
            state = show(unit, run)
            if not state.live:
                break
            if clock() >= deadline:
                if killed:
                    raise StopTimeout("unit %s still %s after SIGTERM and SIGKILL" % (unit, state.active_state),
                                      state)
                run(["systemctl", "kill", "--signal=SIGKILL", unit])
                killed = True
                deadline = clock() + 5.0
            sleep(poll)
    if state.active_state == "failed":
        run(["systemctl", "reset-failed", unit])
    unload_by = min(deadline, clock() + 3.0)
    while state.loaded and clock() < unload_by:
        sleep(poll)
        state = show(unit, run)
    return was_live


def journal_argv(unit: str, invocation_id: str, lines: int) -> list[str]:
    """This invocation's lines: the process's output (_SYSTEMD_INVOCATION_ID) OR systemd's own messages about
    it (INVOCATION_ID, e.g. 'Main process exited, code=exited, status=1/FAILURE')."""
    if invocation_id:
        return ["journalctl", "--no-pager", "-q", "-o", "short-iso", "-n", str(lines),
                f"_SYSTEMD_INVOCATION_ID={invocation_id}", "+", f"INVOCATION_ID={invocation_id}"]
    return ["journalctl", "--no-pager", "-q", "-o", "short-iso", "-n", str(lines), "-u", unit]


def journal(unit: str, invocation_id: str, lines: int = 30, run=default_run) -> list[str]:
    """The last `lines` non-empty lines of this invocation (or, with invocation_id "", of the unit by name: the tail
    of a unit whose invocation is unknown or gone); a failed journalctl is one line saying so."""
    rc, out, err = run(journal_argv(unit, invocation_id, lines))
    if rc != 0:
        return [f"(journalctl failed rc={rc}: {err.strip()[-200:]})"]
    return [ln for ln in out.splitlines() if ln.strip()]


# ---------------------------------------------------------------- processes and sockets (Linux /proc)
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")  # v2, hybrid, v1


def cgroup_pids(control_group: str, cgroup_root: str | None = None) -> set[int] | None:
    """All pids in a unit's cgroup (recursive; unified or v1 name=systemd hierarchy); None when unreadable."""
    if not control_group:
        return None
    roots = (cgroup_root,) if cgroup_root else CGROUP_ROOTS
    base = next((b for b in (os.path.join(r, control_group.lstrip("/")) for r in roots) if os.path.isdir(b)), None)
    if base is None:
        return None
    pids: set[int] = set()
    for dirpath, _dirs, files in os.walk(base):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                    pids.update(int(x) for x in fh.read().split())
            except OSError:
                continue
    return pids


def descendants(root_pid: int, proc: str = "/proc") -> set[int]:
    """root_pid and every process below it (by PPid)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(name))
    out, todo = set(), [root_pid]
    while todo:
        pid = todo.pop()
        if pid in out or pid <= 0:
            continue
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


def unit_pids(state: UnitState) -> set[int]:
    pids = cgroup_pids(state.control_group)
    if pids:
        return pids
    return descendants(state.main_pid) if state.main_pid > 0 else set()


def _listen_inodes(port: int, proc: str = "/proc") -> set[int]:
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(proc, "net", name)) as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    if len(parts) < 10 or parts[3] != "0A":  # 0A = LISTEN
                        continue
                    if int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(int(parts[9]))
        except OSError:
            continue
    return inodes


def listening_pids(port: int, proc: str = "/proc") -> dict:
    """{"pids": set of pids holding a LISTEN socket on port, "unreadable": pids whose fds we could not read,
    "sockets": number of listening sockets}."""
    inodes = _listen_inodes(port, proc)
    found: set[int] = set()
    unreadable = 0
    if inodes:
        wanted = {f"socket:[{i}]" for i in inodes}
        for name in os.listdir(proc):
            if not name.isdigit():
                continue
            fd_dir = os.path.join(proc, name, "fd")
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                unreadable += 1
                continue
            for fd in fds:
                try:
                    if os.readlink(os.path.join(fd_dir, fd)) in wanted:
                        found.add(int(name))
                        break
                except OSError:
                    continue
    return {"pids": found, "sockets": len(inodes), "unreadable": unreadable}


# ---------------------------------------------------------------- many units at once; a process's unit and owner
def parse_show_blocks(text: str) -> list[dict]:
    """`systemctl show A B ...` output -> one {KEY: VALUE} dict per unit, in the order systemctl printed them
    (split_blocks). A key given twice (ExecStart of a unit with several) keeps every value, joined by "\\n"."""
    out = []
    for block in split_blocks(text):
        cur = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                key = key.strip()
                cur[key] = cur[key] + "\n" + value.strip() if key in cur else value.strip()
        out.append(cur)
    return out


def show_units(units, properties, run=default_run, timeout=30.0) -> list[dict]:
    """The `properties` of each of `units` in one `systemctl show` call (Id always included) -> [{KEY: VALUE}]."""
    if not units:
        return []
    props = ["Id"] + [p for p in properties if p != "Id"]
    argv = ["systemctl", "show", "--no-pager"] + [f"--property={p}" for p in props] + list(units)
    rc, out, err = run(argv, timeout=timeout)
    if rc != 0:
        raise SystemdError(f"`systemctl show` of {len(units)} units failed (rc={rc}): {(err or '').strip()[-300:]}")
    return parse_show_blocks(out)


def service_names(run=default_run) -> list[str]:
    """Every service unit systemd knows: loaded ones (`list-units --all`) and unit files not loaded now
    (`list-unit-files`), templates without an instance (foo@.service) left out; sorted."""
    names = set()
    for argv in (["systemctl", "list-units", "--all", "--type=service", "--plain", "--no-legend", "--no-pager"],
                 ["systemctl", "list-unit-files", "--type=service", "--no-legend", "--no-pager"]):
        rc, out, err = run(argv)
        if rc != 0:
            raise SystemdError(f"`{' '.join(argv[:2])}` failed (rc={rc}): {(err or '').strip()[-300:]}")
        for line in out.splitlines():
            parts = line.split()
            name = next((p for p in parts if p.endswith(".service")), "")
            if name and not name.endswith("@.service"):
                names.add(name)
    return sorted(names)


def exec_start_argvs(value: str) -> list[str]:
    """The command lines of an ExecStart property as `systemctl show` prints it, one per ExecStart:
    "{ path=/usr/bin/x ; argv[]=/usr/bin/x -a b ; ignore_errors=no ; ... }" -> ["/usr/bin/x -a b"]."""
    out = []
    for entry in (value or "").split("\n"):
        start = entry.find("argv[]=")
        if start < 0:
            continue
        rest = entry[start + len("argv[]="):]
        end = rest.find(" ; ignore_errors=")
        out.append((rest if end < 0 else rest[:end]).strip())
    return out


def pid_unit(pid: int, proc: str = "/proc") -> str:
    """The systemd unit (foo.service) or scope (session-3.scope: a login session) a process belongs to, from its
    cgroup path; "" when unreadable or in none."""
    try:
        with open(os.path.join(proc, str(pid), "cgroup")) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return ""
    # v2 "0::/system.slice/x.service", v1 "1:name=systemd:/system.slice/x.service"; the innermost unit wins
    for line in sorted(lines, key=lambda ln: not ln.startswith("0::")):
        path = line.split(":", 2)[-1]
        units = [c for c in path.split("/") if c.endswith((".service", ".scope"))]
        if units:
            return units[-1]
    return ""


def process_info(pid: int, proc: str = "/proc") -> dict:
    """{pid, unit, user, cmdline} of a live process ("" for what cannot be read; user falls back to the uid)."""
    info = {"pid": pid, "unit": pid_unit(pid, proc), "user": "", "cmdline": ""}
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as fh:
            info["cmdline"] = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        with open(os.path.join(proc, str(pid), "status")) as fh:
            uid = next((ln.split()[1] for ln in fh if ln.startswith("Uid:")), "")
    except OSError:
        return info
    try:
        info["user"] = pwd.getpwuid(int(uid)).pw_name
    except (KeyError, ValueError):
        info["user"] = uid
    return info
