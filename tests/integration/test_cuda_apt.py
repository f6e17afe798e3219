"""cuda role, apt route, against the lab's synthetic signed CUDA repository (lab/aptrepo) on the bridge gateway.

The repository serves every path NVIDIA's does (debian12, ubuntu2204, ubuntu2404 x x86_64, sbsa) under one base
URL; the role gets only that base (cuda_apt_repo_base) and derives the path from the host's facts, so what the host
reports (its /etc/os-release) decides which path it is served from. The meta package cuda-toolkit-13-0 depends with
`>=` on three components, each in a pinned and a newer decoy version.
"""
import shlex

import pytest

from lab.aptrepo import AptRepo, COMPONENTS
from lab.aptrepo.repo import DRIVER_PACKAGE

LAB_NAME = "cuda"
HOST = "ct200-lab"
PACKAGES = ("cuda-toolkit-13-0", *COMPONENTS)
# purge what dpkg knows of (apt-get purge of a name apt cannot locate would abort the whole purge)
CLEAN = (f"dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {' '.join(PACKAGES)} cuda-keyring 2>/dev/null "
         "| awk '$2 != \"un\" {print $1}' | xargs -r apt-get purge -y -qq >/dev/null 2>&1; "
         "rm -f /var/cache/apt/archives/*cuda*.deb /var/cache/apt/archives/libcublas*.deb; "   # fetched again, per path
         "rm -rf /usr/local/cuda-13.0 /var/cache/cuda-keyring /etc/apt/preferences.d/cuda-toolkit-13-0.pref "
         "/etc/apt/preferences.d/cuda-repo-driver-guard.pref "
         "/etc/profile.d/cuda.sh /etc/ld.so.conf.d/cuda-13-0.conf; ldconfig")
OS_RELEASE_SAVED = "/etc/os-release.cuda-apt-test"
# /etc/os-release as Ubuntu 24.04 and Rocky Linux 9 ship it.
UBUNTU_2404 = ('PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
               'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
               'HOME_URL="https://www.ubuntu.com/"\nSUPPORT_URL="https://help.ubuntu.com/"\n'
               'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\nUBUNTU_CODENAME=noble\nLOGO=ubuntu-logo\n')
ROCKY_9 = ('NAME="Rocky Linux"\nVERSION="9 (Blue Onyx)"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9"\n'
           'PLATFORM_ID="platform:el9"\nPRETTY_NAME="Rocky Linux 9 (Blue Onyx)"\nANSI_COLOR="0;32"\n')
OS_CHECK = "Refuse a distribution or architecture NVIDIA's CUDA apt repository does not serve (apt route)"
INSTALL = "Install the pinned toolkit and every pinned component at its exact version"
VERIFY_PINS = "Require every pinned CUDA package at exactly its pinned version (apt route)"
NO_DOWNGRADE = "Refuse to downgrade a CUDA package installed newer than its pin (apt route)"
GUARD = "/etc/apt/preferences.d/cuda-repo-driver-guard.pref"


@pytest.fixture(scope="module")
def repo(lab, tmp_path_factory):
    gateway = lab.state()["gateway"]
    # apt ignores no_proxy: let it reach the gateway directly (the lab proxy only allows Debian and PyPI).
    lab.ssh(HOST, f"echo 'Acquire::http::Proxy::{gateway} \"DIRECT\";' > /etc/apt/apt.conf.d/91lab-gateway-direct")
    lab.ssh(HOST, CLEAN)
    with AptRepo(tmp_path_factory.mktemp("aptrepo"), bind=gateway) as served:
        yield served
    lab.ssh(HOST, CLEAN, check=False)


@pytest.fixture
def os_release(lab):
    """`os_release(text)` makes the host's /etc/os-release say `text` (a symlink on Debian: it is moved aside, not
    written through); the original comes back afterwards. A copy left by an aborted run is the original."""
    lab.ssh(HOST, f"test -e {OS_RELEASE_SAVED} -o -L {OS_RELEASE_SAVED} || mv /etc/os-release {OS_RELEASE_SAVED}")

    def write(text):
        lab.ssh(HOST, f"rm -f /etc/os-release && printf %s {shlex.quote(text)} > /etc/os-release")

    yield write
    lab.ssh(HOST, f"rm -f /etc/os-release && mv {OS_RELEASE_SAVED} /etc/os-release")
    assert "Debian GNU/Linux 12" in lab.ssh(HOST, "cat /etc/os-release").stdout


