"""module_utils/gpu/cuda_repo.py and filter_plugins/cuda_repo.py: NVIDIA's CUDA apt repository for a host, the pins.

The hosts are described twice: by the /etc/os-release those systems ship (ID, VERSION_ID) and by the ansible_facts
that ansible-core's own distribution code derives from such a file (run here against a fake root directory).
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from filter_plugins import cuda_repo as filters
from ansible.module_utils.gpu import cuda_repo as cr

ROOT = Path(__file__).resolve().parents[3]

# /etc/os-release as the distributions ship it (the fields that matter kept verbatim).
OS_RELEASE = {
    "debian12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
                'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n'
                'HOME_URL="https://www.debian.org/"\n',
    "ubuntu2204": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                  'VERSION="22.04.5 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
                  'UBUNTU_CODENAME=jammy\n',
    "ubuntu2404": 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
                  'VERSION="24.04.1 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
                  'UBUNTU_CODENAME=noble\nLOGO=ubuntu-logo\n',
    "debian11": 'PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\nNAME="Debian GNU/Linux"\nVERSION_ID="11"\n'
                'VERSION="11 (bullseye)"\nVERSION_CODENAME=bullseye\nID=debian\n',
    "ubuntu2004": 'NAME="Ubuntu"\nVERSION="20.04.6 LTS (Focal Fossa)"\nID=ubuntu\nID_LIKE=debian\n'
                  'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nVERSION_ID="20.04"\nVERSION_CODENAME=focal\n',
    "rocky9": 'NAME="Rocky Linux"\nVERSION="9.4 (Blue Onyx)"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
              'VERSION_ID="9.4"\nPLATFORM_ID="platform:el9"\nPRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"\n',
}
# /etc/debian_version of those systems (Ansible reads it for Debian's precise version).
DEBIAN_VERSION = {"debian12": "12.7\n", "debian11": "11.11\n", "ubuntu2204": "bookworm/sid\n",
                  "ubuntu2404": "trixie/sid\n", "ubuntu2004": "bullseye/sid\n"}


@pytest.mark.parametrize("system, machine, path", [
    ("debian12", "x86_64", "debian12/x86_64/"),
    ("debian12", "aarch64", "debian12/sbsa/"),
    ("ubuntu2204", "x86_64", "ubuntu2204/x86_64/"),
    ("ubuntu2204", "aarch64", "ubuntu2204/sbsa/"),
    ("ubuntu2404", "x86_64", "ubuntu2404/x86_64/"),
    ("ubuntu2404", "aarch64", "ubuntu2404/sbsa/"),
])
def test_path_from_the_os_release_the_system_ships(system, machine, path):
    fields = cr.os_release_fields(OS_RELEASE[system])
    assert cr.repo_path(fields["ID"], fields["VERSION_ID"], machine) == path
    assert cr.repo_url(cr.DEFAULT_BASE, path) == f"https://developer.download.nvidia.com/compute/cuda/repos/{path}"


def test_os_release_fields_unquote():
    fields = cr.os_release_fields(OS_RELEASE["rocky9"] + "# comment\n\nBROKEN LINE\n")
    assert fields["ID"] == "rocky" and fields["VERSION_ID"] == "9.4" and fields["ID_LIKE"] == "rhel centos fedora"
    assert "BROKEN LINE" not in fields


@pytest.mark.parametrize("os_id, version_id, machine, named", [
    ("debian", "11", "x86_64", "ID=debian VERSION_ID=11"),
    ("ubuntu", "20.04", "x86_64", "ID=ubuntu VERSION_ID=20.04"),
    ("rocky", "9", "x86_64", "ID=rocky VERSION_ID=9"),
    ("debian", "12", "armv7l", "architecture armv7l"),
    ("ubuntu", "24.04", "ppc64le", "architecture ppc64le"),
    ("ubuntu", "24.10", "x86_64", "ID=ubuntu VERSION_ID=24.10"),
    ("", "", "", "ID=? VERSION_ID=? and architecture ?"),
])
def test_refusals_name_what_was_found_and_what_is_supported(os_id, version_id, machine, named):
    with pytest.raises(cr.CudaRepoError) as exc:
        cr.repo_path(os_id, version_id, machine)
    msg = str(exc.value)
    assert named in msg
    assert "supported: Debian 12, Ubuntu 22.04, Ubuntu 24.04 on x86_64, aarch64 (sbsa)" in msg
    assert all(p in msg for p in cr.supported_paths())


def test_point_releases_share_their_release_directory():
    assert cr.repo_path("debian", "12.7", "x86_64") == "debian12/x86_64/"       # Debian's precise version
    assert cr.repo_path("ubuntu", "24.04.1", "aarch64") == "ubuntu2404/sbsa/"
    assert cr.repo_path('"Ubuntu"', '"22.04"', "x86_64") == "ubuntu2204/x86_64/"  # quoted, any case


def test_supported_paths_and_their_source_lists():
    assert cr.supported_paths() == ["debian12/x86_64/", "debian12/sbsa/", "ubuntu2204/x86_64/", "ubuntu2204/sbsa/",
                                    "ubuntu2404/x86_64/", "ubuntu2404/sbsa/"]
    assert cr.source_list_name("ubuntu2404/x86_64/") == "cuda-ubuntu2404-x86_64.list"
    assert cr.source_list_name("debian12/sbsa") == "cuda-debian12-sbsa.list"
    with pytest.raises(cr.CudaRepoError):
        cr.source_list_name("debian12/")
    with pytest.raises(cr.CudaRepoError):
        cr.repo_url("ftp://mirror/", "debian12/x86_64/")


# ---------------------------------------------------------------------------------------------- ansible_facts
class _Module:
    """What ansible-core's distribution parsers ask of a module: no dpkg, no commands."""

    def get_bin_path(self, *_a, **_kw):
        return None

    def run_command(self, *_a, **_kw):
        return 1, "", ""

    def debug(self, *_a, **_kw):
        pass


