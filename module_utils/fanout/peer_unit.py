# -*- coding: utf-8 -*-
"""Lifecycle of the fleet peer server (module_utils/fanout/peer_server.py) under a transient systemd unit, and the
tiny client the fetcher uses to read a peer (peer_health, peer_index).

started: a previous run's server (its token is stale) is stopped; run_dir (0700) gets the server's and hf_verify's
source - read from the module_utils this code was shipped with, so it works inside an AnsiballZ payload - and
token.sha256 (0600); `systemd-run --unit=<unit> --collect -p Type=exec -p RuntimeMaxSec=<lifetime + 30>` starts
it, and GET /health with the token must answer 200 from the unit's own MainPID within wait_timeout, else the unit is
stopped and the journal tail and the last probe are the evidence. stopped: the unit is stopped (bounded: SIGTERM,
then SIGKILL), its stats are read and run_dir's files are removed. The unit's state, its bounded stop and its journal
come from module_utils/systemd/unit.py; this file turns their failures into PeerError with model_peer's evidence.

Stdlib only. Every function that runs a command takes `run(argv) -> (rc, stdout, stderr)` so tests inject a fake.
"""
from __future__ import absolute_import, division, print_function

import hashlib
import http.client
import ipaddress
import json
import os
import re
import stat
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import quote

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.fanout import peer_server as _server_mod
from ansible.module_utils.hf import verify as _verify_mod
from ansible.module_utils.systemd import unit as systemd_unit
from ansible.module_utils.shipping.source import SourceError, module_source

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
UNIT_RE = re.compile(r"[A-Za-z0-9_.@][A-Za-z0-9_.@-]*\Z")
SERVER_SCRIPT = "model_peer_server.py"
VERIFY_SCRIPT = "hf_verify.py"
TOKEN_FILE = "token.sha256"
STATS_FILE = "stats.json"
OURS = (SERVER_SCRIPT, VERIFY_SCRIPT, TOKEN_FILE, STATS_FILE)
OURS_TMP = re.compile(r"(%s)\.tmp\.\d+\Z" % "|".join(re.escape(n) for n in OURS))
JOURNAL_LINES = 40  # the unit's journal tail in a failed start's evidence
# The unit's properties in a failure's evidence (unit_state), as systemctl printed them, MainPID as an int.
EVIDENCE_PROPS = ("LoadState", "ActiveState", "SubState", "MainPID", "Transient", "Result", "ExecMainCode",
                  "ExecMainStatus")
DEFAULTS = {"state": "started", "port": 8095, "lifetime": 7200, "unit": "sglang-model-peer",
            "run_dir": "/run/sglang-model-peer", "wait_timeout": 20, "bundle_dir": None, "python": None}


class PeerError(EvidenceError):
    """A failure with its evidence (a dict for fail_json)."""

    default_kind = "peer"

    def __init__(self, msg, **evidence):
        EvidenceError.__init__(self, msg, evidence=evidence)


# -- the client --------------------------------------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # the token must not follow a redirect
        return None


