"""playbooks/apply_proposal.yml on a tie, through ansible-playbook on this machine (connection local, the host in
group nvlink, the service role's apply skipped by its tag): a tie without a pick is refused before anything changes,
naming the candidates and the variable; a picked candidate's own fragment is what would be applied."""
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
FRAGMENT = {"sglang_service_speculative_overrides": {}, "sglang_service_server_overrides": {},
            "sglang_service_env_overrides": {}, "sglang_service_extra_args": {},
            "sglang_service_validation_overrides": []}


def fragment(budget):
    return dict(FRAGMENT, sglang_service_speculative_overrides={"algorithm": "DDTREE", "budget": budget})


TIE = {"run": "sweep-tie", "objective": {"mode": "throughput"}, "groups": {"nvlink": {
    "hosts": ["localhost"], "winner": None, "status": "tie", "baseline": "ar",
    "reason": "tie between dd4, dd8 (dd4 over dd8: margin 1.3% <= spread 5.0% of the 4 cells it rests on)",
    "group_vars": FRAGMENT, "diff": "",
    "tie": {"candidates": ["dd4", "dd8"], "kept": None, "pick_with": "-e proposal_pick=<one of dd4, dd8>",
            "group_vars": {"dd4": fragment(4), "dd8": fragment(8)}}}}}


def play(tmp_path, proposal, **extra):
    path = tmp_path / "proposal.yml"
    path.write_text(yaml.safe_dump(proposal))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"nvlink": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "vars.json").write_text(json.dumps({"proposal": str(path), "target_hosts": "nvlink", **extra}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(ROOT / "playbooks/apply_proposal.yml"), "--skip-tags", "apply",
                           "-e", f"@{tmp_path / 'vars.json'}"], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT),
                                         "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
                                         "ANSIBLE_GATHERING": "explicit",
                                         "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"})
    return proc.returncode, proc.stdout + proc.stderr


def test_a_tie_without_a_pick_is_refused_naming_the_candidates_and_the_variable(tmp_path):
    rc, out = play(tmp_path, TIE)
    assert rc != 0, out[-3000:]
    assert "is a tie between dd4, dd8" in out and "Nothing was changed" in out
    assert "Pick one with -e proposal_pick=<config>, one of dd4, dd8" in out
    assert "What the proposal says for this host" not in out           # refused before anything else


def test_a_pick_outside_the_candidates_is_refused(tmp_path):
    rc, out = play(tmp_path, TIE, proposal_pick="dd16")
    assert rc != 0 and "(got dd16)" in out, out[-3000:]


def test_a_picked_candidate_is_the_one_applied(tmp_path):
    rc, out = play(tmp_path, TIE, proposal_pick="dd8")
    assert rc == 0, out[-3000:]
    assert "apply dd8 (picked from a tie) from run sweep-tie" in out


def test_a_plain_winner_ignores_a_pick_and_a_group_without_winner_applies_nothing(tmp_path):
    won = {"run": "sweep-won", "groups": {"nvlink": dict(TIE["groups"]["nvlink"], winner="dd4", status="winner",
                                                         group_vars=fragment(4))}}
    del won["groups"]["nvlink"]["tie"]
    rc, out = play(tmp_path, won, proposal_pick="dd8")
    assert rc == 0 and "apply dd4 from run sweep-won" in out, out[-3000:]
    none = {"run": "sweep-none", "groups": {"nvlink": dict(won["groups"]["nvlink"], winner=None, status="none",
                                                           reason="no config beats it")}}
    rc, out = play(tmp_path, none)
    assert rc == 0 and "nothing to apply: no config beats it" in out, out[-3000:]
