"""ansible.module_utils.venv.adopt: an operator's venv verified, adopted (moved, relocated, recorded) and given back.
Real venvs (python3 -m venv --without-pip) with a fake sglang whose version and patched file the test controls."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible.module_utils.venv import adopt as va
from ansible.module_utils.venv.manifest import scan, summary

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")

SERVER_ARGS = ('import argparse\n\n\nclass ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n'
               '        parser.add_argument("--port", type=int, default=30000)\n')
PATCH = ("--- a/sglang/srt/server_args.py\n+++ b/sglang/srt/server_args.py\n@@ -5,3 +5,4 @@\n"
         "     @staticmethod\n     def add_cli_args(parser):\n"
         '         parser.add_argument("--port", type=int, default=30000)\n'
         '+        parser.add_argument("--speculative-ddtree-budget", type=int, default=None)\n')
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
SERIES = [{"name": "0001-ddtree.patch", "text": PATCH}]


def make_venv(root, version="0.5.11", patched=True):
    """A venv at root holding sglang <version> (dist-info and __version__), its server_args patched or not, and a
    console script whose shebang names the venv."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = root / "lib" / f"python{PY}" / "site-packages"
    pkg = site / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(SERVER_ARGS)
    dist = site / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    if patched:
        with open(site / "x.patch", "w") as fh:
            fh.write(PATCH)
        subprocess.run(["patch", "-p1", "-d", str(site), "-i", str(site / "x.patch")], check=True,
                       capture_output=True)
        os.unlink(site / "x.patch")
    script = root / "bin" / "sglang-hello"
    script.write_text(f"#!{root}/bin/python\nimport sglang, sys\nprint(sglang.__version__, sys.prefix)\n")
    script.chmod(0o700)
    return root


def run_adopt(tmp_path, source, check_only=False, check_mode=False, version="0.5.11", series=SERIES):
    return va.adopt(str(source), str(tmp_path / "opt/venv"), str(tmp_path / "fact.json"),
                    str(tmp_path / "record.json"), {"flavour": "ddtree", "patch_series_hash": "h"}, PY, "sglang",
                    "sglang", version, series, ["sglang"], "sglang.srt.server_args", check_only=check_only,
                    check_mode=check_mode)


@pytest.fixture()
def old(tmp_path):
    return make_venv(tmp_path / "root" / "venv_sglang211")


