"""filter_plugins/multinode.py: the controller's side of a multi-node serving group (ranks from the inventory, the
refusals, the plan merged into the server config and rendered by sglang_argv, the cross-rank consistency)."""
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from filter_plugins import multinode as f
from filter_plugins.sglang import sglang_argv

ROOT = Path(__file__).resolve().parents[3]


class HostVars(dict):
    """What the filter sees of hostvars: hostvars[host] -> a mapping with .get()."""


HV = HostVars({
    "mn0": {"ansible_host": "10.213.5.10"},
    "mn1": {"ansible_host": "10.213.5.11", "sglang_service_advertise_address": "192.168.100.11"},
    "mn2": {},
    "v6": {"ansible_host": "fd00::7"},
})


def test_ranks_follow_the_given_order_and_prefer_the_advertise_address():
    assert f.sglang_group_ranks(["mn1", "mn0", "mn2"], HV) == [
        {"name": "mn1", "address": "192.168.100.11"}, {"name": "mn0", "address": "10.213.5.10"},
        {"name": "mn2", "address": "mn2"}]
    assert f.sglang_group_ranks(["nohost"], HV) == [{"name": "nohost", "address": "nohost"}]
    with pytest.raises(AnsibleFilterError):
        f.sglang_group_ranks("mn0", HV)


def test_plan_renders_rank0s_address_and_every_rank():
    plan = f.sglang_group_plan(f.sglang_group_ranks(["mn0", "mn1"], HV), 5000, 8, 1)
    assert plan == {"mn0": {"node_rank": 0, "nnodes": 2, "dist_init_addr": "10.213.5.10:5000"},
                    "mn1": {"node_rank": 1, "nnodes": 2, "dist_init_addr": "10.213.5.10:5000"}}
    v6 = f.sglang_group_plan(f.sglang_group_ranks(["v6", "mn0"], HV), 5000, 8, None)
    assert v6["mn0"]["dist_init_addr"] == "[fd00::7]:5000"


@pytest.mark.parametrize("hosts, port, tp, pp, http_port, needle", [
    (["mn0", "mn1"], 5000, 3, 1, 30001, "tp=3 x pp=1 = 3 GPUs is not divisible by nnodes=2 (hosts ['mn0', 'mn1'])"),
    (["mn0", "mn1", "mn2"], 5000, 8, 1, 30001, "tp=8 x pp=1 = 8 GPUs is not divisible by nnodes=3"),
    (["mn0", "mn1"], 70000, 8, 1, 30001, "dist_init_port=70000 is out of range"),
    (["mn0", "mn1"], 30001, 8, 1, 30001, "is also the server's --port"),
    (["mn0", "mn1"], 5000, 0, 1, 30001, "tp=0 is not a positive integer"),
])
def test_problems_name_the_numbers(hosts, port, tp, pp, http_port, needle):
    problems = f.sglang_group_problems(f.sglang_group_ranks(hosts, HV), port, tp, pp, http_port)
    assert len(problems) == 1 and needle in problems[0], problems
    if "--port" in needle:  # the port clash is the role's problem to refuse; the plan itself is well formed
        assert f.sglang_group_plan(f.sglang_group_ranks(hosts, HV), port, tp, pp)["mn1"]["node_rank"] == 1
    else:
        with pytest.raises(AnsibleFilterError, match="sglang_group_plan: "):
            f.sglang_group_plan(f.sglang_group_ranks(hosts, HV), port, tp, pp)


def test_two_hosts_with_one_address_are_refused():
    hv = HostVars({"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.1"}})
    problems = f.sglang_group_problems(f.sglang_group_ranks(["a", "b"], hv), 5000, 8, 1)
    assert problems and "have the same address 10.0.0.1" in problems[0]


