"""library/compile_cache.py run as Ansible runs it, and the recording of real SGLang on the H200
(tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json), the role's default dirs and the lab's stand-in agreeing."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from ansible.module_utils.compile_cache.bundle import DEFAULT_DIRS, check_dirs, containing_dir
from ansible.module_utils.compile_cache.record import RECORD_NAME
from tests.helpers.ansible_module import module_command
from tests.helpers.compile_cache import ARGV, ROOT, fake_venv, make_home

sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
RECORDING = ROOT / "tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json"


# ---------------------------------------------------------------------------------------------------------------
# the module


def _docs():
    tree_ = ast.parse((ROOT / "library/compile_cache.py").read_text())
    return {t.targets[0].id: yaml.safe_load(t.value.value) for t in tree_.body
            if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


def test_module_docs_parse_and_match_the_argument_spec():
    docs = _docs()
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == "compile_cache" and docs["EXAMPLES"][0]["name"]
    src = (ROOT / "library/compile_cache.py").read_text()
    spec = set(re.findall(r"^\s{12}([a-z_0-9]+)=dict\(", src, re.M))
    assert spec == set(doc["options"]), (spec, set(doc["options"]))
    assert doc["options"]["dirs"]["default"] == list(DEFAULT_DIRS)
    assert set(docs["RETURN"]) == {"key", "key_doc", "recorded", "installed", "reason", "sha256", "bytes", "files"}


def run_module(tmp_path, args: dict, check: bool = False) -> dict:
    argsfile = tmp_path / f"args-{len(list(tmp_path.glob('args-*')))}.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check)}))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(module_command("compile_cache", argsfile), capture_output=True,
                         text=True, timeout=60, env=env, cwd=str(tmp_path))
    return json.loads(out.stdout)


def test_module_key_pack_install_with_check_mode_truthful(tmp_path):
    venv = fake_venv(tmp_path)
    src = make_home(tmp_path / "pub")
    key = run_module(tmp_path, {"state": "key", "home": str(src), "argv": ARGV, "venv_path": str(venv),
                                "venv_digest_path": str(venv / ".sglang-venv-digest"),
                                "fact_path": str(tmp_path / "none"), "nvidia_smi": str(tmp_path / "none")})
    assert not key["changed"] and len(key["key"]) == 64 and key["reason"] == "the home records no compile cache"
    out = tmp_path / "stage" / "b.tar"
    dry = run_module(tmp_path, {"state": "packed", "home": str(src), "key_doc": key["key_doc"], "dest": str(out),
                                "settle_s": 0}, check=True)
    assert dry["changed"] and dry["files"] == 5 and not out.exists() and not (src / RECORD_NAME).exists()
    packed = run_module(tmp_path, {"state": "packed", "home": str(src), "key_doc": key["key_doc"], "dest": str(out),
                                   "settle_s": 0})
    assert packed["changed"] and packed["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert packed["recorded"]["key"] == key["key"] and packed["recorded"]["source"] == "published"
    home = tmp_path / "host2"
    home.mkdir()
    args = {"state": "installed", "home": str(home), "bundle": str(out), "key_doc": key["key_doc"],
            "sha256": packed["sha256"]}
    dry = run_module(tmp_path, args, check=True)
    assert dry["changed"] and not dry["installed"] and list(home.iterdir()) == []
    done = run_module(tmp_path, args)
    assert done["changed"] and done["installed"] and done["recorded"]["key"] == key["key"]
    # another key: not a failure, a warning, installed false
    other = dict(key["key_doc"], driver_version="1")
    refused = run_module(tmp_path, dict(args, key_doc=other, home=str(tmp_path / "pub")))
    assert not refused.get("failed") and not refused["installed"] and "key field driver_version" in refused["reason"]
    assert "the service starts cold" in json.dumps(refused.get("warnings", []))
    # a real error fails with the evidence
    err = run_module(tmp_path, dict(args, bundle=str(tmp_path / "gone.tar"), sha256="0" * 64))
    assert err["failed"] and "no bundle at" in err["msg"]


# ---------------------------------------------------------------------------------------------------------------
# the recording, the role's defaults and the stand-in agree


def test_the_role_default_dirs_cover_every_dir_real_sglang_wrote_on_the_h200():
    rec = json.loads(RECORDING.read_text())
    written = set(rec["dirs_written"])
    assert written == {".triton/cache", ".cache/flashinfer", ".cache/tvm-ffi", ".cache/sglang"}
    assert all(rec["dirs_written"][d]["files"] > 0 for d in written)
    defaults = yaml.safe_load((ROOT / "roles/sglang_service/defaults/main.yml").read_text())
    role_dirs = defaults["sglang_service_compile_cache_dirs"]
    assert written <= set(role_dirs) and set(rec["cache_dirs_known_not_written_here"]) <= set(role_dirs)
    assert role_dirs == list(DEFAULT_DIRS)
    check_dirs(role_dirs)
    assert rec["time_to_ready_seeded_s"] < rec["time_to_ready_fresh_s"]
    assert all(s["seeded"]["t_ready"] < s["fresh"]["t_ready"] for s in rec["samples"])
    assert rec["gpu"]["name"] == "NVIDIA H200" and rec["software"]["sglang"] == "0.5.11"


def _standin_args(**over):
    base = dict(model_path="/srv/models/m", attention_backend="triton", speculative_algorithm=None, page_size=1,
                tp_size=1, disable_cuda_graph=False)
    base.update(over)
    return SimpleNamespace(**base)


def test_the_standin_writes_its_cache_under_the_recorded_dirs_and_hits_only_its_own_config(tmp_path, monkeypatch):
    from sglang_standin import jit_cache
    monkeypatch.setenv("HOME", str(tmp_path))
    for v in ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR"):
        monkeypatch.delenv(v, raising=False)
    waits, logs = [], []

    def wait(s):
        waits.append(s)
        return False
    assert not jit_cache.warm_up(_standin_args(), 2.0, wait, logs.append)
    assert waits == [2.0] and "13 of 13 kernels not in the compile cache" in logs[-1]
    written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    rec = set(json.loads(RECORDING.read_text())["dirs_written"])
    assert written and all(containing_dir(p, sorted(rec)) for p in written)
    assert {containing_dir(p, sorted(rec)) for p in written} == rec  # every recorded dir, nothing else
    jit_cache.warm_up(_standin_args(), 2.0, wait, logs.append)
    assert waits == [2.0] and "all 13 kernels found" in logs[-1]  # warm: no compile time
    jit_cache.warm_up(_standin_args(speculative_algorithm="DDTREE"), 2.0, wait, logs.append)
    assert waits[-1] == pytest.approx(2.0 * 12 / 13)  # another config: all but FlashInfer's op are missing


def test_the_standin_is_ready_sooner_with_a_seeded_home(tmp_path):
    from sglang_standin.local import LocalServer
    env = {"HOME": str(tmp_path), "SGLANG_STANDIN_LOAD_S": "0.1", "SGLANG_STANDIN_WARMUP_S": "0.1",
           "SGLANG_STANDIN_COMPILE_S": "1.5"}
    for v in ("TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR", "SGLANG_CACHE_DIR"):
        env[v] = ""
    lines = []
    for _ in range(2):
        with LocalServer(["--model-path", "/srv/models/m", "--host", "127.0.0.1"], env=env) as srv:
            srv.wait_for_line("fired up", timeout=30)
            lines.append([ln for ln in srv.lines if "stand-in JIT" in ln])
    assert "not in the compile cache" in lines[0][0] and "(1.5 s)" in lines[0][0]
    assert "all 13 kernels found in the compile cache" in lines[1][0]
