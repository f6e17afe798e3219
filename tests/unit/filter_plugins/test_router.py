"""filter_plugins/router.py: the router's workers from the inventory (serving groups, router group excluded, rank 0
only of multi-node groups), their URLs, the one-key rule, the argv (never a key), and the dispatch counter.
The inventory cases run twice: on plain dicts, and on Ansible's own groups/hostvars of the repo's inventories."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.router import (router_argv, router_worker_count, router_worker_key_problems,
                                   router_worker_keys_unknown, router_worker_map, router_worker_problems,
                                   router_worker_urls, router_workers)

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "router" / "smg-1.13.0"
NVLINK = {"sglang_service_server_profile": {"host": "0.0.0.0", "port": 30001}}
PCIE = {"sglang_service_server_profile": {"host": "0.0.0.0", "port": 30002}}


def inventory():
    groups = {"all": ["r1", "b1", "b2", "p1", "m0", "m1"], "router": ["r1"], "nvlink": ["b1", "b2", "m0", "m1"],
              "b300": ["b1", "b2"], "pair": ["m0", "m1"], "pcie": ["p1"], "ct200": ["p1"]}
    hostvars = {
        "r1": {"ansible_host": "10.0.0.1"},
        "b1": {**NVLINK, "ansible_host": "10.0.0.11"},
        "b2": {**NVLINK, "ansible_host": "10.0.0.12", "sglang_service_advertise_address": "192.168.5.12"},
        "m0": {**NVLINK, "sglang_service_node_group": "pair", "ansible_host": "10.0.0.20"},
        "m1": {**NVLINK, "sglang_service_node_group": "pair", "ansible_host": "10.0.0.21"},
        "p1": {**PCIE, "sglang_service_server_overrides": {"port": 31000}},  # no ansible_host: the name
    }
    return groups, hostvars


def test_workers_are_the_serving_hosts_in_inventory_order_rank0_only():
    groups, hv = inventory()
    assert router_worker_urls(groups, hv) == ["http://10.0.0.11:30001", "http://192.168.5.12:30001",
                                              "http://10.0.0.20:30001", "http://p1:31000"]
    assert router_worker_map(groups, hv) == {"b1": "http://10.0.0.11:30001", "b2": "http://192.168.5.12:30001",
                                             "m0": "http://10.0.0.20:30001", "p1": "http://p1:31000"}
    m0 = next(w for w in router_workers(groups, hv) if w["host"] == "m0")
    assert m0["node_group"] == "pair" and m0["bind"] == "0.0.0.0"
    # the rank order is the node group's order: mn1 first makes it rank 0
    groups["pair"] = ["m1", "m0"]
    assert "http://10.0.0.21:30001" in router_worker_urls(groups, hv)
    assert "http://10.0.0.20:30001" not in router_worker_urls(groups, hv)


def test_the_router_group_and_unknown_groups_are_left_out_and_each_host_counts_once():
    groups, hv = inventory()
    groups["nvlink"].insert(0, "r1")  # a router host that is also in a serving group is not its own worker
    hv["r1"].update(NVLINK)
    assert "http://10.0.0.1:30001" not in router_worker_urls(groups, hv)
    assert router_worker_urls(groups, hv, ["b300", "nvlink", "nosuchgroup"], "router") == [
        "http://10.0.0.11:30001", "http://192.168.5.12:30001", "http://10.0.0.20:30001"]
    assert router_worker_urls(groups, hv, ["nvlink"], [])[0] == "http://10.0.0.1:30001"
    assert router_worker_urls(groups, hv, ["nosuchgroup"]) == []
    assert router_worker_urls({"router": ["r1"]}, hv) == []  # a router group with no workers: the role refuses


def test_port_precedence_and_the_default_port():
    groups = {"nvlink": ["a", "b", "c"]}
    hv = {"a": {"sglang_service_server_overrides": {"port": "30005"}, **NVLINK},
          "b": {"sglang_service_server_overrides": {"tp_size": 8}, **NVLINK},
          "c": {}}
    assert router_worker_urls(groups, hv) == ["http://a:30005", "http://b:30001", "http://c:30000"]
    assert router_worker_urls(groups, hv, default_port=30001)[2] == "http://c:30001"


@pytest.mark.parametrize("port", [0, 70000, "x", True, -1])
def test_bad_ports_are_refused_naming_host_and_variable(port):
    with pytest.raises(AnsibleFilterError, match=r"a: sglang_service_server_profile\.port .* is not a TCP port"):
        router_workers({"nvlink": ["a"]}, {"a": {"sglang_service_server_profile": {"port": port}}})


def test_ipv6_addresses_are_bracketed():
    hv = {"a": {"ansible_host": "fd00::5", **NVLINK}, "b": {"sglang_service_advertise_address": "[fd00::6]"}}
    assert router_worker_urls({"nvlink": ["a", "b"]}, hv) == ["http://[fd00::5]:30001", "http://[fd00::6]:30000"]


def test_a_node_group_that_does_not_hold_the_host_is_refused():
    groups, hv = inventory()
    hv["b1"]["sglang_service_node_group"] = "pair"
    with pytest.raises(AnsibleFilterError, match=r"b1: sglang_service_node_group 'pair' must name an inventory group"):
        router_workers(groups, hv)
    hv["b1"]["sglang_service_node_group"] = "nosuch"
    with pytest.raises(AnsibleFilterError, match="that group has no hosts"):
        router_workers(groups, hv)


def test_loopback_workers_are_problems():
    hv = {"a": {"sglang_service_server_overrides": {"host": "127.0.0.1"}, "ansible_host": "10.0.0.2"},
          "b": {"ansible_host": "127.0.0.1"}, "c": {"ansible_host": "10.0.0.3", **NVLINK}}
    problems = router_worker_problems(router_workers({"nvlink": ["a", "b", "c"]}, hv))
    assert len(problems) == 2 and problems[0].startswith("a: SGLang binds 127.0.0.1") and problems[1].startswith("b:")


def test_the_one_key_rule():
    groups, hv = inventory()
    workers = router_workers(groups, hv)
    assert router_worker_keys_unknown(workers, hv) == ["b1", "b2", "m0", "p1"]
    hv["b1"]["sglang_service_api_key"] = "K"
    hv["b2"]["vault_sglang_service_api_key"] = "K"  # the service role's default
    hv["p1"]["sglang_service_api_key"] = ""  # a worker without a key accepts the router's
    assert router_worker_key_problems(workers, hv, "K") == []
    assert router_worker_keys_unknown(workers, hv) == ["m0"]
    hv["b2"]["vault_sglang_service_api_key"] = "OTHER"
    problems = router_worker_key_problems(workers, hv, "K")
    assert problems == ["b2: its sglang_service_api_key differs from the router's key (smg sends its own --api-key "
                        "to every worker)"]
    assert not any("OTHER" in p for p in problems)  # hosts are named, keys never
    assert [p.split(":")[0] for p in router_worker_key_problems(workers, hv, "")] == ["b1", "b2"]
    assert "the router none" in router_worker_key_problems(workers, hv, "")[0]


def test_argv_is_smg_launch_flags_in_order_with_extras_and_never_a_key():
    flags = {"host": "0.0.0.0", "port": 30000, "worker_urls": ["http://a:1", "http://b:2"], "policy": "cache_aware",
             "health_failure_threshold": 3, "disable_retries": False, "log_level": None}
    assert router_argv(flags) == ["launch", "--host", "0.0.0.0", "--port", "30000", "--worker-urls", "http://a:1",
                                  "http://b:2", "--policy", "cache_aware", "--health-failure-threshold", "3"]
    argv = router_argv(flags, {"policy": "round_robin", "--disable-circuit-breaker": True, "cache-threshold": 0.5})
    assert argv[argv.index("--policy") + 1] == "round_robin" and argv.count("--policy") == 1
    assert argv[-3:] == ["--disable-circuit-breaker", "--cache-threshold", "0.5"]
    assert router_argv({"worker_urls": []}) == ["launch"]
    for bad in ({"api_key": "K"}, {"--api-key": "K"}, {"tenant_api_key": "t:K"}):
        with pytest.raises(AnsibleFilterError, match="refused in the argv"):
            router_argv(flags, bad)
    with pytest.raises(AnsibleFilterError, match="not a flag name"):
        router_argv({"host x": 1})
    with pytest.raises(AnsibleFilterError, match="mapping is not a flag value"):
        router_argv({"selector": {"a": "b"}})


def test_every_rendered_flag_is_in_smgs_recorded_help():
    """The flags the role renders by default exist in smg 1.13.0's own `smg launch --help` (recorded)."""
    help_text = (FIX / "launch-help.txt").read_text()
    known = set(__import__("re").findall(r"(--[a-z0-9-]+)", help_text))
    defaults = __import__("yaml").safe_load((ROOT / "roles" / "sglang_router" / "defaults" / "main.yml").read_text())
    rendered = [a for a in router_argv({k: "x" for k in defaults["sglang_router_flags"]}) if a.startswith("--")]
    assert len(rendered) == len(defaults["sglang_router_flags"]) and set(rendered) <= known, set(rendered) - known


