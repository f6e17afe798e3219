"""Cross-rank consistency of a multi-node serving group: the NVIDIA driver, CUDA toolkit and venv of every rank,
compared across the ranks.

  rank_facts(cuda_home, venv_digest_path, gpus_expected) -> this host's {"driver", "cuda", "venv_hash"} (reads files)
  consistency(facts_by_rank)          -> driver / CUDA / venv hash mismatches, naming the ranks (pure)

Stdlib only (runs on the target with the system python3, 3.10+).
"""
from __future__ import annotations

import re

from ansible.module_utils.gpu.cuda_toolkit import cuda_version

RANK_FACT_KEYS = ("driver", "cuda", "venv_hash")


def consistency(facts_by_rank: dict, keys=RANK_FACT_KEYS) -> list[dict]:
    """Mismatches of driver, CUDA and venv hash across ranks: [{"key", "values": {rank: value}, "detail"}], one
    per key whose value differs between ranks or is missing on any rank (a fact that cannot be compared cannot
    be vouched for). `facts_by_rank`: {rank name: {"driver", "cuda", "venv_hash"}} in rank order."""
    mismatches = []
    ranks = list(facts_by_rank or {})
    for key in keys:
        values = {rank: str((facts_by_rank[rank] or {}).get(key) or "").strip() for rank in ranks}
        by_value: dict[str, list[str]] = {}
        for rank, value in values.items():
            by_value.setdefault(value, []).append(rank)
        if len(by_value) <= 1 and "" not in by_value:
            continue
        parts = [f"{v!r} on {', '.join(r)}" if v else f"missing on {', '.join(r)}" for v, r in by_value.items()]
        mismatches.append({"key": key, "values": values, "detail": f"{key} differs across ranks: " + "; ".join(parts)})
    return mismatches


def rank_facts(cuda_home: str = "", venv_digest_path: str = "", gpus_expected: bool = True,
               driver_files=("/sys/module/nvidia/version", "/proc/driver/nvidia/version")) -> dict:
    """This host's {"driver", "cuda", "venv_hash"} for consistency(): the loaded NVIDIA kernel module's version
    (/sys/module/nvidia/version, else the 'Kernel Module  X' of /proc/driver/nvidia/version), the CUDA toolkit's
    version at cuda_home (version.json, else version.txt), the venv's content hash (the venv role's digest file).
    A fact the host lacks is "" (consistency() then refuses it), except that a host declaring no GPU
    (gpus_expected=False, the lab) has "none" for a missing driver and toolkit, so such ranks still compare."""
    driver = ""
    for path in driver_files:
        text = _read_text(path)
        if not text:
            continue
        m = re.search(r"Kernel Module(?: for [a-z0-9_]+)?\s+([0-9][0-9.]*)", text)
        driver = m.group(1) if m else (text.split()[0] if re.match(r"^[0-9][0-9.]*$", text.split()[0]) else "")
        if driver:
            break
    cuda = cuda_version(cuda_home)
    if not gpus_expected:
        driver, cuda = driver or "none", cuda or "none"
    return {"driver": driver, "cuda": cuda, "venv_hash": _read_text(venv_digest_path) if venv_digest_path else ""}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""