def ansible_distribution_facts(tmp_path, monkeypatch, system):
    """The distribution facts ansible-core computes for a host whose /etc holds `system`'s files."""
    from ansible.module_utils.common import sys_info
    from ansible.module_utils.facts.system import distribution as dist

    root = tmp_path / system
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text(OS_RELEASE[system])
    if system in DEBIAN_VERSION:
        (root / "etc" / "debian_version").write_text(DEBIAN_VERSION[system])
    # the distro library Ansible uses here (bundled or installed), reading the fake root instead of /
    monkeypatch.setattr(sys_info, "distro", sys_info.distro.LinuxDistribution(
        include_lsb=False, include_uname=False, include_oslevel=False, root_dir=str(root)))

    def dist_file(self, path, allow_empty=False):   # the real parsers, on the fake root's files
        local = root / path.lstrip("/")
        if not local.is_file() or (not allow_empty and local.stat().st_size == 0):
            return False, None
        return True, local.read_text()

    monkeypatch.setattr(dist.DistributionFiles, "_get_dist_file_content", dist_file)
    facts = dist.DistributionFiles(_Module()).process_dist_files()
    facts["os_family"] = dist.Distribution.OS_FAMILY.get(facts["distribution"], facts["distribution"])
    return facts


@pytest.mark.parametrize("system, expected", [
    ("debian12", {"distribution": "Debian", "distribution_version": "12.7", "distribution_major_version": "12"}),
    ("ubuntu2204", {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"}),
    ("ubuntu2404", {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"}),
])
def test_what_ansible_reports_for_these_systems(tmp_path, monkeypatch, system, expected):
    facts = ansible_distribution_facts(tmp_path, monkeypatch, system)
    assert {k: facts[k] for k in expected} == expected
    assert facts["os_family"] == "Debian"
    for machine, arch in (("x86_64", "x86_64"), ("aarch64", "sbsa")):
        assert cr.repo_path_from_facts({**facts, "architecture": machine}) == f"{system}/{arch}/"
        assert cr.repo_problem_from_facts({**facts, "architecture": machine}) == ""


@pytest.mark.parametrize("system, found", [
    ("debian11", "distribution=Debian distribution_version=11.11 distribution_major_version=11"),
    ("ubuntu2004", "distribution=Ubuntu distribution_version=20.04 distribution_major_version=20"),
    ("rocky9", "distribution=Rocky"),
])
def test_unsupported_systems_are_refused_with_the_facts_ansible_reported(tmp_path, monkeypatch, system, found):
    facts = {**ansible_distribution_facts(tmp_path, monkeypatch, system), "architecture": "x86_64"}
    problem = cr.repo_problem_from_facts(facts)
    assert problem.startswith("found ") and found in problem and "architecture=x86_64" in problem
    assert "no directory for this distribution;" in problem
    assert "supported: Debian 12, Ubuntu 22.04, Ubuntu 24.04" in problem
    with pytest.raises(cr.CudaRepoError, match="ubuntu2404/sbsa/"):
        cr.repo_path_from_facts(facts)


def test_unsupported_architecture_on_a_supported_distribution():
    facts = {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24",
             "architecture": "ppc64le"}
    problem = cr.repo_problem_from_facts(facts)
    assert "architecture=ppc64le" in problem and "no directory for this architecture;" in problem
    facts = {**facts, "distribution": "Ubuntu", "distribution_version": "20.04", "architecture": "armv7l"}
    assert "no directory for this distribution and architecture;" in cr.repo_problem_from_facts(facts)


def test_no_facts_says_gather_them():
    assert "gather facts first" in cr.repo_problem_from_facts({})
    assert "gather facts first" in cr.repo_problem_from_facts(None)


def test_filters_raise_ansible_filter_errors_with_the_message():
    from ansible.errors import AnsibleFilterError
    good = {"distribution": "Debian", "distribution_version": "12.7", "distribution_major_version": "12",
            "architecture": "aarch64"}
    assert filters.cuda_repo_path(good) == "debian12/sbsa/"
    assert filters.cuda_repo_problem(good) == ""
    bad = {**good, "distribution": "Rocky", "distribution_version": "9.4", "distribution_major_version": "9"}
    with pytest.raises(AnsibleFilterError, match="cuda: found distribution=Rocky .*supported: Debian 12"):
        filters.cuda_repo_path(bad)
    assert "distribution=Rocky" in filters.cuda_repo_problem(bad)
    assert set(filters.FilterModule().filters()) == {
        "cuda_repo_path", "cuda_repo_problem", "cuda_apt_pins", "cuda_apt_missing", "cuda_apt_pin_mismatches",
        "cuda_apt_newer_installed", "cuda_apt_guarded_pins"}


@pytest.mark.skipif(not shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)),
                    reason="ansible-playbook not in this venv")
def test_the_filter_on_this_controllers_real_facts(tmp_path):
    """Ansible's real gathered facts of this machine go through the filter to the path its os-release implies."""
    play, result = tmp_path / "play.yml", tmp_path / "result.json"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": True, "gather_subset": ["min"],
        "tasks": [{"ansible.builtin.copy": {
            "dest": str(result), "mode": "0644",
            "content": "{{ {'problem': ansible_facts | cuda_repo_problem, 'arch': ansible_facts['architecture'],"
                       " 'path': (ansible_facts | cuda_repo_path) if not (ansible_facts | cuda_repo_problem)"
                       " else ''} | to_json }}"}}]}]))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    msg = json.loads(result.read_text())
    fields = cr.os_release_fields(Path("/etc/os-release").read_text())
    try:
        expected = cr.repo_path(fields.get("ID"), fields.get("VERSION_ID"), msg["arch"])
    except cr.CudaRepoError:
        assert "supported:" in msg["problem"]
    else:
        assert msg["problem"] == "" and msg["path"] == expected, (expected, msg)


