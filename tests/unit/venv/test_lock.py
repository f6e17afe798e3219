"""ansible.module_utils.venv.lock: the shipped locks are full (every line pinned and hashed) and fresh (made from the shipped
pins); the parser reads requirements files as pip does and refuses, naming the line, what hash-checking mode would."""
import hashlib
import re
from pathlib import Path

import pytest

from ansible.module_utils.venv import lock as vl

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "roles/venv/files"
FLAVOURS = ["lab", "ddtree", "upstream"]          # resolved by uv against PyPI
WHEELHOUSE_FLAVOURS = ["image-torch-0511"]          # locked from a bundle's wheels (LOCK_WHEELHOUSE)
H1, H2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


@pytest.mark.parametrize("flavour", FLAVOURS + WHEELHOUSE_FLAVOURS)
def test_each_shipped_lock_is_full_and_made_from_the_shipped_pins(flavour):
    lock = vl.read(str(FILES / f"locks/{flavour}.txt"))
    assert lock["entries"] and all(e["hashes"] and e["version"] for e in lock["entries"])
    # the lock header names the sha256 of the pins file as it is now: an edited input without a re-lock fails here
    info = vl.check_input(lock, str(FILES / f"requirements/{flavour}.txt"))
    assert lock["header"]["input"] == f"requirements/{flavour}.txt" and len(info["input_sha256"]) == 64
    # every top-level pin of the input is in the lock at that version
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", (FILES / f"requirements/{flavour}.txt").read_text(), re.M)
    versions = {(e["name"], e["version"]) for e in lock["entries"]}
    assert pins and all((vl.canonical_name(n), v) in versions for n, v in pins)


def test_shipped_locks_hold_what_their_flavour_needs():
    lab = vl.read(str(FILES / "locks/lab.txt"))
    assert lab["names"] == ["idna", "six"]  # the stand-in needs nothing: no dependencies, a stdlib build backend
    assert vl.check_local_packages(lab, [str(ROOT / "lab/sglang_standin")]) == []
    six = next(e for e in lab["entries"] if e["name"] == "six")
    assert six["version"] == "1.17.0" and len(six["hashes"]) == 2  # the wheel and the sdist, as on PyPI
    ddtree = vl.read(str(FILES / "locks/ddtree.txt"))
    pinned = {e["name"]: e["version"] for e in ddtree["entries"] if not e["marker"]}
    assert pinned["sglang"] == "0.5.11" and pinned["torch"] == "2.11.0"
    assert {"setuptools", "setuptools-scm", "wheel"} <= set(ddtree["names"])  # the clone route's build backend
    upstream = vl.read(str(FILES / "locks/upstream.txt"))
    assert {e["name"]: e["version"] for e in upstream["entries"] if not e["marker"]}["sglang"] == "0.5.23"
    assert len(ddtree["entries"]) > 150 and len(upstream["entries"]) > 150
    # the cu130 instructions are in the header the operator reads
    assert "LOCK_TORCH_BACKEND=cu130 roles/venv/files/locks/lock.sh ddtree" in (FILES / "locks/ddtree.txt").read_text()


def test_logical_lines_join_continuations_and_drop_comments_as_pip_does():
    text = ("# header\n\nsix==1.17.0 \\\n    --hash=" + H1 + " \\\n    --hash=" + H2 + "\n    # via -r x.txt\n"
            "idna==3.10 --hash=" + H1 + "  # trailing comment\n")
    assert vl.logical_lines(text) == [(3, f"six==1.17.0     --hash={H1}     --hash={H2}"),
                                      (7, f"idna==3.10 --hash={H1}")]
    lock = vl.parse(text)
    assert [(e["name"], e["version"], e["hashes"], e["line"]) for e in lock["entries"]] == [
        ("six", "1.17.0", [H1, H2], 3), ("idna", "3.10", [H1], 7)]


