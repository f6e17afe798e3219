"""module_utils/fanout/peer_unit.py and library/model_peer.py: input refused before any command, the systemd-run argv,
check mode, the source shipped into run_dir (also out of a zip, as inside an AnsiballZ payload), start and stop
through a fake systemd that runs the real server, failure evidence and the bounded stop. The peer client (peer_url,
peer_health, peer_index) is tested in tests/unit/fanout/test_peer_client.py."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from ansible.module_utils.fanout import peer_unit as mp
from ansible.module_utils.hf.hub import RemoteFile
from ansible.module_utils.hf.verify import Manifest
from tests.helpers.ansible_module import module_command

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "fleet-token-0123456789"


def params(tmp_path, **kw):
    p = {"state": "started", "bind": "127.0.0.1", "port": 18095, "root": str(tmp_path / "root"),
         "models": ["m1"], "bundle_dir": None, "token": TOKEN, "lifetime": 600, "unit": "test-model-peer",
         "run_dir": str(tmp_path / "run"), "python": sys.executable, "wait_timeout": 20}
    p.update(kw)
    return p


def make_model(tmp_path):
    d = tmp_path / "root" / "m1"
    (d / ".hf_model").mkdir(parents=True)
    data = os.urandom(12345)
    (d / "w.bin").write_bytes(data)
    man = Manifest(str(d / ".hf_model" / "manifest.json"), "org/m1", "c" * 40)
    digest = hashlib.sha256(data).hexdigest()
    man.record(RemoteFile("w.bin", len(data), sha256=digest), str(d / "w.bin"), digest, "c" * 40)
    man.save()
    return data


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeSystemd:
    """systemctl / systemd-run / journalctl for one transient unit. systemd-run really runs the command (spawn=True)
    with its output in a file the fake journal returns; the unit's state follows the process."""

    def __init__(self, tmp_path, spawn=True, state=None, stops=True):
        self.calls = []
        self.spawn = spawn
        self.stops = stops
        self.proc = None
        self.log = tmp_path / "unit.log"
        self.state = dict(state or {"LoadState": "not-found", "ActiveState": "inactive", "Transient": "no",
                                    "MainPID": "0", "Result": "success"})

    def _refresh(self):
        if self.proc is not None and self.proc.poll() is not None:
            rc = self.proc.returncode
            self.proc = None
            if rc == 0:  # --collect: gone once inactive
                self.state.update(LoadState="not-found", ActiveState="inactive", MainPID="0", Result="success")
            else:
                self.state.update(ActiveState="failed", MainPID="0", Result="exit-code")

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[:2] == ["systemctl", "show"]:
            self._refresh()
            return 0, "".join("%s=%s\n" % kv for kv in self.state.items()), ""
        if argv[:2] == ["systemctl", "stop"]:
            if self.proc is not None:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=20)
                self._refresh()
            elif self.stops:
                self.state.update(LoadState="not-found", ActiveState="inactive", MainPID="0")
            return 0, "", ""
        if argv[:2] == ["systemctl", "kill"]:
            self.state.update(ActiveState="failed", MainPID="0", Result="signal")
            return 0, "", ""
        if argv[:2] == ["systemctl", "reset-failed"]:
            self.state.update(LoadState="not-found", ActiveState="inactive")
            return 0, "", ""
        if argv[0] == "systemd-run":
            cmd = argv[next(i for i, a in enumerate(argv) if i > 0 and not a.startswith("--")):]
            self.state.update(LoadState="loaded", ActiveState="active", Transient="yes", Result="success")
            if self.spawn:
                with open(self.log, "w") as out:
                    self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
                self.state["MainPID"] = str(self.proc.pid)
            return 0, "Running as unit: %s.service\n" % argv[1].split("=", 1)[1], ""
        if argv[0] == "journalctl":
            text = self.log.read_text() if self.log.exists() else ""
            return 0, "-- journal of the fake unit --\n" + text, ""
        raise AssertionError("unexpected command %r" % argv)

    def kinds(self):
        return [c[1] if c[0] == "systemctl" else c[0] for c in self.calls]

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def systemd_dir(tmp_path):
    d = tmp_path / "run-systemd-system"
    d.mkdir()
    return str(d)


