"""takeover_venv's wiring: the old venv is verified before anything changes (before the weights are linked and the
units stopped), adopted after the units stop, moved back before they start again on revert; and the fields adoption
writes into the fact are the ones the venv role's provenance step writes, so the venv role's next run (which keeps an
adopted venv: build.py adopted_kept) rewrites nothing."""
from __future__ import annotations

from pathlib import Path

import yaml

from ansible.module_utils.venv.build import ADOPTED_KEEP

ROOT = Path(__file__).resolve().parents[4]


def tasks(role, name):
    return yaml.safe_load((ROOT / "roles" / role / "tasks" / f"{name}.yml").read_text())


KEYWORDS = {"name", "register", "when", "vars", "loop", "loop_control", "tags", "failed_when", "changed_when",
            "check_mode", "delegate_to", "run_once", "environment", "until", "retries", "delay", "async", "poll"}


def module(task):
    return next(k for k in task if k not in KEYWORDS)


def test_verified_first_adopted_after_the_stop_reverted_before_the_start():
    first = tasks("takeover", "adopt")[0]
    assert first["ansible.builtin.include_role"]["tasks_from"] == "adopt"
    assert first["vars"]["venv_adopt_state"] == "verified"
    stop = tasks("takeover", "stop")
    names = [module(t) for t in stop]
    adopt = [t for t in stop if "ansible.builtin.include_role" in t]
    assert len(adopt) == 1 and adopt[0]["vars"]["venv_adopt_state"] == "adopted"
    assert names.index("sglang_takeover") < stop.index(adopt[0])
    revert = tasks("takeover", "revert")
    modules = [module(t) for t in revert]
    assert modules.index("venv_adopt") < modules.index("ansible.builtin.systemd_service", 4)
    defaults = yaml.safe_load((ROOT / "roles/takeover/defaults/main.yml").read_text())
    assert defaults["takeover_venv"] == ""


def test_adoption_writes_the_fields_the_venv_role_writes():
    adopt = next(t for t in tasks("venv", "adopt") if "venv_adopt" in t)
    configure = next(t for t in tasks("venv", "configure") if "venv_provenance" in t)
    role_fields = set(configure["vars"]["venv_prov_fields"])
    adopt_fields = set(adopt["venv_adopt"]["fields"])
    # method and recipe_hash the module sets (adopted, ""); the rest must be the role's own keys
    assert adopt_fields | {"method", "recipe_hash"} == role_fields
    assert set(ADOPTED_KEEP) >= {"method", "source", "recipe_hash"}
    assert "venv_built.adopted" in configure["venv_provenance"]["fields"]
