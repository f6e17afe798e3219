"""NVIDIA's CUDA apt repository for a host, and the exact-version pins of the toolkit: pure functions, stdlib only.

The ONE place that knows which NVIDIA repository serves which host. NVIDIA's documented layout is

    https://developer.download.nvidia.com/compute/cuda/repos/<distro><release without dots>/<arch>/

with <distro><release> one of debian12, ubuntu2204, ubuntu2404 and <arch> x86_64 (machine x86_64) or sbsa
(machine aarch64: server Arm; NVIDIA's "arm64" directories are for Jetson and are not served here). Every such
directory is a flat repository (`deb [signed-by=...] URL /`) whose cuda-keyring package writes
/etc/apt/sources.list.d/cuda-<distro><release>-<arch>.list naming that same URL.

    repo_path(os_id, version_id, machine)   -> "ubuntu2404/x86_64/"     (os-release ID, VERSION_ID, uname -m)
    os_release_fields(text)                 -> {"ID": "ubuntu", "VERSION_ID": "24.04", ...}   (/etc/os-release)
    os_release_from_facts(ansible_facts)    -> ("ubuntu", "24.04", "x86_64")
    repo_path_from_facts(ansible_facts)     -> "ubuntu2404/x86_64/"
    repo_problem_from_facts(ansible_facts)  -> "" or the refusal: what was found and what is supported
    source_list_name(path)                  -> "cuda-ubuntu2404-x86_64.list"
    supported_paths()                       -> ["debian12/x86_64/", "debian12/sbsa/", ...]

Anything else (Debian 11, Ubuntu 20.04, Rocky, armv7l, ppc64le, ...) raises CudaRepoError naming the supported set.

How Ansible names these (ansible-core 2.19 module_utils/facts/system/distribution.py and common/sys_info.py):
``distribution`` is "Debian" or "Ubuntu"; for Debian ``distribution_version`` is the precise /etc/debian_version
("12.7") and ``distribution_major_version`` "12" (os-release VERSION_ID="12"); for Ubuntu ``distribution_version``
is os-release VERSION_ID ("24.04") and ``distribution_major_version`` "24"; ``architecture`` is uname -m
("x86_64", "aarch64").

The pins: the toolkit meta package (cuda-toolkit-13-0) depends on its components with `>=` only, so the
components drift unless each one is pinned and installed at its own exact version.

    pinned_packages(meta, version, components)   -> {package: version} (the meta first)
    missing_from_repository(madison, pinned)     -> ["pkg=ver", ...] the repository does not offer
    pin_mismatches(dpkg_query, pinned)           -> [{"package", "pinned", "installed"}, ...]
    newer_installed(dpkg_query, pinned)          -> the mismatches whose installed version is NEWER (dpkg's order,
                                                    gpu/deb_version.py): installing the pins would downgrade them
    guarded_pins(pinned, patterns)               -> ["pkg (pattern)", ...] pins the driver guard would block

The driver guard: apt preferences (roles/cuda/templates/etc/apt/preferences.d/cuda-repo-driver-guard.pref.j2) that
forbid taking the driver, the fabric manager and their libraries (DRIVER_PACKAGES) from NVIDIA's CUDA repository,
so that adding the repository for the toolkit never lets a later `apt upgrade` replace them.
"""
from __future__ import annotations

import fnmatch
import re

from ansible.module_utils.evidence.error import EvidenceError
from ansible.module_utils.gpu.deb_version import DebVersionError, compare

DEFAULT_BASE = "https://developer.download.nvidia.com/compute/cuda/repos/"
# (os-release ID, VERSION_ID) -> NVIDIA's distribution directory.
DISTROS = {("debian", "12"): "debian12", ("ubuntu", "22.04"): "ubuntu2204", ("ubuntu", "24.04"): "ubuntu2404"}
# uname -m (Ansible's `architecture`) -> NVIDIA's architecture directory.
ARCHES = {"x86_64": "x86_64", "aarch64": "sbsa"}
# NVIDIA's architecture directory -> the Debian architecture of the packages in it.
DEB_ARCHES = {"x86_64": "amd64", "sbsa": "arm64"}
# Ansible's `distribution` -> os-release ID.
_FACT_DISTROS = {"Debian": "debian", "Ubuntu": "ubuntu"}
_PRETTY = {"debian": "Debian", "ubuntu": "Ubuntu"}
# A Debian package name and version (Debian policy 5.6.1, 5.6.12).
PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION_RE = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")


