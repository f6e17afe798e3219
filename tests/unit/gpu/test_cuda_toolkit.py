"""module_utils/gpu/cuda_toolkit.py: the toolkit at a CUDA_HOME - its version (version.json, version.txt, else
include/cuda.h for the wheel layouts) and nvcc --version's release - and every reason it is not the release asked
for, each naming what was found (the cuda role's existing route refuses with these, its verify fails with them)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ansible.module_utils.gpu.cuda_toolkit import (cuda_version, header_version, inspect, nvcc_release,
                                                   same_release, toolkit_version)

# What real nvcc 13.0 (nvidia-cuda-nvcc 13.0.88) prints for --version.
NVCC_13_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
# The wheel layouts' only version record: include/cuda.h (nvidia-cuda-runtime 13.0.96: nvidia/cu13/include/cuda.h).
CUDA_H = "#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n/* ... */\n#define CUDA_VERSION {v}\n#endif\n"


def toolkit(root: Path, nvcc_text: str | None = NVCC_13_0, version_json: str | None = None, cuda_h: int | None = None,
            nvcc_rc: int = 0, executable: bool = True) -> Path:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    if version_json is not None:
        (root / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "%s"}}\n' % version_json)
    if cuda_h is not None:
        (root / "include").mkdir(exist_ok=True)
        (root / "include" / "cuda.h").write_text(CUDA_H.format(v=cuda_h))
    if nvcc_text is not None:
        nvcc = root / "bin" / "nvcc"
        nvcc.write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\nexit %d\n" % (nvcc_text, nvcc_rc))
        nvcc.chmod(0o755 if executable else 0o644)
    return root


def test_version_sources_in_order(tmp_path):
    both = toolkit(tmp_path / "apt", version_json="13.0.2", cuda_h=13000)
    assert toolkit_version(str(both)) == ("13.0.2", "version.json")
    old = tmp_path / "old"
    old.mkdir()
    (old / "version.txt").write_text("CUDA Version 12.4.131\n")
    assert toolkit_version(str(old)) == ("12.4.131", "version.txt") and cuda_version(str(old)) == "12.4.131"
    wheels = toolkit(tmp_path / "wheels", cuda_h=13000)
    assert toolkit_version(str(wheels)) == ("13.0", "include/cuda.h")
    # cuda_version (the compile-cache key, the cross-rank fact) still reads the version files only
    assert cuda_version(str(wheels)) == ""
    assert toolkit_version(str(tmp_path / "none")) == ("", "")


@pytest.mark.parametrize("define,expected", [(13000, "13.0"), (12080, "12.8"), (13020, "13.2"), (11070, "11.7")])
def test_header_version(tmp_path, define, expected):
    assert header_version(str(toolkit(tmp_path, cuda_h=define))) == expected


def test_nvcc_release_and_same_release():
    assert nvcc_release(NVCC_13_0) == "13.0"
    assert nvcc_release("Cuda compilation tools, release 12.8, V12.8.93") == "12.8"
    assert nvcc_release("nvcc: command not found") == "" and nvcc_release(None) == ""
    assert same_release("13.0.2", "13.0") and same_release("13.0.2-1", "13.0") and same_release("13.0", "13.0")
    assert not same_release("13.1.0", "13.0") and not same_release("", "13.0") and not same_release("130", "13.0")


def test_a_toolkit_of_the_release_has_no_problem(tmp_path):
    apt = inspect(str(toolkit(tmp_path / "apt", version_json="13.0.2")), "13.0")
    assert apt["problems"] == [], apt
    assert (apt["version"], apt["version_source"], apt["nvcc_release"], apt["nvcc_rc"]) == \
        ("13.0.2", "version.json", "13.0", 0)
    wheels = inspect(str(toolkit(tmp_path / "wheels", cuda_h=13000)), "13.0")
    assert wheels["problems"] == [] and wheels["version_source"] == "include/cuda.h", wheels


def test_a_symlinked_cuda_home_is_followed(tmp_path):
    real = toolkit(tmp_path / "cuda-13.0", version_json="13.0.2")
    (tmp_path / "cuda").symlink_to(real)
    assert inspect(str(tmp_path / "cuda"), "13.0")["problems"] == []


def test_missing_or_not_a_directory(tmp_path):
    res = inspect(str(tmp_path / "cuda-13.0"), "13.0")
    assert res["problems"] == [f"{tmp_path}/cuda-13.0 does not exist"] and not res["exists"]
    (tmp_path / "file").write_text("x")
    assert inspect(str(tmp_path / "file"), "13.0")["problems"] == [f"{tmp_path}/file is not a directory"]


def test_another_version_is_named_from_both_sources(tmp_path):
    home = toolkit(tmp_path, version_json="12.8.1",
                   nvcc_text=NVCC_13_0.replace("release 13.0, V13.0.88", "release 12.8, V12.8.93"))
    res = inspect(str(home), "13.0")
    assert res["problems"] == [f"{home}/version.json says CUDA 12.8.1, not 13.0",
                               f"{home}/bin/nvcc --version reports release 12.8, not 13.0"], res
    # a version file that disagrees with nvcc (a half-upgraded toolkit) is refused too
    mixed = toolkit(tmp_path / "mixed", version_json="13.1.0")
    assert inspect(str(mixed), "13.0")["problems"] == [f"{mixed}/version.json says CUDA 13.1.0, not 13.0"]


def test_no_version_at_all(tmp_path):
    home = toolkit(tmp_path)
    assert inspect(str(home), "13.0")["problems"] == [
        f"{home} has no version.json, version.txt or include/cuda.h naming a CUDA version (not a CUDA toolkit)"]


def test_nvcc_missing_not_executable_failing_or_silent(tmp_path):
    home = toolkit(tmp_path / "a", nvcc_text=None, version_json="13.0.2")
    assert inspect(str(home), "13.0")["problems"] == [f"{home}/bin/nvcc is missing"]
    home = toolkit(tmp_path / "b", version_json="13.0.2", executable=False)
    res = inspect(str(home), "13.0")
    assert res["problems"] == [f"{home}/bin/nvcc is not executable"] and res["nvcc_rc"] is None
    home = toolkit(tmp_path / "c", version_json="13.0.2", nvcc_text="libnvvm.so: cannot open shared object\n", nvcc_rc=1)
    assert inspect(str(home), "13.0")["problems"] == [
        f"{home}/bin/nvcc --version exited 1: libnvvm.so: cannot open shared object"]
    home = toolkit(tmp_path / "d", version_json="13.0.2", nvcc_text="hello\n")
    assert inspect(str(home), "13.0")["problems"] == [f"{home}/bin/nvcc --version printed no release line: hello"]


def test_nvcc_that_cannot_start_or_hangs(tmp_path):
    home = toolkit(tmp_path, version_json="13.0.2")

    def hangs(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"])
    res = inspect(str(home), "13.0", run=hangs, timeout=5)
    assert len(res["problems"]) == 1 and "--version could not run" in res["problems"][0] and "timed out" in \
        res["problems"][0]
    asked = []

    def answers(argv, **kw):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, NVCC_13_0, "")
    assert inspect(str(home), "13.0", run=answers)["problems"] == []
    assert asked == [[f"{home}/bin/nvcc", "--version"]]


@pytest.mark.skipif(not os.access("/usr/local/cuda-13.0/bin/nvcc", os.X_OK), reason="no CUDA 13.0 on this machine")
def test_this_machines_toolkit():
    """A real toolkit laid out from NVIDIA's wheels (this machine's, like the pip route's): no version file, the
    version from include/cuda.h, the release from the real nvcc."""
    res = inspect("/usr/local/cuda-13.0", "13.0")
    assert res["problems"] == [] and res["nvcc_release"] == "13.0", res
    assert inspect("/usr/local/cuda-13.0", "12.8")["problems"][-1].endswith("reports release 13.0, not 12.8")
