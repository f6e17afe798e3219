"""cuda role on lab hosts: the pip route for real (CUDA 13.0 wheels through the lab proxy), that toolkit then
adopted with cuda_install_method: existing (nothing installed, the same verify; another release refused before any
change), and the driver gate.

Lab hosts declare no GPU: the gate must say so (skipped, with a warning) and must fail, before any change,
when a host is told to expect GPUs it does not have.
"""
import pytest

LAB_NAME = "cuda"
HOST = "b300-lab"
CLEAN = ("rm -rf /opt/cuda-13.0-pip /usr/local/cuda-13.0 /etc/profile.d/cuda.sh /etc/ld.so.conf.d/cuda-13-0.conf"
         " && ldconfig")


@pytest.fixture(scope="module")
def clean_host(lab):
    lab.ssh(HOST, CLEAN)
    yield
    lab.ssh(HOST, CLEAN, check=False)


def test_gate_fails_before_any_change_when_gpus_are_expected(lab, playbook, clean_host):
    run = playbook("playbooks/cuda.yml", limit=HOST,
                   extravars={"deploy_gpu_count": 8, "deploy_gpu_compute_capability": "10.3"})
    assert run.rc != 0
    gate = run.result("Read the GPUs and run the driver gate (count, compute capability, driver)", HOST)
    assert gate["_event"] == "runner_on_failed"
    assert "expected 8 GPU(s), found 0" in gate["msg"] and "nvidia-smi not found" in gate["msg"], gate["msg"]
    assert run.changed_count(HOST) == 0
    assert lab.ssh(HOST, "test -e /usr/local/cuda-13.0 || test -e /opt/cuda-13.0-pip", check=False).returncode == 1


def test_pip_route_installs_real_nvcc_13_0_and_is_idempotent(lab, playbook, clean_host):
    lab.ssh(HOST, CLEAN)
    dry = playbook("playbooks/cuda.yml", limit=HOST, check=True)
    assert dry.rc == 0 and dry.changed_count(HOST) > 0, dry.stdout[-3000:]   # check mode on a fresh host: truthful
    assert lab.ssh(HOST, "ls -d /opt/cuda-13.0-pip /usr/local/cuda-13.0 2>&1 | grep -c 'No such file'").stdout.strip() == "2"

    first = playbook("playbooks/cuda.yml", limit=HOST)
    assert first.rc == 0, first.stdout[-3000:]
    assert first.changed_count(HOST) > 0
    # the gate says loudly that it did not run, and never reports a pass
    gate = first.result("Read the GPUs and run the driver gate (count, compute capability, driver)", HOST)
    assert gate["gate"]["status"] == "skipped"
    assert any("driver gate NOT run" in w for w in gate.get("warnings", [])), gate
    report = first.result("Report the driver gate", HOST)
    assert report["msg"].startswith("GPU DRIVER GATE SKIPPED on b300-lab")
    # the real nvcc from the wheels, through /usr/local/cuda-13.0, in a login shell
    out = lab.ssh(HOST, "bash -lc 'echo $CUDA_HOME; command -v nvcc; nvcc --version; readlink -f $CUDA_HOME/bin/nvcc;"
                        " ldconfig -p | grep libcudart.so.13'").stdout
    assert out.splitlines()[:2] == ["/usr/local/cuda-13.0", "/usr/local/cuda-13.0/bin/nvcc"]
    assert "Cuda compilation tools, release 13.0, V13.0." in out
    assert "/opt/cuda-13.0-pip/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc" in out
    assert "=> /usr/local/cuda-13.0/lib64/libcudart.so.13" in out

    second = playbook("playbooks/cuda.yml", limit=HOST)
    assert second.rc == 0 and second.changed_count(HOST) == 0, second.stdout[-3000:]

    # issue 26: the toolkit just laid out (real nvcc 13.0, no version file: include/cuda.h) adopted as an existing
    # one: nothing installed, the same configure and verify; the one change is the method the profile records
    adopt = {"cuda_install_method": "existing", "cuda_home": "/usr/local/cuda-13.0"}
    adopted = playbook("playbooks/cuda.yml", limit=HOST, extravars=adopt)
    assert adopted.rc == 0, adopted.failures()
    changed = sorted({ev["event_data"]["task"] for ev in adopted.events if ev.get("event") == "runner_on_ok"
                      and ev["event_data"].get("res", {}).get("changed")})
    assert changed == ["Export CUDA_HOME and PATH for login shells"], changed
    assert not {"Install from the CUDA wheels", "Install from NVIDIA's apt repository"} & {
        ev["event_data"].get("task") for ev in adopted.events if ev.get("event") == "runner_on_ok"}
    read = adopted.result("Read the toolkit already in cuda_home (existing route)", HOST)
    assert read["problems"] == [] and read["toolkit"]["version_source"] == "include/cuda.h", read
    report = adopted.result("Report the toolkit", HOST)["msg"]
    assert report.startswith("CUDA 13.0 via existing at /usr/local/cuda-13.0: include/cuda.h 13.0, Cuda compilation"
                             " tools, release 13.0, V13.0."), report
    assert "(existing route)" in lab.ssh(HOST, "cat /etc/profile.d/cuda.sh").stdout
    again = playbook("playbooks/cuda.yml", limit=HOST, extravars=adopt)
    assert again.rc == 0 and again.changed_count(HOST) == 0, again.stdout[-3000:]
    # another release asked of it: refused at preflight, naming what is there, before any change
    wrong = playbook("playbooks/cuda.yml", limit=HOST, extravars={**adopt, "cuda_version": "12.8"})
    assert wrong.rc != 0 and wrong.changed_count(HOST) == 0, wrong.stdout[-3000:]
    res = wrong.result("Refuse to adopt cuda_home unless it holds the CUDA release asked for (existing route)", HOST)
    assert res["_event"] == "runner_on_failed", res
    assert ("/usr/local/cuda-13.0/include/cuda.h says CUDA 13.0, not 12.8; /usr/local/cuda-13.0/bin/nvcc --version"
            " reports release 13.0, not 12.8. Nothing was changed.") in res["msg"], res["msg"]
    assert lab.ssh(HOST, "test -e /etc/ld.so.conf.d/cuda-12-8.conf", check=False).returncode == 1