def native_path(info, distro="debian12"):
    """The repository path this lab host derives when it reports `distro` (the lab's architecture)."""
    return f"{distro}/{info['native_arch']}/"


def apt_vars(info, path=None, **over):
    """The apt route against the synthetic repository through the derived path: only the base is given; the key and
    the keyring .deb's sha256 are those of `path` (default: what a Debian 12 lab host derives)."""
    path = path or native_path(info)
    return {"cuda_install_method": "apt", "cuda_apt_repo_base": info["base"],
            "cuda_apt_key_fingerprint": info["fingerprint"], "cuda_apt_keyring_sha256": info["paths"][path]["keyring_sha256"],
            "cuda_apt_components": info["components"],   # the synthetic meta package has three components
            "cuda_verify_libraries": [], **over}   # the synthetic toolkit ships no libcudart


def installed(lab, *packages):
    """{package: version} of those of `packages` dpkg has installed ("ii", or "hi": held)."""
    out = lab.ssh(HOST, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' " + " ".join(packages),
                  check=False).stdout
    return {f[0]: f[1] for f in (line.split() for line in out.splitlines()) if len(f) == 3 and f[2][1:2] == "i"}


def test_wrong_repository_key_is_refused_before_the_keyring_is_installed(lab, playbook, repo):
    # a mirror at a URL of its own (cuda_apt_repo_url overrides the derived one): the repository's root
    run = playbook("playbooks/cuda.yml", limit=HOST,
                   extravars=apt_vars(repo.info, cuda_apt_repo_url=repo.info["url"],
                                      cuda_apt_keyring_sha256=repo.info["keyring_sha256"],
                                      cuda_apt_key_fingerprint="EB693B3035CD5710E231E123A4B469963BF863CC"))
    assert run.rc != 0
    res = run.result("Require the expected repository key", HOST)
    assert res["_event"] == "runner_on_failed"
    assert repo.info["fingerprint"] in res["msg"] and "was not installed" in res["msg"]
    state = lab.ssh(HOST, "dpkg -s cuda-keyring; ls /etc/apt/sources.list.d /etc/apt/preferences.d", check=False)
    assert "is not installed" in state.stderr
    assert "cuda" not in state.stdout


