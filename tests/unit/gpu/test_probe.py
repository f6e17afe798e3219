"""gpu facts (module_utils/gpu/facts.py collect(): the probe, then the gate) and the driver gate, with nvidia-smi
replaced by captured or documented texts."""

import importlib.util
import json
from pathlib import Path

import pytest

from ansible.module_utils.gpu import probe as gpu_probe
from ansible.module_utils.gpu import probe_script
from ansible.module_utils.gpu.facts import collect
from ansible.module_utils.gpu.gate import evaluate_gate
from ansible.module_utils.gpu.nvidia_smi import GATE_FIELDS, HEALTH_FIELDS, parse_query_gpu

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"
_spec = importlib.util.spec_from_file_location("fake_host", FIX / "fake_host.py")
fake_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_host)


def fake_runner(prefix, query_rc=0, unknown=(), systemctl=None):
    """nvidia-smi answering from <prefix>-gate-query.txt (else <prefix>-query.txt) and <prefix>-topo.txt."""
    gate = FIX / ("%s-gate-query.txt" % prefix)
    query = gate.name if gate.exists() else "%s-query.txt" % prefix
    return fake_host.FakeHost(query, "%s-topo.txt" % prefix, unknown=unknown, systemctl=systemctl,
                              query_rc=query_rc)


def never_run(argv, timeout, env=None):
    raise AssertionError("nothing should run: %r" % argv)


