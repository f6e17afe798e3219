#!/usr/bin/python
"""Ansible module gpu_facts: what nvidia-smi (and optionally torch in a venv) says about a host's GPUs."""

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read GPU count, names, memory, driver, capability, health and links; gate on expectations
description:
  - Runs one C(nvidia-smi --query-gpu=... --format=csv,noheader,nounits) and C(nvidia-smi topo -m) and parses them.
    The query asks for index, uuid, pci.bus_id, memory.total, driver_version, compute_cap, persistence_mode,
    mig.mode.current, mig.mode.pending, ecc.mode.current, ecc.errors.uncorrected.volatile.total,
    ecc.errors.uncorrected.aggregate.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure,
    fabric.state, fabric.status and name (field names as C(nvidia-smi --help-query-gpu) of driver 580 lists them).
  - A field the driver does not know fails the whole query; it is dropped, listed in
    RV(gpu_facts.unknown_query_fields) and the query runs again, so its check reads C(not_checked), never passed.
  - Classifies the GPU-to-GPU links (NVLink C(NV#) or a PCIe path C(PIX/PXB/PHB/NODE/SYS)) and suggests the
    deployment profile C(nvlink) or C(pcie).
  - With O(expected_count) set, evaluates the driver gate and fails with what was found, naming the GPUs, when it
    does not hold. Checks - count, compute capability, minimum driver; persistence mode on (O(require_persistence));
    MIG off, current and pending (O(allow_mig)); uncorrectable volatile ECC errors at most O(max_uncorrected_ecc);
    no page pending retirement; no row remapping pending or failed; ECC mode off is a warning; on an NVSwitch
    fabric (O(require_fabric)) every GPU's fabric state C(Completed) with status C(Success), and the fabric
    manager's systemd unit (O(fabric_manager_unit), read with C(systemctl show)) running.
  - Each check is reported in RV(gate.checks) as C(passed), C(failed), C(warned) or C(not_checked) with what was
    found. A value the driver reports as C([N/A]) or C([Not Supported]) makes its check C(not_checked) with why.
  - O(expected_count=0) means the host declares no GPU; the gate is then reported as C(skipped) with a warning,
    never as passed.
  - With O(torch_python) set, runs a probe with that interpreter (a venv holding torch) - device count and
    capability, a matmul on each GPU checked against the CPU, an NCCL all-reduce in one process and one across
    all GPUs with one process per GPU. NVLink multicast stays off (C(NCCL_NVLS_ENABLE=0)).
  - Only reads; changes nothing on the host. Check mode runs the same reads.
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
  require_fabric:
    description:
      - Whether every GPU must be registered on an NVSwitch fabric (fabric state C(Completed), status C(Success))
        with the fabric manager unit running.
      - C(auto) requires it when any GPU reports a fabric state (NVSwitch systems such as an HGX B300 do; a GPU
        outside any fabric reports C(N/A)). C(true) requires it even when no GPU reports one. C(false) does not
        check it.
    type: str
    choices: [auto, "true", "false"]
    default: auto
  require_persistence:
    description: Fail when persistence mode is off on a GPU; C(false) reports it as a warning instead.
    type: bool
    default: true
  allow_mig:
    description: Accept MIG mode (current or pending) on a GPU as a warning; by default it fails the gate.
    type: bool
    default: false
  max_uncorrected_ecc:
    description: Uncorrectable ECC errors since the driver loaded (volatile total) tolerated on each GPU.
    type: int
    default: 0
  fabric_manager_unit:
    description: systemd unit of the NVIDIA fabric manager, read when the fabric is required.
    type: str
    default: nvidia-fabricmanager.service
  systemctl:
    description: Name or path of systemctl.
    type: str
    default: systemctl
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
- name: Gate on 8 sm_103 GPUs with a CUDA 13 driver (fabric required where the GPUs report one)
  gpu_facts:
    expected_count: 8
    expected_compute_capability: "10.3"
    min_driver: 580
  register: gpu

- name: Gate an NVSwitch host, tolerating persistence mode off (reported as a warning)
  gpu_facts:
    expected_count: 8
    require_fabric: "true"
    require_persistence: false

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
    gpus:
      description:
        - "Per GPU: index, uuid, pci_bus_id, memory_total_mib, driver_version, compute_capability, name, and health:
          {nvidia-smi field: the text it answered} for persistence_mode, mig.mode.current, mig.mode.pending,
          ecc.mode.current, ecc.errors.uncorrected.volatile.total, ecc.errors.uncorrected.aggregate.total,
          retired_pages.pending, remapped_rows.pending, remapped_rows.failure, fabric.state, fabric.status
          (C([N/A]) kept as written; a field this driver does not know is absent)."
      type: list
    driver_version: {description: Driver version of GPU 0, type: str}
    interconnect: {description: "nvlink, pcie, mixed, or none (fewer than two GPUs)", type: str}
    suggested_profile: {description: "nvlink, pcie, or empty when the links cannot decide", type: str}
    unknown_query_fields: {description: "Query fields this driver rejected -> its message ({} when none)", type: dict}
    fabric_manager:
      description: >-
        The fabric manager unit as systemctl showed it (unit, read, load_state, active_state, sub_state, error);
        null when it was not read (no gate, or the fabric is not required).
      type: dict
    raw: {description: "The nvidia-smi outputs parsed: query, query_fields (what query answers), topo", type: dict}
gate:
  description: Driver gate. Null without expected_count.
  returned: always
  type: dict
  contains:
    status: {description: "pass, fail or skipped (expected_count 0: nothing checked)", type: str}
    reasons: {description: "One line per failed check, naming the GPUs and what they show (skipped: why)", type: list}
    found: {description: "GPU count, names, compute capability and driver found", type: str}
    checks:
      description: >-
        Every check, in order nvidia_smi, gpu_count, compute_capability, driver, persistence_mode, mig_mode,
        ecc_mode, ecc_uncorrected_errors, retired_pages, remapped_rows, fabric, fabric_manager_service; each
        {name, status (passed, failed, warned or not_checked), found}.
      type: list
      elements: dict
    warnings: {description: "One line per warned check (also sent as task warnings)", type: list}
torch_probe:
  description: "Torch probe report (ok, error, device_count, devices, nccl_single, nccl_multi). Null when not run."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.facts import collect


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            expected_count=dict(type="int"),
            expected_compute_capability=dict(type="str", default=""),
            min_driver=dict(type="int", default=580),
            require_fabric=dict(type="str", default="auto", choices=["auto", "true", "false"]),
            require_persistence=dict(type="bool", default=True),
            allow_mig=dict(type="bool", default=False),
            max_uncorrected_ecc=dict(type="int", default=0),
            fabric_manager_unit=dict(type="str", default="nvidia-fabricmanager.service"),
            systemctl=dict(type="str", default="systemctl"),
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
    if p["max_uncorrected_ecc"] < 0:
        module.fail_json(msg="max_uncorrected_ecc must be >= 0, got %d" % p["max_uncorrected_ecc"])
    if not p["fabric_manager_unit"].strip():
        module.fail_json(msg="fabric_manager_unit must name a systemd unit, got %r" % p["fabric_manager_unit"])
    result = collect(nvidia_smi=p["nvidia_smi"], expected_count=p["expected_count"],
                     expected_capability=p["expected_compute_capability"], min_driver=p["min_driver"],
                     torch_python=p["torch_python"], probe_timeout=p["probe_timeout"],
                     require_fabric=p["require_fabric"], require_persistence=p["require_persistence"],
                     allow_mig=p["allow_mig"], max_uncorrected_ecc=p["max_uncorrected_ecc"],
                     systemctl=p["systemctl"], fabric_manager_unit=p["fabric_manager_unit"])
    gate = result["gate"]
    probe = result["torch_probe"]
    if gate and gate["status"] == "skipped":
        for reason in gate["reasons"]:
            module.warn("GPU driver gate: " + reason)
    for warning in (gate or {}).get("warnings", []):
        module.warn("GPU driver gate: " + warning)
    if gate and gate["status"] == "fail" and p["fail_on_gate"]:
        module.fail_json(msg="GPU driver gate failed: " + "; ".join(gate["reasons"]), changed=False, **result)
    if probe and not probe.get("ok") and p["fail_on_probe"]:
        module.fail_json(msg="torch GPU probe failed: %s" % probe.get("error"), changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