def test_divisible_and_defaults_pass():
    ranks = f.sglang_group_ranks(["mn0", "mn1"], HV)
    assert f.sglang_group_problems(ranks, 5000, 16, 1, 30001) == []
    assert f.sglang_group_problems(ranks, "5000", "8", "2", None) == []
    assert f.sglang_group_problems(ranks, 5000, "", None, None) == [
        "tp=1 x pp=1 = 1 GPUs is not divisible by nnodes=2 (hosts ['mn0', 'mn1'])"]


def test_consistency_names_the_differing_rank_and_values():
    facts = {"mn0": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "aaa"},
             "mn1": {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "bbb"},
             "mn2": {"driver": "575.51.03", "cuda": "13.0", "venv_hash": "aaa"}}
    out = f.sglang_group_consistency(facts)
    assert [m["key"] for m in out] == ["driver", "venv_hash"]
    assert out[0]["detail"] == "driver differs across ranks: '580.95.05' on mn0, mn1; '575.51.03' on mn2"
    assert out[1]["detail"] == "venv_hash differs across ranks: 'aaa' on mn0, mn2; 'bbb' on mn1"
    assert f.sglang_group_consistency({k: dict(v, driver="580.95.05", venv_hash="aaa") for k, v in facts.items()}) == []


def test_consistency_refuses_a_missing_fact_unless_allowed_in_check_mode():
    facts = {"mn0": {"driver": "none", "cuda": "none", "venv_hash": "aaa"},
             "mn1": {"driver": "none", "cuda": "none", "venv_hash": ""}}
    assert f.sglang_group_consistency(facts)[0]["detail"] == "venv_hash differs across ranks: 'aaa' on mn0; missing on mn1"
    assert f.sglang_group_consistency(facts, True) == []
    facts["mn1"]["cuda"] = "13.0"
    assert [m["key"] for m in f.sglang_group_consistency(facts, True)] == ["cuda"]
    with pytest.raises(AnsibleFilterError):
        f.sglang_group_consistency([facts])


def test_rank_url():
    assert f.sglang_rank_url("10.0.0.2", 30001) == "http://10.0.0.2:30001"
    assert f.sglang_rank_url("fd00::2", "30001") == "http://[fd00::2]:30001"
    assert f.sglang_rank_url("b300-02.fabric", 30001) == "http://b300-02.fabric:30001"
    with pytest.raises(AnsibleFilterError):
        f.sglang_rank_url("10.0.0.2", "x")


def test_the_plan_merged_into_the_server_config_renders_the_real_flags():
    """The role merges the plan's keys into the server config (sglang_service_server_group) and sglang_argv renders
    them in 0.5.11's spelling; a single node merges {} and renders exactly what it rendered before."""
    server = {"model_path": "/srv/models/Kimi-K2.6", "host": "0.0.0.0", "port": 30001, "tp_size": 8}
    plan = f.sglang_group_plan(f.sglang_group_ranks(["mn0", "mn1"], HV), 5000, server["tp_size"], 1)
    argv = sglang_argv({**server, **plan["mn1"]}, {"algorithm": "NONE"}, {}, "0.5.11")
    joined = " ".join(argv)
    assert "--dist-init-addr 10.213.5.10:5000" in joined and "--nnodes 2" in joined and "--node-rank 1" in joined
    assert sglang_argv({**server, **{}}, {"algorithm": "NONE"}, {}, "0.5.11") == \
        sglang_argv(server, {"algorithm": "NONE"}, {}, "0.5.11")


def test_the_role_merges_the_group_layer_last():
    defaults = yaml.safe_load((ROOT / "roles/sglang_service/defaults/main.yml").read_text())
    assert defaults["sglang_service_server_group"] == {} and defaults["sglang_service_node_group"] == ""
    assert defaults["sglang_service_server"].strip().endswith("sglang_service_server_overrides, sglang_service_server_group) }}")


def test_filters_are_registered():
    assert set(f.FilterModule().filters()) == {"sglang_group_ranks", "sglang_group_problems", "sglang_group_plan",
                                               "sglang_group_consistency", "sglang_rank_url"}
