"""cuda role, apt route, against the lab's synthetic signed CUDA repository (lab/aptrepo) on the bridge gateway."""
import pytest

from lab.aptrepo import AptRepo

LAB_NAME = "cuda"
HOST = "ct200-lab"
CLEAN = ("apt-get purge -y -qq cuda-toolkit-13-0 cuda-keyring >/dev/null 2>&1; "
         "rm -rf /usr/local/cuda-13.0 /var/cache/cuda-keyring /etc/apt/preferences.d/cuda-toolkit-13-0.pref "
         "/etc/profile.d/cuda.sh /etc/ld.so.conf.d/cuda-13-0.conf; ldconfig")


@pytest.fixture(scope="module")
def repo(lab, tmp_path_factory):
    gateway = lab.state()["gateway"]
    # apt ignores no_proxy: let it reach the gateway directly (the lab proxy only allows Debian and PyPI).
    lab.ssh(HOST, f"echo 'Acquire::http::Proxy::{gateway} \"DIRECT\";' > /etc/apt/apt.conf.d/91lab-gateway-direct")
    lab.ssh(HOST, CLEAN)
    with AptRepo(tmp_path_factory.mktemp("aptrepo"), bind=gateway) as served:
        yield served
    lab.ssh(HOST, CLEAN, check=False)


def apt_vars(info, **over):
    return {"cuda_install_method": "apt", "cuda_apt_repo_url": info["url"],
            "cuda_apt_key_fingerprint": info["fingerprint"], "cuda_apt_keyring_sha256": info["keyring_sha256"],
            "cuda_verify_libraries": [], **over}   # the synthetic toolkit ships no libcudart


def test_wrong_repository_key_is_refused_before_the_keyring_is_installed(lab, playbook, repo):
    run = playbook("playbooks/cuda.yml", limit=HOST,
                   extravars=apt_vars(repo.info, cuda_apt_key_fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC"))
    assert run.rc != 0
    res = run.result("Require the expected repository key", HOST)
    assert res["_event"] == "runner_on_failed"
    assert repo.info["fingerprint"] in res["msg"] and "was not installed" in res["msg"]
    state = lab.ssh(HOST, "dpkg -s cuda-keyring; ls /etc/apt/sources.list.d /etc/apt/preferences.d", check=False)
    assert "is not installed" in state.stderr
    assert "cuda" not in state.stdout


def test_apt_route_installs_the_pinned_toolkit_and_is_idempotent(lab, playbook, repo):
    lab.ssh(HOST, CLEAN)
    dry = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info), check=True)
    assert dry.rc == 0 and dry.changed_count(HOST) > 0, dry.stdout[-3000:]   # check mode on a fresh host: truthful
    assert lab.ssh(HOST, "ls /var/cache/cuda-keyring /usr/local/cuda-13.0 /etc/apt/preferences.d/cuda-toolkit-13-0.pref "
                         "2>&1 | grep -c 'No such file'").stdout.strip() == "3"

    first = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert first.rc == 0, first.stdout[-3000:]
    assert first.changed_count(HOST) > 0
    assert any(r.startswith("GET /cuda-keyring_1.1-1_all.deb") for r in repo.requests), repo.requests
    assert any("/cuda-toolkit-13-0_13.0.2-1_" in r for r in repo.requests), repo.requests
    # the newer 13.0.3-1 in the repository is held back by the pin
    policy = lab.ssh(HOST, "apt-cache policy cuda-toolkit-13-0").stdout
    assert "Installed: 13.0.2-1" in policy and "Candidate: 13.0.2-1" in policy and "13.0.3-1" in policy
    out = lab.ssh(HOST, "bash -lc 'echo $CUDA_HOME; nvcc --version'").stdout
    assert out.startswith("/usr/local/cuda-13.0\n") and "release 13.0, V13.0.88" in out

    second = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert second.rc == 0 and second.changed_count(HOST) == 0, second.stdout[-3000:]

    # someone upgrades behind the operator's back: the next run puts the pinned version back
    lab.ssh(HOST, "apt-get install -y -qq cuda-toolkit-13-0=13.0.3-1 >/dev/null")
    again = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert again.rc == 0, again.stdout[-3000:]
    assert lab.ssh(HOST, "dpkg-query -W -f='${Version}' cuda-toolkit-13-0").stdout == "13.0.2-1"