def test_apt_route_installs_the_pinned_toolkit_and_is_idempotent(lab, playbook, repo):
    lab.ssh(HOST, CLEAN)
    path = native_path(repo.info)
    dry = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info), check=True)
    assert dry.rc == 0 and dry.changed_count(HOST) > 0, dry.stdout[-3000:]   # check mode on a fresh host: truthful
    assert lab.ssh(HOST, "ls /var/cache/cuda-keyring /usr/local/cuda-13.0 /etc/apt/preferences.d/cuda-toolkit-13-0.pref "
                         "2>&1 | grep -c 'No such file'").stdout.strip() == "3"

    first = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert first.rc == 0, first.failures()
    assert first.changed_count(HOST) > 0
    assert f"GET /{path}cuda-keyring_1.1-1_all.deb 200" in repo.requests, repo.requests
    assert any(f"/cuda-toolkit-13-0_{repo.info['meta']['version']}_" in r for r in repo.requests), repo.requests
    for name, pinned in repo.info["components"].items():   # every component fetched at its pinned version only
        assert any(f"/{name}_{pinned}_" in r for r in repo.requests), (name, repo.requests)
        assert not any(f"/{name}_{repo.info['decoys'][name]}_" in r for r in repo.requests), (name, repo.requests)
    # the newer meta package and the newer components in the repository are held back by the pins
    policy = lab.ssh(HOST, "apt-cache policy cuda-toolkit-13-0 cuda-nvcc-13-0").stdout
    assert "Installed: 13.0.2-1" in policy and "Candidate: 13.0.2-1" in policy and "13.0.3-1" in policy
    assert "Installed: 13.0.88-1" in policy and "Candidate: 13.0.88-1" in policy and "13.0.96-1" in policy
    assert installed(lab, *PACKAGES) == {"cuda-toolkit-13-0": "13.0.2-1", **repo.info["components"]}
    prefs = lab.ssh(HOST, "cat /etc/apt/preferences.d/cuda-toolkit-13-0.pref").stdout
    for name, version in {"cuda-toolkit-13-0": "13.0.2-1", **repo.info["components"]}.items():
        assert f"Package: {name}\nPin: version {version}\nPin-Priority: 999\n" in prefs
    # the driver guard: apt never takes the fabric manager (or the driver) from the CUDA repository; its origin is
    # the one apt itself names for that repository
    guard = lab.ssh(HOST, f"cat {GUARD}").stdout
    origin = guard.split('Pin: origin "')[1].split('"')[0]
    files = lab.ssh(HOST, "apt-cache policy").stdout   # the package files, each with the origin apt names
    assert f" origin {origin}\n" in files + "\n", files
    fm = lab.ssh(HOST, f"apt-cache policy {DRIVER_PACKAGE[0]}").stdout
    assert "Candidate: (none)" in fm and f"{DRIVER_PACKAGE[1]} -1" in fm, fm
    out = lab.ssh(HOST, "bash -lc 'echo $CUDA_HOME; nvcc --version'").stdout
    assert out.startswith("/usr/local/cuda-13.0\n") and "release 13.0, V13.0.88" in out

    second = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert second.rc == 0 and second.changed_count(HOST) == 0, second.stdout[-3000:]

    # someone upgrades behind the operator's back: the next run refuses, naming it, and downgrades nothing
    lab.ssh(HOST, "apt-get install -y -qq cuda-toolkit-13-0=13.0.3-1 >/dev/null")
    again = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert again.rc != 0
    assert "cuda-toolkit-13-0 installed 13.0.3-1, pinned 13.0.2-1" in again.result(NO_DOWNGRADE, HOST)["msg"]
    assert lab.ssh(HOST, "dpkg-query -W -f='${Version}' cuda-toolkit-13-0").stdout == "13.0.3-1"
    # the documented switch puts the pin back
    back = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info, cuda_apt_allow_downgrade=True))
    assert back.rc == 0, back.failures()
    assert lab.ssh(HOST, "dpkg-query -W -f='${Version}' cuda-toolkit-13-0").stdout == "13.0.2-1"


def test_component_upgraded_behind_the_pin_is_named_and_refused_not_downgraded(lab, playbook, repo):
    """The meta package stays at its pin while a component drifts to a newer version (its `>=` dependency still
    holds): verify names it; the next run (and its check mode) refuses at preflight naming the versions, changing
    nothing; only cuda_apt_allow_downgrade puts it back.

    It starts from the pinned toolkit of the Debian path, installed by the apt route: the test above ends there (its
    last run put the pins back), and a full install from a clean host is that test's subject, so it is not paid twice;
    run alone (or after a test that left anything else), the toolkit is installed here first."""
    pinned_set = {"cuda-toolkit-13-0": "13.0.2-1", **repo.info["components"]}
    debian_source = f"/etc/apt/sources.list.d/{repo.info['paths'][native_path(repo.info)]['source_list']}"
    if installed(lab, *PACKAGES) != pinned_set or lab.ssh(HOST, f"test -e {debian_source}", check=False).returncode:
        lab.ssh(HOST, CLEAN)
        first = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
        assert first.rc == 0, first.failures()
    name = "cuda-nvcc-13-0"
    pinned, newer = repo.info["components"][name], repo.info["decoys"][name]
    lab.ssh(HOST, f"apt-get install -y -qq {name}={newer} >/dev/null")
    assert installed(lab, "cuda-toolkit-13-0", name) == {"cuda-toolkit-13-0": "13.0.2-1", name: newer}

    checked = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info), tags="cuda_verify")
    assert checked.rc != 0
    res = checked.result(VERIFY_PINS, HOST)
    assert res["_event"] == "runner_on_failed", res
    assert f"{name} installed {newer}, pinned {pinned}" in res["msg"] and "1 of the 4 pinned packages" in res["msg"]
    assert f"{name} newer than the pin: the next run refuses rather than downgrade" in res["msg"]

    for check in (True, False):
        run = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info), check=check)
        assert run.rc != 0
        res = run.result(NO_DOWNGRADE, HOST)
        assert res["_event"] == "runner_on_failed", res
        assert f"{name} installed {newer}, pinned {pinned}" in res["msg"] and "Nothing was changed" in res["msg"]
        assert "cuda_apt_allow_downgrade" in res["msg"] and INSTALL not in run.task_names()
        assert installed(lab, name) == {name: newer}   # nothing downgraded

    again = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info, cuda_apt_allow_downgrade=True))
    assert again.rc == 0, again.failures()
    assert again.result(INSTALL, HOST).get("changed") is True
    assert again.result(VERIFY_PINS, HOST)["_event"] == "runner_on_ok"
    assert installed(lab, *PACKAGES) == {"cuda-toolkit-13-0": "13.0.2-1", **repo.info["components"]}
    assert "release 13.0, V13.0.88" in lab.ssh(HOST, "bash -lc 'nvcc --version'").stdout