class CudaRepoError(EvidenceError, ValueError):
    """No NVIDIA CUDA repository serves this host, or the input is malformed; the message says what is supported."""


def supported_paths():
    """Every repository path NVIDIA serves that this project supports, in a stable order."""
    return [f"{d}/{a}/" for d in DISTROS.values() for a in ARCHES.values()]


def supported_text():
    distros = ", ".join(f"{_PRETTY[i]} {v}" for i, v in DISTROS)
    arches = ", ".join(f"{m} ({a})" if m != a else m for m, a in ARCHES.items())
    return f"supported: {distros} on {arches}, i.e. {', '.join(supported_paths())}"


def _clean(value):
    return str(value if value is not None else "").strip().strip("\"'").strip()


def _release(os_id, version_id):
    """The release key of DISTROS: Debian's major version ("12.7" -> "12"), Ubuntu's YY.MM ("24.04.1" -> "24.04")."""
    if os_id == "debian":
        return version_id.split(".")[0]
    if os_id == "ubuntu":
        return ".".join(version_id.split(".")[:2])
    return version_id


def _lookup(os_id, version_id, machine):
    """(distro directory or None, arch directory or None) for cleaned inputs."""
    return DISTROS.get((os_id, _release(os_id, version_id))), ARCHES.get(machine)


def repo_path(os_id, version_id, machine):
    """NVIDIA's repository path ("<distro><release>/<arch>/") for os-release ID/VERSION_ID and `uname -m`."""
    os_id, version_id, machine = _clean(os_id).lower(), _clean(version_id), _clean(machine)
    distro, arch = _lookup(os_id, version_id, machine)
    if distro and arch:
        return f"{distro}/{arch}/"
    what = []
    if not distro:
        what.append(f"distribution ID={os_id or '?'} VERSION_ID={version_id or '?'}")
    if not arch:
        what.append(f"architecture {machine or '?'}")
    raise CudaRepoError(f"NVIDIA's CUDA apt repository has no directory for {' and '.join(what)}; {supported_text()}")


def os_release_fields(text):
    """The KEY=value lines of an os-release file (os-release(5)), values unquoted."""
    fields = {}
    for line in str(text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip()] = value
    return fields


def os_release_from_facts(facts):
    """(os-release ID, VERSION_ID, machine) from ansible_facts, as Ansible names them (see the module docstring)."""
    if not isinstance(facts, dict) or not facts.get("distribution"):
        raise CudaRepoError("no distribution facts for this host (gather facts first: the CUDA repository is chosen "
                            f"from distribution, distribution_version and architecture); {supported_text()}")
    distribution = _clean(facts.get("distribution"))
    os_id = _FACT_DISTROS.get(distribution, distribution.lower())
    if os_id == "debian":
        version = _clean(facts.get("distribution_major_version"))
    else:
        version = _clean(facts.get("distribution_version"))
    return os_id, version, _clean(facts.get("architecture"))


def facts_text(facts):
    """What Ansible reported, for messages."""
    facts = facts if isinstance(facts, dict) else {}
    return ("distribution={} distribution_version={} distribution_major_version={} architecture={}".format(
        *(facts.get(k, "?") for k in ("distribution", "distribution_version", "distribution_major_version",
                                      "architecture"))))


def repo_path_from_facts(facts):
    """NVIDIA's repository path for a host, from its ansible_facts; CudaRepoError naming the facts otherwise."""
    os_id, version, machine = os_release_from_facts(facts)
    distro, arch = _lookup(os_id, version, machine)
    if distro and arch:
        return f"{distro}/{arch}/"
    what = " and ".join(w for w, ok in (("distribution", distro), ("architecture", arch)) if not ok)
    raise CudaRepoError(f"found {facts_text(facts)}: NVIDIA's CUDA apt repository has no directory for this {what}; "
                        f"{supported_text()}")


