"""What the gpu_facts module returns: the host's GPU facts (module_utils/gpu/probe.py), the driver gate's verdict on
them (module_utils/gpu/gate.py) and, when asked, the torch probe's report.

Stdlib only; runs on the target. `collect()` is the one entry point the module calls; `runner` (default: the
probe's default_runner, looked up when called) is how every command runs, so tests feed captured text instead.
"""

from ansible.module_utils.gpu import probe
from ansible.module_utils.gpu.gate import FABRIC_MANAGER_UNIT, evaluate_gate
from ansible.module_utils.gpu.nvidia_smi import driver_major, suggest_profile


def collect(nvidia_smi="nvidia-smi", expected_count=None, expected_capability="", min_driver=0,
            torch_python=None, probe_timeout=300, runner=None, require_fabric="auto", require_persistence=True,
            allow_mig=False, max_uncorrected_ecc=0, systemctl="systemctl", fabric_manager_unit=FABRIC_MANAGER_UNIT):
    """Everything gpu_facts returns. expected_count None = no gate at all (facts only)."""
    runner = runner or probe.default_runner
    smi = probe.read_nvidia_smi(nvidia_smi, runner)
    gpus = smi["gpus"]
    if smi["links"]:
        profile, reason = suggest_profile(smi["links"])
    else:
        profile, reason = "", "no topology read" if not gpus else "no GPU-to-GPU links"
    driver = gpus[0]["driver_version"] if gpus else None
    facts = {
        "nvidia_smi_present": smi["present"],
        "nvidia_smi_error": smi["error"],
        "gpu_count": len(gpus),
        "gpus": gpus,
        "driver_version": driver,
        "driver_major": driver_major(driver),
        "compute_capabilities": sorted({g["compute_capability"] for g in gpus if g["compute_capability"]}),
        "interconnect": smi["links"]["interconnect"] if smi["links"] else "none",
        "links": smi["links"],
        "topology": smi["topology"],
        "suggested_profile": profile,
        "suggested_profile_reason": reason,
        "unknown_query_fields": smi["unknown_fields"],
        "fabric_manager": None,
        "raw": smi["raw"],
    }
    result = {"gpu_facts": facts, "gate": None, "torch_probe": None}
    if expected_count is not None:
        read = {}

        def fabric_manager():
            if "unit" not in read:
                read.update(probe.read_fabric_manager(systemctl, fabric_manager_unit, runner))
            return read
        result["gate"] = evaluate_gate(
            gpus, smi["error"], expected_count, expected_capability, min_driver, links=smi["links"],
            unknown_fields=smi["unknown_fields"], require_fabric=require_fabric,
            require_persistence=require_persistence, allow_mig=allow_mig, max_uncorrected_ecc=max_uncorrected_ecc,
            fabric_manager=fabric_manager)
        facts["fabric_manager"] = dict(read) if read else None
    if torch_python:
        result["torch_probe"] = probe.run_torch_probe(torch_python, runner, probe_timeout)
    return result