# ---------------------------------------------------------------------------------------------- pins
MADISON = (" cuda-toolkit-13-0 |   13.0.3-1 | http://10.213.0.1:8080/debian12/x86_64  Packages\n"
           " cuda-toolkit-13-0 |   13.0.2-1 | http://10.213.0.1:8080/debian12/x86_64  Packages\n"
           "    cuda-nvcc-13-0 |  13.0.96-1 | http://10.213.0.1:8080/debian12/x86_64  Packages\n"
           "    cuda-nvcc-13-0 |  13.0.88-1 | http://10.213.0.1:8080/debian12/x86_64  Packages\n"
           "  cuda-cudart-13-0 | 13.0.104-1 | http://10.213.0.1:8080/debian12/x86_64  Packages\n")
PINS = {"cuda-toolkit-13-0": "13.0.2-1", "cuda-nvcc-13-0": "13.0.88-1", "cuda-cudart-13-0": "13.0.96-1",
        "libcublas-13-0": "13.1.0.3-1"}


def test_pinned_packages_meta_first_and_checked():
    pins = cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", {"cuda-nvcc-13-0": "13.0.88-1", "libnpp-13-0": "1:2.3-1"})
    assert list(pins.items()) == [("cuda-toolkit-13-0", "13.0.2-1"), ("cuda-nvcc-13-0", "13.0.88-1"),
                                  ("libnpp-13-0", "1:2.3-1")]
    assert cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", {}) == {"cuda-toolkit-13-0": "13.0.2-1"}
    with pytest.raises(cr.CudaRepoError, match="pinned twice"):
        cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", {"cuda-toolkit-13-0": "13.0.3-1"})
    with pytest.raises(cr.CudaRepoError, match="Cuda_Nvcc=13.0.88-1"):
        cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", {"Cuda_Nvcc": "13.0.88-1"})
    with pytest.raises(cr.CudaRepoError, match="cuda-nvcc-13-0=>= 13.0"):
        cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", {"cuda-nvcc-13-0": ">= 13.0"})
    with pytest.raises(cr.CudaRepoError, match="mapping"):
        cr.pinned_packages("cuda-toolkit-13-0", "13.0.2-1", ["cuda-nvcc-13-0"])


