#!/usr/bin/python
"""Ansible module gpu_facts: what nvidia-smi (and optionally torch in a venv) says about a host's GPUs."""

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read GPU count, names, memory, driver, compute capability and links; gate on expectations
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) and C(nvidia-smi topo -m) and parses them.
  - Classifies the GPU-to-GPU links (NVLink C(NV#) or a PCIe path C(PIX/PXB/PHB/NODE/SYS)) and suggests the
    deployment profile C(nvlink) or C(pcie).
  - With O(expected_count) set, evaluates the driver gate (count, compute capability, minimum driver) and fails
    with what was found when it does not hold. O(expected_count=0) means the host declares no GPU; the gate is
    then reported as C(skipped) with a warning, never as passed.
  - With O(torch_python) set, runs a probe with that interpreter (a venv holding torch): device count and
    capability, a matmul on each GPU checked against the CPU, an NCCL all-reduce in one process and one across
    all GPUs with one process per GPU. NVLink multicast stays off (C(NCCL_NVLS_ENABLE=0)).
  - Only reads; changes nothing on the host.
options:
  nvidia_smi:
    description: Name or path of the nvidia-smi binary.
    type: str
    default: nvidia-smi
  expected_count:
    description: GPUs the host must show; 0 = the host declares none. Omit to collect facts without a gate.
    type: int
  expected_compute_capability:
    description: Compute capability every GPU must report, for example C(10.3). Empty = not checked.
    type: str
    default: ""
  min_driver:
    description: Lowest acceptable driver major version (CUDA 13 needs 580).
    type: int
    default: 580
  fail_on_gate:
    description: Fail the task when the gate status is C(fail).
    type: bool
    default: true
  torch_python:
    description: Python interpreter of a venv with torch; runs the torch probe when set.
    type: path
  probe_timeout:
    description: Seconds the torch probe may take before it is stopped and reported as failed.
    type: int
    default: 300
  fail_on_probe:
    description: Fail the task when the torch probe does not report ok.
    type: bool
    default: true
author: sglang-deploy
"""

EXAMPLES = r"""
- name: Gate on 8 sm_103 GPUs with a CUDA 13 driver
  gpu_facts:
    expected_count: 8
    expected_compute_capability: "10.3"
    min_driver: 580
  register: gpu

- name: Probe torch and NCCL in the SGLang venv
  gpu_facts:
    torch_python: /opt/sglang/venv/bin/python
"""

RETURN = r"""
gpu_facts:
  description: Parsed nvidia-smi facts.
  returned: always
  type: dict
  contains:
    gpu_count: {description: Number of GPUs, type: int}
    gpus: {description: "Per GPU: index, uuid, pci_bus_id, memory_total_mib, driver_version, compute_capability, name", type: list}
    driver_version: {description: Driver version of GPU 0, type: str}
    interconnect: {description: "nvlink, pcie, mixed, or none (fewer than two GPUs)", type: str}
    suggested_profile: {description: "nvlink, pcie, or empty when the links cannot decide", type: str}
    raw: {description: The nvidia-smi outputs parsed, type: dict}
gate:
  description: "Driver gate: status pass, fail or skipped, reasons, found. Null without expected_count."
  returned: always
  type: dict
torch_probe:
  description: "Torch probe report (ok, error, device_count, devices, nccl_single, nccl_multi). Null when not run."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_probe import collect


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            expected_count=dict(type="int"),
            expected_compute_capability=dict(type="str", default=""),
            min_driver=dict(type="int", default=580),
            fail_on_gate=dict(type="bool", default=True),
            torch_python=dict(type="path"),
            probe_timeout=dict(type="int", default=300),
            fail_on_probe=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["expected_count"] is not None and p["expected_count"] < 0:
        module.fail_json(msg="expected_count must be >= 0, got %d" % p["expected_count"])
    result = collect(nvidia_smi=p["nvidia_smi"], expected_count=p["expected_count"],
                     expected_capability=p["expected_compute_capability"], min_driver=p["min_driver"],
                     torch_python=p["torch_python"], probe_timeout=p["probe_timeout"])
    gate = result["gate"]
    probe = result["torch_probe"]
    if gate and gate["status"] == "skipped":
        for reason in gate["reasons"]:
            module.warn("GPU driver gate: " + reason)
    if gate and gate["status"] == "fail" and p["fail_on_gate"]:
        module.fail_json(msg="GPU driver gate failed: " + "; ".join(gate["reasons"]), changed=False, **result)
    if probe and not probe.get("ok") and p["fail_on_probe"]:
        module.fail_json(msg="torch GPU probe failed: %s" % probe.get("error"), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
