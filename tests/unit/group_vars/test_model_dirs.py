"""The shipped inventories' model directories name the repositories they hold, as Ansible itself renders them: every
models_list entry's name is its repository's name part, and the service loads exactly those directories (the target
and, on a speculative profile, the drafter), from the same root. The production inventory is only parsed here."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils.hf.model_dir import dir_problems, model_dir

ROOT = Path(__file__).resolve().parents[3]

PLAY = """
- hosts: nvlink:pcie
  gather_facts: false
  connection: local
  tasks:
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: interface.yml
    - ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0600"
        content: "{{ {'models_list': models_list, 'models_root': models_root | default(deploy_models_root),
                      'model_repo': deploy_model_repo, 'draft_model_repo': deploy_draft_model_repo,
                      'model_path': sglang_service_interface.server_layers.model_path,
                      'speculative': sglang_service_interface.speculative_profile} | to_json }}"
"""


def rendered(inventory: str, tmp_path) -> dict:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "out"
    out.mkdir()
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT), "LAB_NAME": "test-model-dirs-none",
           "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(ROOT / "inventory" / inventory),
                           str(play), "-e", f"out={out}", "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


@pytest.mark.parametrize("inventory,hosts,target_repo,draft_repo", [
    ("production", {"b300-01.example.internal", "b300-02.example.internal", "ct200-01.example.internal"},
     "moonshotai/Kimi-K2.6", "z-lab/Kimi-K2.6-DFlash"),
    ("lab", {"b300-lab", "ct200-lab"}, "demo/Kimi-K2.6", "demo/Kimi-K2.6-DFlash"),
])
def test_every_model_path_names_its_repository(inventory, hosts, target_repo, draft_repo, tmp_path):
    by_host = rendered(inventory, tmp_path)
    assert set(by_host) == hosts
    for host, v in by_host.items():
        assert dir_problems(v["models_list"]) == [], host
        repo_of = {m["name"]: m["repo_id"] for m in v["models_list"]}
        assert (v["model_repo"], v["draft_model_repo"]) == (target_repo, draft_repo)
        root = v["models_root"]
        # the target the unit loads is the directory of the repository the models role fetched
        assert v["model_path"] == f"{root}/{model_dir(target_repo)}" and repo_of[model_dir(target_repo)] == target_repo
        draft = v["speculative"].get("draft_model_path")
        if v["speculative"]["algorithm"] != "NONE":
            assert draft == f"{root}/{model_dir(draft_repo)}" and repo_of[model_dir(draft_repo)] == draft_repo, host
    # the hand deployment's lie is gone: no directory is named after the operator's own drafter
    assert not any("tmp-long" in json.dumps(v) for v in by_host.values())
    # the nvlink hosts are the speculative ones and load the public drafter's directory
    assert {h for h, v in by_host.items() if v["speculative"]["algorithm"] != "NONE"} == {h for h in hosts if "b300" in h}
