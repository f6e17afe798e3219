"""The driver gate's health checks (persistence, MIG, ECC, retired pages, remapped rows, NVSwitch fabric and the
fabric manager unit), on the real H200 recording and on B300 HGX texts derived from the B300 fixture; and the
gpu_facts module itself (options, warnings, fail_json with the evidence)."""

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from ansible.module_utils.gpu import probe as gpu_probe
from ansible.module_utils.gpu.facts import collect
from ansible.module_utils.gpu.gate import CHECK_NAMES, evaluate_gate
from ansible.module_utils.gpu.nvidia_smi import GATE_FIELDS, HEALTH_FIELDS, parse_query_gpu
from ansible.module_utils.systemd.unit import SHOW_PROPERTIES

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "nvidia-smi"
_spec = importlib.util.spec_from_file_location("fake_host", FIX / "fake_host.py")
fake_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_host)
FakeHost = fake_host.FakeHost

B300_TOPO = "b300-8gpu-nvlink-topo.txt"
FM_ACTIVE = (0, "systemctl-show-fm-active.txt", "")
FM_FAILED = (0, "systemctl-show-fm-failed.txt", "")
FM_NOT_FOUND = (0, "systemctl-show-fm-not-found.txt", "")
NO_SYSTEMD = (1, "", "systemctl-show-no-systemd.stderr.txt")


@pytest.fixture
def bins(tmp_path):
    """Paths for nvidia-smi and systemctl that exist but are never run (the FakeHost answers)."""
    out = {}
    for name in ("nvidia-smi", "systemctl"):
        path = tmp_path / name
        path.write_text("#!/bin/sh\nexit 99\n")
        path.chmod(0o755)
        out[name] = str(path)
    return out


def gate_of(bins, query, systemctl=FM_ACTIVE, unknown=(), topo=B300_TOPO, count=8, cap="10.3", **knobs):
    host = FakeHost(query, topo, unknown=unknown, systemctl=systemctl)
    res = collect(nvidia_smi=bins["nvidia-smi"], systemctl=bins["systemctl"], expected_count=count,
                  expected_capability=cap, min_driver=580, runner=host, **knobs)
    return res, host


def checks(gate):
    return {c["name"]: c for c in gate["checks"]}


def systemctl_calls(host):
    return [c for c in host.calls if c[0].endswith("systemctl")]


# --- the derived B300 fixtures ---------------------------------------------------------------------------------

def test_b300_gate_fixtures_change_only_the_fields_they_name():
    base = (FIX / "b300-8gpu-nvlink-query.txt").read_text().splitlines()
    healthy = [row.split(", ", len(GATE_FIELDS) - 1) for row in
               (FIX / "b300-8gpu-nvlink-gate-query.txt").read_text().splitlines()]
    keep = [GATE_FIELDS.index(f) for f in fake_host.QUERY_ORDER]
    assert [", ".join(r[i] for i in keep) for r in healthy] == base      # base columns untouched
    changed = {"b300-8gpu-fm-down-gate-query.txt": {(g, f) for g in range(8) for f in ("fabric.state", "fabric.status")},
               "b300-8gpu-ecc-gate-query.txt": {(5, "ecc.errors.uncorrected.volatile.total"),
                                                (5, "ecc.errors.uncorrected.aggregate.total"),
                                                (5, "remapped_rows.pending")},
               "b300-8gpu-mig-gate-query.txt": {(3, "mig.mode.current"), (3, "mig.mode.pending")},
               "b300-8gpu-persistence-off-gate-query.txt": {(g, "persistence_mode") for g in range(8)}}
    for name, expected in changed.items():
        rows = [row.split(", ", len(GATE_FIELDS) - 1) for row in (FIX / name).read_text().splitlines()]
        diff = {(int(r[0]), GATE_FIELDS[i]) for r, h in zip(rows, healthy) for i in range(len(GATE_FIELDS))
                if r[i] != h[i]}
        assert diff == expected, name
        assert name in (FIX / "README.md").read_text()


# --- B300 HGX scenarios ----------------------------------------------------------------------------------------

