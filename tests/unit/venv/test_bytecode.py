"""ansible.module_utils.venv.bytecode: the checker decides as importlib does (magic, flags, source hash or mtime+size, mode);
a compile makes every module's pyc valid; venv_commit compiles the stage before the swap, naming live paths, never
writing through a pyc hard-linked from the live venv. Real venvs made with `python -m venv --without-pip`."""
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils.venv import bytecode as vbc
from ansible.module_utils.venv import manifest as vm
from ansible.module_utils.venv import stage as vs

BASE_PYTHON = sys.executable if sys.prefix == sys.base_prefix else "/usr/bin/python3"
MODULES = {"pkg/__init__.py": "X = 1\n", "pkg/sub.py": "def f():\n    return 2\n", "top.py": "import pkg\n"}


def make_venv(root: Path) -> Path:
    subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    site = site_of(root)
    for rel, text in MODULES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    return root


def site_of(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


def pyc_of(venv: Path, rel: str) -> Path:
    tag = subprocess.run([str(venv / "bin/python"), "-c", "import sys; print(sys.implementation.cache_tag)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    src = site_of(venv) / rel
    return src.parent / "__pycache__" / f"{src.stem}.{tag}.pyc"


@pytest.fixture()
def venv(tmp_path):
    return make_venv(tmp_path / "venv")


def test_a_fresh_compile_passes_the_check(venv):
    before = vbc.run(str(venv), "check")
    assert before["sources"] == 3 and before["missing_count"] == 3 and before["invalid"] == 3
    assert {m["path"] for m in before["missing"]} == {str(site_of(venv) / r) for r in MODULES}
    done = vbc.run(str(venv), "compile")
    assert done["compiled"] == 3 and done["kept"] == 0 and done["errors"] == [] and done["mode"] == "checked-hash"
    after = vbc.run(str(venv), "check")
    assert after["invalid"] == 0 and after["valid"] == 3 and after["modes"] == {"checked-hash": 3}
    assert after["dirs"] == [str(site_of(venv).resolve())]
    head = pyc_of(venv, "pkg/sub.py").read_bytes()[:8]
    assert int.from_bytes(head[4:8], "little") == 0b11  # hash-based, checked against the source
    again = vbc.run(str(venv), "compile")
    assert again["compiled"] == 0 and again["kept"] == 3  # a valid checked-hash pyc is not rewritten


def test_a_changed_source_or_a_deleted_pyc_fails_the_check_naming_the_file(venv):
    vbc.run(str(venv), "compile")
    sub = site_of(venv) / "pkg/sub.py"
    sub.write_text("def f():\n    return 3\n")  # same size, new bytes
    stale = vbc.run(str(venv), "check")
    assert stale["invalid"] == 1 and stale["stale"] == [
        {"path": str(sub), "why": "source hash differs (the source changed after it was compiled)"}]
    assert "(stale: source hash differs" in vbc.describe_invalid(stale) and str(sub) in vbc.describe_invalid(stale)
    pyc_of(venv, "top.py").unlink()
    both = vbc.run(str(venv), "check")
    assert both["stale_count"] == 1 and both["missing"] == [{"path": str(site_of(venv) / "top.py")}]
    assert both["invalid"] == 2


def test_touching_a_source_keeps_a_checked_hash_pyc_but_not_a_timestamp_one(venv):
    vbc.run(str(venv), "compile")
    init = site_of(venv) / "pkg/__init__.py"
    st = init.stat()
    os.utime(init, (st.st_atime + 100, st.st_mtime + 100))  # mtime only: the bytes are the same
    assert vbc.run(str(venv), "check")["invalid"] == 0
    # a timestamp pyc (what importlib itself writes) goes stale on the same touch
    code = ("import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True, "
            "invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)")
    subprocess.run([str(venv / "bin/python"), "-c", code, str(init)], check=True)
    ok = vbc.run(str(venv), "check")
    assert ok["invalid"] == 0 and ok["modes"] == {"checked-hash": 2, "timestamp": 1}
    os.utime(init, (st.st_atime + 200, st.st_mtime + 200))
    stale = vbc.run(str(venv), "check")
    assert stale["stale"] == [{"path": str(init),
                               "why": "source mtime differs from the one the timestamp pyc recorded"}]


@pytest.mark.parametrize("damage, why", [
    (lambda b: b"\x00\x00" + b[2:], "is not this interpreter's"),
    (lambda b: b[:4] + (4).to_bytes(4, "little") + b[8:], "invalid flags 0x4"),
    (lambda b: b[:10], "truncated pyc"),
])
def test_a_pyc_importlib_would_reject_is_stale(venv, damage, why):
    vbc.run(str(venv), "compile")
    pyc = pyc_of(venv, "pkg/sub.py")
    pyc.write_bytes(damage(pyc.read_bytes()))
    result = vbc.run(str(venv), "check")
    assert result["invalid"] == 1 and why in result["stale"][0]["why"]
    assert vbc.run(str(venv), "compile")["compiled"] == 1 and vbc.run(str(venv), "check")["invalid"] == 0


def test_a_pyc_the_service_user_cannot_read_is_stale_and_recompiled_readable(venv):
    vbc.run(str(venv), "compile")
    pyc = pyc_of(venv, "pkg/sub.py")
    os.chmod(pyc, 0o600)
    result = vbc.run(str(venv), "check")
    assert result["stale"] == [{"path": str(site_of(venv) / "pkg/sub.py"),
                                "why": "pyc mode 0600 is not readable by other users"}]
    os.chmod(pyc.parent, 0o700)
    assert "cannot be searched by other users" in vbc.run(str(venv), "check")["stale"][0]["why"]
    vbc.run(str(venv), "compile")
    assert vbc.run(str(venv), "check")["invalid"] == 0
    assert pyc.stat().st_mode & 0o777 == 0o644 and pyc.parent.stat().st_mode & 0o055 == 0o055


def test_a_source_with_a_syntax_error_is_reported_not_counted(venv):
    bad = site_of(venv) / "pkg/py2_only.py"
    bad.write_text("print 'hello'\n")
    done = vbc.run(str(venv), "compile")
    assert done["compiled"] == 3 and done["uncompilable_count"] == 1 and done["uncompilable"][0]["path"] == str(bad)
    result = vbc.run(str(venv), "check")
    assert result["invalid"] == 0 and result["uncompilable_count"] == 1
    assert "SyntaxError" in result["uncompilable"][0]["error"]


def test_many_modules_compile_on_several_processes_as_on_one(venv):
    for i in range(150):
        (site_of(venv) / f"m{i}.py").write_text(f"VALUE = {i}\n")
    pooled = vbc.run(str(venv), "compile", ["--workers", "2"])
    assert pooled["workers"] == 2 and pooled["compiled"] == 153 and pooled["errors"] == []
    assert vbc.run(str(venv), "check")["valid"] == 153
    for pyc in (site_of(venv) / "__pycache__").iterdir():
        pyc.unlink()
    single = vbc.run(str(venv), "compile", ["--workers", "1"])
    assert single["workers"] == 1 and single["compiled"] == 151 and single["kept"] == 2  # pkg/ kept its two


def test_ensure_compiles_only_what_is_missing_and_check_mode_writes_nothing(venv):
    first = vbc.ensure(str(venv), check_mode=True)
    assert first["changed"] and first["before"]["invalid"] == 3 and not pyc_of(venv, "top.py").exists()
    done = vbc.ensure(str(venv))
    assert done["changed"] and done["compiled"]["compiled"] == 3 and done["after"]["invalid"] == 0
    inode = pyc_of(venv, "top.py").stat().st_ino
    pyc_of(venv, "pkg/sub.py").unlink()
    again = vbc.ensure(str(venv))
    assert again["changed"] and again["compiled"]["compiled"] == 1 and again["compiled"]["kept"] == 2
    assert pyc_of(venv, "top.py").stat().st_ino == inode  # valid pycs are left alone
    final = vbc.ensure(str(venv))
    assert final["changed"] is False and final["compiled"] == {} and final["before"]["invalid"] == 0


def test_the_importing_interpreter_finds_every_module_compiled(venv):
    vbc.run(str(venv), "compile")
    out = subprocess.run([str(venv / "bin/python"), "-v", "-c", "import top, pkg.sub"], capture_output=True,
                         text=True, check=True, env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    site = str(site_of(venv))
    loaded = [line for line in out.stderr.splitlines() if line.startswith("# code object from") and site in line]
    assert len(loaded) == 3 and all(line.endswith(".pyc'") for line in loaded), loaded


def test_commit_compiles_the_stage_before_the_swap_with_live_paths_and_no_write_through(tmp_path):
    live = tmp_path / "opt/venv"
    p = vs.paths(str(live))
    make_venv(Path(p["stage"]))
    first = vs.commit(str(live))
    assert first["bytecode"]["compiled"] == 3 and first["bytecode"]["orphans_removed"] == 0
    code = marshal.loads(pyc_of(live, "pkg/sub.py").read_bytes()[16:])
    assert code.co_filename == str(site_of(live) / "pkg/sub.py")  # the live path, not the stage's
    assert vbc.run(str(live), "check")["invalid"] == 0
    digest = vm.summary(vm.scan(str(live)))["digest"]
    # what a partial stream does: the stage is a hard-link copy of live (pycs included), one source replaced, one gone
    stage = Path(p["stage"])
    stage.mkdir()
    vs._link_tree(str(live), str(stage), set())
    sub_pyc_live = pyc_of(live, "pkg/sub.py")
    old_bytes, old_inode = sub_pyc_live.read_bytes(), sub_pyc_live.stat().st_ino
    (site_of(stage) / "pkg/sub.py").unlink()
    (site_of(stage) / "pkg/sub.py").write_text("def f():\n    return 4\n")
    (site_of(stage) / "pkg/__init__.py").unlink()
    (site_of(stage) / "pkg/__init__.py").write_text("")
    (site_of(stage) / "top.py").unlink()  # deleted upstream: its pyc is an orphan
    (site_of(stage) / "kept.py").write_text("")
    second = vs.commit(str(live))
    assert second["bytecode"]["compiled"] == 3 and second["bytecode"]["orphans_removed"] == 1
    assert second["digest"] != digest and vbc.run(str(live), "check")["invalid"] == 0
    assert not pyc_of(live, "top.py").exists()
    new_pyc = pyc_of(live, "pkg/sub.py")
    assert new_pyc.stat().st_ino != old_inode  # a new file: the old venv's pyc was not written through
    assert old_bytes != new_pyc.read_bytes()


def test_commit_refuses_to_swap_when_a_pyc_cannot_be_written(tmp_path):
    live = tmp_path / "opt/venv"
    p = vs.paths(str(live))
    stage = make_venv(Path(p["stage"]))
    cache = site_of(stage) / "pkg/__pycache__"
    cache.write_text("not a directory")  # py_compile cannot make the directory
    with pytest.raises(vs.StageError, match=r"byte-code of the stage: .*could not be written.*live venv left"):
        vs.commit(str(live))
    assert not live.exists() and stage.is_dir()
