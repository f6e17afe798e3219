"""The lab's named host sets: which machines `python -m lab up --hosts NAME` (or LAB_HOSTS=NAME) boots."""
from __future__ import annotations

from lab.error import LabError

DEFAULT_HOSTS = ("b300-lab", "ct200-lab")
# The fleet lab (inventory/fleet-lab): six like hosts for the fan-out of weights (LAB_NAME of its own).
FLEET_HOSTS = tuple(f"fleet{i}" for i in range(1, 7))
# The router lab (inventory/router-lab): SGLang's router on router1 in front of two serving hosts.
ROUTER_LAB_HOSTS = ("router1", "serve1", "serve2")
# The multi-node lab (inventory/multinode-lab): one serving group of two ranks, mn0 (rank 0) and mn1.
MULTINODE_HOSTS = ("mn0", "mn1")
# Host sets by name, for `python -m lab up --hosts NAME` and LAB_HOSTS=NAME (molecule scenarios).
HOST_SETS = {"default": DEFAULT_HOSTS, "fleet": FLEET_HOSTS, "router": ROUTER_LAB_HOSTS, "multinode": MULTINODE_HOSTS}


def host_set(name: str) -> tuple[str, ...]:
    """The hosts of a named set (HOST_SETS): how `--hosts` and LAB_HOSTS pick a lab's machines."""
    if name not in HOST_SETS:
        raise LabError(f"unknown host set {name!r}: one of {sorted(HOST_SETS)}")
    return HOST_SETS[name]