def test_healthy_b300_hgx_passes_with_fabric_and_fabric_manager_checked(bins):
    res, host = gate_of(bins, "b300-8gpu-nvlink-gate-query.txt")
    gate = res["gate"]
    assert gate["status"] == "pass", gate["reasons"]
    assert [c["name"] for c in gate["checks"]] == list(CHECK_NAMES)
    by = checks(gate)
    for name in ("persistence_mode", "mig_mode", "ecc_mode", "ecc_uncorrected_errors", "remapped_rows", "fabric",
                 "fabric_manager_service"):
        assert by[name]["status"] == "passed", by[name]
    # B300 (like the H200) reports retired pages as [N/A]: said so, never passed.
    assert by["retired_pages"] == {"name": "retired_pages", "status": "not_checked",
                                   "found": "GPU0-GPU7: nvidia-smi reports [N/A] for retired_pages.pending"}
    assert "GPU0-GPU7: fabric.state Completed, fabric.status Success" in by["fabric"]["found"]
    assert by["fabric_manager_service"]["found"] == (
        "nvidia-fabricmanager.service: LoadState=loaded ActiveState=active SubState=running")
    # read through module_utils/systemd/unit.py, the one home of `systemctl show`
    assert systemctl_calls(host) == [[bins["systemctl"], "show", "nvidia-fabricmanager.service", "--no-pager"]
                                     + ["--property=%s" % p for p in SHOW_PROPERTIES]]
    assert res["gpu_facts"]["fabric_manager"]["active_state"] == "active"
    assert host.queries()[0] == list(GATE_FIELDS) and len(host.queries()) == 1    # one query for everything
    assert gate["warnings"] == []


def test_fabric_manager_down_fails_naming_every_gpu_and_the_unit(bins):
    res, _ = gate_of(bins, "b300-8gpu-fm-down-gate-query.txt", systemctl=FM_FAILED)
    gate = res["gate"]
    assert gate["status"] == "fail"
    by = checks(gate)
    assert by["fabric"]["status"] == "failed"
    assert "GPU0-GPU7: fabric.state In Progress, fabric.status N/A" in by["fabric"]["found"]
    assert by["fabric_manager_service"]["status"] == "failed"
    fabric_reason = next(r for r in gate["reasons"] if r.startswith("NVSwitch fabric not ready"))
    assert "GPU0-GPU7: fabric.state In Progress, fabric.status N/A" in fabric_reason
    assert "GPU0-GPU7 report a fabric state; links: nvlink" in fabric_reason     # why it was required (auto)
    assert any("nvidia-fabricmanager.service is not running" in r and "ActiveState=failed" in r
               for r in gate["reasons"])
    # the rest of the host is healthy and says so
    assert all(by[n]["status"] == "passed" for n in ("persistence_mode", "mig_mode", "remapped_rows"))


def test_fabric_down_with_no_unit_installed_and_without_systemd(bins):
    res, _ = gate_of(bins, "b300-8gpu-fm-down-gate-query.txt", systemctl=FM_NOT_FOUND)
    assert any("nvidia-fabricmanager.service is not installed" in r for r in res["gate"]["reasons"])
    res, host = gate_of(bins, "b300-8gpu-fm-down-gate-query.txt", systemctl=NO_SYSTEMD)
    by = checks(res["gate"])
    assert res["gate"]["status"] == "fail" and by["fabric"]["status"] == "failed"     # the GPUs still decide
    assert by["fabric_manager_service"]["status"] == "not_checked"
    assert "System has not been booted with systemd as init system" in by["fabric_manager_service"]["found"]
    assert res["gpu_facts"]["fabric_manager"]["read"] is False and len(systemctl_calls(host)) == 1


def test_fabric_up_but_unit_stopped_fails_and_unit_absent_warns(bins):
    # The GPUs keep reading Completed after the daemon dies: an installed unit that is not running fails.
    res, _ = gate_of(bins, "b300-8gpu-nvlink-gate-query.txt", systemctl=FM_FAILED)
    assert res["gate"]["status"] == "fail"
    assert checks(res["gate"])["fabric"]["status"] == "passed"
    assert checks(res["gate"])["fabric_manager_service"]["status"] == "failed"
    # No such unit while every GPU is registered: the fabric manager runs elsewhere (a driver container).
    res, _ = gate_of(bins, "b300-8gpu-nvlink-gate-query.txt", systemctl=FM_NOT_FOUND)
    assert res["gate"]["status"] == "pass"
    assert checks(res["gate"])["fabric_manager_service"]["status"] == "warned"
    assert any("not installed although the NVSwitch fabric is up" in w for w in res["gate"]["warnings"])