def test_versions_the_repository_does_not_offer():
    assert cr.parse_madison(MADISON)["cuda-nvcc-13-0"] == ["13.0.96-1", "13.0.88-1"]
    # cudart only at a newer version, cublas not at all
    assert cr.missing_from_repository(MADISON, PINS) == ["cuda-cudart-13-0=13.0.96-1", "libcublas-13-0=13.1.0.3-1"]
    assert cr.missing_from_repository("", {"a": "1"}) == ["a=1"]
    assert cr.missing_from_repository(MADISON, {"cuda-toolkit-13-0": "13.0.2-1", "cuda-nvcc-13-0": "13.0.88-1"}) == []


def test_pin_mismatches_from_dpkg_query():
    dpkg = ("cuda-toolkit-13-0\t13.0.2-1\tii \n"
            "cuda-nvcc-13-0\t13.0.96-1\tii \n"       # upgraded behind the pin
            "cuda-cudart-13-0\t13.0.96-1\trc \n")    # removed, configuration left
    assert cr.pin_mismatches(dpkg, PINS) == [
        {"package": "cuda-nvcc-13-0", "pinned": "13.0.88-1", "installed": "13.0.96-1"},
        {"package": "cuda-cudart-13-0", "pinned": "13.0.96-1", "installed": ""},
        {"package": "libcublas-13-0", "pinned": "13.1.0.3-1", "installed": ""},   # dpkg does not know it
    ]
    # held ("hi", as the nvidia/cuda images hold libcublas) is installed; half-installed ("iH") is not
    held = dpkg + "libcublas-13-0\t13.1.0.3-1\thi \n"
    assert [m["package"] for m in cr.pin_mismatches(held, PINS)] == ["cuda-nvcc-13-0", "cuda-cudart-13-0"]
    half = "cuda-toolkit-13-0\t13.0.2-1\tiH \n"
    assert cr.pin_mismatches(half, {"cuda-toolkit-13-0": "13.0.2-1"})[0]["installed"] == ""
    good = "".join(f"{p}\t{v}\tii \n" for p, v in PINS.items())
    assert cr.pin_mismatches(good, PINS) == []
    assert filters.cuda_apt_pin_mismatches(good, PINS) == []
    assert filters.cuda_apt_missing(MADISON, {"cuda-nvcc-13-0": "13.0.88-1"}) == []


def test_a_component_installed_newer_than_its_pin_is_named_for_the_refusal():
    """Installing the pins there would be a downgrade: the play refuses it (roles/cuda/tasks/preflight.yml)."""
    dpkg = ("cuda-toolkit-13-0\t13.0.2-1\tii \n"
            "cuda-nvcc-13-0\t13.0.96-1\tii \n"          # newer than 13.0.88-1: named
            "cuda-cudart-13-0\t13.0.85-1\tii \n"        # older: an upgrade to the pin, fine
            "libcublas-13-0\t13.1.0.3-1~rc1\thi \n")    # ~ sorts before the release: older, fine
    newer = cr.newer_installed(dpkg, PINS)
    assert newer == [{"package": "cuda-nvcc-13-0", "pinned": "13.0.88-1", "installed": "13.0.96-1"}]
    assert filters.cuda_apt_newer_installed(dpkg, PINS) == newer
    # the order is dpkg's, not the strings': 13.0.100-1 > 13.0.96-1, an epoch beats everything
    assert cr.newer_installed("cuda-nvcc-13-0\t13.0.100-1\tii \n", {"cuda-nvcc-13-0": "13.0.96-1"})
    assert cr.newer_installed("cuda-nvcc-13-0\t1:13.0.1-1\tii \n", {"cuda-nvcc-13-0": "13.0.96-1"})
    assert not cr.newer_installed("cuda-nvcc-13-0\t13.0.9-1\tii \n", {"cuda-nvcc-13-0": "13.0.88-1"})
    assert not cr.newer_installed("cuda-nvcc-13-0\t13.0.96-1\trc \n", {"cuda-nvcc-13-0": "13.0.88-1"})  # removed


