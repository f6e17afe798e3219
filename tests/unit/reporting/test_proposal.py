"""proposal.yml: per host group winner, figures, group_vars fragment and the diff against a temp group_vars dir;
hosts of one group aggregated (valid on all, geometric mean over hosts); no winner = nothing to apply."""
import pytest
import yaml

from reporting import load_run
from reporting.objective import Objective
from reporting.proposal import (DEFAULT_GROUP_VARS_DIR, block_diff, build_proposal, host_groups, proposal_text,
                                read_group_profile, write_proposal)
from tests.helpers.reporting_rows import CODE, RANDOM, cell, config_row, sweep_rows, write_run

NVLINK_SERVICE = """---
sglang_service_server_profile:
  tp_size: 8
  max_running_requests: 128
sglang_service_speculative_profile:
  algorithm: DDTREE
  draft_model_path: "{{ sglang_service_models_root }}/{{ sglang_service_draft_model_name }}"
  block_size: 4
  budget: 16
  topk_cap: 4
"""
PCIE_SERVICE = """---
sglang_service_speculative_profile:
  algorithm: NONE
"""


@pytest.fixture
def group_vars(tmp_path):
    gv = tmp_path / "group_vars"
    (gv / "nvlink").mkdir(parents=True)
    (gv / "nvlink" / "sglang_service.yml").write_text(NVLINK_SERVICE)
    (gv / "pcie").mkdir()
    (gv / "pcie" / "sglang_service.yml").write_text(PCIE_SERVICE)
    return gv


def pcie_rows():
    """Group pcie, hosts p1 and p2: x is 1.2x on p1 and 0.9x on p2 (group geomean sqrt(1.08) = 1.039 -> wins);
    y is 1.5x on p1 but failed on p2 (not valid on the group); z was measured on p1 only."""
    cells, configs = [], []
    factors = {"p1": {"x": 1.2, "y": 1.5, "z": 1.1}, "p2": {"x": 0.9}}
    for host in ("p1", "p2"):
        configs.append(config_row("ar", host=host, group="pcie", baseline=True))
        for c in (1, 16):
            cells.append(cell("ar", RANDOM, c, 100.0 * c, host=host, group="pcie"))
            for name, f in factors[host].items():
                cells.append(cell(name, RANDOM, c, 100.0 * c * f, host=host, group="pcie"))
        configs.append(config_row("x", host=host, group="pcie", overrides={
            "speculative": {"algorithm": "EAGLE3", "num_steps": 3}, "env": {"X": "1"}}))
    configs.append(config_row("y", host="p1", group="pcie"))
    configs.append(config_row("y", "failed", host="p2", group="pcie", failed_step="ready", reason="OOM at load"))
    configs.append(config_row("z", host="p1", group="pcie"))
    return cells, configs


@pytest.fixture
def both(tmp_path):
    cells, configs = sweep_rows()
    pc, pg = pcie_rows()
    return load_run(write_run(tmp_path / "sweep-x", cells + pc, configs + pg))


def test_host_groups(both):
    assert host_groups(both) == {"nvlink": ["h1"], "pcie": ["p1", "p2"]}


