"""The sglang_service unit template's GPU daemon lines, rendered the way the role renders them: the host group's
sglang_service_gpu_daemons_require (group_vars/nvlink, group_vars/pcie) and the daemons' states read through
module_utils/gpu/daemons.py (one `systemctl show`, a KEY=VALUE block per unit) decide After=/Wants=/Requires=.
An nvlink host Requires= its fabric manager where installed and is refused when it failed; a pcie host never
Requires= it."""
from pathlib import Path

import jinja2
import pytest
import yaml

from ansible.module_utils.gpu import daemons
from filter_plugins.sglang import FilterModule

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "sglang_service"
TEMPLATE = ROLE / "templates" / "etc" / "systemd" / "system" / "sglang.service.j2"
PM, FM = "nvidia-persistenced.service", "nvidia-fabricmanager.service"
STATES = {"present": ("loaded", "active", "running"), "absent": ("not-found", "inactive", "dead"),
          "failed": ("loaded", "failed", "failed")}


def role_var(group: str, name: str):
    """The variable as the inventory gives it to a host of `group` (group_vars over the role's defaults)."""
    group_vars = yaml.safe_load((ROOT / "group_vars" / group / "sglang_service.yml").read_text())
    return group_vars.get(name, yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())[name])


def systemctl(fm: str):
    def run(argv):
        if argv[0] == "journalctl":
            return 0, "nv-fabricmanager: NVSwitch fabric initialization failed\n", ""
        blocks = []
        for unit in argv[2:argv.index("--no-pager")]:
            load, active, sub = STATES["present" if unit == PM else fm]
            blocks.append(f"Id={unit}\nLoadState={load}\nActiveState={active}\nSubState={sub}\n")
        return 0, "\n".join(blocks), ""
    return run


def render(group: str, fm: str) -> str:
    got = daemons.read(role_var(group, "sglang_service_gpu_daemons"), role_var(group, "sglang_service_gpu_daemons_require"),
                       run=systemctl(fm))
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)  # Ansible's template settings
    env.filters.update(FilterModule().filters())
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="managed", sglang_service_name="sglang", sglang_service_host_group=group,
        sglang_service_speculative={"algorithm": "NONE"}, sglang_service_node_group="",
        sglang_service_gpu_daemons_present=got["present"], sglang_service_gpu_daemons_required=got["required"],
        sglang_service_models_root="/srv/models", sglang_service_venv_path="/opt/sglang/venv",
        sglang_service_user="sglang", sglang_service_group="sglang", sglang_service_home="/var/lib/sglang",
        sglang_service_environment={"HOME": "/var/lib/sglang"}, sglang_service_api_key="",
        sglang_service_python="/opt/sglang/venv/bin/python", sglang_service_launcher_path="/usr/local/libexec/l.py",
        sglang_service_launch_module="sglang.launch_server", sglang_service_argv=["--port", "30001"],
        sglang_service_restart_policy="on-failure", sglang_service_restart_sec=30, sglang_service_stop_timeout=120,
        sglang_service_unit_extra={}, sglang_service_env_path="/etc/sglang/sglang.env")


def unit_lines(text: str, key: str) -> list[str]:
    return [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith(key + "=")]


@pytest.mark.parametrize("group,fm,after,requires", [
    ("nvlink", "present", f"network-online.target {PM} {FM}", [FM]),
    ("nvlink", "absent", f"network-online.target {PM}", []),
    ("pcie", "present", f"network-online.target {PM} {FM}", []),
    ("pcie", "absent", f"network-online.target {PM}", []),
    ("pcie", "failed", f"network-online.target {PM} {FM}", []),
])
def test_gpu_daemon_lines(group, fm, after, requires):
    text = render(group, fm)
    assert unit_lines(text, "After") == [after] and unit_lines(text, "Wants") == [after]
    assert unit_lines(text, "Requires") == requires


def test_an_nvlink_host_with_a_failed_fabric_manager_is_refused_before_any_rendering():
    with pytest.raises(daemons.GpuDaemonError, match=f"{FM} ActiveState=failed SubState=failed") as err:
        render("nvlink", "failed")
    assert "NVSwitch fabric initialization failed" in err.value.message


def test_the_require_list_is_decided_per_host_group():
    assert role_var("nvlink", "sglang_service_gpu_daemons_require") == [FM]
    assert role_var("pcie", "sglang_service_gpu_daemons_require") == []
    assert FM in role_var("pcie", "sglang_service_gpu_daemons")  # ordered after it where present, never required
