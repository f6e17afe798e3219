"""The unit and env file paths of the sglang_service and sglang_router roles: one home each, in the role's
defaults/main.yml (sglang_*_unit, sglang_*_unit_path, sglang_*_env_path); every task, handler, verify and template of
the role uses those variables, and other roles and plays reach the service's unit file only through
sglang_service_interface.unit_path. A second spelling of "/etc/systemd/system/" or of "<config_dir>/<name>.env" fails
here."""
from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = ("sglang_service", "sglang_router")
UNIT_DIR = "/etc/systemd/system/"


def role_files(role):
    """The role's tasks, handlers, templates and vars (molecule scenarios and docs are not the role)."""
    base = ROOT / "roles" / role
    return sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in (".yml", ".yaml", ".j2")
                  and "molecule" not in p.relative_to(base).parts)


def play_files():
    """Every other role's and every play's YAML (another role reads a unit path only through an interface fact)."""
    files = [ROOT / "site.yml"] + sorted((ROOT / "playbooks").rglob("*.yml"))
    for role in sorted((ROOT / "roles").iterdir()):
        if role.name not in ROLES:
            files += role_files(role.name)
    return files


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())


@pytest.mark.parametrize("role", ROLES)
def test_the_unit_path_is_spelled_once_in_the_roles_defaults(role):
    home = ROOT / "roles" / role / "defaults" / "main.yml"
    spelled = [(p.relative_to(ROOT), n) for p in role_files(role)
               for n, line in enumerate(p.read_text().splitlines(), 1) if UNIT_DIR in line]
    assert spelled == [(home.relative_to(ROOT), n) for n, line in enumerate(home.read_text().splitlines(), 1)
                       if line.startswith("%s_unit_path:" % role)], spelled


@pytest.mark.parametrize("role", ROLES)
def test_the_unit_name_and_env_path_are_built_only_in_the_defaults(role):
    built = re.compile(r"\{\{\s*%s_name\s*\}\}\.(service|env)\b" % role)
    home = ROOT / "roles" / role / "defaults" / "main.yml"
    outside = [(str(p.relative_to(ROOT)), n, line.strip()) for p in role_files(role) if p != home
               for n, line in enumerate(p.read_text().splitlines(), 1) if built.search(line)]
    assert outside == []
    assert len(built.findall(home.read_text())) == 2  # <name>.service and <name>.env, once each


def test_no_other_role_or_play_spells_a_unit_path():
    spelled = [(str(p.relative_to(ROOT)), n) for p in play_files()
               for n, line in enumerate(p.read_text().splitlines(), 1) if UNIT_DIR in line]
    assert spelled == []
    assert "sglang_service_interface.unit_path" in (ROOT / "playbooks" / "venv.yml").read_text()
    interface = (ROOT / "roles" / "sglang_service" / "tasks" / "interface.yml").read_text()
    assert 'unit_path: "{{ sglang_service_unit_path }}"' in interface


def render(values, name):
    """A role default as Ansible templates it (defaults that name other defaults, rendered until plain)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    value = values[name]
    for _ in range(10):
        if "{{" not in str(value):
            return value
        value = env.from_string(value).render(**values)
    raise AssertionError("%s does not settle: %r" % (name, value))


def test_the_paths_are_the_ones_the_roles_always_wrote():
    service, router = defaults("sglang_service"), defaults("sglang_router")
    assert [render(service, "sglang_service_" + k) for k in ("unit", "unit_path", "env_path")] == [
        "sglang.service", "/etc/systemd/system/sglang.service", "/etc/sglang/sglang.env"]
    assert [render(router, "sglang_router_" + k) for k in ("unit", "unit_path", "env_path")] == [
        "sglang-router.service", "/etc/systemd/system/sglang-router.service", "/etc/sglang-router/sglang-router.env"]