def test_login_check_sees_the_login_shell_not_the_session(lab, playbook, clean_host):
    """Runs on the toolkit installed above (configure + verify only).

    1. A CUDA_HOME in the SSH session (here via pam_env) must not fool the check: found on the H200, whose image
       exports CUDA_HOME=/usr/local/cuda, where the command module expanded $CUDA_HOME itself.
    2. A login file that overrides CUDA_HOME after ours fails verify, naming the file.
    """
    tags = "cuda_configure,cuda_verify"
    lab.ssh(HOST, "echo CUDA_HOME=/usr/local/cuda >> /etc/environment")
    try:
        run = playbook("playbooks/cuda.yml", limit=HOST, tags=tags)
        assert run.rc == 0, run.stdout[-3000:]
        res = run.result("Read CUDA_HOME and nvcc from a login shell (and which login files mention CUDA_HOME)", HOST)
        assert res["stdout_lines"][:2] == ["/usr/local/cuda-13.0", "/usr/local/cuda-13.0/bin/nvcc"]

        lab.ssh(HOST, "echo 'export CUDA_HOME=/usr/local/cuda' >> /root/.profile")
        run = playbook("playbooks/cuda.yml", limit=HOST, tags=tags)
        assert run.rc != 0
        res = run.result("Require CUDA_HOME and nvcc in login shells", HOST)
        assert res["_event"] == "runner_on_failed"
        assert "CUDA_HOME=/usr/local/cuda and" in res["msg"] and "/root/.profile" in res["msg"], res["msg"]
    finally:
        lab.ssh(HOST, "sed -i '/CUDA_HOME/d' /etc/environment /root/.profile")


def test_pip_route_refuses_an_apt_toolkit_in_cuda_home(lab, playbook, clean_host):
    lab.ssh(HOST, "rm -rf /usr/local/cuda-13.0 && mkdir -p /usr/local/cuda-13.0/bin")
    try:
        run = playbook("playbooks/cuda.yml", limit=HOST)
        assert run.rc != 0
        res = run.result("Refuse to mix the apt and pip layouts in cuda_home", HOST)
        assert res["_event"] == "runner_on_failed" and "a real directory" in res["msg"]
        assert run.changed_count(HOST) == 0
    finally:
        lab.ssh(HOST, CLEAN)
