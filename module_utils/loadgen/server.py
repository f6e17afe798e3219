# -*- coding: utf-8 -*-
"""The server under test, as the bench sees it from the target (stdlib only): whether it serves, what it serves, and
the systemd unit that runs it.

check_serving() proves the server answers /health_generate (or /health) 200 and lists a model before anything is
measured; served_model() and server_tokenizer() read what it serves (/v1/models, /server_info); service_argv() is
the running unit's full argv from /proc/<MainPID>/cmdline with every secret redacted (redact_argv), put in each
row's provenance; unit_state() is the unit's MainPID, restart count and state, which the soak watches. HTTP goes
through transport.py.
"""
from __future__ import annotations

from ansible.module_utils.loadgen.transport import get_json, get_status
from ansible.module_utils.systemd import unit as systemd_unit


def check_serving(base_url, api_key=None, timeout=5.0):
    """None when the server answers /health_generate (or /health) 200 and lists a model, else the reason."""
    last = "no answer"
    for path in ("/health_generate", "/health"):
        try:
            status = get_status(base_url, path, timeout=timeout)
        except (OSError, ValueError) as exc:
            return "server at %s is not serving: %s: %s" % (base_url, path, getattr(exc, "reason", exc))
        if status == 200:
            break
        if 200 <= status < 300:
            continue
        last = "%s answered HTTP %d (not ready)" % (path, status)
        if status == 404:
            continue
        return "server at %s is not ready: %s" % (base_url, last)
    else:
        return "server at %s is not ready: %s" % (base_url, last)
    models = get_json(base_url, "/v1/models", timeout=timeout, api_key=api_key)
    if not isinstance(models, dict) or not models.get("data"):
        return "server at %s is up but /v1/models lists no model (%r)" % (base_url, models)
    return None


def served_model(base_url, api_key=None):
    """The id of the first model /v1/models lists ("default" when it lists none)."""
    models = get_json(base_url, "/v1/models", api_key=api_key) or {}
    data = models.get("data") or [{}]
    return data[0].get("id") or "default"


def server_tokenizer(base_url, api_key=None):
    """The served model's tokenizer directory from /server_info (tokenizer_path, else model_path)."""
    info = get_json(base_url, "/server_info", api_key=api_key) or {}
    return info.get("tokenizer_path") or info.get("model_path") or ""


def service_argv(unit, run=systemd_unit.default_run):
    """The running unit's full argv from /proc/<MainPID>/cmdline ([] when unknown)."""
    if not unit:
        return []
    try:
        pid = systemd_unit.show(unit, run).main_pid
    except (OSError, systemd_unit.SystemdError):
        return []
    if pid <= 0:
        return []
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    return redact_argv(argv)


def redact_argv(argv):
    """Replace the value of --api-key (and any *token*/*key* flag) so rows never carry a secret."""
    out = []
    hide = False
    for arg in argv:
        if hide:
            out.append("<redacted>")
            hide = False
            continue
        name = arg.split("=", 1)[0]
        secret = name.startswith("--") and ("api-key" in name or "token" in name)
        if secret and "=" in arg:
            out.append(name + "=<redacted>")
        else:
            out.append(arg)
            hide = secret
    return out


def unit_state(unit, run=systemd_unit.default_run):
    """{"main_pid", "n_restarts", "active"} of a systemd unit (module_utils/systemd/unit.py), or None when unknown
    (no unit, no systemd)."""
    if not unit:
        return None
    try:
        state = systemd_unit.show(unit, run)
    except (OSError, systemd_unit.SystemdError):
        return None
    return {"main_pid": state.main_pid, "n_restarts": state.n_restarts, "active": state.active_state}