def test_markers_local_versions_options_and_names_are_read():
    text = (f"--extra-index-url https://download.pytorch.org/whl/cu130\n--find-links=/srv/wheels\n"
            f"torch==2.11.0+cu130 ; sys_platform == 'linux' --hash={H1}\n"
            f"numpy==2.3.5 ; python_full_version < '3.13' --hash={H1}\n"
            f"numpy==2.5.5 ; python_full_version >= '3.13' --hash={H2}\n"
            f"Typing_Extensions==4.16.0 --hash={H2}\n")
    lock = vl.parse(text)
    assert lock["options"] == [["--extra-index-url", "https://download.pytorch.org/whl/cu130"],
                               ["--find-links", "/srv/wheels"]]
    torch = lock["entries"][0]
    assert (torch["version"], torch["marker"]) == ("2.11.0+cu130", "sys_platform == 'linux'")
    assert lock["names"] == ["numpy", "torch", "typing-extensions"]


@pytest.mark.parametrize("line, problem", [
    ("six==1.17.0", "six==1.17.0 has no --hash=sha256"),
    (f"six>=1.16 --hash={H1}", "six is not pinned to one exact version"),
    (f"six~=1.16 --hash={H1}", "six is not pinned to one exact version"),
    (f"six===1.17.0 --hash={H1}", "six is not pinned to one exact version"),
    (f"six==1.* --hash={H1}", "six is not pinned to one exact version"),
    (f"six --hash={H1}", "six is not pinned (name==version)"),
    (f"six==1.17.0 --hash=md5:{'a' * 32}", "is not sha256:<64 lowercase hex>"),
    (f"six==1.17.0 --hash=sha256:{'A' * 64}", "is not sha256:<64 lowercase hex>"),
    (f"six @ https://example.org/six.whl --hash={H1}", "a URL or path is not a locked release"),
    (f"./wheels/six-1.17.0-py3-none-any.whl --hash={H1}", "a URL or path is not a locked release"),
    ("-r more.txt", "option -r is not allowed"),
    ("-c constraints.txt", "option -c is not allowed"),
    ("--trusted-host example.org", "option --trusted-host is not allowed"),
    ("--index-url https://a https://b", "--index-url needs exactly one URL or path"),
])
def test_a_bad_line_is_refused_naming_its_number(line, problem):
    text = f"# lock\nidna==3.10 --hash={H1}\n{line}\n"
    with pytest.raises(vl.LockError, match=re.escape(problem)) as err:
        vl.parse(text, "locks/lab.txt")
    assert str(err.value).startswith("locks/lab.txt:3: ")


def test_a_name_locked_twice_for_the_same_markers_is_refused():
    with pytest.raises(vl.LockError, match="six is locked twice .first at line 1"):
        vl.parse(f"six==1.17.0 --hash={H1}\nsix==1.16.0 --hash={H2}\n")
    vl.parse(f"six==1.17.0 ; python_version >= '3.12' --hash={H1}\nsix==1.16.0 ; python_version < '3.12' --hash={H2}\n")


def test_canonical_form_ignores_comments_and_order_not_hashes_or_options():
    a = vl.parse(f"# one\nsix==1.17.0 --hash={H1} --hash={H2}\nidna==3.10 --hash={H1}\n")
    b = vl.parse(f"# two\nidna==3.10 --hash={H1}\n    # via x\nsix==1.17.0 --hash={H2} --hash={H1}\n")
    assert vl.lock_hash(a) == vl.lock_hash(b)
    c = vl.parse(f"six==1.17.0 --hash={H1}\nidna==3.10 --hash={H1}\n")
    d = vl.parse(f"--extra-index-url https://x\nsix==1.17.0 --hash={H1} --hash={H2}\nidna==3.10 --hash={H1}\n")
    assert len({vl.lock_hash(a), vl.lock_hash(c), vl.lock_hash(d)}) == 3