def repo_problem_from_facts(facts):
    """"" when NVIDIA serves this host, else the refusal message (what was found, what is supported)."""
    try:
        repo_path_from_facts(facts)
    except CudaRepoError as exc:
        return str(exc)
    return ""


def repo_url(base, path):
    """base (ends in /) + path."""
    base = _clean(base)
    if not re.match(r"^https?://.+/$", base):
        raise CudaRepoError(f"repository base must be an http(s) URL ending in '/': {base!r}")
    return base + path


def source_list_name(path):
    """The source list NVIDIA's cuda-keyring of `path` installs: debian12/x86_64/ -> cuda-debian12-x86_64.list."""
    parts = [p for p in _clean(path).split("/") if p]
    if len(parts) != 2:
        raise CudaRepoError(f"not a repository path <distro><release>/<arch>/: {path!r}")
    return f"cuda-{parts[0]}-{parts[1]}.list"


def pinned_packages(meta, version, components):
    """{package: exact version}: the meta package first, then its components; malformed input raises."""
    if not isinstance(components, dict):
        raise CudaRepoError(f"components must be a mapping package -> exact version, got {type(components).__name__}")
    pins = {str(meta): str(version)}
    for package, pinned in components.items():
        package, pinned = str(package), str(pinned)
        if package in pins:
            raise CudaRepoError(f"{package} is pinned twice (meta package {meta} and a component)")
        pins[package] = pinned
    bad = [f"{p}={v}" for p, v in pins.items() if not PACKAGE_RE.match(p) or not VERSION_RE.match(v)]
    if bad:
        raise CudaRepoError(f"not a Debian package name and exact version: {', '.join(bad)}")
    return pins


def parse_madison(text):
    """`apt-cache madison PKG...` -> {package: [versions the configured repositories offer]}."""
    offered = {}
    for line in str(text or "").splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and fields[0] and fields[1]:
            offered.setdefault(fields[0], [])
            if fields[1] not in offered[fields[0]]:
                offered[fields[0]].append(fields[1])
    return offered


def missing_from_repository(madison_text, pinned):
    """The pins ("pkg=version") no configured repository offers, per `apt-cache madison` of those packages."""
    offered = parse_madison(madison_text)
    return [f"{p}={v}" for p, v in pinned.items() if v not in offered.get(p, [])]


def parse_dpkg_query(text):
    """`dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' PKG...` -> {package: (version, status)}."""
    seen = {}
    for line in str(text or "").splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and fields[0]:
            seen[fields[0].strip()] = (fields[1].strip(), fields[2].strip())
    return seen


def pin_mismatches(dpkg_query_text, pinned):
    """Every pinned package that is not installed at exactly its pinned version, in pin order.

    Installed means dpkg's package state is "installed" (the second letter of db:Status-Abbrev: "ii", or "hi" when
    also marked hold, as NVIDIA's images hold libcublas). Each: {"package", "pinned", "installed"}; installed is ""
    when the package is not installed (unknown, removed, only its configuration files left, half-installed).
    """
    seen = parse_dpkg_query(dpkg_query_text)
    out = []
    for package, version in pinned.items():
        installed, status = seen.get(package, ("", ""))
        if status[1:2] != "i":
            installed = ""
        if installed != version:
            out.append({"package": package, "pinned": version, "installed": installed})
    return out


def newer_installed(dpkg_query_text, pinned):
    """The pinned packages installed at a version NEWER than their pin (dpkg's comparison): installing the pins would
    downgrade them. Each: {"package", "pinned", "installed"}, in pin order."""
    out = []
    for wrong in pin_mismatches(dpkg_query_text, pinned):
        if not wrong["installed"]:
            continue
        try:
            newer = compare(wrong["installed"], wrong["pinned"]) > 0
        except DebVersionError as exc:
            raise CudaRepoError(f"{wrong['package']}: {exc}") from None
        if newer:
            out.append(wrong)
    return out


def guarded_pins(pinned, patterns):
    """The pins a driver-guard pattern (apt preferences glob, as fnmatch reads it) matches: apt could not install
    them from NVIDIA's repository. ["package (pattern)", ...]."""
    return [f"{p} ({pat})" for p in pinned for pat in (patterns or []) if fnmatch.fnmatchcase(p, str(pat))][:20]