def test_dispatch_counter_from_the_recorded_metrics():
    text = (FIX / "metrics_after_generate.txt").read_text().replace("{worker1}", "http://w1:1").replace(
        "{worker2}", "http://w2:2")
    assert router_worker_count(text, "http://w1:1/") == 2.0
    assert router_worker_count(text, "http://w2:2") == 0.0
    assert router_worker_count(text, "http://w3:3") == 0.0 and router_worker_count("", "http://w1:1") == 0.0


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ {'map': groups | router_worker_map(hostvars, ['nvlink', 'pcie'], ['router'], 30001),
                      'keys': groups | router_workers(hostvars, ['nvlink', 'pcie'], ['router'], 30001)
                              | router_worker_key_problems(hostvars, 'lab-only-standin-key'),
                      'wrong': groups | router_workers(hostvars, ['nvlink', 'pcie'], ['router'], 30001)
                              | router_worker_key_problems(hostvars, 'wrong')} | to_json }}"
      connection: local
"""


@pytest.mark.parametrize("inv,expected", [
    ("router-lab", {"serve1": "http://serve1:30001", "serve2": "http://serve2:30001"}),
    ("multinode-lab", {"mn0": "http://mn0:30001"}),
    ("production", {"b300-01.example.internal": "http://b300-01.example.internal:30001",
                    "b300-02.example.internal": "http://b300-02.example.internal:30001",
                    "ct200-01.example.internal": "http://ct200-01.example.internal:30001"}),
])
def test_on_ansibles_own_hostvars_of_the_repo_inventories(inv, expected, tmp_path):
    """Real groups/hostvars (group_vars templated lazily, the lab profile's key): with no lab up, no ansible_host."""
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT), "LAB_NAME": "test-router-filter-none",
           "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(ROOT / "inventory" / inv),
                           str(play), "-e", f"out={tmp_path / 'out.json'}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["map"] == expected
    assert out["keys"] == []  # the lab profile's key on every lab worker; production holds none (not judged)
    judged = [] if inv == "production" else sorted(expected)
    assert [p.split(":")[0] for p in out["wrong"]] == judged


