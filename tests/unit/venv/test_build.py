"""ansible.module_utils.venv.build (recipe, up-to-date decision, build) with its clone route (venv.clone), flag schema
(venv.flag_schema) and provenance fact (venv.provenance); the build is a real offline one into the stage through a
private mount namespace (no network: a hand-made wheel in a lock with its sha256, PIP_NO_INDEX, pip's hash-checking
mode). Local source trees need the index (setuptools/wheel) and
are covered by the lab integration test, except the SGLang stand-in (its stdlib build backend needs nothing): the
flag schema step is tested on a venv holding it, with the lab series' parser patch."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils.venv import build as vb
from ansible.module_utils.venv import clone as vc
from ansible.module_utils.venv import flag_schema as fs
from ansible.module_utils.venv import namespace as vns
from ansible.module_utils.venv import patch as vpatch
from ansible.module_utils.venv import provenance as vp
from ansible.module_utils.venv.build_error import BuildError
from ansible.module_utils.venv import bytecode as vbc
from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import stage as vs

ROOT = Path(__file__).resolve().parents[3]
LAB_SERIES = ROOT / "roles/venv/files/patches/lab"
STANDIN = ROOT / "lab/sglang_standin"
DDTREE_PATCH = "0003-standin-ddtree-flags.patch"


def tiny_package(root: Path, name="tinypkg", version="1.0"):
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(f"__version__ = '{version}'\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n[tool.setuptools]\npackages = ["{name}"]\n')
    return root


def tiny_wheel(root: Path, name="tinypkg", version="1.0", extra: dict | None = None) -> Path:
    """A hand-made pure-python wheel: pip installs it offline, without any build backend. `extra`: more files
    (archive path -> text)."""
    import base64
    import hashlib
    import zipfile
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}-{version}-py3-none-any.whl"
    files = {f"{name}/__init__.py": f"__version__ = '{version}'\n",
             f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n", **(extra or {})}
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


def lock_for(path: Path, *wheels: Path, hashes: dict | None = None) -> Path:
    """A lock of hand-made wheels: name==version, the wheel's sha256 (or the one given by name), --find-links."""
    lines = [f"--find-links {wheels[0].parent}"] if wheels else []
    for wheel in wheels:
        name, version = wheel.name.split("-")[:2]
        digest = (hashes or {}).get(name) or hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}")
    path.write_text("# input: none sha256=" + "0" * 64 + "\n" + "\n".join(lines) + "\n")
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
    names = vpatch.read_series(str(LAB_SERIES))
    variants.append(vb.recipe("lab", sys.executable, str(req), [str(pkg)], str(LAB_SERIES), names, []))
    assert len({v["recipe_hash"] for v in variants} | {base["recipe_hash"]}) == 6