def test_ubuntu_2404_host_is_served_from_the_ubuntu2404_path(lab, playbook, repo, os_release):
    """NEW: a host whose /etc/os-release says Ubuntu 24.04 gets <base>/ubuntu2404/<arch>/ (and nothing else)."""
    lab.ssh(HOST, CLEAN)   # the keyring of another path would be kept by dpkg (same package version)
    os_release(UBUNTU_2404)
    path = native_path(repo.info, "ubuntu2404")
    start = len(repo.requests)
    run = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info, path))
    assert run.rc == 0, run.failures()
    facts = run.result("Gathering Facts", HOST)["ansible_facts"]
    assert (facts["ansible_distribution"], facts["ansible_distribution_version"]) == ("Ubuntu", "24.04")
    served = repo.requests[start:]
    assert f"GET /{path}cuda-keyring_1.1-1_all.deb 200" in served, served
    assert f"GET /{path}InRelease 200" in served, served
    assert any(r.startswith(f"GET /{path}") and "/cuda-nvcc-13-0_13.0.88-1_" in r for r in served), served
    assert all(r.split()[1].startswith(f"/{path}") for r in served), served   # no other path, not the root
    source = repo.info["paths"][path]["source_list"]
    assert source == f"cuda-ubuntu2404-{repo.info['native_arch']}.list"
    listed = lab.ssh(HOST, f"cat /etc/apt/sources.list.d/{source}").stdout
    assert listed == f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo.info['base']}{path} /\n"
    assert installed(lab, *PACKAGES) == {"cuda-toolkit-13-0": "13.0.2-1", **repo.info["components"]}
    lab.ssh(HOST, CLEAN)


def test_unknown_distribution_is_refused_at_preflight_before_any_change(lab, playbook, repo, os_release):
    """NEW: os-release ID=rocky VERSION_ID=9: refused by the first preflight task, naming what Ansible found and
    what is supported; nothing downloaded, nothing written."""
    lab.ssh(HOST, CLEAN)
    before = lab.ssh(HOST, "ls -A /etc/apt/preferences.d /etc/apt/sources.list.d").stdout
    os_release(ROCKY_9)
    start = len(repo.requests)
    run = playbook("playbooks/cuda.yml", limit=HOST, extravars=apt_vars(repo.info))
    assert run.rc != 0
    facts = run.result("Gathering Facts", HOST)["ansible_facts"]
    assert "Rocky" in facts["ansible_distribution"] and facts["ansible_distribution_version"] == "9"
    res = run.result(OS_CHECK, HOST)
    assert res["_event"] == "runner_on_failed", res
    msg = res["msg"]
    assert f"distribution={facts['ansible_distribution']} distribution_version=9 distribution_major_version=9" in msg
    assert f"architecture={facts['ansible_architecture']}" in msg
    assert "supported: Debian 12, Ubuntu 22.04, Ubuntu 24.04" in msg and "ubuntu2404/x86_64/" in msg
    assert "nothing was changed" in msg
    assert "Create the keyring download directory" not in run.task_names()
    assert repo.requests[start:] == []
    after = lab.ssh(HOST, "ls -A /etc/apt/preferences.d /etc/apt/sources.list.d").stdout
    assert after == before and "cuda" not in after
    state = lab.ssh(HOST, "ls /var/cache/cuda-keyring; dpkg -s cuda-keyring", check=False)
    assert "No such file" in state.stderr and "is not installed" in state.stderr
