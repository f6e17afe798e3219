"""The CUDA toolkit installed at a CUDA_HOME: its version, as the compile-cache key and the multi-node consistency
check read it (version.json, else the older version.txt), and the cuda role's inspection of a toolkit it is to
verify or adopt (`inspect`: the version file, else the headers, and what `<cuda_home>/bin/nvcc --version` reports).
"""
from __future__ import annotations

import json
import os
import re
import subprocess

# nvcc --version's release line: "Cuda compilation tools, release 13.0, V13.0.88".
NVCC_RELEASE = re.compile(r"\brelease ([0-9]+\.[0-9]+),")
# include/cuda.h (every layout ships it: runfile, NVIDIA's apt packages, the nvidia-cuda-runtime wheel):
# "#define CUDA_VERSION 13000" = 1000 * major + 10 * minor.
CUDA_H_VERSION = re.compile(r"^#define\s+CUDA_VERSION\s+([0-9]+)\s*$", re.M)


def _version_file(cuda_home: str) -> tuple[str, str]:
    """(version, file it came from): version.json's cuda.version, else version.txt's "CUDA Version X"; ("", "")."""
    if not cuda_home:
        return "", ""
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as fh:
            return str(json.load(fh)["cuda"]["version"]), "version.json"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(cuda_home, "version.txt"), encoding="utf-8") as fh:
            m = re.search(r"CUDA Version\s+([0-9.]+)", fh.read())
            return (m.group(1), "version.txt") if m else ("", "")
    except OSError:
        return "", ""


def cuda_version(cuda_home: str) -> str:
    """The CUDA toolkit's version at cuda_home (version.json, else version.txt); "" when there is none."""
    return _version_file(cuda_home)[0]


def header_version(cuda_home: str) -> str:
    """MAJOR.MINOR from <cuda_home>/include/cuda.h's CUDA_VERSION (13000 -> "13.0"); "" when unreadable."""
    try:
        with open(os.path.join(cuda_home, "include", "cuda.h"), encoding="utf-8", errors="replace") as fh:
            m = CUDA_H_VERSION.search(fh.read())
    except OSError:
        return ""
    if not m:
        return ""
    n = int(m.group(1))
    return "%d.%d" % (n // 1000, (n % 1000) // 10)


def toolkit_version(cuda_home: str) -> tuple[str, str]:
    """(version, source): version.json / version.txt first; else include/cuda.h, for the toolkits laid out from
    NVIDIA's wheels (the pip route, a toolkit "installed from files"), which carry no version file."""
    version, source = _version_file(cuda_home)
    if version:
        return version, source
    version = header_version(cuda_home)
    return (version, "include/cuda.h") if version else ("", "")


def nvcc_release(text: str) -> str:
    """MAJOR.MINOR of nvcc --version's "release X.Y," line; "" when the text has none."""
    m = NVCC_RELEASE.search(text or "")
    return m.group(1) if m else ""


def same_release(version: str, wanted: str) -> bool:
    """True when version ("13.0.2", "13.0.2-1", "13.0") is of release wanted (MAJOR.MINOR, "13.0")."""
    return bool(version) and version.split("-")[0].split(".")[:2] == wanted.split(".")[:2]


def inspect(cuda_home: str, wanted: str, run=None, timeout: float = 60) -> dict:
    """What sits at cuda_home and why it is not a CUDA `wanted` toolkit.

    Returns {cuda_home, exists, version, version_source, nvcc, nvcc_rc, nvcc_release, nvcc_output, problems}:
    problems is [] for a toolkit whose version (version.json, version.txt, else include/cuda.h) and whose
    bin/nvcc --version release both are `wanted` (MAJOR.MINOR); else one line per finding, naming what was found.
    `run` is subprocess.run or a stand-in called the same way (tests). Only reads; runs nvcc --version alone."""
    run = run or subprocess.run
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    out = {"cuda_home": cuda_home, "exists": os.path.isdir(cuda_home), "version": "", "version_source": "",
           "nvcc": nvcc, "nvcc_rc": None, "nvcc_release": "", "nvcc_output": "", "problems": []}
    problems = out["problems"]
    if not out["exists"]:
        what = "is not a directory" if os.path.lexists(cuda_home) else "does not exist"
        problems.append("%s %s" % (cuda_home, what))
        return out
    out["version"], out["version_source"] = toolkit_version(cuda_home)
    if not out["version"]:
        problems.append("%s has no version.json, version.txt or include/cuda.h naming a CUDA version "
                        "(not a CUDA toolkit)" % cuda_home)
    elif not same_release(out["version"], wanted):
        problems.append("%s/%s says CUDA %s, not %s" % (cuda_home, out["version_source"], out["version"], wanted))
    if not os.path.isfile(nvcc) or not os.access(nvcc, os.X_OK):
        problems.append("%s %s" % (nvcc, "is not executable" if os.path.lexists(nvcc) else "is missing"))
        return out
    try:
        proc = run([nvcc, "--version"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        problems.append("%s --version could not run: %s" % (nvcc, exc))
        return out
    out["nvcc_rc"] = proc.returncode
    out["nvcc_output"] = ((proc.stdout or "") + (proc.stderr or "")).strip()[-2000:]
    out["nvcc_release"] = nvcc_release(proc.stdout)
    if proc.returncode != 0:
        problems.append("%s --version exited %d: %s" % (nvcc, proc.returncode, out["nvcc_output"][-500:]))
    elif not out["nvcc_release"]:
        problems.append("%s --version printed no release line: %s" % (nvcc, out["nvcc_output"][-500:]))
    elif out["nvcc_release"] != wanted:
        problems.append("%s --version reports release %s, not %s" % (nvcc, out["nvcc_release"], wanted))
    return out
