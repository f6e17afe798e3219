"""module_utils/monitoring/gpu_textfile.py: the node exporter's textfile of GPU metrics, from the recorded nvidia-smi
answers (tests/fixtures/nvidia-smi/: the H200's real METRICS_FIELDS query, the B300 gate texts with the readings the
H200 gave), written atomically; every series parses as Prometheus text (promtool check metrics)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible.module_utils.gpu import nvidia_smi
from ansible.module_utils.monitoring import gpu_textfile, rules

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "nvidia-smi"
H200 = (FIX / "h200-metrics-query.txt").read_text()


def smi(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\nexit 9\n")
    path.chmod(0o755)
    return str(path)


def answering(*answers):
    """A subprocess.run stand-in answering each call with the next (rc, stdout); records the argv."""
    asked = []

    def run(argv, **_kw):
        asked.append(argv)
        rc, out = answers[len(asked) - 1]
        return SimpleNamespace(returncode=rc, stdout=out, stderr="")
    return run, asked


def b300_metrics(gate_fixture):
    """A B300 gate text with the H200's recorded readings put where METRICS_FIELDS has them."""
    readings = H200.split(", ")[6:10]
    rows = []
    for line in (FIX / gate_fixture).read_text().splitlines():
        parts = line.split(", ")
        rows.append(", ".join(parts[:6] + readings + parts[6:]))
    return "\n".join(rows) + "\n"


def series(text):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_the_h200_recording_gives_every_reading_in_base_units(tmp_path):
    run, asked = answering((0, H200))
    gpus, error = gpu_textfile.read(smi(tmp_path), run=run)
    assert error is None and asked[0][1] == "--query-gpu=" + ",".join(nvidia_smi.METRICS_FIELDS)
    got = series(gpu_textfile.render(gpus, 1700000000.5))
    one = '{gpu="0",uuid="GPU-4bce2eeb-1a3c-8c30-3731-651978f9b7a3"}'
    assert got["gpu_power_draw_watts" + one] == 80.11
    assert got["gpu_memory_used_bytes" + one] == 0.0
    assert got["gpu_memory_total_bytes" + one] == 143771 * 1048576
    assert got["gpu_utilization_ratio" + one] == 0.0 and got["gpu_temperature_celsius" + one] == 41.0
    assert got["gpu_ecc_uncorrected_volatile_errors" + one] == 0.0
    assert got["gpu_remapped_rows_failure" + one] == 0.0 and got["gpu_remapped_rows_pending" + one] == 0.0
    assert got["gpu_textfile_ok"] == 1.0 and got["gpu_textfile_last_run_timestamp_seconds"] == 1700000000.5
    # unavailable values give no sample (no 0 that would read as a state): retired pages [N/A], fabric N/A
    assert not any(k.startswith(("gpu_retired_pages_pending", "gpu_fabric_state")) for k in got)


def test_b300_ecc_and_fabric_texts_feed_the_alert_rules_series(tmp_path):
    run, _ = answering((0, b300_metrics("b300-8gpu-ecc-gate-query.txt")))
    got = series(gpu_textfile.render(gpu_textfile.read(smi(tmp_path), run=run)[0], 1))
    ecc = {k: v for k, v in got.items() if k.startswith("gpu_ecc_uncorrected_volatile_errors") and v > 0}
    assert list(ecc) == ['gpu_ecc_uncorrected_volatile_errors{gpu="5",uuid="GPU-00000005-b300-4a1e-9d2c-000000000005"}']
    assert sum(v for k, v in got.items() if k.startswith("gpu_remapped_rows_pending")) == 1.0
    assert sum(1 for k in got if k.startswith('gpu_fabric_state') and 'state="Completed"' in k) == 8
    run, _ = answering((0, b300_metrics("b300-8gpu-fm-down-gate-query.txt")))
    got = series(gpu_textfile.render(gpu_textfile.read(smi(tmp_path), run=run)[0], 1))
    assert sum(1 for k in got if k.startswith('gpu_fabric_state') and 'state="In Progress"' in k) == 8
    # the alert rules read names this file writes
    assert {"gpu_ecc_uncorrected_volatile_errors", "gpu_remapped_rows_failure"} <= set(rules.GPU_TEXTFILE_METRICS)