# -- input ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, message", [
    ({"bind": "0.0.0.0"}, "wildcard"), ({"bind": "::"}, "wildcard"), ({"bind": "0:0::0"}, "wildcard"),
    ({"bind": "peer.example"}, "IP address literal"), ({"token": "short-token"}, "at least 16"),
    ({"token": "sixteen chars and space"}, "without spaces"), ({"models": ["m1", "../etc"]}, "bad model name"),
    ({"models": [".hidden"]}, "bad model name"), ({"models": ["m1", "m1"]}, "twice"), ({"models": []}, "models"),
    ({"lifetime": 0}, "lifetime"), ({"unit": "-x"}, "unit"), ({"unit": "a b"}, "unit"), ({"port": 0}, "port"),
    ({"run_dir": "/"}, "run_dir"), ({"run_dir": "relative"}, "run_dir"), ({"root": "models"}, "absolute"),
    ({"token": None}, "token"), ({"wait_timeout": 0}, "wait_timeout")])
def test_bad_input_fails_before_any_command(tmp_path, systemd_dir, override, message):
    fake = FakeSystemd(tmp_path)
    with pytest.raises(mp.PeerError) as err:
        mp.manage(params(tmp_path, **override), run=fake, systemd_dir=systemd_dir)
    assert message in str(err.value)
    assert fake.calls == [] and not (tmp_path / "run").exists()


