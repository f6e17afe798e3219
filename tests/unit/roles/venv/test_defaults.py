"""The venv role's computed defaults, rendered as Ansible renders them (jinja2 over defaults/main.yml)."""
from pathlib import Path

import jinja2
import pytest
import yaml

DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[4] / "roles/venv/defaults/main.yml").read_text())


def render(name, **facts):
    return yaml.safe_load(jinja2.Environment().from_string(DEFAULTS[name]).render(**facts))


@pytest.mark.parametrize("flavour", ["upstream", "ddtree", "image-torch-0511"])
def test_real_sglang_flavours_need_libnuma(flavour):
    # sgl_kernel's library links libnuma.so.1; the H200 image lacks it (the kit carries libnuma1's .deb), and without
    # it `import sgl_kernel` fails when the service starts
    packages = render("venv_apt_packages", venv_flavour=flavour, venv_source="pypi", venv_method="build")
    assert "libnuma1" in packages and "python3-venv" in packages


def test_the_lab_flavour_needs_no_libnuma_and_a_clone_build_needs_git():
    assert "libnuma1" not in render("venv_apt_packages", venv_flavour="lab", venv_source="pypi", venv_method="build")
    assert "git" in render("venv_apt_packages", venv_flavour="lab", venv_source="clone", venv_method="build")
