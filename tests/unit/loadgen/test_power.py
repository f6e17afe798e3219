"""GPU power while a cell runs (module_utils/loadgen/power.py): sampled through gpu/nvidia_smi.py's power query,
answered here by the H200's recording and a B300 text in the same format; no nvidia-smi gives None with the reason."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible.module_utils.gpu.nvidia_smi import POWER_ARGS
from ansible.module_utils.loadgen import power
from ansible.module_utils.loadgen.power import PowerSampler, measure, server_gpu_count, spec_problems

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"


def smi(tmp_path, texts, asked=None):
    """(binary, run): a present nvidia-smi answering the power query with each text in turn (the last repeats)."""
    binary = tmp_path / "nvidia-smi"
    binary.write_text("")
    texts = list(texts)

    def run(argv, **kw):
        if asked is not None:
            asked.append(argv)
        assert argv[1:] == list(POWER_ARGS), argv
        text = texts.pop(0) if len(texts) > 1 else texts[0]
        return SimpleNamespace(returncode=0, stdout=text, stderr="")
    return str(binary), run


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0
        return self.t


def test_h200_recording_gives_mean_max_limit_and_tokens_per_joule(tmp_path):
    samples = (FIX / "h200-power-samples.txt").read_text().splitlines(keepends=True)
    asked = []
    binary, run = smi(tmp_path, samples, asked)
    s = PowerSampler(interval=1.0, nvidia_smi=binary, run=run, clock=Clock())
    for _ in samples:
        assert s.sample()
    s.stopped_at = s.clock()
    out = s.summary(duration=10.0, output_tokens=8092)
    assert asked[0] == [binary, *POWER_ARGS]
    assert out["power_samples"] == 5 and out["power_gpus"] == 1 and out["power_limit_w"] == 700.0
    assert out["power_mean_w"] == pytest.approx((80.92 + 80.87 + 80.87 + 80.89 + 80.93) / 5, abs=0.01)
    assert out["power_max_w"] == 80.93
    assert out["output_tokens_per_joule"] == pytest.approx(8092 / (out["power_mean_w"] * 10.0), rel=1e-3)
    assert out["power_reason"] == ""


def test_b300_sums_the_servers_gpus_only(tmp_path):
    binary, run = smi(tmp_path, [(FIX / "b300-8gpu-power-query.txt").read_text()])
    all8 = PowerSampler(nvidia_smi=binary, run=run, clock=Clock())
    assert all8.sample()
    assert all8.samples[0][1:] == (pytest.approx(3609.0), 8800.0, 8)
    tp4 = PowerSampler(gpu_count=4, nvidia_smi=binary, run=run, clock=Clock())
    assert tp4.sample()
    assert tp4.samples[0][1:] == (pytest.approx(448.12 + 452.87 + 455.03 + 449.61), 4400.0, 4)


def test_window_leaves_the_warmup_out(tmp_path):
    binary, run = smi(tmp_path, ["0, 100.00, 700.00\n", "0, 100.00, 700.00\n", "0, 400.00, 700.00\n",
                                 "0, 500.00, 700.00\n"])
    s = PowerSampler(interval=1.0, nvidia_smi=binary, run=run, clock=Clock())
    for _ in range(4):
        s.sample()                   # at t = 1, 2, 3, 4
    s.stopped_at = 5.0
    out = s.summary(duration=1.0, output_tokens=900)   # window: t >= 5 - 1 - 1 = 3
    assert out["power_samples"] == 2 and out["power_mean_w"] == 450.0 and out["output_tokens_per_joule"] == 2.0


def test_no_nvidia_smi_or_a_failing_one_is_none_with_the_reason(tmp_path):
    out = measure(lambda: {"duration": 1.0, "total_output_tokens": 10}, 0.05, nvidia_smi=str(tmp_path / "absent"))
    assert out["power_mean_w"] is None and out["output_tokens_per_joule"] is None
    assert out["power_reason"] == "no nvidia-smi on the host"
    binary = tmp_path / "nvidia-smi"
    binary.write_text("")
    failing = lambda argv, **kw: SimpleNamespace(returncode=9, stdout="", stderr="NVIDIA-SMI has failed")  # noqa: E731
    out = measure(lambda: {"duration": 1.0, "total_output_tokens": 10}, 0.05, nvidia_smi=str(binary), run=failing)
    assert out["power_mean_w"] is None and "power query failed" in out["power_reason"] and "exited 9" in out["power_reason"]
    na = lambda argv, **kw: SimpleNamespace(returncode=0, stdout="0, [N/A], [N/A]\n", stderr="")  # noqa: E731
    out = measure(lambda: {"duration": 1.0}, 0.05, nvidia_smi=str(binary), run=na)
    assert out["power_reason"] == "nvidia-smi reports no power.draw for GPU(s) 0"
    off = measure(lambda: {"duration": 1.0}, 0)
    assert off["power_reason"] == "power sampling off (interval 0)"


def test_measure_samples_in_a_thread_while_the_cell_runs(tmp_path):
    """The cell runs until the sampler thread has answered two queries after it started (an event, not a fixed
    time: under load the thread may be late), and reports how long that took as its duration."""
    import time
    asked, durations = [], []
    binary, run = smi(tmp_path, ["0, 200.00, 700.00\n"], asked)

    def cell():
        t0, before = time.monotonic(), len(asked)
        while len(asked) < before + 2 and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        durations.append(time.monotonic() - t0 + 1e-6)
        return {"duration": durations[0], "total_output_tokens": 600}
    out = measure(cell, 0.05, nvidia_smi=binary, run=run)
    assert out["power_samples"] >= 2 and out["power_mean_w"] == 200.0
    assert out["output_tokens_per_joule"] == pytest.approx(600 / (200.0 * durations[0]), rel=1e-3)  # rounded to 4


def test_server_gpu_count_from_the_argv_and_spec_check():
    assert server_gpu_count(["python", "-m", "sglang.launch_server", "--tp-size", "8"]) == 8
    assert server_gpu_count(["--tensor-parallel-size=4", "--dp-size", "2"]) == 8
    assert server_gpu_count(["--model-path", "/m"]) is None and server_gpu_count([]) is None
    assert spec_problems({}) == [] and spec_problems({"power_interval": 0}) == []
    assert "power_interval" in spec_problems({"power_interval": -1})[0]
    assert set(power.FIELDS) == set(power.empty("x"))
