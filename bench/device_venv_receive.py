"""The stream's target end on a real server: venv_receive (extract + sha256 of every byte, one pass) against
`tar -x` (no verification) and against `tar -x` followed by hashing the result (what verifying costs otherwise),
all measured in the same run on the same host.

Not part of `make bench` (the controller has no big venv): run it on a GPU host with a real torch install, e.g.
through the device tool: `python3 -m bench.device_venv_receive [SITE_PACKAGES]`. The source is the torch
site-packages found by `site` (or the argument); the stream is made by the product's own source pipeline
(venv_stream.source_pipeline, plain tar) and unpacked onto the host's disk. Every run writes a fresh directory
(none is deleted before the end: a just-freed inode table can slow the next creations). ROUNDS (env) runs each.
Ratios are baseline_seconds / our_seconds (>= 1.00: ours is as fast or faster).
"""
from __future__ import annotations

import os
import resource
import shlex
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import local_module_utils  # noqa: E402

local_module_utils.install()
from ansible.module_utils.venv import manifest as venv_manifest  # noqa: E402
from ansible.module_utils.venv import stream as venv_stream  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "2"))
EXCLUDE = "--exclude=__pycache__ --exclude='*.pyc'"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(src: str, cmd: str) -> tuple[float, float, str]:
    subprocess.run(f"tar -C {shlex.quote(src)} -cf - . | wc -c > /dev/null", shell=True, check=True)  # warm source
    c0, t0 = children_cpu(), time.monotonic()
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - t0, children_cpu() - c0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:200]} failed ({p.returncode}): {p.stderr[-1000:]}")
    subprocess.run(["sync"], check=True)
    return wall, cpu, p.stdout.strip()


def main(argv: list[str]) -> int:
    src = argv[0] if argv else next(p for p in site.getsitepackages() if os.path.isdir(os.path.join(p, "torch")))
    base = tempfile.mkdtemp(prefix="venv-receive-", dir="/var/tmp")
    code = (ROOT / "module_utils/venv/receive.py").read_text()
    info = venv_manifest.summary(venv_manifest.scan(src))
    print(f"source {src}: {info['files']} files, {info['bytes'] / 1e9:.2f} GB; {os.cpu_count()} CPUs; "
          f"{ROUNDS} rounds", flush=True)
    res: dict[str, list[tuple[float, float]]] = {"tar -x": [], "receiver": [], "tar -x, then hash": []}
    try:
        for r in range(ROUNDS):
            dirs = {k: os.path.join(base, f"{i}-{r}") for i, k in enumerate(res)}
            for d in dirs.values():
                os.makedirs(d)
            tar_c = f"tar -C {shlex.quote(src)} -cf - {EXCLUDE} ."
            cmds = {
                "tar -x": f"{tar_c} | tar -C {dirs['tar -x']} -xpf -",
                "receiver": f"{venv_stream.source_pipeline({}, src, True, 0)} | "
                            f"python3 -c {shlex.quote(code)} {dirs['receiver']}",
                "tar -x, then hash": f"{tar_c} | tar -C {dirs['tar -x, then hash']} -xpf - && "
                                     f"PYTHONPATH={ROOT} python3 -c 'import sys, local_module_utils; local_module_utils.install(); "
                                     f"from ansible.module_utils.venv.manifest import scan; "
                                     f"scan(sys.argv[1], workers=1)' {dirs['tar -x, then hash']}",
            }
            for name in (list(res) if r % 2 == 0 else list(res)[::-1]):
                wall, cpu, _ = timed(src, cmds[name])
                res[name].append((wall, cpu))
                print(f"  round {r + 1}: {name:18s} {wall:6.2f} s wall, {cpu:6.2f} CPU-s", flush=True)
            same = venv_manifest.digest(venv_manifest.scan(dirs["receiver"])) == \
                venv_manifest.digest(venv_manifest.scan(dirs["tar -x"]))
            print(f"  round {r + 1}: receiver's tree == tar -x's tree: {same}", flush=True)
            if not same:
                return 1
        med = {k: statistics.median(w for w, _ in v) for k, v in res.items()}
        gb = info["bytes"] / 1e9
        for k, v in med.items():
            print(f"{k:18s} median {v:6.2f} s ({gb / v:.2f} GB/s)")
        print(f"receiver vs tar -x (which verifies nothing): {med['tar -x'] / med['receiver']:.2f}x; "
              f"vs tar -x then hashing: {med['tar -x, then hash'] / med['receiver']:.2f}x")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