def _opener():
    """No proxy (peers are on the fleet network, and a host's http_proxy is for the Hub), no redirects."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def peer_url(bind, port):
    host = str(ipaddress.ip_address(bind))
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def file_url(url, model, path):
    """Where a peer at `url` serves `path` of `model`."""
    return "%s/files/%s/%s" % (url.rstrip("/"), quote(model, safe=""), quote(path, safe="/"))


def _get_json(url, token, timeout, limit=64 << 20):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer %s" % token, "Accept": "application/json"})
    try:
        with _opener().open(req, timeout=timeout) as resp:
            status = resp.status
            body = resp.read(limit + 1)
    except urllib.error.HTTPError as err:
        code = err.headers.get("X-Error-Code") if err.headers is not None else None
        err.close()
        raise PeerError("%s answered HTTP %d%s" % (url, err.code, " (%s)" % code if code else ""), url=url,
                        status=err.code, error_code=code)
    except urllib.error.URLError as err:
        raise PeerError("%s: %s" % (url, err.reason), url=url)
    except (OSError, http.client.HTTPException, ValueError) as err:  # timeouts, resets, a bad status line
        raise PeerError("%s: %s: %s" % (url, type(err).__name__, err), url=url)
    if status != 200:
        raise PeerError("%s answered HTTP %d" % (url, status), url=url, status=status)
    if len(body) > limit:
        raise PeerError("%s: answer larger than %d bytes" % (url, limit), url=url)
    try:
        data = json.loads(body.decode("utf-8"))
    except ValueError as err:
        raise PeerError("%s: not JSON (%s): %r" % (url, err, body[:120]), url=url)
    if not isinstance(data, dict):
        raise PeerError("%s: JSON is not an object: %r" % (url, body[:120]), url=url)
    return data


def peer_health(url, token, timeout=5):
    """GET <url>/health -> {"ok", "models", "pid"}; PeerError on any failure."""
    data = _get_json(url.rstrip("/") + "/health", token, timeout)
    if data.get("ok") is not True:
        raise PeerError("%s/health: not ok: %r" % (url, data), url=url)
    return data


def peer_index(url, model, token, timeout=10):
    """GET <url>/index/<model> -> {"model", "repo_id", "repo_type", "revision", "files": {path: {"size",
    "sha256"}}, "progress", "active"}; PeerError on any failure."""
    data = _get_json("%s/index/%s" % (url.rstrip("/"), quote(model, safe="")), token, timeout)
    if data.get("model") != model or not isinstance(data.get("files"), dict):
        raise PeerError("%s: not an index of %s: %r" % (url, model, sorted(data)[:10]), url=url)
    return data


# -- input ---------------------------------------------------------------------------------------------------------

def validate(params):
    """A normalised copy of the module's parameters; PeerError (before anything runs) on bad input."""
    p = dict(DEFAULTS)
    p.update(dict((k, v) for k, v in params.items() if v is not None))
    if p["state"] not in ("started", "stopped"):
        raise PeerError("state must be started or stopped, got %r" % p["state"])
    if not UNIT_RE.match(str(p["unit"])):
        raise PeerError("unit %r: want [A-Za-z0-9_.@-]+, not starting with '-'" % p["unit"])
    run_dir = str(p["run_dir"])
    if not os.path.isabs(run_dir) or os.path.normpath(run_dir) == "/":
        raise PeerError("run_dir must be an absolute path of its own, got %r" % run_dir)
    p["run_dir"] = os.path.normpath(run_dir)
    if p["state"] == "stopped":
        return p
    missing = [k for k in ("bind", "root", "models", "token") if not p.get(k)]
    if missing:
        raise PeerError("state=started needs %s" % ", ".join(missing))
    try:
        ip = ipaddress.ip_address(str(p["bind"]))
    except ValueError:
        raise PeerError("bind must be an IP address literal (this host's fleet network address), got %r" % p["bind"])
    if ip.is_unspecified:
        raise PeerError("refusing bind=%s (a wildcard address): bind the peer server to this host's fleet network "
                        "address, e.g. the address the other hosts reach it at" % p["bind"])
    p["bind"] = str(ip)
    if not 1 <= int(p["port"]) <= 65535:
        raise PeerError("port must be 1-65535, got %r" % p["port"])
    for key in ("root", "bundle_dir", "python"):
        if p.get(key) and not os.path.isabs(str(p[key])):
            raise PeerError("%s must be an absolute path, got %r" % (key, p[key]))
    models = list(p["models"])
    bad = [m for m in models if not NAME_RE.match(str(m))]
    if bad:
        raise PeerError("bad model name(s) %s: want [A-Za-z0-9][A-Za-z0-9._-]* (a directory name under root)" % bad)
    if len(set(models)) != len(models):
        raise PeerError("models names a model twice: %s" % models)
    token = str(p["token"])
    if len(token) < 16:
        raise PeerError("token must be at least 16 characters, got %d" % len(token))
    if any(c.isspace() or ord(c) < 33 or ord(c) > 126 for c in token):
        raise PeerError("token must be printable ASCII without spaces (it travels in an HTTP header)")
    if int(p["lifetime"]) < 1:
        raise PeerError("lifetime must be >= 1 second, got %r" % p["lifetime"])
    if int(p["wait_timeout"]) < 1:
        raise PeerError("wait_timeout must be >= 1 second, got %r" % p["wait_timeout"])
    p["python"] = p.get("python") or sys.executable
    return p


# -- the run dir ---------------------------------------------------------------------------------------------------

def server_sources():
    try:
        return {SERVER_SCRIPT: module_source(_server_mod), VERIFY_SCRIPT: module_source(_verify_mod)}
    except SourceError as exc:
        raise PeerError(exc.message, **exc.evidence) from exc


def _ours(name):
    return name in OURS or bool(OURS_TMP.match(name))


def _write(path, text, mode=0o600):
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def check_run_dir(run_dir):
    """True when run_dir exists; PeerError when it is not a directory of ours holding only our files."""
    try:
        st = os.lstat(run_dir)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise PeerError("run_dir %s exists and is not a directory (a symlink?)" % run_dir)
    if st.st_uid != os.geteuid():
        raise PeerError("run_dir %s belongs to uid %d, not to us (uid %d)" % (run_dir, st.st_uid, os.geteuid()))
    foreign = sorted(n for n in os.listdir(run_dir) if not _ours(n))
    if foreign:
        raise PeerError("run_dir %s holds files model_peer did not write (%s): give the peer server a directory of "
                        "its own" % (run_dir, ", ".join(foreign[:10])))
    return True


