"""module_utils/sglang/preflight.py: the installed version's own validation (here the stand-in's) judges the argv,
in a subprocess that sees no GPU and gets the host's GPU facts from nvidia-smi instead."""
import os
import sys
from pathlib import Path

from filter_plugins.sglang import sglang_argv
from ansible.module_utils.sglang import preflight as pf

ROOT = Path(__file__).resolve().parents[3]
ENV = {"PYTHONPATH": str(ROOT / "lab" / "sglang_standin")}
MODULE = "sglang_standin.server_args"


def check(argv, **kw):
    return pf.check(sys.executable, MODULE, argv, env=ENV, timeout=60, **kw)


def test_profile_argv_accepted(standin_ddtree_root, ddtree_schema):
    argv = sglang_argv({"model_path": "/srv/models/K", "port": 30001, "host": "0.0.0.0", "tp_size": 8,
                        "attention_backend": "triton", "page_size": 1, "trust_remote_code": True},
                       {"algorithm": "DDTREE", "draft_model_path": "/srv/models/d", "block_size": 8,
                        "draft_window_size": 2048, "budget": 8, "topk_cap": 4, "debug_metrics": True},
                       None, ddtree_schema)
    out = pf.check(sys.executable, MODULE, argv, env={"PYTHONPATH": str(standin_ddtree_root)}, timeout=60,
                   with_api_key=True)
    assert out == {"accepted": True, "rc": 0, "message": "", "steps": ["prepare_server_args", "check_server_args"]}


def test_unknown_flag_rejected_with_argparse_message():
    out = check(["--model-path", "/m", "--speculative-ddtree-bugdet", "8"])
    assert not out["accepted"] and out["rc"] == 2
    assert "sglang serve: error: unrecognized arguments: --speculative-ddtree-bugdet" in out["message"]


def test_semantic_rejection_names_the_exception_and_the_step():
    out = check(["--model-path", "/m", "--speculative-algorithm", "DFLASH"])
    assert not out["accepted"] and out["rc"] == 1
    assert out["message"].startswith("refused in prepare_server_args: ValueError: DFLASH speculative decoding "
                                     "requires setting --speculative-draft-model-path")


def test_check_server_args_runs_after_parsing():
    out = check(["--model-path", "/m", "--tp-size", "1", "--nnodes", "2"])
    assert not out["accepted"] and out["steps"] == ["prepare_server_args", "check_server_args"]
    assert "AssertionError: tp_size must be divisible by number of nodes" in out["message"]


FAKE_TORCH = """
import os
class _Cuda:
    def __getattr__(self, name):
        raise RuntimeError("real CUDA call " + name + " (would open a context)")
    def is_available(self):
        raise RuntimeError("real CUDA call is_available")
cuda = _Cuda()
"""
PROBE_PARSER = """
import json, os, torch
def prepare_server_args(argv):
    return Args()
class Args:
    def check_server_args(self):
        p = torch.cuda.get_device_properties(0)
        print("SEEN", json.dumps({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "available": torch.cuda.is_available(),
              "count": torch.cuda.device_count(), "cap": torch.cuda.get_device_capability(), "name": p.name,
              "mib": p.total_memory >> 20}))
"""