def test_require_fabric_false_skips_fabric_and_the_unit(bins):
    res, host = gate_of(bins, "b300-8gpu-fm-down-gate-query.txt", systemctl=None, require_fabric="false")
    by = checks(res["gate"])
    assert res["gate"]["status"] == "pass"
    assert by["fabric"]["status"] == "not_checked" and "require_fabric=false" in by["fabric"]["found"]
    assert "8 of 8 GPU(s) report a fabric state" in by["fabric"]["found"]
    assert by["fabric_manager_service"]["status"] == "not_checked" and systemctl_calls(host) == []


def test_uncorrected_ecc_and_pending_remap_fail_naming_gpu_and_counts(bins):
    res, _ = gate_of(bins, "b300-8gpu-ecc-gate-query.txt")
    gate = res["gate"]
    by = checks(gate)
    assert gate["status"] == "fail"
    assert by["ecc_uncorrected_errors"]["status"] == "failed"
    assert ("GPU5: 2 uncorrectable ECC error(s) since the driver loaded (aggregate 2); at most 0 allowed"
            in gate["reasons"][0])
    assert "GPU0-GPU4, GPU6, GPU7: 0 uncorrectable" in by["ecc_uncorrected_errors"]["found"]
    assert by["remapped_rows"]["status"] == "failed"
    assert any(r.startswith("GPU5: row remapping pending (remapped_rows.pending=Yes)") for r in gate["reasons"])
    assert not any("GPU4" in r for r in gate["reasons"])
    # Two errors tolerated: the ECC count passes, the pending remap still fails.
    res, _ = gate_of(bins, "b300-8gpu-ecc-gate-query.txt", max_uncorrected_ecc=2)
    assert checks(res["gate"])["ecc_uncorrected_errors"]["status"] == "passed"
    assert res["gate"]["status"] == "fail" and len(res["gate"]["reasons"]) == 1


def test_mig_on_one_gpu_fails_naming_it_unless_allowed(bins):
    res, _ = gate_of(bins, "b300-8gpu-mig-gate-query.txt")
    gate = res["gate"]
    assert gate["status"] == "fail"
    assert gate["reasons"] == [
        "GPU3: MIG current Enabled, pending Enabled: SGLang tensor parallelism needs whole GPUs (disable MIG: "
        "nvidia-smi -i N -mig 0, then reset the GPU)"]
    res, _ = gate_of(bins, "b300-8gpu-mig-gate-query.txt", allow_mig=True)
    assert res["gate"]["status"] == "pass"
    assert checks(res["gate"])["mig_mode"]["status"] == "warned"
    assert res["gate"]["warnings"] == [gate["reasons"][0] + " [allow_mig=true]"]


def test_mig_pending_alone_fails():
    text = (FIX / "b300-8gpu-nvlink-gate-query.txt").read_text().splitlines()[0]
    row = text.split(", ")
    row[GATE_FIELDS.index("mig.mode.pending")] = "Enabled"
    gate = evaluate_gate(parse_query_gpu(", ".join(row) + "\n", GATE_FIELDS), None, 1, "10.3", 580,
                         require_fabric="false")
    assert gate["reasons"][0].startswith("GPU0: MIG pending Enabled:")


def test_persistence_off_fails_or_warns_by_the_knob(bins):
    res, _ = gate_of(bins, "b300-8gpu-persistence-off-gate-query.txt")
    assert res["gate"]["status"] == "fail"
    assert res["gate"]["reasons"] == [
        "GPU0-GPU7: persistence mode Disabled (enable it: nvidia-persistenced, or nvidia-smi -pm 1)"]
    res, _ = gate_of(bins, "b300-8gpu-persistence-off-gate-query.txt", require_persistence=False)
    assert res["gate"]["status"] == "pass"
    assert checks(res["gate"])["persistence_mode"]["status"] == "warned"
    assert res["gate"]["warnings"] == [
        "GPU0-GPU7: persistence mode Disabled (enable it: nvidia-persistenced, or nvidia-smi -pm 1) "
        "[require_persistence=false]"]


# --- fields the driver does not report or does not know ---------------------------------------------------------