def test_check_input_refuses_a_lock_made_from_other_pins(tmp_path):
    pins = tmp_path / "lab.txt"
    pins.write_text("six==1.17.0\n")
    sha = hashlib.sha256(pins.read_bytes()).hexdigest()
    lock = vl.parse(f"# input: requirements/lab.txt sha256={sha}\nsix==1.17.0 --hash={H1}\n")
    assert vl.check_input(lock, str(pins))["input_sha256"] == sha
    pins.write_text("six==1.17.0\nidna==3.10\n")
    with pytest.raises(vl.LockError, match="generated from another lab.txt .*re-run roles/venv/files/locks/lock.sh"):
        vl.check_input(lock, str(pins))
    with pytest.raises(vl.LockError, match="has no '# input: <file> sha256=<hex>' header line"):
        vl.check_input(vl.parse(f"six==1.17.0 --hash={H1}\n"), str(pins))


def test_local_packages_must_find_their_backend_and_dependencies_in_the_lock(tmp_path):
    tree = tmp_path / "pkg"
    tree.mkdir()
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61", "setuptools-scm>=8"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "Pkg_One"\nversion = "1"\n'
        'dependencies = ["Six>=1", "other-local", "tomli; python_version<\'3.11\'"]\n')
    lock = vl.parse(f"setuptools==81.0.0 --hash={H1}\nsix==1.17.0 --hash={H1}\n")
    problems = vl.check_local_packages(lock, [str(tree)], ("other-local",))
    assert problems == [f"{tree}: build backend requirement(s) setuptools-scm>=8 not in the lock (the build runs with "
                        "--no-build-isolation: add them to the flavour's input and re-lock)"]
    assert vl.project_name(str(tree)) == "pkg-one"
    assert any("dependencies other-local" in p for p in vl.check_local_packages(lock, [str(tree)]))
    setup_only = tmp_path / "legacy"
    setup_only.mkdir()
    (setup_only / "setup.py").write_text("")
    assert "setuptools>=40.8.0" in vl.check_local_packages(vl.parse(f"six==1.17.0 --hash={H1}\n"), [str(setup_only)])[0]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_shipped_lock_names_the_python_it_was_resolved_for(flavour):
    """The one record of the host Python a flavour needs: lock.sh's resolver header (LOCK_PYTHON)."""
    lock = vl.read(str(FILES / f"locks/{flavour}.txt"))
    assert lock["header"]["python"] == re.search(r"^python=\$\{LOCK_PYTHON:-([0-9.]+)\}$",
                                                 (FILES / "locks/lock.sh").read_text(), re.M).group(1)
    assert vl.summary(lock)["python"] == lock["header"]["python"]
    assert "python" not in vl.parse(f"six==1.17.0 --hash={H1}\n")["header"]   # a lock without the header: unknown


def test_a_host_python_older_than_the_lock_is_refused_naming_it_the_need_and_the_fix():
    msg = vl.python_problem("3.10.12", "3.11", "/usr/bin/python3", "locks/ddtree.txt")
    assert msg.startswith("venv_python /usr/bin/python3 is Python 3.10.12, but the lock locks/ddtree.txt was "
                          "resolved for CPython >= 3.11")
    assert "ppa:deadsnakes/ppa" in msg and "venv_python: /usr/bin/python3.12" in msg and "python3.12-venv" in msg
    assert vl.python_problem("3.11.2", "3.11", "/usr/bin/python3") == ""
    assert vl.python_problem("3.12.3", "3.11", "/usr/bin/python3") == ""
    assert vl.python_problem("3.9.18", "", "/usr/bin/python3") == ""          # no floor recorded: nothing to judge
    gone = vl.python_problem("", "3.11", "/usr/bin/python3.12", error="[Errno 2] No such file or directory")
    assert "venv_python /usr/bin/python3.12 does not run" in gone and "No such file" in gone and "3.11+" in gone
    # a streamed venv: the target's interpreter must be the source's major.minor
    assert "made with Python 3.12.3" in vl.python_problem("3.11.2", "3.11", "/usr/bin/python3", same_as="3.12.3")
    assert vl.python_problem("3.12.1", "3.11", "/usr/bin/python3", same_as="3.12.3") == ""