def run_module(tmp_path, args, check_mode=False):
    """library/model_peer.py as Ansible runs it, with systemctl/systemd-run/journalctl on PATH logging any call."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir(exist_ok=True)
    calls = tmp_path / "calls.log"
    for name in ("systemctl", "systemd-run", "journalctl"):
        script = fakebin / name
        script.write_text("#!/bin/sh\necho \"%s $*\" >> %s\nexit 1\n" % (name, calls))
        script.chmod(0o755)
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode)}))
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH="%s:%s" % (fakebin, os.environ.get("PATH", "")))
    proc = subprocess.run(module_command("model_peer", argfile), env=env,
                          capture_output=True, text=True, timeout=60)
    return json.loads(proc.stdout.strip().splitlines()[-1]), (calls.read_text() if calls.exists() else "")


@pytest.mark.parametrize("override, message", [
    ({"bind": "0.0.0.0"}, "wildcard"), ({"token": "x" * 15}, "at least 16"), ({"models": ["a/b"]}, "bad model"),
    ({"bind": None}, "bind")])
def test_the_module_refuses_bad_input_without_running_anything(tmp_path, override, message):
    args = dict((k, v) for k, v in params(tmp_path, **override).items() if v is not None)
    result, calls = run_module(tmp_path, args)
    assert result.get("failed") and message in result["msg"], result
    assert calls == "" and not (tmp_path / "run").exists()
    assert TOKEN not in json.dumps(result)


def test_the_module_in_check_mode_runs_nothing(tmp_path):
    result, calls = run_module(tmp_path, params(tmp_path), check_mode=True)
    if os.path.isdir("/run/systemd/system"):
        assert not result.get("failed") and result["changed"] and result["msg"].startswith("check mode: would start")
    else:  # this machine has no systemd: a real run would fail, and so does check mode, clearly
        assert result.get("failed") and "does not run systemd" in result["msg"]
    assert calls == "" and not (tmp_path / "run").exists()


def test_check_mode_started_runs_no_command(tmp_path, systemd_dir):
    fake = FakeSystemd(tmp_path)
    result = mp.manage(params(tmp_path, models=["m1", "m2"]), check_mode=True, run=fake, systemd_dir=systemd_dir)
    assert result == {"changed": True, "url": "http://127.0.0.1:18095", "unit": "test-model-peer", "pid": 0,
                      "msg": "check mode: would start test-model-peer serving m1, m2 from %s on "
                             "http://127.0.0.1:18095 for 600s" % (tmp_path / "root")}
    assert fake.calls == [] and not (tmp_path / "run").exists()


def test_check_mode_stopped_only_reads_the_state(tmp_path, systemd_dir):
    for active, changed in (("active", True), ("inactive", False)):
        fake = FakeSystemd(tmp_path, state={"LoadState": "loaded" if changed else "not-found",
                                            "ActiveState": active, "Transient": "yes", "MainPID": "7"})
        result = mp.manage({"state": "stopped", "run_dir": str(tmp_path / "run")}, check_mode=True, run=fake,
                           systemd_dir=systemd_dir)
        assert result["changed"] is changed and fake.kinds() == ["show"]


def test_no_systemd_is_a_clear_failure(tmp_path):
    fake = FakeSystemd(tmp_path)
    with pytest.raises(mp.PeerError) as err:
        mp.manage(params(tmp_path), run=fake, systemd_dir=str(tmp_path / "absent"))
    assert "does not run systemd" in str(err.value) and fake.calls == []
    result = mp.manage({"state": "stopped", "run_dir": str(tmp_path / "run")}, run=fake,
                       systemd_dir=str(tmp_path / "absent"))
    assert result["changed"] is False and fake.calls == []


# -- the systemd-run argv and the run dir ---------------------------------------------------------------------------

def test_systemd_run_argv(tmp_path):
    p = mp.validate(params(tmp_path, models=["m1", "m2"], bundle_dir="/srv/bundles", lifetime=3600,
                           bind="fd00::0:5"))
    paths = {"server": "/run/x/model_peer_server.py", "token_file": "/run/x/token.sha256",
             "stats": "/run/x/stats.json"}
    assert mp.systemd_run_argv(p, paths) == [
        "systemd-run", "--unit=test-model-peer", "--collect", "--property=Type=exec", "--property=RuntimeMaxSec=3630",
        sys.executable, "-B", "/run/x/model_peer_server.py", "--bind", "fd00::5", "--port", "18095",
        "--root", str(tmp_path / "root"), "--model", "m1", "--model", "m2", "--bundle-dir", "/srv/bundles",
        "--token-sha256-file", "/run/x/token.sha256", "--lifetime", "3600", "--stats", "/run/x/stats.json"]
    p = mp.validate(params(tmp_path))
    argv = mp.systemd_run_argv(p, paths)
    assert "--bundle-dir" not in argv and argv[argv.index("--lifetime") + 1] == "600"


def test_prepare_run_dir_ships_both_sources_and_only_the_token_hash(tmp_path):
    run_dir = tmp_path / "run"
    paths = mp.prepare_run_dir(str(run_dir), TOKEN)
    assert (run_dir / "model_peer_server.py").read_text() == (ROOT / "module_utils/fanout/peer_server.py").read_text()
    assert (run_dir / "hf_verify.py").read_text() == (ROOT / "module_utils/hf/verify.py").read_text()
    assert (run_dir / "token.sha256").read_text() == hashlib.sha256(TOKEN.encode()).hexdigest() + "\n"
    assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    for name in ("model_peer_server.py", "hf_verify.py", "token.sha256"):
        assert stat.S_IMODE(os.stat(run_dir / name).st_mode) == 0o600
    assert paths == {"server": str(run_dir / "model_peer_server.py"), "token_file": str(run_dir / "token.sha256"),
                     "stats": str(run_dir / "stats.json")}
    assert not any(TOKEN in p.read_text() for p in run_dir.iterdir())
    (run_dir / "stats.json").write_text("{}")  # a previous run's stats do not survive a new start
    os.chmod(run_dir, 0o755)
    mp.prepare_run_dir(str(run_dir), TOKEN)
    assert not (run_dir / "stats.json").exists() and stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700


def test_run_dir_must_be_ours_alone(tmp_path, systemd_dir):
    shared = tmp_path / "run"
    shared.mkdir()
    (shared / "someone-elses.conf").write_text("x")
    fake = FakeSystemd(tmp_path)
    with pytest.raises(mp.PeerError) as err:
        mp.manage(params(tmp_path), run=fake, systemd_dir=systemd_dir)
    assert "someone-elses.conf" in str(err.value) and "systemd-run" not in fake.kinds() and "stop" not in fake.kinds()
    os.symlink(str(shared), str(tmp_path / "link"))
    with pytest.raises(mp.PeerError):
        mp.prepare_run_dir(str(tmp_path / "link"), TOKEN)
    (shared / "stats.json").write_text('{"requests": 3}')
    assert sorted(mp.clear_run_dir(str(shared))) == ["stats.json"]  # a foreign file keeps the directory
    assert sorted(os.listdir(shared)) == ["someone-elses.conf"]


def test_sources_ship_out_of_a_zip_as_in_an_ansiballz_payload(tmp_path):
    """The zip holds ansible/module_utils/{fanout/peer_unit,fanout/peer_server,hf/verify}.py and what peer_unit imports
    (systemd/unit, evidence/error, shipping/source), imported by zipimport with no module_utils on disk (-I -S: no site-packages, no
    cwd); then the shipped copy runs standalone from run_dir."""
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(payload, "w") as zf:
        zf.writestr("ansible/__init__.py", "")
        zf.writestr("ansible/module_utils/__init__.py", "")
        for name in ("fanout/__init__.py", "fanout/peer_unit.py", "fanout/peer_server.py", "hf/__init__.py",
                     "hf/verify.py", "systemd/__init__.py", "systemd/unit.py", "evidence/__init__.py",
                     "evidence/error.py", "shipping/__init__.py", "shipping/source.py"):
            zf.writestr("ansible/module_utils/" + name, (ROOT / "module_utils" / name).read_text())
    run_dir = tmp_path / "run"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from ansible.module_utils.fanout import peer_unit as m; "
            "print(type(m._server_mod.__loader__).__name__, m._server_mod.__file__); "
            "m.prepare_run_dir(sys.argv[2], sys.argv[3])")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(payload), str(run_dir), TOKEN],
                          capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("zipimporter ") and "payload.zip" in proc.stdout
    for name, src in (("model_peer_server.py", "fanout/peer_server.py"), ("hf_verify.py", "hf/verify.py")):
        assert (run_dir / name).read_bytes() == (ROOT / "module_utils" / src).read_bytes()
    data = make_model(tmp_path)
    ready = tmp_path / "ready.json"
    server = subprocess.Popen([sys.executable, "-I", "-B", str(run_dir / "model_peer_server.py"), "--bind",
                               "127.0.0.1", "--port", "0", "--root", str(tmp_path / "root"), "--model", "m1",
                               "--token-sha256-file", str(run_dir / "token.sha256"), "--lifetime", "60", "--stats",
                               str(run_dir / "stats.json"), "--ready-file", str(ready)], cwd="/")
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        url = "http://127.0.0.1:%d" % json.loads(ready.read_text())["port"]
        assert mp.peer_health(url, TOKEN)["pid"] == server.pid
        assert mp.peer_index(url, "m1", TOKEN)["files"]["w.bin"]["sha256"] == hashlib.sha256(data).hexdigest()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=20) == 0
    assert sorted(os.listdir(run_dir)) == ["hf_verify.py", "model_peer_server.py", "stats.json", "token.sha256"]


# -- start and stop through the fake systemd (the real server) ------------------------------------------------------

def test_start_serve_stop(tmp_path, systemd_dir):
    data = make_model(tmp_path)
    port = free_port()
    fake = FakeSystemd(tmp_path)
    try:
        result = mp.manage(params(tmp_path, port=port), run=fake, systemd_dir=systemd_dir)
        assert fake.proc is not None and result["pid"] == fake.proc.pid
        url = "http://127.0.0.1:%d" % port
        assert result["changed"] and result["url"] == url and result["unit"] == "test-model-peer"
        run_argv = [c for c in fake.calls if c[0] == "systemd-run"][0]
        paths = {"server": str(tmp_path / "run" / "model_peer_server.py"),
                 "token_file": str(tmp_path / "run" / "token.sha256"), "stats": str(tmp_path / "run" / "stats.json")}
        assert run_argv == mp.systemd_run_argv(mp.validate(params(tmp_path, port=port)), paths)
        idx = mp.peer_index(url, "m1", TOKEN)
        assert idx["files"] == {"w.bin": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}}
        with pytest.raises(mp.PeerError) as err:
            mp.peer_index(url, "m1", "another-token-0123456789")
        assert err.value.evidence["status"] == 401
        stopped = mp.manage({"state": "stopped", "unit": "test-model-peer", "run_dir": str(tmp_path / "run")},
                            run=fake, systemd_dir=systemd_dir)
        assert stopped["changed"] is True and fake.proc is None
        assert stopped["stats"]["requests"] == 3 and stopped["stats"]["unauthorized"] == 1
        assert stopped["stats"]["bytes_served"] == {"m1": 0}
        assert not (tmp_path / "run").exists()
        again = mp.manage({"state": "stopped", "unit": "test-model-peer", "run_dir": str(tmp_path / "run")},
                          run=fake, systemd_dir=systemd_dir)
        assert again == {"changed": False, "stats": {}, "msg": "test-model-peer was not running"}
    finally:
        fake.cleanup()


def test_a_previous_server_is_stopped_before_the_new_one_starts(tmp_path, systemd_dir):
    fake = FakeSystemd(tmp_path, spawn=False, state={"LoadState": "loaded", "ActiveState": "active",
                                                     "Transient": "yes", "MainPID": "4242"})

    def probe(url, token, timeout):
        fake.state["MainPID"] = "4343"
        return {"ok": True, "models": ["m1"], "pid": 4343}

    result = mp.manage(params(tmp_path), run=fake, systemd_dir=systemd_dir, probe=probe)
    kinds = fake.kinds()
    assert kinds.index("stop") < kinds.index("systemd-run") and result["pid"] == 4343
    assert "after stopping the previous one" in result["msg"]


def test_a_failed_systemd_run_is_reported_and_cleaned_up(tmp_path, systemd_dir):
    class Refusing(FakeSystemd):
        def __call__(self, argv):
            if argv[0] == "systemd-run":
                self.calls.append(list(argv))
                return 1, "", "Failed to start transient service unit: Unit test-model-peer.service already exists."
            return FakeSystemd.__call__(self, argv)

    fake = Refusing(tmp_path)
    with pytest.raises(mp.PeerError) as err:
        mp.manage(params(tmp_path), run=fake, systemd_dir=systemd_dir)
    assert "systemd-run of test-model-peer failed (rc=1)" in str(err.value) and "already exists" in str(err.value)
    assert err.value.evidence["journal"][0] == "-- journal of the fake unit --"
    assert err.value.evidence["argv"][0] == "systemd-run" and not (tmp_path / "run").exists()


def test_a_unit_that_is_not_ours_is_refused(tmp_path, systemd_dir):
    fake = FakeSystemd(tmp_path, state={"LoadState": "loaded", "ActiveState": "active", "Transient": "no",
                                        "MainPID": "1"})
    for p in (params(tmp_path), {"state": "stopped", "run_dir": str(tmp_path / "run")}):
        with pytest.raises(mp.PeerError) as err:
            mp.manage(p, run=fake, systemd_dir=systemd_dir)
        assert "not a transient unit" in str(err.value)
    assert fake.kinds() == ["show", "show"]


def test_a_server_that_dies_at_start_fails_with_its_journal(tmp_path, systemd_dir):
    make_model(tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # bound, not listening: the server cannot bind it, a probe is refused at once
    fake = FakeSystemd(tmp_path)
    t0 = time.monotonic()
    try:
        with pytest.raises(mp.PeerError) as err:
            mp.manage(params(tmp_path, port=taken.getsockname()[1]), run=fake, systemd_dir=systemd_dir)
    finally:
        taken.close()
        fake.cleanup()
    assert time.monotonic() - t0 < 10  # noticed by the unit's death, not by the 20 s wait
    ev = err.value.evidence
    assert "did not come up" in str(err.value) and "failed" in str(err.value)
    assert any("Address already in use" in line for line in ev["journal"]), ev["journal"]
    assert ev["unit_state"]["ActiveState"] == "failed" and ev["probe"]
    assert "reset-failed" in fake.kinds() and not (tmp_path / "run").exists()


def test_health_from_another_process_is_not_readiness(tmp_path):
    fake = FakeSystemd(tmp_path, spawn=False, state={"LoadState": "loaded", "ActiveState": "active",
                                                     "Transient": "yes", "MainPID": "100"})
    now = [0.0]

    def sleep(s):
        now[0] += s

    with pytest.raises(mp.PeerError) as err:
        mp.wait_for_health("http://127.0.0.1:1", TOKEN, "u", fake, 5, probe=lambda u, t, timeout: {"pid": 200},
                           clock=lambda: now[0], sleep=sleep)
    assert "within 5s" in str(err.value) and "pid 200" in str(err.value) and "MainPID 100" in str(err.value)
    assert 5.0 <= now[0] < 5.5


def test_stop_is_bounded_and_escalates(tmp_path):
    now = [0.0]

    def sleep(s):
        now[0] += s

    fake = FakeSystemd(tmp_path, spawn=False, stops=False,
                       state={"LoadState": "loaded", "ActiveState": "deactivating", "Transient": "yes"})
    assert mp.stop_unit("u", fake, timeout=15, clock=lambda: now[0], sleep=sleep) is True
    kinds = fake.kinds()
    assert kinds.index("stop") < kinds.index("kill") < kinds.index("reset-failed")
    assert ["systemctl", "kill", "--signal=SIGKILL", "u"] in fake.calls and 15 <= now[0] < 16

    class Stuck(FakeSystemd):
        def __call__(self, argv):
            out = FakeSystemd.__call__(self, argv)
            self.state.update(ActiveState="deactivating")
            return out

    now[0] = 0.0
    stuck = Stuck(tmp_path, spawn=False, stops=False,
                  state={"LoadState": "loaded", "ActiveState": "active", "Transient": "yes"})
    with pytest.raises(mp.PeerError) as err:
        mp.stop_unit("u", stuck, timeout=15, clock=lambda: now[0], sleep=sleep)
    assert "after SIGTERM and SIGKILL" in str(err.value) and 20 <= now[0] < 21
    gone = FakeSystemd(tmp_path, spawn=False)
    assert mp.stop_unit("u", gone) is False and gone.kinds() == ["show"]


def test_module_docs_match_the_argument_spec():
    import ast

    import yaml
    src = (ROOT / "library" / "model_peer.py").read_text()
    tree = ast.parse(src)
    docs = dict((t.targets[0].id, yaml.safe_load(t.value.value)) for t in tree.body
                if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES",
                                                                                      "RETURN"))
    spec = next(t.value for t in tree.body if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") == "ARGS")
    args = dict((kw.arg, dict((k.arg, ast.literal_eval(k.value)) for k in kw.value.keywords)) for kw in spec.keywords)
    options = docs["DOCUMENTATION"]["options"]
    assert docs["DOCUMENTATION"]["module"] == "model_peer" and set(options) == set(args)
    for name, opt in options.items():
        assert opt["type"] == args[name]["type"], name
        assert opt.get("default") == args[name].get("default"), name
        assert opt.get("choices") == args[name].get("choices"), name
        assert (name == "token") == bool(args[name].get("no_log")), name
        if name in mp.DEFAULTS and args[name].get("default") is not None:
            assert mp.DEFAULTS[name] == args[name]["default"], name
    assert set(docs["RETURN"]) == {"msg", "url", "unit", "pid", "stats"}
    assert [e["model_peer"].get("state", "started") for e in docs["EXAMPLES"]] == ["started", "stopped"]