# --- the role's preflight refuses bad input on the controller, before any host is contacted ------------------------

def run_router_play(tmp_path, extravars: dict, inv: str = "router-lab"):
    """playbooks/router.yml against an inventory whose lab is not up (LAB_NAME names no lab): router1 has no address,
    so any task that needed the host would end 'unreachable'; a refusal must come before that."""
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT), "LAB_NAME": "test-router-filter-none",
           "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "HOME": str(tmp_path)}
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(ROOT / "inventory" / inv),
                           str(ROOT / "playbooks" / "router.yml"), "-e", json.dumps(extravars)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("extravars,task,message", [
    ({"sglang_router_worker_groups": ["pcie"]}, "A router group with no workers is refused",
     "a router group with no workers: no host of the serving groups pcie"),
    ({"sglang_router_exclude_groups": ["router", "b300"]}, "A router group with no workers is refused",
     "a router group with no workers"),
    ({"sglang_router_api_key": "not-the-workers-key"}, "Every worker's key is the router's key",
     "serve1: its sglang_service_api_key differs from the router's key"),
    ({"sglang_router_api_key": ""}, "The router has a key when it listens beyond loopback",
     "sglang_router_api_key is empty and the router binds 0.0.0.0"),
    ({"sglang_router_min_healthy_workers": 3}, "Ports and numbers are valid",
     "must be between 0 and the 2 worker(s) of the inventory (serve1, serve2)"),
    ({"sglang_router_prometheus_port": 30000}, "Ports and numbers are valid", "invalid router settings"),
    ({"sglang_router_policy": "fastest"}, "Validating arguments against arg spec",
     "value of sglang_router_policy must be one of"),
])
def test_bad_input_is_refused_before_any_host_is_touched(tmp_path, extravars, task, message):
    proc = run_router_play(tmp_path, extravars)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert message in " ".join(out.split()), out[-3000:]
    failed_at = out[:out.index("fatal: [router1]")].rsplit("TASK [", 1)[1]
    assert failed_at.startswith(f"sglang_router : {task}"), failed_at[:200]
    assert "unreachable=0" in out and "UNREACHABLE" not in out  # nothing needed the host before the refusal
    assert "not-the-workers-key" not in out  # the key is never echoed