def prepare_run_dir(run_dir, token, sources=None):
    """run_dir (0700) with the server's sources and sha256(token) (0600); a previous stats file is removed.
    -> {"server", "token_file", "stats"} paths."""
    if check_run_dir(run_dir):
        os.chmod(run_dir, 0o700)
    else:
        os.makedirs(run_dir, mode=0o700)
        os.chmod(run_dir, 0o700)
    stats = os.path.join(run_dir, STATS_FILE)
    if os.path.lexists(stats):
        os.unlink(stats)
    for name, text in (sources or server_sources()).items():
        _write(os.path.join(run_dir, name), text)
    token_file = os.path.join(run_dir, TOKEN_FILE)
    _write(token_file, hashlib.sha256(token.encode("utf-8")).hexdigest() + "\n")
    return {"server": os.path.join(run_dir, SERVER_SCRIPT), "token_file": token_file, "stats": stats}


def read_stats(run_dir):
    try:
        with open(os.path.join(run_dir, STATS_FILE)) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def clear_run_dir(run_dir):
    """Remove our files from run_dir, then run_dir itself when nothing else is left. -> what was removed."""
    try:
        st = os.lstat(run_dir)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        return []
    removed = []
    for name in os.listdir(run_dir):
        if _ours(name):
            os.unlink(os.path.join(run_dir, name))
            removed.append(name)
    try:
        os.rmdir(run_dir)
        removed.append(run_dir)
    except OSError:
        pass  # someone else's files are in it: they stay, and so does the directory
    return removed


# -- systemd -------------------------------------------------------------------------------------------------------

def default_run(argv):
    """systemctl, systemd-run and journalctl, 30 s each."""
    return systemd_unit.default_run(argv, timeout=30.0)


def server_argv(p, python, paths):
    argv = [python, "-B", paths["server"], "--bind", p["bind"], "--port", str(int(p["port"])), "--root", p["root"]]
    for model in p["models"]:
        argv += ["--model", model]
    if p.get("bundle_dir"):
        argv += ["--bundle-dir", p["bundle_dir"]]
    return argv + ["--token-sha256-file", paths["token_file"], "--lifetime", str(int(p["lifetime"])),
                   "--stats", paths["stats"]]


def systemd_run_argv(p, paths):
    """systemd-run of the server: the server's own --lifetime is the first bound, RuntimeMaxSec the backstop."""
    return ["systemd-run", "--unit=%s" % p["unit"], "--collect", "--property=Type=exec",
            "--property=RuntimeMaxSec=%d" % (int(p["lifetime"]) + 30)] + server_argv(p, p["python"], paths)


def unit_evidence(state):
    """A UnitState as model_peer's evidence: EVIDENCE_PROPS as systemctl printed them ("" if not), MainPID an int."""
    shown = dict((k, state.raw.get(k, "")) for k in EVIDENCE_PROPS)
    shown["MainPID"] = state.main_pid
    return shown


def unit_state(unit, run):
    """systemd_unit.show, its failure a PeerError."""
    try:
        return systemd_unit.show(unit, run=run)
    except systemd_unit.SystemdError as err:
        raise PeerError(str(err))


def check_ours(unit, state):
    if state.loaded and not state.transient:
        raise PeerError("unit %s exists and is not a transient unit (Transient=%s): it is not a model_peer server; "
                        "choose another unit name" % (unit, state.raw.get("Transient") or "?"),
                        unit_state=unit_evidence(state))


def stop_unit(unit, run, timeout=15.0, clock=time.monotonic, sleep=time.sleep, poll=0.1):
    """systemd_unit.stop_and_wait (SIGTERM, SIGKILL after `timeout`, then give up), its failure a PeerError.
    -> whether the unit was live."""
    try:
        return systemd_unit.stop_and_wait(unit, run, timeout=timeout, clock=clock, sleep=sleep, poll=poll)
    except systemd_unit.StopTimeout as err:
        raise PeerError(str(err), unit_state=unit_evidence(err.state))
    except systemd_unit.SystemdError as err:
        raise PeerError(str(err))


