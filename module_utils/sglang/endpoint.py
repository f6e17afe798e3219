"""Where a server config listens: its port and the URL it is probed at from its own host. The one home of the port
fallback: a config that names no port gets SGLang's own default, read from the version's flag schema (the parser's
`--port` default, extracted from the real parser), never a number written here.

    listen_port(server, schema=None)  -> server["port"], else the schema's --port default (with no schema: the
                                         default every committed schema agrees on)
    probe_url(server, schema=None)    -> http://127.0.0.1:PORT, or the bind address when it is a specific one
"""
from __future__ import annotations

import functools

from ansible.module_utils.sglang import schema as schema_lib

WILDCARD_HOSTS = ("0.0.0.0", "::", "", "localhost")


class EndpointError(schema_lib.SchemaError):
    """The port cannot be known (a schema without --port, committed schemas that disagree, a non-number)."""


def _schema_default(schema) -> int:
    hit = schema.lookup("--port")
    if hit is None or hit[1].get("default") in (None, ""):
        raise EndpointError(f"SGLang {schema.version}'s flag schema has no --port default")
    return int(hit[1]["default"])


def default_port(schema=None) -> int:
    """SGLang's own --port default: from `schema` (a FlagSchema), else the one all committed schemas agree on."""
    if schema is not None:
        return _schema_default(schema)
    return _committed_default()


@functools.lru_cache(maxsize=1)
def _committed_default() -> int:
    """Read once per process: the committed schemas are ~0.5 MB of JSON and do not change while a play runs."""
    defaults = {v: _schema_default(schema_lib.load(v)) for v in schema_lib.available()}
    if len(set(defaults.values())) != 1:
        raise EndpointError(f"the committed schemas disagree on --port's default ({defaults}): name the version")
    return next(iter(defaults.values()))


def listen_port(server, schema=None) -> int:
    """The port the server config makes SGLang listen on."""
    port = (server or {}).get("port")
    if port in (None, ""):
        return default_port(schema)
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise EndpointError(f"server port {port!r} is not a number") from None
    if not 0 < port < 65536:
        raise EndpointError(f"server port {port} is out of range 1-65535")
    return port


def probe_url(server, schema=None) -> str:
    """http://HOST:PORT the service answers at from its own host (a wildcard bind is probed on loopback)."""
    host = str((server or {}).get("host") or "127.0.0.1")
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{listen_port(server, schema)}"