def test_the_no_workers_refusal_names_the_groups_it_searched_and_their_hosts(tmp_path):
    proc = run_router_play(tmp_path, {"sglang_router_worker_groups": ["nvlink", "pcie"],
                                      "sglang_router_exclude_groups": ["router", "nvlink"]})
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out[-2000:]
    assert "groups searched and their hosts: {'nvlink': ['serve1', 'serve2'], 'pcie': []}" in out, out[-2000:]


# --- the readiness watch the role's handler and verify use (module_utils/router/client.unit_watch) ---------------
# (belongs with tests/unit/router/test_client.py, which this role's owner does not edit; the molecule scenario runs it
# against a real SIGKILLed router)

def _states(*texts):
    from ansible.module_utils.systemd.unit import parse_show
    it = iter(texts)
    return lambda unit: parse_show(unit, next(it))


RUNNING = "ActiveState=active\nSubState=running\nMainPID={pid}\nInvocationID=inv{pid}\nNRestarts={n}\n"


def test_unit_watch_passes_while_the_pinned_process_runs_and_fails_when_it_dies():
    from ansible.module_utils.router.client import RouterError, unit_watch
    asked = []
    dead = ("ActiveState=activating\nSubState=auto-restart\nMainPID=0\nInvocationID=inv10\nNRestarts=0\n"
            "ExecMainCode=2\nExecMainStatus=9\nResult=signal\n")
    watch = unit_watch("r.service", _states(RUNNING.format(pid=10, n=0), RUNNING.format(pid=10, n=0), dead),
                       lambda u, inv, n: asked.append((u, inv, n)) or ["smg: bind failed"], journal_lines=7)
    watch()
    watch()
    with pytest.raises(RouterError) as exc:
        watch()
    assert exc.value.kind == "failed"
    assert "activating/auto-restart: main process killed with signal 9" in exc.value.message
    assert exc.value.evidence["journal"] == ["smg: bind failed"] and asked == [("r.service", "inv10", 7)]


def test_unit_watch_fails_on_a_new_main_process_or_an_automatic_restart():
    from ansible.module_utils.router.client import RouterError, unit_watch
    for later in (RUNNING.format(pid=11, n=0), RUNNING.format(pid=10, n=1)):
        watch = unit_watch("r.service", _states(RUNNING.format(pid=10, n=0), later), lambda *a: [])
        watch()
        with pytest.raises(RouterError, match="was restarted while waiting"):
            watch()


def test_wait_ready_ends_at_the_first_failed_watch_without_polling_the_router():
    from ansible.module_utils.router.client import RouterClient, RouterError

    def boom():
        raise RouterError("failed", "r.service is failed/failed", {"journal": ["x"]})
    client = RouterClient("http://127.0.0.1:9", http=lambda *a, **k: pytest.fail("the router was polled"))
    with pytest.raises(RouterError) as exc:
        client.wait_ready(1, timeout=30, watch=boom)
    assert exc.value.kind == "failed" and exc.value.evidence["journal"] == ["x"]