def wait_for_health(url, token, unit, run, timeout, probe=None, clock=time.monotonic, sleep=time.sleep,
                    poll=0.2):
    """Until GET /health with the token answers 200 from the unit's MainPID (bounded by `timeout`): -> {"pid",
    "health"}. PeerError (evidence: the last probe, the unit's state) when the unit dies or time runs out."""
    probe = probe or peer_health
    deadline = clock() + timeout
    last = "no answer yet"
    while True:
        state = unit_state(unit, run)
        if not state.live:
            raise PeerError("unit %s is %s (%s) before %s/health answered: %s" % (
                unit, state.active_state or "gone", state.result or "?", url, last), probe=last,
                unit_state=unit_evidence(state))
        try:
            health = probe(url, token, timeout=max(0.5, min(2.0, deadline - clock())))
        except PeerError as err:
            last = str(err)
        else:
            pid = health.get("pid")
            if state.main_pid and pid == state.main_pid:
                return {"pid": pid, "health": health}
            last = "%s/health answered from pid %r, not from the unit's MainPID %r" % (url, pid, state.main_pid)
        if clock() >= deadline:
            raise PeerError("%s/health did not answer 200 within %ss: %s" % (url, timeout, last), probe=last,
                            unit_state=unit_evidence(state))
        sleep(poll)


# -- the module's logic --------------------------------------------------------------------------------------------

def manage(params, check_mode=False, run=default_run, systemd_dir="/run/systemd/system", probe=None,
           clock=time.monotonic, sleep=time.sleep, stop_timeout=15.0):
    """The model_peer module: -> its result dict; PeerError with evidence on failure."""
    p = validate(params)
    unit, run_dir = p["unit"], p["run_dir"]
    has_systemd = os.path.isdir(systemd_dir)
    if p["state"] == "stopped":
        return _stop(p, check_mode, run, has_systemd, clock, sleep, stop_timeout)
    url = peer_url(p["bind"], int(p["port"]))
    what = "%s serving %s from %s on %s for %ds" % (unit, ", ".join(p["models"]), p["root"], url, int(p["lifetime"]))
    if not has_systemd:
        raise PeerError("this host does not run systemd (%s is missing): model_peer starts the peer server as a "
                        "transient systemd unit" % systemd_dir)
    if check_mode:
        return {"changed": True, "url": url, "unit": unit, "pid": 0, "msg": "check mode: would start %s" % what}
    check_ours(unit, unit_state(unit, run))
    check_run_dir(run_dir)
    stopped_old = stop_unit(unit, run, timeout=stop_timeout, clock=clock, sleep=sleep)  # its token is stale
    paths = prepare_run_dir(run_dir, p["token"])
    argv = systemd_run_argv(p, paths)
    rc, out, err = run(argv)
    if rc != 0:
        journal = systemd_unit.journal(unit, "", JOURNAL_LINES, run)
        _cleanup(unit, run_dir, run, clock, sleep, stop_timeout)
        raise PeerError("systemd-run of %s failed (rc=%d): %s" % (unit, rc, (err or out or "").strip()[-400:]),
                        argv=argv, journal=journal)
    try:
        got = wait_for_health(url, p["token"], unit, run, int(p["wait_timeout"]), probe=probe, clock=clock,
                              sleep=sleep)
    except PeerError as failure:
        stop_error = _cleanup(unit, run_dir, run, clock, sleep, stop_timeout)
        evidence = dict(failure.evidence, journal=systemd_unit.journal(unit, "", JOURNAL_LINES, run), argv=argv)
        if stop_error:
            evidence["stop_error"] = stop_error
        raise PeerError("peer server %s did not come up: %s" % (unit, failure), **evidence)
    return {"changed": True, "url": url, "unit": unit, "pid": got["pid"],
            "msg": "started %s (pid %d)%s" % (what, got["pid"], ", after stopping the previous one" if stopped_old
                                              else "")}


def _cleanup(unit, run_dir, run, clock, sleep, stop_timeout):
    """Stop the unit and clear run_dir after a failed start; -> the stop's error, if any."""
    try:
        stop_unit(unit, run, timeout=stop_timeout, clock=clock, sleep=sleep)
    except PeerError as err:
        return str(err)
    clear_run_dir(run_dir)
    return None


def _stop(p, check_mode, run, has_systemd, clock, sleep, stop_timeout):
    unit, run_dir = p["unit"], p["run_dir"]
    running = False
    if has_systemd:
        state = unit_state(unit, run)
        check_ours(unit, state)
        running = state.live
    if check_mode:
        return {"changed": running, "stats": read_stats(run_dir),
                "msg": "check mode: would stop %s" % unit if running else "%s is not running" % unit}
    if has_systemd:
        running = stop_unit(unit, run, timeout=stop_timeout, clock=clock, sleep=sleep)
    stats = read_stats(run_dir)
    clear_run_dir(run_dir)
    served = sum(v for v in (stats.get("bytes_served") or {}).values() if isinstance(v, int))
    msg = ("stopped %s" % unit if running else "%s was not running" % unit) + \
        (" (it served %d bytes in %d requests)" % (served, stats.get("requests") or 0) if stats else "")
    return {"changed": running, "stats": stats, "msg": msg}
