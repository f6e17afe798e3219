"""module_utils/sglang/endpoint.py: the one home of the service port fallback (SGLang's own --port default, read from
the version's flag schema), and the rule that no task, filter or module carries a port fallback of its own.

The fallback once disagreed: 30001 in the service's interface and the router's defaults, 30000 in the multi-node plan
and the probe URL filter. Now each of them asks this module (or the sglang_port filter over it)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.sglang import endpoint
from ansible.module_utils.sglang import schema as schema_lib
from filter_plugins import router as router_filters
from filter_plugins import sglang as f

ROOT = Path(__file__).resolve().parents[3]


def committed_port_default(version):
    return json.loads((ROOT / "schemas" / "sglang" / f"{version}.json").read_text())["options"]["port"]["default"]


def test_the_fallback_is_the_parsers_own_default():
    for version in schema_lib.available():
        assert endpoint.default_port(schema_lib.load(version)) == committed_port_default(version)
    assert endpoint.default_port() == committed_port_default("0.5.11")
    assert endpoint.listen_port({"model_path": "/m"}) == committed_port_default("0.5.11")
    assert f.sglang_port({"model_path": "/m"}, "0.5.23") == committed_port_default("0.5.23")


def test_a_named_port_wins_and_bad_ones_are_refused():
    assert endpoint.listen_port({"port": "30001"}) == 30001
    assert f.sglang_port({"port": 8000}) == 8000
    for bad in ("x", 0, 70000):
        with pytest.raises(endpoint.EndpointError):
            endpoint.listen_port({"port": bad})
    with pytest.raises(f.SGLangConfigError):
        f.sglang_port({"port": "x"})


def test_schemas_that_disagree_are_not_guessed_between(monkeypatch):
    base = json.loads((ROOT / "schemas" / "sglang" / "0.5.11.json").read_text())
    other = json.loads(json.dumps(base))
    other["options"]["port"]["default"] = 40000
    other["sglang_version"] = "9.9.9"
    schemas = {"0.5.11": schema_lib.from_dict(base), "9.9.9": schema_lib.from_dict(other)}
    monkeypatch.setattr(schema_lib, "available", lambda path=None: list(schemas))
    monkeypatch.setattr(schema_lib, "load", lambda v, path=None: schemas[v])
    monkeypatch.setattr(endpoint, "_committed_default", endpoint._committed_default.__wrapped__)
    with pytest.raises(endpoint.EndpointError, match="disagree"):
        endpoint.default_port()
    assert endpoint.default_port(schemas["9.9.9"]) == 40000


@pytest.mark.parametrize("server, url", [
    ({"port": 30001}, "http://127.0.0.1:30001"),
    ({"host": "0.0.0.0", "port": 30001}, "http://127.0.0.1:30001"),
    ({"host": "::", "port": 1}, "http://127.0.0.1:1"),
    ({"host": "10.0.0.5", "port": 30001}, "http://10.0.0.5:30001"),
    ({"host": "fd00::5", "port": 30001}, "http://[fd00::5]:30001"),
    ({}, "http://127.0.0.1:30000"),
])
def test_probe_url(server, url):
    assert f.sglang_probe_url(server) == url


def test_the_router_asks_the_same_home_when_the_role_passes_no_port():
    groups = {"nvlink": ["a"]}
    hostvars = {"a": {"ansible_host": "10.0.0.1"}}
    assert router_filters.router_worker_urls(groups, hostvars) == [f"http://10.0.0.1:{endpoint.default_port()}"]


def test_the_router_default_is_the_service_base_port():
    """The router reads a worker's port from the worker's group_vars layers; when they name none, the worker runs
    the service role's base layer, which the router cannot see in hostvars: the role passes it, and it must be it."""
    service = yaml.safe_load((ROOT / "roles/sglang_service/defaults/main.yml").read_text())
    router = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
    assert router["sglang_router_worker_default_port"] == service["sglang_service_server_base"]["port"]


# a service port (4-5 digits) as a fallback; a URL's scheme default (`p.port or 80`) is another fact
FALLBACK = re.compile(r"port\s*\|\s*default\(\s*\d{4}|default_port\s*=\s*\d{4}|get\(\s*['\"]port['\"]\s*\)\s*or\s+\d{4}"
                      r"|\.port\s+or\s+\d{4}")


def test_no_port_fallback_outside_its_home():
    assert FALLBACK.search("port: \"{{ sglang_service_server.port | default(30001) | int }}\"")  # the old copies
    assert FALLBACK.search("return f\"http://{host}:{server.get('port') or 30000}\"")
    assert FALLBACK.search("def router_workers(groups, hostvars, default_port=30000):")
    files = subprocess.run(["git", "ls-files", "roles", "playbooks", "filter_plugins", "module_utils", "library",
                            "site.yml"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    copies = [f"{p}:{n}" for p in files if p.endswith((".py", ".yml", ".j2")) and "/molecule/" not in p
              and (ROOT / p).exists()
              for n, line in enumerate((ROOT / p).read_text(errors="replace").splitlines(), 1)
              if FALLBACK.search(line)]
    assert copies == [], f"a port fallback outside module_utils/sglang/endpoint.py: {copies}"
