"""module_utils.venv_build: recipe, up-to-date decision, provenance fact, and a real offline build into the
stage through a private mount namespace (no network: a hand-made wheel, PIP_NO_INDEX). Local source trees need the index (setuptools/wheel) and
are covered by the lab integration test."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from module_utils import venv_build as vb
from module_utils import venv_manifest as vm
from module_utils import venv_stage as vs

LAB_SERIES = Path(__file__).resolve().parents[2] / "roles/venv/files/patches/lab"


def tiny_package(root: Path, name="tinypkg", version="1.0"):
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(f"__version__ = '{version}'\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n[tool.setuptools]\npackages = ["{name}"]\n')
    return root


def tiny_wheel(root: Path, name="tinypkg", version="1.0") -> Path:
    """A hand-made pure-python wheel: pip installs it offline, without any build backend."""
    import base64
    import hashlib
    import zipfile
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}/__init__.py": f"__version__ = '{version}'\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for arc, text in files.items():
            data = text.encode()
            zf.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{name}-{version}.dist-info/RECORD,,")
        zf.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def inputs(tmp_path):
    req = tmp_path / "req.txt"
    req.write_text("# nothing from an index\n")
    pkg = tiny_package(tmp_path / "src/tinypkg")
    patches = tmp_path / "patches"
    patches.mkdir()
    return req, pkg, patches


def test_recipe_hash_tracks_every_input(tmp_path):
    req, pkg, patches = inputs(tmp_path)
    base = vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])
    assert base["python"] == ".".join(map(str, sys.version_info[:3]))
    assert vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])["recipe_hash"] == \
        base["recipe_hash"]
    (pkg / "tinypkg/__pycache__").mkdir()
    (pkg / "tinypkg/__pycache__/x.pyc").write_bytes(b"")
    assert vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])["recipe_hash"] == \
        base["recipe_hash"]
    variants = [
        vb.recipe("ddtree", sys.executable, str(req), [str(pkg)], str(patches), [], []),
        vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(patches), [], ["--pre"]),
        vb.recipe("lab", sys.executable, str(req), [], str(patches), [], []),
    ]
    (pkg / "tinypkg/__init__.py").write_text("__version__ = '1.1'\n")
    variants.append(vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(patches), [], []))
    names = vb.read_series(str(LAB_SERIES))
    variants.append(vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(LAB_SERIES), names, []))
    assert len({v["recipe_hash"] for v in variants} | {base["recipe_hash"]}) == 6


def test_write_fact_is_idempotent_and_atomic(tmp_path):
    fact = tmp_path / "facts.d/sglang_venv.fact"
    assert vb.write_fact(str(fact), {"a": 1}, check_mode=True) and not fact.exists()
    assert vb.write_fact(str(fact), {"a": 1})
    assert json.loads(fact.read_text()) == {"a": 1} and oct(fact.stat().st_mode & 0o777) == oct(0o644)
    assert not vb.write_fact(str(fact), {"a": 1})
    assert vb.write_fact(str(fact), {"a": 2})


def test_in_namespace_argv():
    argv = vb.in_namespace("/opt/sglang/.venv.stage", "/opt/sglang/venv", ["pip", "install"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-4:] == ["/opt/sglang/.venv.stage", "/opt/sglang/venv", "pip", "install"]


def test_bad_inputs_fail_before_anything_is_made(tmp_path):
    req, pkg, patches = inputs(tmp_path)
    live = tmp_path / "opt/venv"
    common = dict(path=str(live), python=sys.executable, flavour="lab", pip_args=[], import_names=[],
                  fact_path=str(tmp_path / "f.fact"))
    with pytest.raises(vb.BuildError, match="requirements file .* does not exist"):
        vb.build_if_needed(requirements=str(tmp_path / "none.txt"), local_packages=[], patch_dir=str(patches),
                           require_patches=False, **common)
    with pytest.raises(vb.BuildError, match="without pyproject.toml"):
        vb.build_if_needed(requirements=str(req), local_packages=[str(tmp_path)], patch_dir=str(patches),
                           require_patches=False, **common)
    with pytest.raises(vb.BuildError, match="holds no patches"):  # the ddtree rule: an empty operator dir
        vb.build_if_needed(requirements=str(req), local_packages=[], patch_dir=str(patches),
                           require_patches=True, **common)
    (patches / "series").write_text("0001-missing.patch\n")
    with pytest.raises(vb.BuildError, match="missing patch file"):
        vb.build_if_needed(requirements=str(req), local_packages=[], patch_dir=str(patches),
                           require_patches=False, **common)
    assert not (tmp_path / "opt").exists()


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_offline_build_into_stage_then_swap_then_up_to_date(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    req = tmp_path / "req.txt"
    req.write_text(f"{tiny_wheel(tmp_path / 'wheels')}\n")
    # a patch series against the tiny package (made here: its own files)
    patches = tmp_path / "p"
    patches.mkdir()
    (patches / "0001-tiny.patch").write_text(
        "--- a/tinypkg/__init__.py\n+++ b/tinypkg/__init__.py\n@@ -1 +1,2 @@\n __version__ = '1.0'\n+PATCHED = True\n")
    live = tmp_path / "opt/sglang/venv"
    fact = tmp_path / "facts.d/sglang_venv.fact"
    kw = dict(path=str(live), python=sys.executable if sys.prefix == sys.base_prefix else "/usr/bin/python3",
              flavour="lab", requirements=str(req), local_packages=[], patch_dir=str(patches),
              require_patches=True, pip_args=[], import_names=["tinypkg"], fact_path=str(fact), timeout=300)
    r = vb.build_if_needed(**kw)
    assert r["built"] and r["patches_applied"] == ["0001-tiny.patch"] and r["steps"][-1] == "imports"
    assert live.is_dir() and not any(live.iterdir())  # only the empty mount point: the bytes are in the stage
    stage = Path(r["stage"])
    # shebangs carry the LIVE path, not the stage path
    pip_script = (stage / "bin/pip").read_text().splitlines()[0]
    assert pip_script == f"#!{live}/bin/python" or pip_script.startswith(f"#!{live}/bin/python")
    c = vs.commit(str(live))
    assert vb.write_fact(str(fact), {"recipe_hash": r["recipe"]["recipe_hash"], "content_hash": c["digest"]})
    site = vb.site_packages(str(live))
    assert "PATCHED = True" in Path(site, "tinypkg/__init__.py").read_text()
    out = subprocess.run([str(live / "bin/python"), "-c", "import tinypkg; print(tinypkg.PATCHED)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    assert vb.venv_versions(str(live), "tinypkg", "tinypkg")["sglang_version"] == "1.0"
    again = vb.build_if_needed(**kw)
    assert not again["built"] and "matches" in again["reason"]
    Path(site, "tinypkg/__init__.py").write_text("__version__ = 'tampered'\n")
    drift = vb.build_if_needed(**kw, check_mode=True)
    assert drift["built"] and "differs from the recorded" in drift["reason"]
    assert not Path(vs.paths(str(live))["stage"]).exists()  # check mode built nothing
    assert vm.is_venv(str(live))
