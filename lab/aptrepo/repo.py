"""Builder and HTTP server of the synthetic CUDA apt repository (see the package docstring)."""
from __future__ import annotations

import email.utils
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import local_module_utils  # noqa: E402

local_module_utils.install()
from ansible.module_utils.gpu import cuda_repo  # noqa: E402

KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
KEYRING_PATH = "usr/share/keyrings/cuda-archive-keyring.gpg"
META = "cuda-toolkit-13-0"
# Versions of the meta package: 13.0.2-1 is the release the role pins, 13.0.3-1 a newer decoy (same dependencies).
TOOLKIT_VERSIONS = ("13.0.2-1", "13.0.3-1")
# Component packages: (the version CUDA 13.0.2 ships, which the role pins; a newer decoy). The meta package depends
# on each with `>=` the pinned version, as NVIDIA's does, so apt would take the decoy unless the component is pinned.
COMPONENTS = {
    "cuda-nvcc-13-0": ("13.0.88-1", "13.0.96-1"),
    "cuda-cudart-13-0": ("13.0.96-1", "13.0.104-1"),
    "libcublas-13-0": ("13.1.0.3-1", "13.1.1.3-1"),
}
PINNED_COMPONENTS = {name: versions[0] for name, versions in COMPONENTS.items()}
# A driver-side package the repository serves too, as NVIDIA's does: the role's driver guard (apt preferences,
# Pin-Priority -1 for the repository's origin) must keep apt from ever taking it from here.
DRIVER_PACKAGE = ("nvidia-fabricmanager-580", "580.95.05-1")
DECOY_COMPONENTS = {name: versions[1] for name, versions in COMPONENTS.items()}

NVCC = """#!/bin/sh
# Synthetic nvcc (lab test double): prints what CUDA {release} nvcc {version} prints for --version.
case "$1" in
  --version|-V)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Built on Wed_Aug_20_01:58:59_PM_PDT_2025"
    echo "Cuda compilation tools, release {release}, V{version}"
    echo "Build cuda_{release}.r{release}/compiler.36424714_0"
    ;;
  *) echo "synthetic nvcc (lab test double): only --version is implemented" >&2; exit 2 ;;
esac
"""


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _arch() -> str:
    return _run(["dpkg", "--print-architecture"]).stdout.strip()


def native_repo_arch(deb_arch: str | None = None) -> str:
    """NVIDIA's architecture directory (x86_64, sbsa) of this machine's Debian architecture (amd64, arm64)."""
    deb_arch = deb_arch or _arch()
    for repo_arch, arch in cuda_repo.DEB_ARCHES.items():
        if arch == deb_arch:
            return repo_arch
    raise ValueError(f"NVIDIA serves no CUDA repository for Debian architecture {deb_arch}")


def _deb(workdir: Path, name: str, version: str, arch: str, files: dict[str, tuple[bytes, int]],
         description: str, conffiles: tuple[str, ...] = (), depends: str = "") -> Path:
    root = workdir / f"{name}_{version}_{arch}"
    (root / "DEBIAN").mkdir(parents=True)
    for rel, (data, mode) in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: lab <lab@localhost>\n"
        + (f"Depends: {depends}\n" if depends else "")
        + f"Section: devel\nPriority: optional\nDescription: {description}\n"
        " Synthetic package of the lab's test apt repository; not NVIDIA's.\n")
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(f"/{c}\n" for c in conffiles))
    out = workdir / f"{name}_{version}_{arch}.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)])
    return out


def _toolkit_debs(build: Path, arch: str) -> list[Path]:
    """The meta package (both versions) and every component (pinned and decoy) for one Debian architecture."""
    release = "13.0"
    home = "usr/local/cuda-13.0"
    debs = []
    depends = ", ".join(f"{name} (>= {pinned})" for name, pinned in PINNED_COMPONENTS.items())
    for version in TOOLKIT_VERSIONS:
        debs.append(_deb(build, META, version, arch, {
            f"{home}/version.json": (f'{{"cuda": {{"version": "{version}"}}}}\n'.encode(), 0o644),
        }, f"lab stand-in for the CUDA toolkit 13.0 meta package ({version})", depends=depends))
    for name, versions in COMPONENTS.items():
        for version in versions:
            upstream = version.split("-")[0]
            if name == "cuda-nvcc-13-0":
                files = {f"{home}/bin/nvcc": (NVCC.format(release=release, version=upstream).encode(), 0o755)}
            else:
                files = {f"{home}/lib64/README.{name}.lab": (f"synthetic {name} {version}: no libraries\n".encode(),
                                                             0o644)}
            debs.append(_deb(build, name, version, arch, files, f"lab stand-in for {name} ({version})"))
    name, version = DRIVER_PACKAGE
    debs.append(_deb(build, name, version, arch, {f"usr/share/doc/{name}/README.lab": (b"synthetic\n", 0o644)},
                     f"lab stand-in for the fabric manager ({version})"))
    return debs


