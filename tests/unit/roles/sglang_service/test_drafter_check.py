"""roles/sglang_service/tasks/drafter_check.yml through ansible-playbook on this machine (connection local): the
directories the unit loads name their repositories, and the drafter's config.json is checked against the block size
of the rendered argv (or the version's default) before anything changes. The argv and the schema reference are set
the way preflight.yml sets them (from the committed 0.5.11 schema here)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PLAY = """
- hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.set_fact:
        sglang_service_schema_ref: "0.5.11"
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: drafter_check.yml
      vars:
        sglang_service_argv: "{{ sglang_service_server | sglang_argv(sglang_service_speculative, {}, '0.5.11') }}"
"""
FAILED = ("The model directories the service loads name the repositories they hold",
          "The drafter is made for the block size the server would run (its config.json on the host)")


def run(tmp_path, speculative, drafter_block=None, **extra):
    root = tmp_path / "models"
    if drafter_block is not None:
        (root / "Kimi-K2.6-DFlash").mkdir(parents=True)
        (root / "Kimi-K2.6-DFlash" / "config.json").write_text(json.dumps(
            {"block_size": drafter_block, "dflash_config": {"block_size": drafter_block}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extravars = {"deploy_models_root": str(root), "deploy_model_repo": "moonshotai/Kimi-K2.6",
                 "deploy_draft_model_repo": "z-lab/Kimi-K2.6-DFlash", "deploy_venv_path": "/opt/sglang/venv",
                 "deploy_cuda_home": "/usr/local/cuda", "deploy_host_group": "nvlink", "deploy_gpu_count": 0,
                 "deploy_gpu_compute_capability": "",
                 "sglang_service_speculative_profile": speculative, "ansible_python_interpreter": sys.executable,
                 **extra}
    (tmp_path / "vars.json").write_text(json.dumps(extravars))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play), "-v",
                           "-e", f"@{tmp_path / 'vars.json'}"], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT),
                               "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
                               "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
                               "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
    return proc.returncode, proc.stdout + proc.stderr


DFLASH = {"algorithm": "DFLASH", "draft_model_path": "{{ sglang_service_models_root }}/{{ sglang_service_draft_model_name }}"}


def test_a_drafter_made_for_the_profiles_block_size_passes(tmp_path):
    rc, out = run(tmp_path, dict(DFLASH, block_size=8), drafter_block=8)
    assert rc == 0, out[-3000:]
    assert f'"config": "{tmp_path}/models/Kimi-K2.6-DFlash/config.json"' in out and '"drafter_block_size": 8' in out


def test_a_block_size_mismatch_is_refused_before_any_change(tmp_path):
    rc, out = run(tmp_path, dict(DFLASH, block_size=8), drafter_block=16)
    assert rc != 0 and f"TASK [sglang_service : {FAILED[1]}]" in out, out[-3000:]
    assert "the server would run block size 8 (--speculative-dflash-block-size 8 (the server's argv))" in out
    assert f"made for 16 ({tmp_path}/models/Kimi-K2.6-DFlash/config.json: dflash_config.block_size)" in out


def test_the_default_applies_when_the_profile_sets_none(tmp_path):
    """No block-size flag: SGLang 0.5.11's schema defaults are none, so the server takes the drafter's own."""
    rc, out = run(tmp_path, DFLASH, drafter_block=16)
    assert rc == 0, out[-3000:]
    assert '"block_size": 16' in out and "flag schema defaults them to none" in out
    bare = tmp_path / "bare"
    bare.mkdir()
    rc, out = run(bare, DFLASH)  # no drafter at all: refused with the path
    assert rc != 0 and f"{bare}/models/Kimi-K2.6-DFlash/config.json is missing" in out, out[-3000:]


def test_a_directory_named_after_another_repository_is_refused_naming_both(tmp_path):
    rc, out = run(tmp_path, dict(DFLASH, block_size=8), drafter_block=8,
                  sglang_service_draft_model_name="Kimi-K2.6-DFlash-tmp-long")
    assert rc != 0 and f"TASK [sglang_service : {FAILED[0]}]" in out, out[-3000:]
    assert ("sglang_service_draft_model_name 'Kimi-K2.6-DFlash-tmp-long' holds z-lab/Kimi-K2.6-DFlash, so its "
            "directory must be named 'Kimi-K2.6-DFlash'") in out


def test_no_speculative_drafter_no_check(tmp_path):
    rc, out = run(tmp_path, {"algorithm": "NONE"})
    assert rc == 0, out[-3000:]
    assert "skipping: [localhost]" in out
