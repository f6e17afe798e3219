"""module_utils/monitoring/targets.py: scrape targets from the inventory: every worker's /metrics (rank 0 only of a
multi-node group, as the router's worker list gives them), the router's listener, every host's node exporter (all
ranks), each labelled host and group; no target at all and an unreachable loopback router are refused."""
from __future__ import annotations

import pytest

from ansible.module_utils.monitoring import targets
from ansible.module_utils.monitoring.rules import MonitoringError

SERVING = {"nvlink": ["b1", "mn0", "mn1"], "pcie": ["p1"]}
WORKERS = [{"host": "b1", "url": "http://10.0.0.11:30001"}, {"host": "mn0", "url": "http://10.0.0.30:30001/"},
           {"host": "p1", "url": "http://[fd00::21]:30002"}]  # mn1 is rank 1: no API, not a worker
ADDRESSES = {"b1": "10.0.0.11", "mn0": "10.0.0.30", "mn1": "10.0.0.31", "p1": "fd00::21", "r1": "10.0.0.2"}


def jobs(out, job):
    return {t["labels"]["host"]: (t["targets"][0], t["labels"]["group"]) for t in out["jobs"][job]}


def test_workers_rank_0_only_every_host_node_exporter_and_the_router():
    out = targets.scrape_targets(SERVING, WORKERS, [{"host": "r1", "bind": "0.0.0.0", "port": 29000}], ADDRESSES,
                                 "mon1", 9100)
    assert jobs(out, "sglang") == {"b1": ("10.0.0.11:30001", "nvlink"), "mn0": ("10.0.0.30:30001", "nvlink"),
                                   "p1": ("[fd00::21]:30002", "pcie")}
    assert jobs(out, "node") == {"b1": ("10.0.0.11:9100", "nvlink"), "mn0": ("10.0.0.30:9100", "nvlink"),
                                 "mn1": ("10.0.0.31:9100", "nvlink"), "p1": ("[fd00::21]:9100", "pcie"),
                                 "r1": ("10.0.0.2:9100", "router")}
    assert jobs(out, "smg") == {"r1": ("10.0.0.2:29000", "router")}
    assert out["workers"] == [{"host": "b1", "group": "nvlink", "url": "http://10.0.0.11:30001"},
                              {"host": "mn0", "group": "nvlink", "url": "http://10.0.0.30:30001"},
                              {"host": "p1", "group": "pcie", "url": "http://[fd00::21]:30002"}]
    assert out["serving_hosts"] == ["b1", "mn0", "mn1", "p1"] and out["exporter_hosts"][-1] == "r1"


def test_a_loopback_router_is_scraped_on_its_own_host_and_refused_from_another():
    routers = [{"host": "r1", "bind": "127.0.0.1", "port": 29000}]
    out = targets.scrape_targets(SERVING, WORKERS, routers, ADDRESSES, "r1", 9100)
    assert jobs(out, "smg") == {"r1": ("127.0.0.1:29000", "router")}
    with pytest.raises(MonitoringError, match="loopback .* set sglang_router_prometheus_host"):
        targets.scrape_targets(SERVING, WORKERS, routers, ADDRESSES, "mon1", 9100)


def test_job_names_follow_the_rule_settings_and_unmonitored_workers_are_left_out():
    out = targets.scrape_targets({"pcie": ["p1"]}, WORKERS, [], ADDRESSES, "mon1", 9100,
                                 {"job_sglang": "workers", "job_node": "nodes", "floor_margin": 0.8})
    assert set(out["jobs"]) == {"workers", "smg", "nodes"} and list(jobs(out, "workers")) == ["p1"]


@pytest.mark.parametrize("serving", [{}, {"nvlink": []}, None])
def test_a_monitoring_group_with_no_targets_is_refused(serving):
    with pytest.raises(MonitoringError, match="no targets") as err:
        targets.scrape_targets(serving, [], [], {}, "mon1", 9100)
    assert err.value.kind == "no_targets"


@pytest.mark.parametrize("kw, match", [({"node_port": 0}, "TCP port"), ({"addresses": {"b1": 'x"y'}}, "label value"),
                                       ({"routers": [{"host": "r1", "bind": "0.0.0.0", "port": "x"}]}, "TCP port")])
def test_bad_input_is_refused(kw, match):
    args = dict(serving={"nvlink": ["b1"]}, workers=[], routers=[], addresses={}, monitoring_host="m", node_port=9100)
    with pytest.raises(MonitoringError, match=match):
        targets.scrape_targets(**dict(args, **kw))


def test_inventory_groups_reads_speculation_and_nvswitch_from_the_first_host():
    got = targets.inventory_groups({"nvlink": ["b1"], "pcie": ["p1"], "empty": []}, {"b1": "DDTREE", "p1": "NONE"},
                                   {"b1": ["nvidia-fabricmanager.service"], "p1": []})
    assert got == {"nvlink": {"speculative": True, "nvswitch": True}, "pcie": {"speculative": False, "nvswitch": False}}