def test_the_driver_guard_blocks_no_pin_and_names_the_driver_packages():
    defaults = yaml.safe_load((ROOT / "roles" / "cuda" / "defaults" / "main.yml").read_text())
    guard = defaults["cuda_apt_driver_packages"]
    pins = cr.pinned_packages(defaults["cuda_apt_package"], defaults["cuda_apt_version"],
                              defaults["cuda_apt_components"])
    assert cr.guarded_pins(pins, guard) == []
    for name in ("cuda-drivers", "cuda-drivers-580", "nvidia-driver-580-open", "nvidia-open", "nvidia-open-580",
                 "nvidia-fabricmanager-580", "nvidia-fabricmanager", "libnvidia-nscq-580", "libnvidia-compute-580",
                 "nvidia-kernel-open-580", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-imex-580"):
        assert any(__import__("fnmatch").fnmatchcase(name, g) for g in guard), name
    assert cr.guarded_pins({"nvidia-fabricmanager-580": "580.95.05-1"}, guard) == [
        "nvidia-fabricmanager-580 (nvidia-*)"]
    assert filters.cuda_apt_guarded_pins(pins, guard) == []


def test_role_defaults_pin_the_components_the_lab_repository_models():
    defaults = yaml.safe_load((ROOT / "roles" / "cuda" / "defaults" / "main.yml").read_text())
    components = defaults["cuda_apt_components"]
    pins = cr.pinned_packages(defaults["cuda_apt_package"], defaults["cuda_apt_version"], components)
    assert list(pins)[0] == "cuda-toolkit-13-0" and pins["cuda-toolkit-13-0"] == "13.0.2-1"
    from lab.aptrepo import PINNED_COMPONENTS
    assert {p: components[p] for p in PINNED_COMPONENTS} == PINNED_COMPONENTS
    assert defaults["cuda_apt_repo_base"] == cr.DEFAULT_BASE
    assert "cuda_repo_path" in defaults["cuda_apt_repo_url"] and "cuda_apt_repo_base" in defaults["cuda_apt_repo_url"]
    specs = yaml.safe_load((ROOT / "roles" / "cuda" / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert options["cuda_apt_components"]["type"] == "dict" and options["cuda_apt_repo_base"]["type"] == "str"


# ---------------------------------------------------------------------------------------------- lab repository
@pytest.mark.skipif(not all(shutil.which(t) for t in ("gpg", "dpkg-deb", "dpkg-scanpackages")),
                    reason="gpg and dpkg-dev (the Makefile's APT_PACKAGES) missing")
def test_lab_repository_serves_every_supported_path(tmp_path):
    from lab.aptrepo import build_repo, DECOY_COMPONENTS, PINNED_COMPONENTS
    info = build_repo(tmp_path / "repo", "http://127.0.0.1:9/")
    assert sorted(info["paths"]) == sorted(cr.supported_paths())
    for path, repo in info["paths"].items():
        directory = tmp_path / "repo" / path
        source = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(directory / info["keyring_deb"])],
                                check=True, capture_output=True).stdout
        listing = subprocess.run(["tar", "-t"], input=source, check=True, capture_output=True).stdout.decode()
        assert f"./etc/apt/sources.list.d/{cr.source_list_name(path)}" in listing.splitlines()
        member = subprocess.run(["tar", "-xO", f"./etc/apt/sources.list.d/{cr.source_list_name(path)}"],
                                input=source, check=True, capture_output=True).stdout.decode()
        assert member == f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] http://127.0.0.1:9/{path} /\n"
        packages = (directory / "Packages").read_text()
        arch = cr.DEB_ARCHES[path.split("/")[1]]
        assert repo["arch"] == arch and f"Architecture: {arch}\n" in packages
        assert packages.count("Package: cuda-toolkit-13-0\n") == 2
        for name in PINNED_COMPONENTS:   # pinned and decoy of each component
            assert packages.count(f"Package: {name}\n") == 2
            assert f"Version: {PINNED_COMPONENTS[name]}\n" in packages and f"Version: {DECOY_COMPONENTS[name]}\n" in packages
        depends = {line for line in packages.splitlines() if line.startswith("Depends:")}
        assert depends == {"Depends: " + ", ".join(f"{n} (>= {v})" for n, v in PINNED_COMPONENTS.items())}
        assert (directory / "InRelease").read_text().startswith("-----BEGIN PGP SIGNED MESSAGE-----")
    # the root: a flat mirror of this machine's debian12 path, its list naming the root URL
    root_packages = (tmp_path / "repo" / "Packages").read_text()
    assert root_packages.count("Package: cuda-toolkit-13-0\n") == 2 and "Filename: ./debian12" not in root_packages
    assert info["native_arch"] in ("x86_64", "sbsa") and info["components"] == PINNED_COMPONENTS
