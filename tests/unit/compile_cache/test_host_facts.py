"""module_utils/compile_cache/host.py: the key's facts as a host has them (venv, provenance fact, CUDA toolkit, GPUs
through gpu/nvidia_smi.py, answered with the recordings in tests/fixtures/nvidia-smi/), and that compile_cache/ runs
no command itself."""
from __future__ import annotations

import ast
import json
import sys
from types import SimpleNamespace

import pytest

from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.host import gpu_facts, host_facts
from ansible.module_utils.gpu.cuda_toolkit import cuda_version
from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.gpu.nvidia_smi import QUERY_ARGS
from tests.helpers.compile_cache import ARGV, ROOT, facts, fake_venv

SMI_FIXTURES = ROOT / "tests/fixtures/nvidia-smi"


# ---------------------------------------------------------------------------------------------------------------
# host facts




def test_host_facts_read_the_venv_the_fact_cuda_and_the_gpus(tmp_path):
    venv = fake_venv(tmp_path)
    fact = tmp_path / "sglang_venv.fact"
    fact.write_text(json.dumps({"sglang_version": "0.5.11", "patch_series_hash": "ab" * 32}))
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.0.88"}}))
    smi = tmp_path / "nvidia-smi"  # answers the query with the H200's recorded answer
    smi.write_text(f"#!/bin/sh\ncat '{SMI_FIXTURES / 'h200-query.txt'}'\n")
    smi.chmod(0o755)
    got = host_facts(ARGV, str(venv), str(venv / ".sglang-venv-digest"), str(fact), str(cuda), str(smi))
    assert got == facts()
    # no nvidia-smi (the lab): empty GPU fields; no fact: SGLang's version from the dist-info
    lab = host_facts([], str(venv), str(venv / ".sglang-venv-digest"), str(tmp_path / "none"), "",
                        str(tmp_path / "no-such-smi"))
    assert (lab["gpu_name"], lab["compute_capability"], lab["driver_version"], lab["cuda_version"]) == ("", "", "", "")
    assert lab["sglang_version"] == "0.5.11" and lab["patch_series_hash"] == "" and lab["torch_version"] == "2.11.0+cu130"


def test_gpu_facts_mixed_gpus_and_a_failing_nvidia_smi(tmp_path):
    asked = []

    def answer(stdout, returncode=0, stderr=""):
        def run(argv, **kw):
            asked.append(argv)
            return SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)
        return run
    mixed = (SMI_FIXTURES / "h200-query.txt").read_text() + (SMI_FIXTURES / "b300-8gpu-nvlink-query.txt").read_text()
    got = gpu_facts(sys.executable, runner=answer(mixed))
    assert got == {"gpu_name": "NVIDIA B300 SXM6 AC+NVIDIA H200", "compute_capability": "10.3+9.0",
                   "driver_version": "580.159.04+580.95.05"}
    assert asked[-1] == [sys.executable, *QUERY_ARGS]  # gpu/nvidia_smi.py's query, the one the fixtures answer
    bad = answer("", 9, "NVIDIA-SMI has failed because it couldn't communicate")
    with pytest.raises(CompileCacheError, match="couldn't communicate") as err:
        gpu_facts(sys.executable, runner=bad)
    assert isinstance(err.value, EvidenceError) and err.value.evidence["rc"] == 9
    with pytest.raises(CompileCacheError, match="listed no GPU"):
        gpu_facts(sys.executable, runner=answer("\n"))
    with pytest.raises(CompileCacheError, match="expected 7 comma-separated fields"):
        gpu_facts(sys.executable, runner=answer("NVIDIA H200, 9.0, 580.159.04\n"))


def test_compile_cache_runs_no_command_itself():
    """The GPU facts come from gpu/nvidia_smi.py (query_gpus); nothing in compile_cache/ starts a process or names
    nvidia-smi outside its docstrings."""
    starts = {"system", "popen", "spawnv", "spawnvp", "execv", "execvp", "posix_spawn", "Popen", "run", "check_output"}
    for path in sorted((ROOT / "module_utils/compile_cache").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "subprocess" not in imported, path
        assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in starts
                    and getattr(n.value, "id", "") in ("os", "subprocess")], path
        assert not [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    and "nvidia-smi" in n.value and id(n) not in docs], path


def test_cuda_version_from_version_txt(tmp_path):
    (tmp_path / "version.txt").write_text("CUDA Version 12.4.131\n")
    assert cuda_version(str(tmp_path)) == "12.4.131"
    assert cuda_version(str(tmp_path / "none")) == ""
