"""ansible.module_utils.venv.patch: the ordered patch series, idempotent through reverse dry runs (real GNU patch)."""
import os
import shutil
from pathlib import Path

import pytest

from ansible.module_utils.venv import patch as vp

LAB_SERIES = Path(__file__).resolve().parents[3] / "roles/venv/files/patches/lab"
SIX_HEAD = ('"""Utilities for writing code that runs on Python 2 and 3"""\n\nimport sys\nimport types\n\n'
            '__author__ = "Benjamin Peterson <benjamin@python.org>"\n__version__ = "1.17.0"\n\n\n'
            '# Useful for very coarse version differentiation.\nPY2 = sys.version_info[0] == 2\n')

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")


@pytest.fixture()
def venv(tmp_path):
    site = tmp_path / "venv/lib/python3.11/site-packages"
    site.mkdir(parents=True)
    (site / "six.py").write_text(SIX_HEAD)
    return tmp_path / "venv"


def site_of(venv):
    return vp.site_packages(str(venv))


def test_lab_series_order_and_hash():
    names = vp.read_series(str(LAB_SERIES), require=True)
    assert names == ["0001-six-lab-marker.patch", "0002-six-lab-patched-function.patch",
                     "0003-standin-ddtree-flags.patch"]
    h = vp.series_hash(str(LAB_SERIES), names)
    assert len(h) == 64 and h != vp.series_hash(str(LAB_SERIES), list(reversed(names)))
    assert vp.series_hash(str(LAB_SERIES), []) == ""


def test_apply_is_idempotent_and_verify_sees_it(venv):
    names = vp.read_series(str(LAB_SERIES))
    first = vp.apply_series(site_of(venv), str(LAB_SERIES), names)
    assert first == {"applied": names, "already": [], "changed": True}
    text = (Path(site_of(venv)) / "six.py").read_text()
    assert 'LAB_PATCHES = ("0001", "0002")' in text and "def lab_patched" in text
    second = vp.apply_series(site_of(venv), str(LAB_SERIES), names)
    assert second == {"applied": [], "already": names, "changed": False}
    assert (Path(site_of(venv)) / "six.py").read_text() == text
    assert vp.verify_series(site_of(venv), str(LAB_SERIES), names)["missing"] == {}
    assert not list(Path(site_of(venv)).glob("*.orig")) and not list(Path(site_of(venv)).glob("*.rej"))


def test_partially_applied_series_completes(venv):
    names = vp.read_series(str(LAB_SERIES))
    vp.apply_series(site_of(venv), str(LAB_SERIES), names[:1])
    r = vp.apply_series(site_of(venv), str(LAB_SERIES), names)
    assert r["already"] == names[:1] and r["applied"] == names[1:]


def test_check_mode_writes_nothing(venv):
    names = vp.read_series(str(LAB_SERIES))
    r = vp.apply_series(site_of(venv), str(LAB_SERIES), names[:1], check_mode=True)
    assert r["applied"] == names[:1]
    assert (Path(site_of(venv)) / "six.py").read_text() == SIX_HEAD


def test_conflict_shows_the_rejected_hunk_and_writes_nothing(venv):
    six = Path(site_of(venv)) / "six.py"
    six.write_text(SIX_HEAD.replace('__version__ = "1.17.0"', '__version__ = "1.16.0"'))
    before = six.read_text()
    with pytest.raises(vp.PatchError) as exc:
        vp.apply_series(site_of(venv), str(LAB_SERIES), vp.read_series(str(LAB_SERIES)))
    msg = str(exc.value)
    assert "0001-six-lab-marker.patch neither applies to nor is applied" in msg
    assert "six.py hunk #1:" in msg and '+LAB_PATCHES = ("0001",)' in msg
    assert six.read_text() == before


def test_out_of_order_patch_is_a_conflict(venv):
    with pytest.raises(vp.PatchError, match="0002-six-lab-patched-function.patch neither applies"):
        vp.apply_series(site_of(venv), str(LAB_SERIES), ["0002-six-lab-patched-function.patch"])


def test_verify_reports_missing_patches(venv):
    names = vp.read_series(str(LAB_SERIES))
    found = vp.verify_series(site_of(venv), str(LAB_SERIES), names)
    assert found["applied"] == [] and found["missing"][names[0]] == "applicable"
    with pytest.raises(vp.PatchError, match="patches missing"):
        vp.run_state("verify", str(LAB_SERIES), str(venv), False)


def test_series_errors(tmp_path):
    with pytest.raises(vp.PatchError, match="does not exist"):
        vp.read_series(str(tmp_path / "none"), require=True)
    assert vp.read_series(str(tmp_path / "none")) == []
    (tmp_path / "empty").mkdir()
    with pytest.raises(vp.PatchError, match="holds no patches"):
        vp.read_series(str(tmp_path / "empty"), require=True)
    d = tmp_path / "d"
    d.mkdir()
    (d / "series").write_text("# comment\n0001-a.patch\n0002-gone.patch -p1\n")
    (d / "0001-a.patch").write_text("")
    with pytest.raises(vp.PatchError, match="missing patch file.*0002-gone.patch"):
        vp.read_series(str(d))
    (d / "series").unlink()
    (d / "0003-b.diff").write_text("")
    (d / "notes.txt").write_text("")
    assert vp.read_series(str(d)) == ["0001-a.patch", "0003-b.diff"]


def test_split_hunks_and_failed_hunks():
    text = (LAB_SERIES / "0002-six-lab-patched-function.patch").read_text()
    hunks = vp.split_hunks(text)
    assert list(hunks) == ["six.py"] and len(hunks["six.py"]) == 1 and hunks["six.py"][0].startswith("@@")
    out = "checking file six.py\nHunk #1 FAILED at 31.\n1 out of 1 hunk FAILED\n"
    assert vp.failed_hunks(text, out)[0].startswith("six.py hunk #1:\n@@ -31,7")


def test_site_packages_must_be_unique(tmp_path):
    for v in ("python3.11", "python3.12"):
        (tmp_path / "lib" / v / "site-packages").mkdir(parents=True)
    with pytest.raises(vp.PatchError, match="expected one"):
        vp.site_packages(str(tmp_path))
    os.rmdir(tmp_path / "lib/python3.12/site-packages")
    assert vp.site_packages(str(tmp_path)).endswith("lib/python3.11/site-packages")