def test_good_venv_adopted_relocated_and_recorded(tmp_path, old):
    result = run_adopt(tmp_path, old)
    live = tmp_path / "opt/venv"
    assert result["adopted"] and result["method"] == "rename" and not old.exists()
    assert "sglang-hello" in result["relocated"] and "activate" in result["relocated"]
    out = subprocess.run([str(live / "bin/sglang-hello")], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0.5.11", str(live)]
    assert str(old) not in (live / "bin/activate").read_text()
    assert (live / "bin/sglang-hello").stat().st_mode & 0o005 == 0o005  # the service user reads and runs it
    fact = json.loads((tmp_path / "fact.json").read_text())
    assert fact["method"] == "adopted" and fact["adopted_from"] == str(old) and fact["sglang_version"] == "0.5.11"
    assert fact["content_hash"] == summary(scan(str(live)))["digest"] and fact["adopted_pin"] == "sglang==0.5.11"
    schema = json.loads((live / "sglang-flag-schema.json").read_text())
    assert "speculative_ddtree_budget" in schema["options"] and fact["flag_schema_sha256"]
    record = json.loads((tmp_path / "record.json").read_text())
    assert record[-1]["venv"]["source"] == str(old) and record[-1]["venv"]["method"] == "rename"


def test_rerun_is_a_no_op(tmp_path, old):
    run_adopt(tmp_path, old)
    before = (tmp_path / "fact.json").read_text(), (tmp_path / "record.json").read_text()
    again = run_adopt(tmp_path, old)
    assert not again["changed"] and "unchanged since" in again["msg"]
    assert ((tmp_path / "fact.json").read_text(), (tmp_path / "record.json").read_text()) == before


def test_check_mode_and_verify_change_nothing(tmp_path, old):
    digest = summary(scan(str(old)))["digest"]
    for kwargs in ({"check_mode": True}, {"check_only": True}):
        result = run_adopt(tmp_path, old, **kwargs)
        assert "would adopt" in result["msg"] and result["verified"]["sglang_version"] == "0.5.11"
        assert result["changed"] == ("check_mode" in kwargs)
    assert summary(scan(str(old)))["digest"] == digest
    assert not (tmp_path / "opt").exists() and not (tmp_path / "fact.json").exists()
    assert not (tmp_path / "record.json").exists()


def test_wrong_version_refused_naming_both(tmp_path):
    old = make_venv(tmp_path / "v", version="0.5.10")
    with pytest.raises(va.AdoptError) as err:
        run_adopt(tmp_path, old)
    assert err.value.evidence["check"] == "version"
    assert "0.5.10" in err.value.message and "0.5.11" in err.value.message and "takeover_venv" in err.value.message
    assert old.exists() and not (tmp_path / "opt").exists()


def test_unpatched_refused_naming_the_patch(tmp_path):
    old = make_venv(tmp_path / "v", patched=False)
    with pytest.raises(va.AdoptError) as err:
        run_adopt(tmp_path, old)
    assert err.value.evidence["check"] == "patches" and "0001-ddtree.patch" in err.value.message
    assert old.exists() and not (tmp_path / "record.json").exists()


def test_repository_form_series_verified(tmp_path, old):
    repo = PATCH.replace("a/sglang/", "a/python/sglang/").replace("b/sglang/", "b/python/sglang/")
    result = run_adopt(tmp_path, old, check_only=True, series=[{"name": "0001.patch", "text": repo}])
    assert result["verified"]["patch_form"] == "repository"


def test_broken_python_refused(tmp_path, old):
    (old / "bin/python").unlink()
    (old / "bin/python").write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    (old / "bin/python").chmod(0o755)
    with pytest.raises(va.AdoptError) as err:
        run_adopt(tmp_path, old)
    assert err.value.evidence["check"] == "python" and "broken" in err.value.message


def test_taken_venv_path_refused(tmp_path, old):
    (tmp_path / "opt/venv/bin").mkdir(parents=True)
    with pytest.raises(va.AdoptError) as err:
        run_adopt(tmp_path, old)
    assert err.value.evidence["check"] == "paths" and old.exists()


def test_revert_restores_path_and_shebangs(tmp_path, old):
    before = {e[0]: e[4] for e in scan(str(old))}  # every path and its content (modes are widened: a+rX stays)
    run_adopt(tmp_path, old)
    result = va.revert(str(tmp_path / "record.json"))
    assert result["changed"] and old.exists() and not (tmp_path / "opt/venv").exists()
    assert not (tmp_path / "fact.json").exists()
    out = subprocess.run([str(old / "bin/sglang-hello")], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["0.5.11", str(old)]
    assert {e[0]: e[4] for e in scan(str(old))} == before
    assert not va.revert(str(tmp_path / "record.json"))["changed"]


def test_relocate_leaves_a_longer_sibling(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/x").write_text("#!/root/venv/bin/python\n# /root/venv2/bin/y /root/venv\n")
    assert va.relocate(str(tmp_path), "/root/venv", "/opt/v") == ["x"]
    assert (tmp_path / "bin/x").read_text() == "#!/opt/v/bin/python\n# /root/venv2/bin/y /opt/v\n"


def test_revert_refuses_a_venv_the_role_built_over(tmp_path, old):
    run_adopt(tmp_path, old)
    fact = json.loads((tmp_path / "fact.json").read_text())
    (tmp_path / "fact.json").write_text(json.dumps(dict(fact, method="build")))
    with pytest.raises(va.AdoptError) as err:
        va.revert(str(tmp_path / "record.json"))
    assert err.value.evidence["check"] == "revert" and "built over it" in err.value.message
    assert (tmp_path / "opt/venv").exists() and not old.exists()