def test_the_wheelhouse_lock_is_exactly_the_pins_one_wheel_each_for_the_images_python():
    """image-torch-0511: one line per wheel of the bundle (name==version, the sha256 of that file), exactly the
    flavour's pins (the one list stage.sh downloads), CPython 3.12 from the wheels' tags; no torch (the image's)."""
    text = (FILES / "locks/image-torch-0511.txt").read_text()
    lock = vl.read(str(FILES / "locks/image-torch-0511.txt"))
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", (FILES / "requirements/image-torch-0511.txt").read_text(),
                           re.M))
    assert {e["name"]: e["version"] for e in lock["entries"]} == {vl.canonical_name(n): v for n, v in pins.items()}
    assert all(len(e["hashes"]) == 1 and not e["marker"] for e in lock["entries"]) and not lock["options"]
    assert lock["header"]["python"] == "3.12" and "# resolver: wheelhouse" in text
    assert {"sglang", "sglang-kernel"} <= set(lock["names"]) and "torch" not in lock["names"]
    assert vl.pinned_version(lock, "sglang") == "0.5.11"


def test_lock_sh_wheelhouse_mode_locks_the_files_and_refuses_a_wheelhouse_that_is_not_the_pins(tmp_path):
    import shutil
    import subprocess
    files = tmp_path / "files"
    shutil.copytree(FILES / "locks", files / "locks")
    (files / "requirements").mkdir()
    (files / "requirements/tiny.txt").write_text("# pins\nsix==1.17.0\nPyYAML==6.0.3\n")
    house = tmp_path / "house"
    house.mkdir()
    (house / "six-1.17.0-py2.py3-none-any.whl").write_bytes(b"six")
    (house / "pyyaml-6.0.3-cp312-cp312-manylinux_2_17_x86_64.whl").write_bytes(b"yaml")
    run = lambda: subprocess.run(["bash", str(files / "locks/lock.sh"), "tiny"], capture_output=True, text=True,
                                 env={"PATH": "/usr/bin:/bin", "LOCK_WHEELHOUSE": str(house)}, timeout=60)
    out = run()
    assert out.returncode == 0, out.stderr
    lock = vl.read(str(files / "locks/tiny.txt"))
    assert [(e["name"], e["version"], e["hashes"]) for e in lock["entries"]] == [
        ("pyyaml", "6.0.3", ["sha256:" + hashlib.sha256(b"yaml").hexdigest()]),
        ("six", "1.17.0", ["sha256:" + hashlib.sha256(b"six").hexdigest()])]
    assert lock["header"]["python"] == "3.12"
    vl.check_input(lock, str(files / "requirements/tiny.txt"))
    (house / "idna-3.10-py3-none-any.whl").write_bytes(b"idna")
    (house / "six-1.17.0-py2.py3-none-any.whl").unlink()
    out = run()
    assert out.returncode != 0 and "no wheel of six==1.17.0" in out.stderr
    assert "idna-3.10-py3-none-any.whl is not a pin of requirements/tiny.txt" in out.stderr


def test_the_image_flavour_carries_the_executables_its_jit_runs():
    # On the image the venv sees the image's packages through a .pth, so pip check is satisfied by the image's ninja;
    # but FlashInfer's JIT runs the `ninja` EXECUTABLE from PATH (flashinfer/jit/cpp_ext.py run_ninja), and the unit's
    # PATH has the venv's bin, not the image venv's. The H200 rehearsal's first real start died there
    # (FileNotFoundError: 'ninja' in flashinfer's rmsnorm JIT): the venv must hold the executable itself.
    lock = vl.parse((ROOT / "roles/venv/files/locks/image-torch-0511.txt").read_text())
    names = {e["name"] for e in lock["entries"]}
    assert "ninja" in names