def _index_and_sign(directory: Path, arch: str, gpg: list[str], fingerprint: str) -> None:
    packages = _run(["dpkg-scanpackages", "--multiversion", "."], cwd=directory).stdout
    (directory / "Packages").write_text(packages)
    (directory / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    lines = ["Origin: lab", "Label: lab CUDA test repository",
             f"Date: {email.utils.formatdate(usegmt=True)}", f"Architectures: {arch} all", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = (directory / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (directory / "Release").write_text("\n".join(lines) + "\n")
    _run(gpg + ["--local-user", fingerprint, "--clearsign", "-o", str(directory / "InRelease"),
                str(directory / "Release")])
    _run(gpg + ["--local-user", fingerprint, "-abs", "-o", str(directory / "Release.gpg"), str(directory / "Release")])


def build_repo(dest: str | os.PathLike, base_url: str) -> dict:
    """Build the signed repositories in `dest` (emptied first) for clients reaching it at `base_url` (ends in /).

    One flat repository per supported NVIDIA path (module_utils/gpu/cuda_repo.supported_paths(): debian12/x86_64/ ...
    ubuntu2404/sbsa/), with the packages of that path's architecture (x86_64: amd64, sbsa: arm64), and one more at
    the root (a mirror of debian12/<this machine's arch>/ at a URL of its own, for `cuda_apt_repo_url` overrides).
    Each repository's keyring .deb writes a source list naming that repository's own URL, as NVIDIA's do:
    cuda-<distro><release>-<arch>.list (the root's: the name of debian12/<arch>/).

    Returns {"path", "url" (the root), "base" (= url: cuda_apt_repo_base), "fingerprint", "keyring_deb",
    "keyring_sha256" (the root's), "versions", "native_arch", "meta", "components" (pinned), "decoys",
    "paths": {path: {"url", "keyring_sha256", "source_list", "arch"}}}.
    """
    if not base_url.endswith("/"):
        raise ValueError(f"base_url must end with '/': {base_url}")
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    native = native_repo_arch()
    repos = {path: (base_url + path, cuda_repo.source_list_name(path)) for path in cuda_repo.supported_paths()}
    repos[""] = (base_url, cuda_repo.source_list_name(f"debian12/{native}/"))
    paths: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="aptrepo-") as tmp:
        tmp = Path(tmp)
        gnupg = tmp / "gnupg"
        gnupg.mkdir(mode=0o700)
        gpg = ["gpg", "--homedir", str(gnupg), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        try:
            _run(gpg + ["--quick-gen-key", "lab CUDA test repository <lab@localhost>", "ed25519", "sign", "never"])
            listing = _run(gpg + ["--with-colons", "--list-keys"]).stdout
            fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
            key = subprocess.run(gpg + ["--export", fingerprint], check=True, capture_output=True).stdout
            toolkit: dict[str, list[Path]] = {}
            for path, (url, source_list) in repos.items():
                repo_arch = path.split("/")[1] if path else native
                deb_arch = cuda_repo.DEB_ARCHES[repo_arch]
                if deb_arch not in toolkit:
                    arch_build = tmp / f"build-{deb_arch}"
                    arch_build.mkdir()
                    toolkit[deb_arch] = _toolkit_debs(arch_build, deb_arch)
                keyring_build = tmp / ("keyring-" + (path.replace("/", "-") or "root"))
                keyring_build.mkdir()
                list_path = f"etc/apt/sources.list.d/{source_list}"
                source = f"deb [signed-by=/{KEYRING_PATH}] {url} /\n".encode()
                keyring = _deb(keyring_build, "cuda-keyring", "1.1-1", "all",
                               {KEYRING_PATH: (key, 0o644), list_path: (source, 0o644)},
                               "lab stand-in for NVIDIA's cuda-keyring", conffiles=(list_path,))
                # indexed apart: dpkg-scanpackages recurses, and the root repository holds the others' directories
                stage = tmp / ("repo-" + (path.replace("/", "-") or "root"))
                stage.mkdir()
                shutil.copy2(keyring, stage / KEYRING_DEB)
                for deb in toolkit[deb_arch]:
                    shutil.copy2(deb, stage / deb.name)
                _index_and_sign(stage, deb_arch, gpg, fingerprint)
                directory = dest / path if path else dest
                directory.mkdir(parents=True, exist_ok=True)
                for item in stage.iterdir():
                    shutil.copy2(item, directory / item.name)
                if path:
                    paths[path] = {"url": url, "source_list": source_list, "arch": deb_arch,
                                   "keyring_sha256": hashlib.sha256((directory / KEYRING_DEB).read_bytes()).hexdigest()}
        finally:
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "all"], capture_output=True, check=False)
    keyring = (dest / KEYRING_DEB).read_bytes()
    return {"path": str(dest), "url": base_url, "base": base_url, "fingerprint": fingerprint,
            "keyring_deb": KEYRING_DEB, "keyring_sha256": hashlib.sha256(keyring).hexdigest(),
            "versions": sorted(TOOLKIT_VERSIONS), "native_arch": native, "meta": {"package": META,
                                                                                 "version": TOOLKIT_VERSIONS[0]},
            "components": dict(PINNED_COMPONENTS), "decoys": dict(DECOY_COMPONENTS), "paths": paths}


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):  # keep a record for tests instead of printing
        self.server.requests.append(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}".strip())


class AptRepo:
    """Build and serve the repository: `with AptRepo(dir, bind="10.213.x.1") as repo: repo.info["url"]`.

    `requests` lists every request served ("GET /ubuntu2404/x86_64/InRelease 200"), oldest first.
    """

    def __init__(self, directory: str | os.PathLike, bind: str, port: int = 0):
        self.directory = Path(directory)
        self.bind = bind
        self.port = port
        self.server = None
        self.thread = None
        self.info: dict = {}

    def start(self) -> dict:
        handler = lambda *a, **kw: _Handler(*a, directory=str(self.directory), **kw)  # noqa: E731
        self.directory.mkdir(parents=True, exist_ok=True)
        self.server = http.server.ThreadingHTTPServer((self.bind, self.port), handler)
        self.server.requests = []
        self.server.daemon_threads = True
        url = f"http://{self.bind}:{self.server.server_address[1]}/"
        self.info = build_repo(self.directory, url)
        self.thread = threading.Thread(target=self.server.serve_forever, name="aptrepo", daemon=True)
        self.thread.start()
        return self.info

    @property
    def requests(self) -> list[str]:
        return list(self.server.requests) if self.server else []

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=10)
            self.server = None

    def __enter__(self) -> "AptRepo":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