def test_recipe_hash_changes_with_schema_module(tmp_path):
    req, pkg, patches = inputs(tmp_path)
    args = ("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])
    none = vb.recipe(*args)
    assert vb.recipe(*args, schema_module="")["recipe_hash"] == none["recipe_hash"]  # no schema: as before
    real = vb.recipe(*args, schema_module="sglang.srt.server_args")
    standin = vb.recipe(*args, schema_module="sglang_standin.server_args")
    assert len({none["recipe_hash"], real["recipe_hash"], standin["recipe_hash"]}) == 3
    assert standin["flag_schema"] == {"module": "sglang_standin.server_args",
                                      "format": fs.extractor().SCHEMA_FORMAT}
    assert "flag_schema" not in none


def test_extractor_source_is_the_module_and_its_import_leaves_cuda_env_alone(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delitem(sys.modules, "ansible.module_utils.sglang.schema_extract", raising=False)
    src = fs.extractor_source()
    assert src == (ROOT / "module_utils/sglang/schema_extract.py").read_text()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"  # the extractor empties it at import: undone here


def test_read_flag_schema(tmp_path):
    assert fs.read_flag_schema(str(tmp_path / "none.json")) == {}
    (tmp_path / "bad.json").write_text("{not json")
    bad = fs.read_flag_schema(str(tmp_path / "bad.json"))
    assert bad["sglang_version"] == "" and len(bad["sha256"]) == 64
    (tmp_path / "ok.json").write_text('{"sglang_version": "0.5.11", "options": {"a": {}, "b": {}}}')
    assert fs.read_flag_schema(str(tmp_path / "ok.json"))["options"] == 2


def test_write_fact_is_idempotent_and_atomic(tmp_path):
    fact = tmp_path / "facts.d/sglang_venv.fact"
    assert vp.write_fact(str(fact), {"a": 1}, check_mode=True) and not fact.exists()
    assert vp.write_fact(str(fact), {"a": 1})
    assert json.loads(fact.read_text()) == {"a": 1} and oct(fact.stat().st_mode & 0o777) == oct(0o644)
    assert not vp.write_fact(str(fact), {"a": 1})
    assert vp.write_fact(str(fact), {"a": 2})


def test_in_namespace_argv():
    argv = vns.in_namespace("/opt/sglang/.venv.stage", "/opt/sglang/venv", ["pip", "install"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-4:] == ["/opt/sglang/.venv.stage", "/opt/sglang/venv", "pip", "install"]


def test_bad_inputs_fail_before_anything_is_made(tmp_path):
    req, pkg, patches = inputs(tmp_path)
    live = tmp_path / "opt/venv"
    common = dict(path=str(live), python=sys.executable, flavour="lab", pip_args=[], import_names=[],
                  fact_path=str(tmp_path / "f.fact"))
    with pytest.raises(BuildError, match="lock file .* does not exist"):
        vb.build_if_needed(lock=str(tmp_path / "none.txt"), local_packages=[], patch_dir=str(patches),
                           require_patches=False, **common)
    with pytest.raises(BuildError, match="without pyproject.toml"):
        vb.build_if_needed(lock=str(req), local_packages=[str(tmp_path)], patch_dir=str(patches),
                           require_patches=False, **common)
    with pytest.raises(BuildError, match="holds no patches"):  # the ddtree rule: an empty operator dir
        vb.build_if_needed(lock=str(req), local_packages=[], patch_dir=str(patches),
                           require_patches=True, **common)
    (patches / "series").write_text("0001-missing.patch\n")
    with pytest.raises(BuildError, match="missing patch file"):
        vb.build_if_needed(lock=str(req), local_packages=[], patch_dir=str(patches),
                           require_patches=False, **common)
    assert not (tmp_path / "opt").exists()


GOOD_HASH = "sha256:" + "a" * 64


@pytest.mark.parametrize("text, named", [
    ("six==1.17.0\n", "req.txt:2: 'six==1.17.0': six==1.17.0 has no --hash=sha256"),
    (f"six>=1.16 --hash={GOOD_HASH}\n", "req.txt:2: 'six>=1.16 --hash=sha256:aaaa"),
    (f"six --hash={GOOD_HASH}\n", "six is not pinned (name==version)"),
    (f"six==1.* --hash={GOOD_HASH}\n", "six is not pinned to one exact version"),
    (f"six @ https://example.org/six-1.17.0-py3-none-any.whl --hash={GOOD_HASH}\n", "a URL or path is not a locked"),
    ("-r other.txt\n", "option -r is not allowed in a lock"),
    ("-e ./src/pkg\n", "option -e is not allowed in a lock"),
    (f"idna==3.10 --hash={GOOD_HASH}\nsix==1.17.0 \\\n    --hash=sha256:abc\n",
     "req.txt:3: 'six==1.17.0 --hash=sha256:abc'"),
])
def test_a_lock_line_pip_would_refuse_fails_the_build_naming_it_before_pip_runs(tmp_path, monkeypatch, text, named):
    req, _, patches = inputs(tmp_path)
    req.write_text("# a lock\n" + text)
    ran = []
    monkeypatch.setattr(vb, "_run", lambda *a, **k: ran.append(a))  # pip never runs
    live = tmp_path / "opt/venv"
    with pytest.raises(BuildError) as err:
        vb.build_if_needed(path=str(live), python=sys.executable, flavour="lab", lock=str(req), local_packages=[],
                           patch_dir=str(patches), require_patches=False, pip_args=[], import_names=[],
                           fact_path=str(tmp_path / "f.fact"))
    assert named in str(err.value)
    assert ran == [] and not (tmp_path / "opt").exists()


def test_recipe_hash_changes_with_a_lock_hash_line_not_with_its_comments_or_line_order(tmp_path):
    req, _, patches = inputs(tmp_path)
    a, b = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    text = f"# header\nidna==3.10 \\\n    --hash={a}\nsix==1.17.0 \\\n    --hash={a} \\\n    --hash={b}\n"
    req.write_text(text)
    args = ("lab", sys.executable, str(req), [], str(patches), [], [])
    base = vb.recipe(*args)
    assert base["lock_packages"] == 2 and base["install"] == vb.INSTALL_MODE
    req.write_text(text.replace("# header", "# another header") + "    # via nothing\n")
    assert vb.recipe(*args)["recipe_hash"] == base["recipe_hash"]
    six_first = text.split("\n")
    req.write_text("\n".join([six_first[0], *six_first[3:6], *six_first[1:3]]) + "\n")
    assert vb.recipe(*args)["recipe_hash"] == base["recipe_hash"]
    req.write_text(text.replace(f"--hash={b}", "--hash=sha256:" + "3" * 64))  # one hash line of six changed
    changed = vb.recipe(*args)
    assert changed["recipe_hash"] != base["recipe_hash"] and changed["lock"] != base["lock"]
    req.write_text(text.replace("six==1.17.0", "six==1.16.0"))
    assert vb.recipe(*args)["recipe_hash"] not in (base["recipe_hash"], changed["recipe_hash"])


def test_a_local_package_needing_what_the_lock_lacks_is_refused_before_anything_is_made(tmp_path, monkeypatch):
    req, pkg, patches = inputs(tmp_path)
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61", "wheel"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "tinypkg"\nversion = "1.0"\n'
        'dependencies = ["requests>=2", "tomli; python_version < \'3.11\'"]\n')
    req.write_text(f"wheel==0.48.0 --hash={GOOD_HASH}\n")
    monkeypatch.setattr(vb, "_run", lambda *a, **k: pytest.fail("pip ran"))
    with pytest.raises(BuildError) as err:
        vb.build_if_needed(path=str(tmp_path / "opt/venv"), python=sys.executable, flavour="lab", lock=str(req),
                           local_packages=[str(pkg)], patch_dir=str(patches), require_patches=False, pip_args=[],
                           import_names=[], fact_path=str(tmp_path / "f.fact"))
    msg = str(err.value)
    assert "build backend requirement(s) setuptools>=61 not in the lock" in msg
    assert "dependencies requests>=2 not in the lock" in msg and "tomli" not in msg  # a marker: pip check decides
    assert not (tmp_path / "opt").exists()


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_offline_build_into_stage_then_swap_then_up_to_date(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    req = lock_for(tmp_path / "req.txt", tiny_wheel(tmp_path / "wheels"))
    # a patch series against the tiny package (made here: its own files)
    patches = tmp_path / "p"
    patches.mkdir()
    (patches / "0001-tiny.patch").write_text(
        "--- a/tinypkg/__init__.py\n+++ b/tinypkg/__init__.py\n@@ -1 +1,2 @@\n __version__ = '1.0'\n+PATCHED = True\n")
    live = tmp_path / "opt/sglang/venv"
    fact = tmp_path / "facts.d/sglang_venv.fact"
    kw = dict(path=str(live), python=sys.executable if sys.prefix == sys.base_prefix else "/usr/bin/python3",
              flavour="lab", lock=str(req), local_packages=[], patch_dir=str(patches),
              require_patches=True, pip_args=[], import_names=["tinypkg"], fact_path=str(fact), timeout=300)
    r = vb.build_if_needed(**kw)
    assert r["built"] and r["patches_applied"] == ["0001-tiny.patch"]
    assert r["steps"] == ["venv", "lock", "pip_check", "patches", "imports"]
    assert live.is_dir() and not any(live.iterdir())  # only the empty mount point: the bytes are in the stage
    stage = Path(r["stage"])
    # shebangs carry the LIVE path, not the stage path
    pip_script = (stage / "bin/pip").read_text().splitlines()[0]
    assert pip_script == f"#!{live}/bin/python" or pip_script.startswith(f"#!{live}/bin/python")
    c = vs.commit(str(live))
    # no byte-code from the build itself (pip --no-compile): the commit compiled the stage, pip's modules included
    assert c["bytecode"]["compiled"] == c["bytecode"]["sources"] - c["bytecode"]["uncompilable_count"] > 100
    assert vbc.run(str(live), "check")["invalid"] == 0
    assert vp.write_fact(str(fact), {"recipe_hash": r["recipe"]["recipe_hash"], "content_hash": c["digest"]})
    site = vpatch.site_packages(str(live))
    assert "PATCHED = True" in Path(site, "tinypkg/__init__.py").read_text()
    out = subprocess.run([str(live / "bin/python"), "-c", "import tinypkg; print(tinypkg.PATCHED)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    assert vp.venv_versions(str(live), "tinypkg", "tinypkg")["sglang_version"] == "1.0"
    assert "flag_schema" not in r["steps"] and r["flag_schema"] == {}  # schema_module "" (a venv without SGLang)
    _, prov = vp.provenance(str(live), str(tmp_path / "p.fact"), c["digest"], {}, "tinypkg", "tinypkg")
    assert prov["flag_schema_sha256"] == "" and prov["flag_schema_sglang_version"] == ""
    again = vb.build_if_needed(**kw)
    assert not again["built"] and "matches" in again["reason"] and again["recovered"] == []
    stale = vs.paths(str(live))["stage"]
    os.mkdir(stale)  # what a failed build leaves
    assert vb.build_if_needed(**kw, check_mode=True)["recovered"] == [f"removed stale {stale}"]
    assert os.path.isdir(stale)  # check mode only names it
    assert vb.build_if_needed(**kw)["recovered"] == [f"removed stale {stale}"] and not os.path.exists(stale)
    Path(site, "tinypkg/__init__.py").write_text("__version__ = 'tampered'\n")
    drift = vb.build_if_needed(**kw, check_mode=True)
    assert drift["built"] and "differs from the recorded" in drift["reason"]
    assert not Path(vs.paths(str(live))["stage"]).exists()  # check mode built nothing
    assert vm.is_venv(str(live))
    # a lock whose hash does not match the file pip finds: pip's hash check refuses it, naming the package, and the
    # live venv stays as it was (nothing swapped)
    wheel = next((tmp_path / "wheels").glob("tinypkg-*.whl"))
    lock_for(req, wheel, hashes={"tinypkg": "0" * 64})
    live_before = vm.summary(vm.scan(str(live)))["digest"]
    with pytest.raises(BuildError) as err:
        vb.build_if_needed(**kw)
    assert "pip install --require-hashes (the lock) failed" in str(err.value)
    assert "DO NOT MATCH THE HASHES" in str(err.value) and "tinypkg==1.0" in str(err.value)
    assert vm.summary(vm.scan(str(live)))["digest"] == live_before and vm.is_venv(str(live))


# The interpreter the builds use: a base interpreter (not the controller venv's).
BASE_PYTHON = sys.executable if sys.prefix == sys.base_prefix else "/usr/bin/python3"


def _build_kw(tmp_path, lock: Path, **over) -> dict:
    kw = dict(path=str(tmp_path / "opt/sglang/venv"),
              python=BASE_PYTHON,
              flavour="lab", lock=str(lock), local_packages=[], patch_dir=str(tmp_path / "p"),
              require_patches=False, pip_args=[], import_names=[], fact_path=str(tmp_path / "f.fact"), timeout=300)
    kw.update(over)
    return kw


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_build_writes_the_venvs_own_flag_schema_into_the_venv(tmp_path, monkeypatch):
    """The stand-in (0.5.11's flags) plus the lab series' parser patch: the schema in the venv has the DDTREE flags
    no committed schema has, it is venv content (manifest, content hash) and the provenance fact records it."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the extractor must not see it
    req = tmp_path / "req.txt"
    req.write_text("# nothing from an index\n")
    (tmp_path / "p").mkdir()
    shutil.copy(LAB_SERIES / DDTREE_PATCH, tmp_path / "p" / DDTREE_PATCH)
    kw = _build_kw(tmp_path, req, local_packages=[str(STANDIN)], require_patches=True,
                   import_names=["sglang_standin"], schema_module="sglang_standin.server_args")
    r = vb.build_if_needed(**kw)
    assert r["steps"][-2:] == ["imports", "flag_schema"] and r["patches_applied"] == [DDTREE_PATCH]
    live = Path(kw["path"])
    stage = Path(r["stage"])
    assert not any(live.iterdir())  # nothing at the live path before the swap
    data = (stage / fs.FLAG_SCHEMA_NAME).read_bytes()
    doc = json.loads(data)
    flags = {f for o in doc["options"].values() for f in o["flags"]}
    assert doc["sglang_version"] == "0.5.11" and doc["source"]["module"] == "sglang_standin.server_args"
    assert {"--speculative-ddtree-budget", "--speculative-ddtree-topk-cap"} <= flags
    assert "DDTREE" in doc["options"]["speculative_algorithm"]["choices"]
    # the venv's parser, not the committed 0.5.11 schema: that one has no DDTREE flags
    committed = json.loads((ROOT / "schemas/sglang/0.5.11.json").read_text())
    assert "--speculative-ddtree-budget" not in {f for o in committed["options"].values() for f in o["flags"]}
    assert r["flag_schema"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert r["flag_schema"]["path"] == str(live / fs.FLAG_SCHEMA_NAME)
    assert oct((stage / fs.FLAG_SCHEMA_NAME).stat().st_mode & 0o777) == oct(0o644)
    assert not list(stage.rglob("sglang_schema_extract*"))  # the extractor itself is not left in the venv

    c = vs.commit(str(live))
    assert fs.FLAG_SCHEMA_NAME in {e[0] for e in vm.scan(str(live))}  # in the manifest: in the content hash
    fact = tmp_path / "prov.fact"
    changed, prov = vp.provenance(str(live), str(fact), c["digest"], {"recipe_hash": r["recipe"]["recipe_hash"]},
                                  "sglang-standin", "sglang_standin")
    assert changed and prov["flag_schema_sha256"] == r["flag_schema"]["sha256"]
    assert prov["flag_schema_sglang_version"] == "0.5.11" and prov["sglang_version"] == "0.5.11.post0+standin"
    # a changed schema file is a changed venv: the content hash moves
    before = vm.summary(vm.scan(str(live)))["digest"]
    (live / fs.FLAG_SCHEMA_NAME).write_bytes(data.replace(b'"0.5.11"', b'"0.5.23"', 1))
    assert vm.summary(vm.scan(str(live)))["digest"] != before


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_broken_schema_module_fails_the_build_with_its_stderr(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    wheel = tiny_wheel(tmp_path / "wheels", extra={
        "tinypkg/server_args.py": "raise RuntimeError('parser exploded: half-applied DDTREE patch')\n"})
    req = lock_for(tmp_path / "req.txt", wheel)
    (tmp_path / "p").mkdir()
    kw = _build_kw(tmp_path, req, import_names=["tinypkg"], schema_module="tinypkg.server_args")
    with pytest.raises(BuildError) as err:
        vb.build_if_needed(**kw)
    msg = str(err.value)
    assert "flag schema" in msg and "tinypkg.server_args" in msg
    assert "RuntimeError: parser exploded: half-applied DDTREE patch" in msg  # the extractor's stderr tail
    live = Path(kw["path"])
    assert not vm.is_venv(str(live)) and not (live / fs.FLAG_SCHEMA_NAME).exists()  # nothing swapped
    assert not os.path.exists(kw["fact_path"])
    # a module that is not there at all fails the same way
    with pytest.raises(BuildError, match="No module named 'tinypkg.nope'"):
        vb.build_if_needed(**dict(kw, schema_module="tinypkg.nope"))


# ---------------------------------------------------------------- clone route (the operator's fork at a pinned commit)
@pytest.mark.parametrize("repo, commit, subdir, message", [
    ("https://github.com/o/sglang.git", "ddtree", "python", "'ddtree' is not a pinned commit"),
    ("https://github.com/o/sglang.git", "main", "python", "not a pinned commit"),
    ("https://github.com/o/sglang.git", "694d475de48f", "python", "full 40-hex sha"),
    ("https://github.com/o/sglang.git", "694D475DE48F6453EA08704DCE4D6777DF125DDF", "", "not a pinned commit"),
    ("ext::sh -c touch% /tmp/pwned", "0" * 40, "", "is not a git URL"),
    ("relative/fork.git", "0" * 40, "", "is not a git URL"),
    ("https://u:secret@github.com/o/s.git x", "0" * 40, "", "'https://github.com/o/s.git x' is not a git URL"),
    ("https://github.com/o/sglang.git", "0" * 40, "../python", "must be a normalised path inside the checkout"),
    ("https://github.com/o/sglang.git", "0" * 40, "/python", "must be a normalised path"),
    ("https://github.com/o/sglang.git", "0" * 40, "python/", "'python/' must be a normalised path"),
])
def test_clone_inputs_refused_before_anything_is_made(tmp_path, repo, commit, subdir, message):
    with pytest.raises(BuildError, match=message) as err:
        vc.check_clone_inputs(repo, commit, subdir)
    assert "secret" not in str(err.value)
    req, _, patches = inputs(tmp_path)
    with pytest.raises(BuildError, match=message):
        vb.build_if_needed(path=str(tmp_path / "opt/venv"), python=sys.executable, flavour="ddtree",
                           lock=str(req), local_packages=[], patch_dir=str(patches), require_patches=False,
                           pip_args=[], import_names=[], fact_path=str(tmp_path / "f.fact"), clone_repo=repo,
                           clone_commit=commit, clone_subdir=subdir, clone_dir=str(tmp_path / "clone"))
    assert not (tmp_path / "opt").exists() and not (tmp_path / "clone").exists()


def test_recipe_hash_tracks_the_clone_commit_repo_and_subdir(tmp_path):
    req, _, patches = inputs(tmp_path)
    args = ("ddtree", sys.executable, str(req), [], str(patches), [], [])
    a, b = "a" * 40, "b" * 40
    pypi = vb.recipe(*args)
    assert "clone" not in pypi and vb.recipe(*args, clone=None)["recipe_hash"] == pypi["recipe_hash"]
    one = vb.recipe(*args, clone=vc.clone_part("https://github.com/o/sglang.git", a, "python"))
    assert one["clone"] == {"repo": "https://github.com/o/sglang.git", "commit": a, "subdir": "python"}
    same = vb.recipe(*args, clone=vc.clone_part("https://github.com/o/sglang.git", a, "python"))
    token = vb.recipe(*args, clone=vc.clone_part("https://x:tok@github.com/o/sglang.git", a, "python"))
    assert one["recipe_hash"] == same["recipe_hash"] == token["recipe_hash"]  # credentials are not the recipe
    assert "tok" not in json.dumps(token)
    others = [vb.recipe(*args, clone=vc.clone_part("https://github.com/o/sglang.git", b, "python")),
              vb.recipe(*args, clone=vc.clone_part("https://github.com/p/sglang.git", a, "python")),
              vb.recipe(*args, clone=vc.clone_part("https://github.com/o/sglang.git", a, ""))]
    assert len({r["recipe_hash"] for r in others} | {one["recipe_hash"], pypi["recipe_hash"]}) == 5


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_clone_route_builds_the_forks_commit_then_the_same_commit_is_a_noop(fork, tmp_path, monkeypatch):
    """The fork (the stand-in with the DDTree patch committed) pip installed from a checkout of its pinned commit:
    no local package, no patch series, yet the venv's parser has the DDTree flags. Same commit again: nothing, not
    even a fetch; another commit: a rebuild (check mode says what it would fetch)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    req = tmp_path / "req.txt"
    req.write_text("# nothing from an index\n")
    (tmp_path / "p").mkdir()
    url = f"file://{fork['path']}"
    clone_dir = tmp_path / "build/clone"
    kw = _build_kw(tmp_path, req, import_names=["sglang_standin"], schema_module="sglang_standin.server_args",
                   clone_repo=url, clone_commit=fork["commit"], clone_subdir="", clone_dir=str(clone_dir))
    r = vb.build_if_needed(**kw)
    assert r["built"] and r["steps"] == ["fetch", "venv", "clone", "pip_check", "patches", "imports", "flag_schema"]
    assert r["clone"] == {"repo": url, "commit": fork["commit"], "subdir": "", "fetched": True, "fetch": "depth1"}
    assert r["recipe"]["clone"] == {"repo": url, "commit": fork["commit"], "subdir": ""}
    assert r["patches_applied"] == []
    doc = json.loads((Path(r["stage"]) / fs.FLAG_SCHEMA_NAME).read_text())
    assert "--speculative-ddtree-budget" in {f for o in doc["options"].values() for f in o["flags"]}
    live = Path(kw["path"])
    c = vs.commit(str(live))
    fields = {"recipe_hash": r["recipe"]["recipe_hash"], "venv_source": "clone", "clone_repo": r["clone"]["repo"],
              "clone_commit": r["clone"]["commit"], "clone_subdir": r["clone"]["subdir"]}
    changed, prov = vp.provenance(str(live), kw["fact_path"], c["digest"], fields, "sglang-standin", "sglang_standin")
    assert changed and prov["clone_commit"] == fork["commit"] and prov["venv_source"] == "clone"
    assert prov["sglang_version"] == "0.5.11.post0+standin" and prov["flag_schema_sglang_version"] == "0.5.11"
    # the same commit: a no-op that fetches nothing (the checkout is not touched)
    marker = clone_dir / "left-by-the-first-build"
    marker.write_text("x")
    again = vb.build_if_needed(**kw)
    assert not again["built"] and "matches" in again["reason"] and again["clone"]["fetched"] is False
    assert marker.exists()
    # another commit: check mode says what would be fetched and changes nothing
    other = vb.build_if_needed(**dict(kw, clone_commit=fork["base_commit"]), check_mode=True)
    assert other["built"] and "recipe changed" in other["reason"]
    assert f"would fetch {fork['base_commit']} from {url}" in other["reason"] and other["clone"]["fetched"] is False
    assert marker.exists() and not Path(vs.paths(str(live))["stage"]).exists()
    # no patch series in this route: the fork carries its patches
    shutil.copy(LAB_SERIES / DDTREE_PATCH, tmp_path / "p" / DDTREE_PATCH)
    with pytest.raises(BuildError, match="does not apply to it"):
        vb.build_if_needed(**dict(kw, clone_commit=fork["base_commit"]))
    assert marker.exists()


def test_an_adopted_venv_is_kept_while_verified_for_the_recipe_and_unchanged(tmp_path):
    """roles/takeover takeover_venv: the fact says method adopted (no recipe hash); kept while its content hash and
    what adoption verified it for (flavour, pin, patch series, schema module) hold; else rebuilt, saying why."""
    from ansible.module_utils.venv.build import up_to_date
    from ansible.module_utils.venv.manifest import scan, summary
    live = tmp_path / "venv"
    (live / "bin").mkdir(parents=True)
    (live / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (live / "bin/python").write_text("")
    want = {"flavour": "ddtree", "adopted_pin": "sglang==0.5.11", "patch_series_hash": "s",
            "adopted_schema_module": "sglang.srt.server_args"}
    fact = dict(want, method="adopted", adopted_from="/root/venv", recipe_hash="",
                content_hash=summary(scan(str(live)))["digest"])
    (tmp_path / "fact").write_text(json.dumps(fact))
    ok, why, _ = up_to_date(str(live), str(tmp_path / "fact"), "r", want)
    assert ok and why.startswith("adopted venv (from /root/venv) kept")
    ok, why, _ = up_to_date(str(live), str(tmp_path / "fact"), "r", dict(want, adopted_pin=""))
    assert not ok and "venv_keep_adopted" in why
    ok, why, _ = up_to_date(str(live), str(tmp_path / "fact"), "r", dict(want, adopted_pin="sglang==0.5.12"))
    assert not ok and "sglang==0.5.12" in why
    (live / "bin/extra").write_text("x")
    ok, why, _ = up_to_date(str(live), str(tmp_path / "fact"), "r", want)
    assert not ok and "changed since its adoption" in why


def test_recipe_hash_tracks_the_image_packages_not_the_wheelhouse(tmp_path):
    """venv_system_site_packages, venv_extra_site_dirs and venv_pip_check_exempt are part of the recipe (a change rebuilds);
    off, the recipe hashes as before they existed. The wheelhouse is not (the lock's hashes decide the bytes)."""
    req, pkg, patches = inputs(tmp_path)
    args = ("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])
    base = vb.recipe(*args)
    off = {"system_site_packages": False, "site_dirs": [], "pip_check_exempt": []}
    assert vb.recipe(*args, image=off)["recipe_hash"] == base["recipe_hash"]
    variants = [vb.recipe(*args, image=dict(off, system_site_packages=True)),
                vb.recipe(*args, image=dict(off, site_dirs=["/opt/torch/.venv/lib/python3.12/site-packages"])),
                vb.recipe(*args, image=dict(off, pip_check_exempt=["timm"]))]
    assert len({v["recipe_hash"] for v in variants} | {base["recipe_hash"]}) == 4
    assert variants[0]["system_site_packages"] is True and "system_site_packages" not in base
    assert vb.recipe(*args, image=dict(off, pip_check_exempt=["b", "a"]))["pip_check_exempt"] == ["a", "b"]


def test_site_dirs_must_be_absolute_and_normalised(tmp_path):
    lock = lock_for(tmp_path / "lock.txt")
    (tmp_path / "p").mkdir()
    with pytest.raises(BuildError, match="site_dirs must be absolute, normalised paths: relative/site"):
        vb.build_if_needed(**_build_kw(tmp_path, lock, site_dirs=["relative/site"]))


def _system_site_broken(tmp_path) -> set[str]:
    """Requirement names pip check reports for a bare venv with system site packages on this machine (a Debian host
    may hold e.g. python3-gi without python3-cairo): the tests tolerate those and no more."""
    import re
    bare = tmp_path / "bare-venv"
    subprocess.run([BASE_PYTHON, "-m", "venv", "--system-site-packages", str(bare)], check=True, capture_output=True)
    out = subprocess.run([str(bare / "bin/python"), "-m", "pip", "check"], capture_output=True, text=True).stdout
    return {a or b for a, b in re.findall(r"requires ([A-Za-z0-9._-]+), which is not installed|"
                                          r"has requirement ([A-Za-z0-9._-]+)", out)}


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_wheelhouse_build_contacts_no_index_and_sees_the_image(tmp_path, monkeypatch):
    """A lock without any index line, the wheels in a host directory, pip's index pointed at a closed loopback port:
    the build installs from the wheelhouse alone. System site packages and an image site directory (.pth) make the
    image's packages importable; pip check tolerates only the exempt requirement; provenance reads it from the venv."""
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # discard port: nothing listens
    monkeypatch.setenv("PIP_RETRIES", "0")
    house = tmp_path / "wheelhouse"
    needy = tiny_wheel(house, "needy", "1.0", extra={"needy-1.0.dist-info/METADATA": (
        "Metadata-Version: 2.1\nName: needy\nVersion: 1.0\nRequires-Dist: notcarried\n")})
    lock = tmp_path / "lock.txt"
    lock.write_text(f"needy==1.0 --hash=sha256:{hashlib.sha256(needy.read_bytes()).hexdigest()}\n")
    image = tmp_path / "image-site"
    (image / "imagepkg").mkdir(parents=True)
    (image / "imagepkg/__init__.py").write_text("WHERE = 'image'\n")
    (tmp_path / "p").mkdir()
    system = _system_site_broken(tmp_path)  # what this machine's own system packages already break, tolerated
    kw = _build_kw(tmp_path, lock, wheelhouse=str(house), system_site_packages=True, site_dirs=[str(image)],
                   import_names=["needy", "imagepkg"], pip_check_exempt=sorted(system))
    with pytest.raises(BuildError, match="needy 1.0 requires notcarried, which is not installed"):
        vb.build_if_needed(**kw)  # not exempt: pip check fails the build
    r = vb.build_if_needed(**dict(kw, pip_check_exempt=sorted(system | {"notcarried"})))
    assert r["steps"] == ["venv", "lock", "pip_check", "patches", "imports"]
    assert [t for t in r["pip_check_tolerated"] if "notcarried" in t or "needy" in t] == [
        "needy 1.0 requires notcarried, which is not installed."]
    assert r["recipe"]["system_site_packages"] is True and r["recipe"]["site_dirs"] == [str(image)]
    stage = Path(r["stage"])
    assert "include-system-site-packages = true" in (stage / "pyvenv.cfg").read_text()
    c = vs.commit(kw["path"])
    live = Path(kw["path"])
    out = subprocess.run([str(live / "bin/python"), "-c", "import imagepkg, needy; print(imagepkg.WHERE)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "image"
    _, prov = vp.provenance(str(live), str(tmp_path / "p.fact"), c["digest"], {}, "needy", "needy")
    assert prov["system_site_packages"] is True and prov["site_dirs"] == [str(image)]


@pytest.mark.skipif(not _can_unshare(), reason="needs root and mount namespaces")
def test_a_locked_package_the_image_also_has_is_installed_in_the_venv_with_its_console_script(tmp_path, monkeypatch):
    """H200 rehearsal: the image's venv (venv_extra_site_dirs) had ninja 1.13.2, the lock pins the same; with the .pth
    written before the lock's install, pip took ninja as already satisfied and the venv's bin had no `ninja`, so
    FlashInfer's JIT (it runs ninja from PATH) killed the first start. Every locked package must land in the venv."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    ep = {"tool-1.0.dist-info/entry_points.txt": "[console_scripts]\ntool = tool:main\n",
          "tool/__init__.py": "def main():\n    print('venv tool')\n"}
    house = tmp_path / "wheelhouse"
    wheel = tiny_wheel(house, "tool", "1.0", extra=ep)
    lock = lock_for(tmp_path / "lock.txt", wheel)
    image = tmp_path / "image-site"        # the same distribution, installed in the image's site dir
    (image / "tool").mkdir(parents=True)
    (image / "tool/__init__.py").write_text("def main():\n    print('image tool')\n")
    (image / "tool-1.0.dist-info").mkdir()
    (image / "tool-1.0.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: tool\nVersion: 1.0\n")
    (image / "tool-1.0.dist-info/INSTALLER").write_text("pip\n")
    (image / "tool-1.0.dist-info/RECORD").write_text("")
    (tmp_path / "p").mkdir()
    kw = _build_kw(tmp_path, lock, wheelhouse=str(house), site_dirs=[str(image)], import_names=["tool"])
    r = vb.build_if_needed(**kw)
    assert r["steps"][:2] == ["venv", "lock"], r["steps"]
    vs.commit(kw["path"])
    live = Path(kw["path"])
    assert (live / "bin/tool").is_file(), sorted(p.name for p in (live / "bin").iterdir())
    out = subprocess.run([str(live / "bin/tool")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "venv tool"
    assert any((live / "lib").glob("python3*/site-packages/" + vb.SITE_DIRS_PTH))


def test_recipe_records_that_the_image_is_joined_after_the_install(tmp_path):
    """Venvs built with the image's site dirs before the fix above lack console scripts: their recipe differs, so the
    role rebuilds them (a venv without image packages hashes as before)."""
    req, pkg, patches = inputs(tmp_path)
    args = ("lab", sys.executable, str(req), [str(pkg)], str(patches), [], [])
    with_dirs = vb.recipe(*args, image={"site_dirs": ["/opt/torch/.venv/lib/python3.12/site-packages"]})
    with_system = vb.recipe(*args, image={"system_site_packages": True})
    assert with_dirs["image_install"] == with_system["image_install"] == vb.IMAGE_INSTALL
    assert "image_install" not in vb.recipe(*args)