def test_a_field_the_driver_does_not_know_is_dropped_and_asked_again(tmp_path):
    # the driver's answer as recorded for an unknown field (h200-unknown-field.txt), naming power.draw
    said = (FIX / "h200-unknown-field.txt").read_text().split("--- stdout\n")[1].split("\n--- stderr")[0]
    without = H200.split(", ")
    run, asked = answering((2, said.replace("no.such.field", "power.draw")), (0, ", ".join(without[:6] + without[7:])))
    gpus, error = gpu_textfile.read(smi(tmp_path), run=run)
    assert error is None and len(asked) == 2 and "power.draw" not in asked[1][1]
    got = series(gpu_textfile.render(gpus, 1))
    assert not any(k.startswith("gpu_power_draw_watts") for k in got)
    assert any(k.startswith("gpu_temperature_celsius") for k in got)


@pytest.mark.parametrize("answer, reason", [((1, "NVIDIA-SMI has failed"), "nvidia_smi_failed"),
                                            ((0, "garbage"), "nvidia_smi_format")])
def test_a_failing_nvidia_smi_says_so_in_the_file(tmp_path, answer, reason):
    run, _ = answering(answer)
    gpus, error = gpu_textfile.read(smi(tmp_path), run=run)
    assert (gpus, error) == ([], reason)
    assert series(gpu_textfile.render(gpus, 1, error)) == {
        f'gpu_textfile_ok{{reason="{reason}"}}': 0.0, "gpu_textfile_last_run_timestamp_seconds": 1.0}


def test_main_writes_atomically_and_a_host_without_nvidia_smi_gets_ok_0(tmp_path):
    out = tmp_path / "sglang_gpu.prom"
    out.write_text("old\n")
    assert gpu_textfile.main(["--out", str(out), "--nvidia-smi", str(tmp_path / "none")], now=5) == 0
    assert series(out.read_text())['gpu_textfile_ok{reason="no_nvidia_smi"}'] == 0.0
    assert oct(out.stat().st_mode & 0o777) == "0o644" and os.listdir(tmp_path) == ["sglang_gpu.prom"]
    run, _ = answering((0, H200))
    gpu_textfile.main(["--out", str(out), "--nvidia-smi", smi(tmp_path)], run=run, now=6)
    assert series(out.read_text())["gpu_textfile_ok"] == 1.0
    assert sorted(os.listdir(tmp_path)) == ["nvidia-smi", "sglang_gpu.prom"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "sglang_gpu.prom"
    out.write_text("old\n")
    monkeypatch.setattr(gpu_textfile.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk")))
    with pytest.raises(OSError):
        gpu_textfile.write_atomic(str(out), "new\n")
    assert out.read_text() == "old\n" and os.listdir(tmp_path) == ["sglang_gpu.prom"]


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus package: make deps)")
def test_the_file_is_valid_prometheus_text(tmp_path):
    run, _ = answering((0, b300_metrics("b300-8gpu-ecc-gate-query.txt")))
    text = gpu_textfile.render(gpu_textfile.read(smi(tmp_path), run=run)[0], 1)
    proc = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    # promtool lints names too (counters end in _total...); only a parse error is a failure here
    assert "error while linting" not in proc.stderr and "parse" not in proc.stderr.lower(), proc.stderr


def test_the_module_runs_standalone_as_the_timer_runs_it(tmp_path):
    """As the role installs it: only this file, gpu/nvidia_smi.py and evidence/error.py under ansible/module_utils."""
    tree = tmp_path / "lib"
    for rel in ("monitoring/gpu_textfile.py", "gpu/nvidia_smi.py", "evidence/error.py"):
        dest = tree / "ansible" / "module_utils" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "module_utils" / rel, dest)
    for pkg in ("ansible", "ansible/module_utils", "ansible/module_utils/monitoring", "ansible/module_utils/gpu",
                "ansible/module_utils/evidence"):
        (tree / pkg / "__init__.py").write_text("")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat {FIX / 'h200-metrics-query.txt'}\n")
    fake.chmod(0o755)
    out = tmp_path / "gpu.prom"
    proc = subprocess.run(["python3", "-s", "-m", "ansible.module_utils.monitoring.gpu_textfile", "--out", str(out),
                           "--nvidia-smi", str(fake)], env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert series(out.read_text())["gpu_textfile_ok"] == 1.0