def test_h200_real_recording_passes_fabric_not_required_and_unit_not_read(bins):
    res, host = gate_of(bins, "h200-gate-query.txt", systemctl=None, topo="h200-topo.txt", count=1, cap="9.0")
    gate = res["gate"]
    by = checks(gate)
    assert gate["status"] == "pass" and gate["reasons"] == [] and gate["warnings"] == []
    assert by["fabric"] == {"name": "fabric", "status": "not_checked",
                            "found": "not required: no GPU reports an NVSwitch fabric state (nvidia-smi reports "
                                     "N/A for fabric.state); links: none"}
    assert by["fabric_manager_service"]["status"] == "not_checked" and systemctl_calls(host) == []
    assert by["retired_pages"]["status"] == "not_checked"
    assert by["remapped_rows"]["found"] == "GPU0: no row remapping pending or failed"
    assert by["persistence_mode"]["status"] == by["mig_mode"]["status"] == by["ecc_mode"]["status"] == "passed"
    assert res["gpu_facts"]["fabric_manager"] is None


def test_h200_with_fabric_required_fails(bins):
    res, _ = gate_of(bins, "h200-gate-query.txt", systemctl=FM_NOT_FOUND, topo="h200-topo.txt", count=1,
                     cap="9.0", require_fabric="true")
    assert res["gate"]["status"] == "fail"
    assert res["gate"]["reasons"][0] == (
        "NVSwitch fabric not ready (required: require_fabric=true) on GPU0: no fabric state (nvidia-smi reports "
        "N/A for fabric.state); the GPUs cannot be used until nvidia-fabricmanager has registered them")


def test_driver_without_fabric_fields_queries_again_and_says_not_checked(bins):
    unknown = ("fabric.state", "fabric.status")
    res, host = gate_of(bins, "b300-8gpu-nvlink-gate-query.txt", unknown=unknown, systemctl=None)
    queries = host.queries()
    assert len(queries) == 3
    assert queries[0] == list(GATE_FIELDS)
    assert queries[-1] == [f for f in GATE_FIELDS if f not in unknown]
    facts = res["gpu_facts"]
    assert set(facts["unknown_query_fields"]) == set(unknown)
    assert facts["unknown_query_fields"]["fabric.state"] == 'Field "fabric.state" is not a valid field to query.'
    assert facts["raw"]["query_fields"] == queries[-1]
    assert "fabric.state" not in facts["gpus"][0]["health"]
    gate = res["gate"]
    by = checks(gate)
    assert gate["status"] == "pass"
    assert by["fabric"]["status"] == "not_checked"
    assert "this driver does not know fabric.state" in by["fabric"]["found"]
    assert "fields this driver does not know: fabric.state, fabric.status" in by["nvidia_smi"]["found"]
    # All 28 pairs on NVLink but no fabric state to read: a warning, never a silent pass.
    assert gate["warnings"] == [
        "all 28 GPU pairs are on NVLink but no GPU reports a fabric state, so the NVSwitch fabric and "
        "nvidia-fabricmanager were not checked; on an NVSwitch system set require_fabric=true"]
    # Required explicitly, a fabric the driver cannot report fails.
    res, _ = gate_of(bins, "b300-8gpu-nvlink-gate-query.txt", unknown=unknown, systemctl=FM_ACTIVE,
                     require_fabric="true")
    assert res["gate"]["status"] == "fail"
    assert "GPU0-GPU7: no fabric state (this driver does not know fabric.state" in res["gate"]["reasons"][0]


def test_driver_without_any_health_field_reports_each_check_not_checked(bins):
    res, host = gate_of(bins, "ct200-8gpu-pcie-query.txt", topo="ct200-8gpu-pcie-topo.txt", cap="12.0",
                        unknown=HEALTH_FIELDS, systemctl=None)
    assert len(host.queries()) == len(HEALTH_FIELDS) + 1
    assert host.queries()[-1] == list(fake_host.QUERY_ORDER)
    gate = res["gate"]
    assert gate["status"] == "pass"
    by = checks(gate)
    for name in ("persistence_mode", "mig_mode", "ecc_mode", "ecc_uncorrected_errors", "retired_pages",
                 "remapped_rows", "fabric", "fabric_manager_service"):
        assert by[name]["status"] == "not_checked", by[name]
    assert by["persistence_mode"]["found"].startswith("GPU0-GPU7: this driver does not know persistence_mode")


