"""roles/cuda with cuda_install_method: existing, through ansible-playbook on this machine (connection local,
preflight and install only: those change nothing on this route, which is what is tested): a toolkit of cuda_version
already in cuda_home - the pip route's symlinked wheel layout here, an apt/runfile tree alike - is adopted with no
change and nothing installed; one of another version, or none, is refused by preflight before any change, naming
what it found and the way out. (Configure and verify are the other routes' own; the lab test in
tests/integration/test_cuda.py runs them on an adopted toolkit.)"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PLAY = """
- hosts: localhost
  gather_facts: false
  connection: local
  roles:
    - role: cuda
"""
REFUSE = "Refuse to adopt cuda_home unless it holds the CUDA release asked for (existing route)"
INSTALLING = ("Create the venv for the CUDA wheels", "Create the keyring download directory", "Create cuda_home",
              "Install the CUDA wheels into the venv", "Install the cuda-keyring package")


def wheel_layout(tmp_path: Path, release: str, cuda_h: int) -> Path:
    """cuda_home as the pip route lays it out: bin, include, lib symlinked into the wheels' tree, lib64 -> lib."""
    tree = tmp_path / "venv/lib/python3.11/site-packages/nvidia/cu13"
    for d in ("bin", "include", "lib"):
        (tree / d).mkdir(parents=True)
    (tree / "include/cuda.h").write_text(f"#define CUDA_VERSION {cuda_h}\n")
    (tree / "bin/nvcc").write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.88'\n")
    (tree / "bin/nvcc").chmod(0o755)
    home = tmp_path / "cuda-13.0"
    home.mkdir()
    for d in ("bin", "include", "lib"):
        (home / d).symlink_to(tree / d)
    (home / "lib64").symlink_to("lib")
    return home


def run(tmp_path, cuda_home, check=False):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extravars = {"cuda_install_method": "existing", "cuda_home": str(cuda_home), "cuda_version": "13.0",
                 "deploy_cuda_home": "/nonexistent", "deploy_gpu_count": 0, "deploy_gpu_compute_capability": "",
                 "cuda_nvidia_smi": str(tmp_path / "no-nvidia-smi"), "ansible_python_interpreter": sys.executable}
    (tmp_path / "vars.json").write_text(json.dumps(extravars))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play), "-v",
            "--tags", "cuda_preflight,cuda_install", "-e", f"@{tmp_path / 'vars.json'}"] + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT),
                               "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "ANSIBLE_NOCOLOR": "1",
                               "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
                               "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
    out = proc.stdout + proc.stderr
    recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert recap, out[-3000:]
    return proc.returncode, out, {"ok": int(recap[1]), "changed": int(recap[2]), "failed": int(recap[3])}


def test_a_toolkit_of_the_release_is_adopted_changing_and_installing_nothing(tmp_path):
    home = wheel_layout(tmp_path, "13.0", 13000)

    def tree():
        return sorted((str(p), p.lstat().st_mtime_ns) for d in ("venv", "cuda-13.0") for p in (tmp_path / d).rglob("*"))
    before = tree()
    for check in (False, True):
        rc, out, recap = run(tmp_path, home, check=check)
        assert rc == 0 and recap["changed"] == 0 and recap["failed"] == 0, out[-3000:]
        assert "TASK [cuda : Adopt the toolkit already in cuda_home, installing nothing (existing route)]" in out
        assert '"version_source": "include/cuda.h"' in out and '"nvcc_release": "13.0"' in out, out[-3000:]
        assert not [t for t in INSTALLING if f"TASK [cuda : {t}]" in out], out[-3000:]
        # the apt/pip layout guard does not apply: an adopted toolkit may have either layout
        assert re.search(r"TASK \[cuda : Refuse to mix the apt and pip layouts in cuda_home\][^\n]*\n"
                         r"(?:[^\n]*\n)?skipping: \[localhost\]", out), out[-3000:]
    assert tree() == before


def test_another_release_is_refused_before_any_change_naming_it(tmp_path):
    home = wheel_layout(tmp_path, "12.8", 12080)
    rc, out, recap = run(tmp_path, home)
    assert rc != 0 and recap["changed"] == 0 and recap["failed"] == 1, out[-3000:]
    assert f"TASK [cuda : {REFUSE}]" in out
    assert (f"{home} is not a CUDA 13.0 toolkit: {home}/include/cuda.h says CUDA 12.8, not 13.0; "
            f"{home}/bin/nvcc --version reports release 12.8, not 13.0. Nothing was changed.") in out, out[-3000:]
    assert "or let the role install one (cuda_install_method: apt or pip)" in out
    assert "TASK [cuda : Adopt the toolkit" not in out


def test_no_toolkit_is_refused_naming_the_path(tmp_path):
    rc, out, recap = run(tmp_path, tmp_path / "cuda-13.0", check=True)
    assert rc != 0 and recap["changed"] == 0, out[-3000:]
    assert f"{tmp_path}/cuda-13.0 is not a CUDA 13.0 toolkit: {tmp_path}/cuda-13.0 does not exist." in out, out[-3000:]