def test_nvlink_winner_fragment_and_diff(both, group_vars):
    proposal, decisions = build_proposal(both, Objective(), group_vars)
    assert proposal["run"] == "sweep-x"
    assert proposal["objective"] == {"mode": "throughput", "slo_ttft_p99_ms": None, "slo_itl_p99_ms": None,
                                     "slo_tpot_p99_ms": None}
    g = proposal["groups"]["nvlink"]
    assert g["hosts"] == ["h1"] and g["winner"] == "dd8" and g["baseline"] == "ar"
    f = g["figures"]
    assert f["geomean_speedup"] == 1.3527
    assert f["speedup"] == {CODE: {1: 2.5, 8: 1.5, 64: 0.9}, RANDOM: {1: 1.5, 8: 1.1, 64: 1.1}}
    assert f["crossover_c"] == {CODE: 64, RANDOM: "never"}
    assert f["accept_length"] == {CODE: 3.5556, RANDOM: 1.2}
    assert f["objective"] == "throughput" and f["slo_ttft_p99_ms"] is None
    assert [d["config"] for d in g["disqualified"]] == ["eagle", "soakfail", "broken"]
    assert "server died at C=8" in g["disqualified"][1]["why"]
    assert g["group_vars"] == {
        "sglang_service_speculative_overrides": {"algorithm": "DDTREE", "budget": 8, "block_size": 8},
        "sglang_service_server_overrides": {"max_running_requests": 64},
        "sglang_service_env_overrides": {},
        "sglang_service_extra_args": {"--enable-foo": True},
        "sglang_service_validation_overrides": ["sm103_budget_cuda_graphs"]}
    diff = g["diff"]
    assert "\n-block_size: 4\n-budget: 16\n+block_size: 8\n+budget: 8\n" in diff
    assert " draft_model_path: '{{ sglang_service_models_root }}/{{ sglang_service_draft_model_name }}'" in diff
    assert " topk_cap: 4" in diff
    assert "-max_running_requests: 128" in diff and "+max_running_requests: 64" in diff
    assert diff.startswith("--- group_vars/nvlink/sglang_service.yml sglang_service_speculative_profile (current)")
    assert decisions["nvlink"].winner == "dd8"


def test_pcie_group_aggregates_hosts(both, group_vars):
    proposal, _ = build_proposal(both, Objective(), group_vars)
    g = proposal["groups"]["pcie"]
    assert g["hosts"] == ["p1", "p2"]
    assert g["winner"] == "x"
    assert g["figures"]["geomean_speedup"] == round((1.2 * 0.9) ** 0.5, 4) == 1.0392
    assert g["figures"]["ranking"] == {"x": 1.0392, "ar": 1.0}
    assert g["figures"]["per_host"]["p1"]["geomean_speedup"] == 1.2
    assert g["figures"]["per_host"]["p2"]["speedup"] == {RANDOM: {1: 0.9, 16: 0.9}}
    assert g["figures"]["crossover_c"] == {RANDOM: "never"}
    assert g["disqualified"] == [{"config": "y", "why": "p2: sweep failed at step ready: OOM at load"}]
    assert g["figures"]["not_ranked"]["z"] == "p2: not measured"
    assert g["group_vars"]["sglang_service_speculative_overrides"] == {"algorithm": "EAGLE3", "num_steps": 3}
    assert g["group_vars"]["sglang_service_env_overrides"] == {"X": "1"}
    assert "-algorithm: NONE\n+algorithm: EAGLE3\n+num_steps: 3" in g["diff"]


def test_no_winner_applies_nothing(both, group_vars):
    proposal, _ = build_proposal(both, Objective.from_bounds(ttft_p99_ms=5.0), group_vars)
    for name in ("nvlink", "pcie"):
        g = proposal["groups"][name]
        assert g["winner"] is None
        assert g["reason"] == "no config meets the SLO (ttft p99 <= 5 ms)"
        assert g["diff"] == ""
        assert g["group_vars"] == {"sglang_service_speculative_overrides": {}, "sglang_service_server_overrides": {},
                                   "sglang_service_env_overrides": {}, "sglang_service_extra_args": {},
                                   "sglang_service_validation_overrides": []}
    closest = proposal["groups"]["nvlink"]["figures"]["closest_cells"]["h1"]
    assert closest["dd8"]["max_concurrency"] == 1 and closest["dd8"]["p99_ttft_ms"] == 10.0


def test_baseline_winner_keeps_current(tmp_path, group_vars):
    rows = [cell("ar", RANDOM, c, 100.0 * c) for c in (1, 8)] + [cell("dd", RANDOM, c, 90.0 * c) for c in (1, 8)]
    r = load_run(write_run(tmp_path / "r", rows, [config_row("ar", baseline=True),
                                                  config_row("dd", overrides={"speculative": {"budget": 4}})]))
    g = build_proposal(r, Objective(), group_vars)[0]["groups"]["nvlink"]
    assert g["winner"] == "ar"
    assert g["reason"].startswith("keep autoregressive / keep current")
    assert g["figures"]["geomean_speedup"] == 1.0 and g["figures"]["crossover_c"] == {RANDOM: "never"}
    assert g["group_vars"]["sglang_service_speculative_overrides"] == {}
    assert g["diff"] == ""                               # the baseline's overrides are empty: nothing changes