def test_other_query_failures_are_not_retried(bins):
    host = FakeHost("h200-gate-query.txt", "h200-topo.txt", query_rc=6)
    res = collect(nvidia_smi=bins["nvidia-smi"], expected_count=1, runner=host)
    assert len(host.queries()) == 1
    assert res["gate"]["reasons"][0] == "nvidia-smi: nvidia-smi --query-gpu failed rc=6: boom"
    assert res["gate"]["reasons"][1] == "expected 1 GPU(s), found 0"
    assert {c["status"] for c in res["gate"]["checks"][4:]} == {"not_checked"}


def _one(**values):
    """One B300 GPU line from the healthy fixture with the given health fields replaced."""
    row = (FIX / "b300-8gpu-nvlink-gate-query.txt").read_text().splitlines()[0].split(", ")
    for field, value in values.items():
        row[GATE_FIELDS.index(field.replace("__", "."))] = value
    return parse_query_gpu(", ".join(row) + "\n", GATE_FIELDS)


def test_ecc_disabled_warns_and_its_counts_are_not_checked():
    gate = evaluate_gate(_one(ecc__mode__current="Disabled", ecc__errors__uncorrected__volatile__total="[N/A]",
                              ecc__errors__uncorrected__aggregate__total="[N/A]"),
                         None, 1, "10.3", 580, require_fabric="false")
    by = checks(gate)
    assert gate["status"] == "pass"
    assert by["ecc_mode"]["status"] == "warned"
    assert gate["warnings"] == ["ecc_mode: GPU0: ECC Disabled (uncorrectable memory errors go uncounted)"]
    assert by["ecc_uncorrected_errors"] == {
        "name": "ecc_uncorrected_errors", "status": "not_checked",
        "found": "GPU0: nvidia-smi reports [N/A] for ecc.errors.uncorrected.volatile.total (ECC is Disabled)"}


def test_retired_pages_pending_and_remap_failure_fail():
    gate = evaluate_gate(_one(retired_pages__pending="Yes", remapped_rows__failure="Yes"), None, 1, "10.3", 580,
                         require_fabric="false")
    assert gate["reasons"] == [
        "GPU0: memory pages pending retirement (retired_pages.pending=Yes): reset the GPU (or reboot) to retire them",
        "GPU0: row remapping failed (remapped_rows.failure=Yes): reset the GPU to apply a pending remap; a failed "
        "remap needs the GPU replaced"]


@pytest.mark.parametrize("state,status", [("Completed", "[Unknown Error]"), ("Completed", "Timeout"),
                                          ("Not Started", "N/A")])
def test_fabric_not_completed_with_success_fails(state, status):
    gate = evaluate_gate(_one(fabric__state=state, fabric__status=status), None, 1, "10.3", 580,
                         fabric_manager=lambda: {"unit": "fm", "read": True, "load_state": "loaded",
                                                 "active_state": "active", "sub_state": "running", "error": None})
    assert gate["status"] == "fail"
    assert "GPU0: fabric.state %s, fabric.status %s" % (state, status) in gate["reasons"][0]


def test_unexpected_values_are_not_checked_never_passed():
    gate = evaluate_gate(_one(persistence_mode="Maybe", remapped_rows__pending="Unknown"), None, 1, "10.3", 580,
                         require_fabric="false")
    by = checks(gate)
    assert by["persistence_mode"] == {"name": "persistence_mode", "status": "not_checked",
                                      "found": "GPU0: unexpected persistence_mode 'Maybe'"}
    assert by["remapped_rows"]["status"] == "not_checked"


def test_skipped_gate_lists_every_check_not_checked():
    gpus = parse_query_gpu((FIX / "h200-gate-query.txt").read_text(), GATE_FIELDS)
    gate = evaluate_gate(gpus, None, 0, "", 580)
    assert gate["status"] == "skipped" and gate["warnings"] == []
    assert [c["name"] for c in gate["checks"]] == list(CHECK_NAMES)
    assert {c["status"] for c in gate["checks"]} == {"not_checked"}


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError, match="require_fabric"):
        evaluate_gate([], None, 1, "", 580, require_fabric="yes")
    with pytest.raises(ValueError, match="max_uncorrected_ecc"):
        evaluate_gate([], None, 1, "", 580, max_uncorrected_ecc=-1)


