"""ansible.module_utils.venv.patch: the ordered patch series, idempotent through reverse dry runs (real GNU patch)."""
import os
import re
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


def repository_form(src: Path, dest: Path) -> Path:
    """The lab series as `git format-patch` from a repository whose package lives in python/ would write it (SGLang's
    layout: python/pyproject.toml, python/sglang/): the same diffs, every path under python/, with a mail header."""
    dest.mkdir()
    for name in vp.read_series(str(src)):
        text = (src / name).read_text()
        text = re.sub(r"^(---|\+\+\+) (a|b)/", r"\1 \2/python/", text, flags=re.M)
        (dest / name).write_text(f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
                                 f"Subject: [PATCH] {name}\n\n---\n{text}-- \n2.43.0\n")
    shutil.copy(src / "series", dest / "series")
    return dest


def test_both_forms_apply_to_the_lab_flavours_package_tree_alike(venv, tmp_path):
    """Site-packages paths (patch -p1) and the repository's python/... paths (format-patch, -p2) give the same tree."""
    packages = ["six", "sglang_standin"]   # the lab flavour's venv_patch_packages
    repo = repository_form(LAB_SERIES, tmp_path / "repo-series")
    names = vp.read_series(str(LAB_SERIES))
    assert vp.series_form(str(LAB_SERIES), names, packages) == {"form": "site", "strip": 1}
    assert vp.series_form(str(repo), names, packages) == {"form": "repository", "strip": 2}
    site = Path(site_of(venv))
    other = tmp_path / "other/lib/python3.11/site-packages"
    other.mkdir(parents=True)
    (other / "six.py").write_text(SIX_HEAD)
    r1 = vp.run_state("present", str(LAB_SERIES), str(venv), True, packages=packages)
    r2 = vp.run_state("present", str(repo), str(tmp_path / "other"), True, packages=packages)
    assert (r1["form"], r1["strip"], r1["applied"]) == ("site", 1, names)
    assert (r2["form"], r2["strip"], r2["applied"]) == ("repository", 2, names)
    for rel in ("six.py", "sglang_standin/server_args_patch.py"):
        assert (site / rel).read_text() == (other / rel).read_text()
    assert vp.run_state("present", str(repo), str(tmp_path / "other"), True, packages=packages)["already"] == names
    assert vp.run_state("verify", str(repo), str(tmp_path / "other"), True, packages=packages)["applied"] == names
    # a conflict in the repository form names the file as site-packages has it, with the rejected hunk
    (other / "six.py").write_text(SIX_HEAD.replace("1.17.0", "1.16.0"))
    with pytest.raises(vp.PatchError, match=r"(?s)0001-six-lab-marker.patch neither applies.*six.py hunk #1:"):
        vp.run_state("present", str(repo), str(tmp_path / "other"), True, packages=packages)


def test_a_series_mixing_the_forms_is_refused_naming_each_patch(tmp_path):
    repo = repository_form(LAB_SERIES, tmp_path / "repo-series")
    mixed = tmp_path / "mixed"
    shutil.copytree(LAB_SERIES, mixed)
    shutil.copy(repo / "0002-six-lab-patched-function.patch", mixed / "0002-six-lab-patched-function.patch")
    with pytest.raises(vp.PatchError) as exc:
        vp.run_state("series", str(mixed), None, True, packages=["six", "sglang_standin"])
    msg = str(exc.value)
    assert "mixes forms" in msg and "0002-six-lab-patched-function.patch (python/six.py)" in msg
    assert "0001-six-lab-marker.patch (six.py)" in msg and "git format-patch <base>..FETCH_HEAD -- python/sglang" in msg


def test_a_series_touching_files_outside_the_package_is_refused_with_the_paths(tmp_path):
    d = tmp_path / "pr"
    d.mkdir()
    (d / "0001-ddtree.patch").write_text(
        "--- a/python/sglang/srt/server_args.py\n+++ b/python/sglang/srt/server_args.py\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/test/srt/test_ddtree.py\n+++ b/test/srt/test_ddtree.py\n@@ -1 +1 @@\n-a\n+b\n")
    (d / "0002-build.patch").write_text("--- a/python/pyproject.toml\n+++ b/python/pyproject.toml\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(vp.PatchError) as exc:
        vp.series_form(str(d), ["0001-ddtree.patch", "0002-build.patch"], ["sglang"])
    msg = str(exc.value)
    assert "outside python/{sglang}/" in msg
    assert "0001-ddtree.patch: test/srt/test_ddtree.py" in msg and "0002-build.patch: python/pyproject.toml" in msg
    assert "server_args" not in msg
    with pytest.raises(vp.PatchError, match="outside python/<package>/.*test/srt/test_ddtree.py"):   # any package
        vp.series_form(str(d), ["0001-ddtree.patch"], [])
    # site form: only the flavour's packages
    (d / "0003-site.patch").write_text("--- a/sglang/srt/x.py\n+++ b/sglang/srt/x.py\n@@ -1 +1 @@\n-a\n+b\n"
                                      "--- a/six.py\n+++ b/six.py\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(vp.PatchError, match=r"outside the package\(s\) sglang .*0003-site.patch: six.py"):
        vp.series_form(str(d), ["0003-site.patch"], ["sglang"])
    assert vp.series_form(str(d), ["0003-site.patch"], ["sglang", "six"]) == {"form": "site", "strip": 1}
    assert vp.series_form(str(d), [], ["sglang"]) == {"form": "", "strip": 1}


def test_the_role_reads_applies_and_verifies_with_the_flavours_packages_and_records_the_form():
    import yaml
    role = Path(__file__).resolve().parents[3] / "roles/venv"
    tasks = {f: yaml.safe_load((role / f"tasks/{f}.yml").read_text()) for f in ("preflight", "install", "verify",
                                                                                "configure")}
    flat = [t for ts in tasks.values() for t in ts for t in (t.get("block") or [t])]
    assert sum(1 for t in flat if t.get("venv_patch", {}).get("packages") == "{{ venv_patch_packages }}") == 2
    assert sum(1 for t in flat if t.get("venv_build", {}).get("patch_packages") == "{{ venv_patch_packages }}") == 1
    prov = next(t for t in tasks["configure"] if "venv_provenance" in t)
    assert prov["vars"]["venv_prov_fields"]["patch_form"] == "{{ venv_series.form | default('') }}"
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text())
    assert "['six', 'sglang_standin'] if venv_flavour == 'lab' else ['sglang']" in defaults["venv_patch_packages"]