def test_gpus_hidden_and_the_hosts_facts_handed_to_torch(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "probeparser.py").write_text(PROBE_PARSER)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat " + str(ROOT / "tests/fixtures/nvidia-smi/b300-8gpu-nvlink-query.txt") + "\n")
    smi.chmod(0o755)
    facts = pf.device_facts(pf.read_gpus(str(smi)), "0,1,2,3")
    assert len(facts["gpus"]) == 4 and facts["gpus"][0]["compute_cap"] == "10.3"
    out = pf.check(sys.executable, "probeparser", [], facts=facts, timeout=60,
                   env={"PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert out["accepted"], out
    seen = [ln for ln in pf_stdout(tmp_path, facts) if ln.startswith("SEEN ")]
    import json
    got = json.loads(seen[0][5:])
    assert got == {"visible": "", "available": True, "count": 4, "cap": [10, 3], "name": "NVIDIA B300 SXM6 AC",
                   "mib": 275040}


def pf_stdout(tmp_path, facts):
    import subprocess
    env = {**os.environ, "PYTHONPATH": str(tmp_path), **pf.NO_GPU_ENV}
    return subprocess.run(pf.command(sys.executable, "probeparser", [], facts), capture_output=True, text=True,
                          env=env, timeout=60).stdout.splitlines()


def test_read_gpus_on_a_host_without_nvidia_smi():
    assert pf.read_gpus("/nonexistent/nvidia-smi") == []


def test_missing_python_and_missing_module():
    assert pf.check("/nonexistent/python", MODULE, [])["rc"] == 127
    out = pf.check(sys.executable, "sglang.srt.server_args_nope", ["--model-path", "/m"], env=ENV, timeout=60)
    assert not out["accepted"] and "ModuleNotFoundError" in out["message"]


def test_api_key_placeholder_never_the_secret():
    cmd = pf.command("/py", MODULE, ["--model-path", "/m"], with_api_key=True)
    assert cmd[-2:] == ["--api-key", pf.API_KEY_PLACEHOLDER]


def test_timeout_reported(tmp_path):
    slow = tmp_path / "slowparser.py"
    slow.write_text("import time\ndef prepare_server_args(argv):\n    time.sleep(30)\n")
    out = pf.check(sys.executable, "slowparser", [], env={"PYTHONPATH": str(tmp_path)}, timeout=1)
    assert out["rc"] == 124 and "within 1s" in out["message"]
    assert os.path.exists(slow)


CACHE_WRITER = '''
import json, os, pathlib
SEEN = {k: os.environ.get(k) for k in ["HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TRITON_HOME",
        "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR", "SGLANG_DG_CACHE_DIR",
        "DG_JIT_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH"]}
SEEN["cwd"] = os.getcwd()
# what real SGLang 0.5.11's import did on the H200: caches under ~ (here, under HOME and every variable)
for d in [os.path.expanduser("~/.cache/flashinfer/0.6.8.post1/90a"), os.path.expanduser("~/.triton/cache/ab")] + \\
        [v for k, v in SEEN.items() if k not in ("HOME", "cwd")]:
    pathlib.Path(d).mkdir(parents=True, exist_ok=True)
    (pathlib.Path(d) / "cuda_utils.so").write_text("x")
def prepare_server_args(argv):
    pathlib.Path(argv[0]).write_text(json.dumps(SEEN))
'''


def test_the_parser_runs_in_a_scratch_home_that_is_removed_afterwards(tmp_path):
    """The service's HOME (and any cache variable it sets into it) never reaches the preflight: every cache the
    import writes lands in a private scratch home, gone when the check returns."""
    (tmp_path / "cachewriter.py").write_text(CACHE_WRITER)
    home = tmp_path / "service-home"   # absent, like /var/lib/sglang before install
    report = tmp_path / "seen.json"
    out = pf.check(sys.executable, "cachewriter", [str(report)], timeout=60,
                   env={"PYTHONPATH": str(tmp_path), "HOME": str(home), "TRITON_CACHE_DIR": str(home / "triton"),
                        "XDG_CACHE_HOME": str(home / ".cache")})
    assert out["accepted"], out
    import json
    seen = json.loads(report.read_text())
    scratch = seen["HOME"]
    assert os.path.basename(scratch).startswith("sglang-preflight-home-") and scratch != str(home)
    assert seen["cwd"] == scratch
    assert set(seen) - {"HOME", "cwd"} == set(pf.SCRATCH_CACHE_ENV)
    assert all(v.startswith(scratch + os.sep) or v == scratch for v in seen.values()), seen
    assert not home.exists()            # nothing under the service's home
    assert not os.path.exists(scratch)  # and the scratch home is gone


def test_the_scratch_home_is_removed_after_a_refusal_and_a_timeout(tmp_path, monkeypatch):
    made = []
    real = pf.tempfile.mkdtemp
    monkeypatch.setattr(pf.tempfile, "mkdtemp", lambda **kw: made.append(real(**kw)) or made[-1])
    (tmp_path / "slowparser.py").write_text("import time\ndef prepare_server_args(argv):\n    time.sleep(30)\n")
    assert pf.check(sys.executable, "slowparser", [], env={"PYTHONPATH": str(tmp_path)}, timeout=1)["rc"] == 124
    assert not pf.check(sys.executable, MODULE, ["--no-such-flag"], env=ENV, timeout=60)["accepted"]
    assert len(made) == 2 and not any(os.path.exists(m) for m in made)


def test_the_h200_recording_real_sglang_writes_under_home_only_without_the_scratch_home():
    """tests/fixtures/real_sglang/preflight_home-0.5.11-h200.json (preflight_home.py run on the H200 with real 0.5.11,
    as root, HOME an absent directory): check() with its scratch home left nothing under the service's HOME and no
    scratch directory behind; the same run without it (the code before issue 25) created HOME with root-owned JIT
    caches in it."""
    import json
    from pathlib import Path
    rec = json.loads((Path(__file__).resolve().parents[3]
                      / "tests/fixtures/real_sglang/preflight_home-0.5.11-h200.json").read_text())
    assert rec["scratch"]["accepted"] and not rec["scratch"]["home_exists_after"]
    assert rec["scratch"]["files_under_home"] == [] and rec["scratch"]["scratch_dirs_left"] == []
    written = rec["no_scratch"]["files_under_home"]
    assert rec["no_scratch"]["accepted"] and written and all(f["uid"] == rec["uid"] == 0 for f in written)
    # what it wrote: FlashInfer's JIT log and Triton's compiled helper, the caches the scratch variables name
    assert {f["path"].split("/")[1] if f["path"].startswith(".cache/") else f["path"].split("/")[0]
            for f in written} == {"flashinfer", ".triton"}
    env = pf.scratch_env("/scratch")
    assert env["HOME"] == "/scratch" and env["TRITON_CACHE_DIR"] == "/scratch/.triton/cache"
    assert env["FLASHINFER_WORKSPACE_BASE"] == "/scratch"