# --- the module ---------------------------------------------------------------------------------------------------

def _doc(name):
    tree = ast.parse((ROOT / "library" / "gpu_facts.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == name:
            return yaml.safe_load(node.value.value)
    raise AssertionError(name)


def test_module_documentation_matches_its_argument_spec():
    doc = _doc("DOCUMENTATION")
    assert _doc("EXAMPLES") and _doc("RETURN")["gate"]["contains"]["checks"]
    src = (ROOT / "library" / "gpu_facts.py").read_text()
    spec_src = src[src.index("argument_spec=dict("):src.index("supports_check_mode=True")]
    spec = eval(spec_src[len("argument_spec="):].rstrip().rstrip(","), {"dict": dict})  # noqa: S307 (own source)
    assert set(spec) == set(doc["options"])
    for name, opt in spec.items():
        assert doc["options"][name]["type"] == opt["type"], name
        assert doc["options"][name].get("default") == opt.get("default"), name
        assert doc["options"][name].get("choices") == opt.get("choices"), name


def run_module(monkeypatch, capsys, args, host):
    from ansible.module_utils.testing import patch_module_args
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings as ansible_warnings
    # As on a target: once any test in this process imported controller code (ansible.errors, a filter plugin),
    # module warnings would go to the controller's display instead of the result. Warnings are also process-global.
    monkeypatch.setattr(_internal, "is_controller", False)
    monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
    monkeypatch.setitem(sys.modules, "ansible.module_utils.gpu.probe", gpu_probe)
    monkeypatch.setattr(gpu_probe, "default_runner", host)
    spec = importlib.util.spec_from_file_location("gpu_facts_module", ROOT / "library" / "gpu_facts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_module_fails_with_the_evidence(monkeypatch, capsys, bins):
    host = FakeHost("b300-8gpu-fm-down-gate-query.txt", B300_TOPO, systemctl=FM_FAILED)
    out = run_module(monkeypatch, capsys, {"nvidia_smi": bins["nvidia-smi"], "systemctl": bins["systemctl"],
                                           "expected_count": 8, "expected_compute_capability": "10.3",
                                           "_ansible_check_mode": True}, host)
    assert out["failed"] is True and out["changed"] is False
    assert out["msg"].startswith("GPU driver gate failed: NVSwitch fabric not ready")
    assert "nvidia-fabricmanager.service is not running" in out["msg"]
    assert checks(out["gate"])["fabric"]["status"] == "failed"
    assert out["gpu_facts"]["gpus"][7]["health"]["fabric.state"] == "In Progress"


def test_module_warns_and_takes_yaml_booleans_for_require_fabric(monkeypatch, capsys, bins):
    host = FakeHost("b300-8gpu-persistence-off-gate-query.txt", B300_TOPO, systemctl=None)
    out = run_module(monkeypatch, capsys, {"nvidia_smi": bins["nvidia-smi"], "systemctl": bins["systemctl"],
                                           "expected_count": 8, "require_persistence": False,
                                           "require_fabric": False}, host)
    assert not out.get("failed"), out.get("msg")
    assert out["gate"]["status"] == "pass"
    assert "require_fabric=false" in checks(out["gate"])["fabric"]["found"]
    sent = [w["event"]["msg"] if isinstance(w, dict) else w for w in out["warnings"]]   # 2.19: WarningSummary
    assert sent == ["GPU driver gate: " + w for w in out["gate"]["warnings"]]
    assert "persistence mode Disabled" in sent[0]


def test_module_refuses_bad_input_before_reading_anything(monkeypatch, capsys, bins):
    host = FakeHost("b300-8gpu-nvlink-gate-query.txt", B300_TOPO)
    out = run_module(monkeypatch, capsys, {"nvidia_smi": bins["nvidia-smi"], "expected_count": 8,
                                           "max_uncorrected_ecc": -1}, host)
    assert out["failed"] and out["msg"] == "max_uncorrected_ecc must be >= 0, got -1"
    out = run_module(monkeypatch, capsys, {"nvidia_smi": bins["nvidia-smi"], "expected_count": 8,
                                           "require_fabric": "sometimes"}, host)
    assert out["failed"] and "require_fabric" in out["msg"]
    assert host.calls == []
