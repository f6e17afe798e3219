"""The service's home and its GPU daemons against the lab (the service lab, after test_service.py: its hosts are
converged already, so the fixture's run is a reconfigure), one real run and check-mode runs:

* after a run, nothing under /var/lib/sglang is owned by anyone but the service user (the preflight, run as root,
  works in a scratch home of its own and leaves none behind; the stand-in writes its JIT caches under HOME like real
  SGLang, as the service user), and verify names a file another user left there;
* the unit's After=/Wants=/Requires= follow the stub GPU daemons (lab/gpu_daemons.py) present, absent or failed, on
  an nvlink host (Requires= its fabric manager; a failed one is refused before any change) and a pcie host (never
  requires it)."""
from __future__ import annotations

import pytest

from ansible.module_utils.compile_cache.record import RECORD_NAME
from tests.helpers.playbook import run_playbook

LAB_NAME = "service"
B300, CT200 = "b300-lab", "ct200-lab"
PM, FM = "nvidia-persistenced.service", "nvidia-fabricmanager.service"
HOME = "/var/lib/sglang"
SERVICE = "playbooks/service.yml"
FAST = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5", "SGLANG_STANDIN_COMPILE_S": "0.2"}
UNIT_TASK = "Systemd unit"
DAEMONS_TASK = "Read the GPU daemons this host has (a failed one the unit requires is refused here, nothing changed)"
OWNED_TASK = "Everything under the service home is owned by the service user"


def check_run(lab, limit=None, tags="sglang_service_preflight,sglang_service_configure", skip_tags=None):
    """A check-mode run (diff on: the unit as it would be rendered) that changes nothing on the hosts."""
    return run_playbook(lab, SERVICE, limit=limit, check=True, tags=tags, skip_tags=skip_tags,
                        extravars={"sglang_service_env_overrides": FAST}, envvars={"ANSIBLE_DIFF_ALWAYS": "1"})


def unit_lines(text: str, key: str) -> list[str]:
    return [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith(key + "=")]


def rendered(run, host: str, lab) -> str:
    """The unit the run rendered for host: the diff's after-text when it would change, else the file as it is."""
    res = run.result(UNIT_TASK, host)
    assert res["_event"] == "runner_on_ok", res
    diffs = res.get("diff") or []
    diffs = diffs if isinstance(diffs, list) else [diffs]
    after = [d["after"] for d in diffs if isinstance(d.get("after"), str)]
    return after[-1] if after else lab.ssh(host, "cat /etc/systemd/system/sglang.service").stdout


def set_fm(lab, mode: str) -> None:
    for host in (B300, CT200):
        lab.gpu_daemon(host, FM, mode)


@pytest.fixture(scope="module")
def deployed(lab, lab_prepared):
    run = run_playbook(lab, SERVICE, extravars={"sglang_service_env_overrides": FAST})
    assert run.rc == 0, run.failures()
    return run


def test_the_home_is_the_service_users_alone_and_the_preflight_left_nothing(deployed, lab):
    for host in (B300, CT200):
        assert deployed.result(OWNED_TASK, host)["_event"] == "runner_on_ok"
        # the compile-cache record is root's on purpose (module_utils/compile_cache/record.py), nothing else
        assert lab.ssh(host, f"find {HOME} ! -user sglang ! -path {HOME}/{RECORD_NAME} -printf '%u %p\\n' | head"
                       ).stdout == ""
        assert lab.ssh(host, f"stat -c '%U %a' {HOME}").stdout.split() == ["sglang", "750"]
        # the server (the stand-in, as sglang) wrote its import-time and warm-up JIT caches there, as real SGLang does
        cached = lab.ssh(host, f"find {HOME}/.triton/cache -name cuda_utils.standin.so -user sglang").stdout
        assert cached.strip(), f"{host}: the stand-in wrote no Triton cache under its HOME"
        # the preflight's scratch home is gone
        assert lab.ssh(host, "ls -d /tmp/sglang-preflight-home-* 2>/dev/null | wc -l").stdout.strip() == "0"


def test_the_unit_follows_the_stub_daemons_present(deployed, lab):
    nv = lab.ssh(B300, "cat /etc/systemd/system/sglang.service").stdout
    pc = lab.ssh(CT200, "cat /etc/systemd/system/sglang.service").stdout
    both = f"network-online.target {PM} {FM}"
    assert unit_lines(nv, "After") == [both] and unit_lines(nv, "Wants") == [both]
    assert unit_lines(nv, "Requires") == [FM]
    assert unit_lines(pc, "After") == [both] and unit_lines(pc, "Requires") == []


def test_absent_and_failed_fabric_manager_on_nvlink_and_pcie(deployed, lab):
    try:
        set_fm(lab, "absent")
        run = check_run(lab)
        assert run.rc == 0, run.failures()
        for host in (B300, CT200):
            unit = rendered(run, host, lab)
            assert unit_lines(unit, "After") == [f"network-online.target {PM}"], unit
            assert unit_lines(unit, "Requires") == []

        set_fm(lab, "failed")
        run = check_run(lab)
        refused = run.result(DAEMONS_TASK, B300)
        assert refused["_event"] == "runner_on_failed", refused
        assert f"{FM} ActiveState=failed SubState=failed" in refused["msg"] and "nothing was changed" in refused["msg"]
        assert "simulated failure (NVSwitch fabric initialization failed)" in refused["msg"]
        assert not run.results(UNIT_TASK, B300)  # refused before the unit is rendered
        ok = run.result(DAEMONS_TASK, CT200)   # pcie: installed and failed, not required: ordered after it only
        assert ok["_event"] == "runner_on_ok" and ok["failed_daemons"] == [FM] and ok["required"] == []
        unit = rendered(run, CT200, lab)
        assert unit_lines(unit, "After") == [f"network-online.target {PM} {FM}"] and unit_lines(unit, "Requires") == []
    finally:
        set_fm(lab, "present")


def test_verify_names_what_another_user_left_in_the_home(deployed, lab):
    stray = f"{HOME}/.triton/cache/ROOTOWNED/cuda_utils.so"
    lab.ssh(CT200, f"mkdir -p {stray.rsplit('/', 1)[0]} && touch {stray}")
    try:
        run = check_run(lab, limit=CT200, tags=None, skip_tags="sglang_service_install")
        res = run.result(OWNED_TASK, CT200)
        assert res["_event"] == "runner_on_failed", res
        assert f"root {stray}" in res["msg"] and f"root {HOME}/.triton/cache/ROOTOWNED" in res["msg"]
    finally:
        lab.ssh(CT200, f"rm -rf {HOME}/.triton/cache/ROOTOWNED")
