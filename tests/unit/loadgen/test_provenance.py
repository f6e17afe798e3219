"""ansible.module_utils.loadgen.provenance: every source read truthfully, a missing one recorded as missing."""
import json
import subprocess
from pathlib import Path

from ansible.module_utils.gpu.nvidia_smi import QUERY_ARGS
from ansible.module_utils.loadgen import provenance as bp

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi"


def fake_run(stdout="", rc=0, exc=None):
    def run(argv, **kw):
        if exc:
            raise exc
        return subprocess.CompletedProcess(argv, rc, stdout=stdout, stderr="boom" if rc else "")
    return run


def test_nvidia_smi_through_query_gpus_on_the_recordings(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    asked = []

    def recorded(name):
        def run(argv, **kw):
            asked.append(argv)
            return subprocess.CompletedProcess(argv, 0, stdout=(FIXTURES / name).read_text(), stderr="")
        return run
    assert bp.nvidia_smi(recorded("b300-8gpu-nvlink-query.txt"), str(smi)) == ("580.95.05", "8x NVIDIA B300 SXM6 AC")
    assert bp.nvidia_smi(recorded("h200-query.txt"), str(smi)) == ("580.159.04", "1x NVIDIA H200")
    assert asked[0] == [str(smi), *QUERY_ARGS]  # gpu/nvidia_smi.py's one query, not an argv of its own


def test_nvidia_smi_absence_and_failures(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    assert bp.nvidia_smi(fake_run(exc=FileNotFoundError()), str(smi))[0] == \
        "none: nvidia-smi not runnable (FileNotFoundError)"
    assert bp.nvidia_smi(fake_run("x"), str(tmp_path / "absent")) == \
        ("none: nvidia-smi not runnable (FileNotFoundError)", "none")
    assert bp.nvidia_smi(fake_run(rc=9), str(smi))[0] == "none: nvidia-smi rc=9 boom"
    assert bp.nvidia_smi(fake_run(""), str(smi))[0] == "none: nvidia-smi listed no GPU"
    assert bp.nvidia_smi(fake_run("580.65.06, NVIDIA B300\n"), str(smi))[0].startswith(
        "none: nvidia-smi answered in another format (expected 7")


def test_cuda_version(tmp_path):
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.1"}}))
    assert bp.cuda_version(str(tmp_path)) == "13.0.1"
    assert bp.cuda_version(str(tmp_path / "nope")).startswith("none: ")
    assert bp.cuda_version("") == "none: no cuda_home"


def test_cuda_version_of_a_toolkit_without_a_version_file(tmp_path):
    # the H200 image's /usr/local/cuda-13.0 has no version.json: the sweep's rows said "none: ... unreadable" for the
    # toolkit the cuda role had just adopted (rehearsal h200-2026-12-04d); the role's own reader is used now
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text("#define CUDA_VERSION 13000\n")
    assert bp.cuda_version(str(tmp_path)) == "13.0 (include/cuda.h)"


def test_venv_fact(tmp_path):
    fact = tmp_path / "sglang_venv.fact"
    fact.write_text(json.dumps({"content_hash": "c0ffee", "sglang_version": "0.5.11", "patch_series_hash": "p4",
                                "python_version": "3.11.2", "method": "stream", "path": "/opt/sglang/venv"}))
    out = bp.venv_fact(str(fact))
    assert out["venv_content_hash"] == "c0ffee" and out["sglang_version"] == "0.5.11"
    assert out["patch_series_hash"] == "p4" and out["venv_method"] == "stream"
    assert bp.venv_fact(str(tmp_path / "missing"))["venv"].startswith("none: ")


def test_model_revisions(tmp_path):
    model = tmp_path / "Kimi"
    (model / ".hf_model").mkdir(parents=True)
    (model / ".hf_model" / "manifest.json").write_text(json.dumps({"version": 1, "repo_id": "org/Kimi",
                                                                   "revision": "a" * 40, "files": {}}))
    out = bp.model_revisions([str(model), str(tmp_path / "draft"), ""])
    assert out[str(model)] == "org/Kimi@" + "a" * 40
    assert out[str(tmp_path / "draft")].startswith("none: ")
    assert len(out) == 2


def test_collect_has_every_key(tmp_path):
    prov = bp.collect(fact_path=str(tmp_path / "f"), cuda_home=str(tmp_path), model_paths=[], unit="",
                      run=fake_run(exc=FileNotFoundError()))
    assert set(prov) >= {"driver", "gpu", "cuda", "venv", "model_revision", "flags"}
    assert prov["flags"] == []


def test_model_paths_from_the_running_argv():
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "/srv/models/K", "--port", "1",
            "--speculative-draft-model-path=/srv/models/D", "--model-path", "/srv/models/K"]
    assert bp.model_paths_from_argv(argv) == ["/srv/models/K", "/srv/models/D"]
    assert bp.model_paths_from_argv(["--model-path"]) == []
