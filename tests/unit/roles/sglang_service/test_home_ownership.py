"""The service home is the service user's alone, but for the compile-cache record (root-owned on purpose): the role's
install gives the rest back and its verify names what another user owns. The record's name has one home,
module_utils/compile_cache/record.py RECORD_NAME; the role's default that spells its path must agree with it."""
from pathlib import Path

import yaml

from ansible.module_utils.compile_cache.record import RECORD_NAME

ROLE = Path(__file__).resolve().parents[4] / "roles" / "sglang_service"


def test_the_roles_record_path_is_the_compile_cache_record():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["sglang_service_compile_cache_record"] == "{{ sglang_service_home }}/" + RECORD_NAME


def test_install_and_verify_leave_out_only_the_record():
    for name in ("install.yml", "verify.yml"):
        text = (ROLE / "tasks" / name).read_text()
        assert "sglang_service_compile_cache_record" in text and RECORD_NAME not in text, name
        assert "-user" in text and "{{ sglang_service_user" in text, name