@pytest.fixture
def smi(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\nexit 99\n")   # never run: the fake runner answers
    path.chmod(0o755)
    return str(path)


def test_collect_nvlink_gate_pass(smi, tmp_path):
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\nexit 99\n")
    systemctl.chmod(0o755)
    host = fake_runner("b300-8gpu-nvlink", systemctl=(0, "systemctl-show-fm-active.txt", ""))
    res = collect(nvidia_smi=smi, expected_count=8, expected_capability="10.3", min_driver=580, runner=host,
                  systemctl=str(systemctl))
    assert res["gate"]["status"] == "pass", res["gate"]
    assert res["gpu_facts"]["suggested_profile"] == "nvlink"
    assert res["gpu_facts"]["interconnect"] == "nvlink"
    assert res["gpu_facts"]["driver_major"] == 580
    assert [c[1] for c in host.calls] == ["--query-gpu=" + ",".join(GATE_FIELDS), "topo", "show"]
    assert host.calls[0][2] == "--format=csv,noheader,nounits"
    assert res["gpu_facts"]["raw"]["query_fields"] == list(GATE_FIELDS)
    assert res["gpu_facts"]["unknown_query_fields"] == {}
    assert res["torch_probe"] is None


def test_collect_pcie_host_fails_nvlink_expectation_with_evidence(smi):
    # The RTX PRO 6000 text has the base columns only: answered as a driver that knows none of the health fields.
    res = collect(nvidia_smi=smi, expected_count=8, expected_capability="10.3", min_driver=580,
                  runner=fake_runner("ct200-8gpu-pcie", unknown=HEALTH_FIELDS))
    gate = res["gate"]
    assert gate["status"] == "fail"
    assert any("expected compute capability 10.3" in r and "GPU0=12.0" in r for r in gate["reasons"])
    assert "RTX PRO 6000" in gate["found"]
    assert res["gpu_facts"]["suggested_profile"] == "pcie"
    assert sorted(res["gpu_facts"]["unknown_query_fields"]) == sorted(HEALTH_FIELDS)


def test_gate_skipped_never_pass_when_host_declares_no_gpu(tmp_path):
    res = collect(nvidia_smi=str(tmp_path / "absent-nvidia-smi"), expected_count=0, runner=never_run)
    assert res["gpu_facts"]["nvidia_smi_present"] is False
    assert res["gate"]["status"] == "skipped"
    assert "declares no GPU" in res["gate"]["reasons"][0]
    assert "nvidia-smi not found" in res["gate"]["found"]


def test_gate_fails_when_gpus_expected_but_no_nvidia_smi(tmp_path):
    res = collect(nvidia_smi=str(tmp_path / "absent"), expected_count=8, expected_capability="12.0",
                  runner=never_run)
    assert res["gate"]["status"] == "fail"
    assert any("expected 8 GPU(s), found 0" in r for r in res["gate"]["reasons"])
    assert any("nvidia-smi not found" in r for r in res["gate"]["reasons"])


def test_gate_fails_when_nvidia_smi_errors(smi):
    res = collect(nvidia_smi=smi, expected_count=1, runner=fake_runner("h200", query_rc=9))
    assert res["gate"]["status"] == "fail"
    assert "rc=9" in res["gpu_facts"]["nvidia_smi_error"]


def test_gate_old_driver_and_wrong_count():
    gpus = parse_query_gpu("0, G0, b, 81559, 575.51.03, 9.0, NVIDIA H100\n1, G1, b, 81559, 575.51.03, 9.0, NVIDIA H100\n")
    gate = evaluate_gate(gpus, None, 8, "9.0", 580)
    assert gate["status"] == "fail"
    assert "expected 8 GPU(s), found 2" in gate["reasons"]
    assert "expected driver >= 580, found GPU0=575.51.03, GPU1=575.51.03" in gate["reasons"]
    assert gate["found"] == "2 GPU(s) NVIDIA H100, compute capability 9.0, driver 575.51.03"


def test_gate_skipped_notes_unexpected_gpus():
    gpus = parse_query_gpu((FIX / "h200-query.txt").read_text())
    gate = evaluate_gate(gpus, None, 0, "", 580)
    assert gate["status"] == "skipped"
    assert any("does have GPUs" in r for r in gate["reasons"])


def test_real_h200_capture_gate_and_probe():
    """What gpu_facts reported on the real H200 (device run), as committed."""
    data = json.loads((FIX / "h200-gpu_facts.json").read_text())
    probe = data["probe"]
    assert probe["gate"]["status"] == "pass"
    status = {c["name"]: c["status"] for c in probe["gate"]["checks"]}
    assert status["persistence_mode"] == status["mig_mode"] == status["remapped_rows"] == "passed"
    assert status["ecc_uncorrected_errors"] == status["ecc_mode"] == "passed"
    assert status["retired_pages"] == status["fabric"] == status["fabric_manager_service"] == "not_checked"
    assert probe["gpu_facts"]["gpus"][0]["health"]["fabric.state"] == "N/A"
    assert probe["gpu_facts"]["unknown_query_fields"] == {}
    fabric = data["fabric_gate"]
    assert fabric["failed"] and fabric["msg"].startswith("GPU driver gate failed: NVSwitch fabric not ready")
    assert fabric["gpu_facts"]["fabric_manager"]["error"] == "systemctl not found (looked for 'systemctl')"
    assert probe["gpu_facts"]["gpu_count"] == 1
    assert probe["gpu_facts"]["compute_capabilities"] == ["9.0"]
    assert probe["gpu_facts"]["driver_major"] >= 580
    tp = probe["torch_probe"]
    assert tp["ok"] and tp["device_count"] == 1 and tp["devices"][0]["capability"] == "9.0"
    assert tp["devices"][0]["matmul_ok"] and tp["devices"][0]["matmul_max_abs_err"] < 1e-3
    assert tp["nccl_single"]["ok"] and tp["nccl_multi"]["ok"]
    assert tp["nccl_multi"]["world_size"] == 1
    b300 = data["b300_gate"]
    assert b300["failed"] and b300["gate"]["status"] == "fail"
    assert "expected 8 GPU(s), found 1" in b300["gate"]["reasons"]


def test_gate_on_real_capture_equals_recorded(smi, tmp_path, monkeypatch):
    recorded = json.loads((FIX / "h200-gpu_facts.json").read_text())
    res = collect(nvidia_smi=smi, expected_count=8, expected_capability="10.3", min_driver=580,
                  runner=fake_runner("h200"))
    assert res["gate"] == recorded["b300_gate"]["gate"]
    res = collect(nvidia_smi=smi, expected_count=1, expected_capability="9.0", min_driver=580,
                  runner=fake_runner("h200"))
    assert res["gate"] == recorded["probe"]["gate"]
    monkeypatch.setenv("PATH", str(tmp_path))           # the device machine has no systemctl
    res = collect(nvidia_smi=smi, expected_count=1, expected_capability="9.0", min_driver=580,
                  runner=fake_runner("h200"), require_fabric="true")
    assert res["gate"] == recorded["fabric_gate"]["gate"]
    assert res["gpu_facts"]["fabric_manager"] == recorded["fabric_gate"]["gpu_facts"]["fabric_manager"]


def test_torch_probe_script_compiles_and_reports_missing_python(tmp_path):
    compile(gpu_probe.probe_script_source(), "torch_probe.py", "exec")
    rep = gpu_probe.run_torch_probe(str(tmp_path / "nope" / "python"), gpu_probe.default_runner)
    assert rep["ok"] is False and "does not exist" in rep["error"]


def test_torch_probe_script_is_the_standalone_file_and_imports_only_stdlib_and_torch():
    """What is shipped to the host is probe_script.py's own text; it runs with the venv's python, so it imports
    nothing of ours (only the standard library and torch)."""
    import ast
    import sys
    path = Path(probe_script.__file__)
    assert gpu_probe.probe_script_source() == path.read_text()
    tops = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            tops.add((node.module or "").split(".")[0])
    assert "torch" in tops
    assert tops - {"torch"} <= set(sys.stdlib_module_names), tops


def test_torch_probe_without_torch_reports_error_not_crash():
    import sys
    rep = gpu_probe.run_torch_probe(sys.executable, gpu_probe.default_runner, timeout=60)
    try:
        import torch
    except ImportError:
        assert rep["ok"] is False and "torch" in rep["error"]
    else:  # torch here (the device run): the report is complete either way
        assert rep["ok"] is (torch.cuda.is_available() and rep.get("error") is None)
        assert "device_count" in rep


def test_probe_env_keeps_nvlink_multicast_off():
    seen = []
    def runner(argv, timeout, env=None):
        seen.append(env)
        return 1, "", "no"
    import sys
    gpu_probe.run_torch_probe(sys.executable, runner)
    assert seen[0]["NCCL_NVLS_ENABLE"] == "0" and seen[0]["NVSHMEM_DISABLE_NVLS"] == "1"


def test_default_runner_missing_program_and_timeout(tmp_path):
    assert gpu_probe.default_runner([str(tmp_path / "absent")], 5)[0] == 127
    assert gpu_probe.default_runner(["sleep", "5"], 0.2)[0] == 124


def test_real_h200_role_gate_logs():
    """The cuda role's preflight on the real H200 (-c local): PASS as the host is; FAIL, unchanged, as a B300."""
    ok = (FIX / "h200-role-gate-pass.log").read_text()
    assert ("GPU DRIVER GATE PASS on localhost: no check failed; found 1 GPU(s) NVIDIA H200, compute capability 9.0, "
            "driver 580.159.04; passed: nvidia_smi, gpu_count, compute_capability, driver, persistence_mode, mig_mode, "
            "ecc_mode, ecc_uncorrected_errors, remapped_rows; retired_pages not checked: GPU0: nvidia-smi reports "
            "[N/A] for retired_pages.pending; fabric not checked: not required: no GPU reports an NVSwitch fabric "
            "state (nvidia-smi reports N/A for fabric.state); links: none; fabric_manager_service not checked: "
            "not read: fabric not required (links: none; suggested profile: none)") in ok
    assert "failed=0" in ok
    bad = (FIX / "h200-role-gate-fail.log").read_text()
    assert "GPU driver gate failed: expected 8 GPU(s), found 1; expected compute capability 10.3" in bad
    assert "changed=0" in bad and "failed=1" in bad


def test_real_h200_role_verify_with_torch_probe():
    """The cuda role's preflight+configure+verify on the H200's own CUDA 13.0 toolkit, torch probe included;
    the second run changes nothing."""
    first = (FIX / "h200-role-verify-1.log").read_text()
    assert "CUDA 13.0 via apt at /usr/local/cuda-13.0: Cuda compilation tools, release 13.0, V13.0.88" in first
    assert "failed=0" in first
    probe = None
    for line in first.splitlines():
        if line.startswith("ok:") and '"torch_probe": {' in line:
            probe = json.loads(line.split("=> ", 1)[1])["torch_probe"]
    assert probe and probe["ok"] and probe["torch_version"].startswith("2.11.0")
    assert probe["devices"][0]["name"] == "NVIDIA H200" and probe["devices"][0]["matmul_ok"]
    assert probe["nccl_single"]["value"] == 3.0 and probe["nccl_multi"]["values"] == [1.0]
    second = (FIX / "h200-role-verify-2.log").read_text()
    assert "changed=0" in second and "failed=0" in second
