"""filter_plugins/venv.py: the preflight's judgement of the host's base interpreter (module_utils/venv/lock.py
python_problem, given what `<venv_python> -c platform.python_version()` printed) and its wiring in the role."""
from pathlib import Path

import yaml

from filter_plugins.venv import FilterModule, venv_clone_input_problems, venv_pinned_version, venv_python_problem

ROOT = Path(__file__).resolve().parents[3]


def test_ubuntu_2204_python_3_10_is_refused_against_the_shipped_lock():
    from ansible.module_utils.venv import lock as vl
    lock_path = str(ROOT / "roles/venv/files/locks/ddtree.txt")
    floor = vl.read(lock_path)["header"]["python"]
    msg = venv_python_problem({"rc": 0, "stdout": "3.10.12\n", "stderr": ""}, floor, "/usr/bin/python3", lock_path)
    assert "venv_python /usr/bin/python3 is Python 3.10.12" in msg and f"CPython >= {floor}" in msg
    assert "deadsnakes" in msg
    assert venv_python_problem({"rc": 0, "stdout": "3.12.3\n"}, floor, "/usr/bin/python3", lock_path) == ""


def test_an_interpreter_that_does_not_run_is_refused_with_its_error():
    run = {"rc": 2, "stdout": "", "stderr": "", "msg": "[Errno 2] No such file or directory: b'/usr/bin/python3.12'"}
    msg = venv_python_problem(run, "3.11", "/usr/bin/python3.12")
    assert "/usr/bin/python3.12 does not run" in msg and "No such file" in msg
    assert "does not run" in venv_python_problem(None, "3.11", "/usr/bin/python3")   # skipped or absent


def test_filters_and_the_preflight_wiring():
    assert FilterModule().filters() == {"venv_clone_input_problems": venv_clone_input_problems,
                                        "venv_python_problem": venv_python_problem,
                                        "venv_pinned_version": venv_pinned_version}
    tasks = yaml.safe_load((ROOT / "roles/venv/tasks/preflight.yml").read_text())
    names = [t["name"] for t in tasks]
    check = names.index("Refuse a base interpreter the flavour's venv cannot use (naming it, what the lock needs, "
                        "the fix)")
    # after the lock is read (its Python is the floor) and the stream source's provenance (its Python)
    assert check > names.index("Full lock of the flavour (every line name==version with sha256 hashes, made from the "
                               "flavour's current pins)")
    expr = tasks[check]["vars"]["venv_python_refusal"]
    assert "venv_lock_check.python" in expr and "python_version" in expr and "3.11" not in expr


def test_pinned_version_from_the_lock_or_the_local_package():
    locks = ROOT / "roles/venv/files/locks"
    assert venv_pinned_version(locks / "ddtree.txt", "sglang") == "0.5.11"
    assert venv_pinned_version(locks / "lab.txt", "sglang-standin", [str(ROOT / "lab/sglang_standin")]) \
        == "0.5.11.post0+standin"
    assert venv_pinned_version(locks / "lab.txt", "sglang") == ""