def test_slo_figures(both, group_vars):
    proposal, _ = build_proposal(both, Objective.from_bounds(ttft_p99_ms=100.0), group_vars)
    assert proposal["objective"] == {"mode": "slo", "slo_ttft_p99_ms": 100.0, "slo_itl_p99_ms": None,
                                     "slo_tpot_p99_ms": None}
    f = proposal["groups"]["nvlink"]["figures"]
    assert proposal["groups"]["nvlink"]["winner"] == "dd8"
    assert f["slo_relative_to_baseline"] == round(900.0 / 600.0, 4) == 1.5      # real text (code) only
    assert f["slo_best_cells"]["h1"][CODE]["max_concurrency"] == 8
    assert f["slo_ttft_p99_ms"] == 100.0


def test_written_yaml_loads_and_says_how_to_apply(both, group_vars, tmp_path):
    proposal, _ = build_proposal(both, Objective(), group_vars)
    path = write_proposal(proposal, tmp_path)
    text = path.read_text()
    assert path.name == "proposal.yml"
    assert text.startswith("# Proposal of sweep run sweep-x")
    assert f"# Apply: ansible-playbook playbooks/apply_proposal.yml -e proposal={path}" in text
    assert "a group whose winner is null" in text and "applies nothing" in text
    loaded = yaml.safe_load(text)
    assert loaded == proposal
    assert set(loaded["groups"]["nvlink"]) == {"hosts", "winner", "status", "reason", "baseline", "figures",
                                               "disqualified", "group_vars", "diff"}
    assert loaded["groups"]["nvlink"]["status"] == "winner" and "tie" not in loaded["groups"]["nvlink"]
    assert "diff: |" in proposal_text(proposal)      # multi-line text as a literal block


def test_group_profile_reading(group_vars, tmp_path):
    profile, note = read_group_profile(group_vars, "nvlink")
    assert profile["draft_model_path"] == "{{ sglang_service_models_root }}/{{ sglang_service_draft_model_name }}"
    assert note == ""
    assert read_group_profile(group_vars, "nope")[0] == {}
    assert "not found" in read_group_profile(group_vars, "nope")[1]
    assert block_diff({"a": 1}, {"a": 1}, "x", "y") == ""
    assert DEFAULT_GROUP_VARS_DIR.name == "group_vars" and (DEFAULT_GROUP_VARS_DIR.parent / "reporting").is_dir()



def test_winner_without_recorded_overrides_is_named(tmp_path, group_vars):
    rows = [cell("ar", RANDOM, c, 100.0 * c) for c in (1, 8)] + [cell("dd", RANDOM, c, 150.0 * c) for c in (1, 8)]
    r = load_run(write_run(tmp_path / "r", rows, [config_row("ar", baseline=True)]))   # dd: cells only
    g = build_proposal(r, Objective(), group_vars)[0]["groups"]["nvlink"]
    assert g["winner"] == "dd" and g["figures"]["geomean_speedup"] == 1.5
    assert g["reason"].endswith("no sweep overrides were recorded for dd: its group_vars fragment is empty and "
                                "applying it changes nothing")
    assert g["group_vars"]["sglang_service_speculative_overrides"] == {} and g["diff"] == ""


def test_multi_host_report_has_per_host_sections_and_the_proposal(both, group_vars):
    from reporting import render_report
    proposal, _ = build_proposal(both, Objective(), group_vars)
    text = render_report(both, proposal=proposal, proposal_path="results/sweep-x/proposal.yml")
    top, rest = text.split("## Host h1", 1)
    assert "## Proposal" in top
    assert "apply: `ansible-playbook playbooks/apply_proposal.yml -e proposal=results/sweep-x/proposal.yml`" in top
    assert "| pcie | p1, p2 | `x` | ar | 1.039x |" in top
    p1 = rest.split("## Host p1")[1].split("## Host p2")[0]
    assert "### Winner" in p1 and "**Overall winner: `y`**" in p1      # on p1 alone y (1.5x) wins
    p2 = rest.split("## Host p2")[1]
    assert "**Overall winner: `ar`** (keep autoregressive / keep current)" in p2
    assert "#### `y`" in p2.split("### Disqualified")[1]
