"""module_utils/multinode/plan.py: the rank plan of a serving group (inventory order, rank 0's address) and its
refusals, as exceptions and as the controller's problem list."""
import pytest

from ansible.module_utils.multinode.plan import MultinodeError, group_plan, plan_problems


def test_plan_follows_inventory_order_and_names_rank0_address():
    plan = group_plan(["b300-02", {"name": "b300-01", "address": "10.0.0.11"}], 5000, 16, 1)
    assert list(plan) == ["b300-02", "b300-01"]  # inventory order, not sorted
    assert plan["b300-02"] == {"node_rank": 0, "nnodes": 2, "dist_init_addr": "b300-02:5000"}
    assert plan["b300-01"] == {"node_rank": 1, "nnodes": 2, "dist_init_addr": "b300-02:5000"}
    plan = group_plan([{"name": "a", "address": "fd00::2"}, {"name": "b", "address": "fd00::3"}], "5000", 8, 2)
    assert plan["b"]["dist_init_addr"] == "[fd00::2]:5000" and plan["a"]["nnodes"] == 2
    assert group_plan(["solo"], 65535, 8, 1)["solo"] == {"node_rank": 0, "nnodes": 1,
                                                             "dist_init_addr": "solo:65535"}


@pytest.mark.parametrize("ranks, port, tp, pp, words", [
    ([], 5000, 8, 1, ["empty"]),
    (["a", "b", "a"], 5000, 6, 1, ["duplicate", "'a'", "ranks 0 and 2"]),
    ([{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.1"}], 5000, 8, 1,
     ["duplicate", "'b' (rank 1) and 'a' (rank 0)", "10.0.0.1"]),
    (["Node-A.example.", {"name": "b", "address": "node-a.example"}], 5000, 8, 1, ["duplicate"]),
    ([{"name": "a", "address": "fd00::2"}, {"name": "b", "address": "fd00:0::2"}], 5000, 8, 1, ["duplicate"]),
    (["a", "b", "c"], 5000, 8, 1, ["tp=8", "pp=1", "nnodes=3", "not divisible"]),
    (["a", "b", "c"], 5000, 4, 2, ["tp=4", "pp=2", "nnodes=3"]),
    (["a", "b"], 0, 8, 1, ["dist_init_port=0", "1..65535"]),
    (["a", "b"], 65536, 8, 1, ["dist_init_port=65536"]),
    (["a", "b"], "50x", 8, 1, ["dist_init_port='50x'"]),
    (["a", "b"], True, 8, 1, ["dist_init_port=True"]),
    (["a", "b"], 5000, 0, 1, ["tp=0"]),
    (["a", "b"], 5000, 8, 1.5, ["pp=1.5"]),
    (["a", ""], 5000, 8, 1, ["rank 1", "empty"]),
])
def test_plan_refusals_name_the_values(ranks, port, tp, pp, words):
    with pytest.raises(MultinodeError) as err:
        group_plan(ranks, port, tp, pp)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


def test_plan_divisible_cases_pass():
    assert group_plan(["a", "b", "c", "d"], 5000, 8, 2)["d"]["node_rank"] == 3
    assert group_plan(["a", "b", "c"], 5000, 3, 2)["c"]["nnodes"] == 3


@pytest.mark.parametrize("ranks, port, tp, pp, http_port, words", [
    (["a", "b"], 5000, 3, 1, 30001, ["tp=3 x pp=1 = 3 GPUs is not divisible by nnodes=2"]),
    (["a", "b"], 5000, 8, 1, 5000, ["dist_init_port=5000 is also the server's --port"]),
    (["a", "a"], 5000, 8, 1, None, ["duplicate host 'a'"]),
    ([], 5000, 8, 1, None, ["empty serving group"]),
])
def test_plan_problems_are_messages_not_exceptions(ranks, port, tp, pp, http_port, words):
    problems = plan_problems(ranks, port, tp, pp, http_port)
    assert len(problems) == 1 and all(w in problems[0] for w in words), problems


def test_plan_problems_empty_for_a_good_group():
    assert plan_problems(["a", "b"], 5000, 8, 1, 30001) == [] and plan_problems(["a", "b"], "5000", 16, 1) == []
