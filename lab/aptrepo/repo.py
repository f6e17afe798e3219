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

KEYRING_DEB = "cuda-keyring_1.1-1_all.deb"
KEYRING_PATH = "usr/share/keyrings/cuda-archive-keyring.gpg"
SOURCE_LIST = "etc/apt/sources.list.d/cuda-debian12-x86_64.list"
# Debian version -> the nvcc build it reports (13.0.2 is the release the role pins; 13.0.3 is a newer decoy).
TOOLKIT_VERSIONS = {"13.0.2-1": "V13.0.88", "13.0.3-1": "V13.0.96"}

NVCC = """#!/bin/sh
# Synthetic nvcc (lab test double): prints what CUDA {release} nvcc prints for --version.
case "$1" in
  --version|-V)
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Copyright (c) 2005-2025 NVIDIA Corporation"
    echo "Built on Wed_Aug_20_01:58:59_PM_PDT_2025"
    echo "Cuda compilation tools, release {release}, {build}"
    echo "Build cuda_{release}.r{release}/compiler.36424714_0"
    ;;
  *) echo "synthetic nvcc (lab test double): only --version is implemented" >&2; exit 2 ;;
esac
"""


def _run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _arch() -> str:
    return _run(["dpkg", "--print-architecture"]).stdout.strip()


def _deb(workdir: Path, name: str, version: str, arch: str, files: dict[str, tuple[bytes, int]],
         description: str, conffiles: tuple[str, ...] = ()) -> Path:
    root = workdir / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    for rel, (data, mode) in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: lab <lab@localhost>\n"
        f"Section: devel\nPriority: optional\nDescription: {description}\n"
        " Synthetic package of the lab's test apt repository; not NVIDIA's.\n")
    if conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(f"/{c}\n" for c in conffiles))
    out = workdir / f"{name}_{version}_{arch}.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)])
    return out


def build_repo(dest: str | os.PathLike, base_url: str) -> dict:
    """Build the signed repository in `dest` (emptied first) for clients reaching it at `base_url` (ends in /).

    Returns {"path", "url", "fingerprint", "keyring_deb", "keyring_sha256", "versions"}.
    """
    if not base_url.endswith("/"):
        raise ValueError(f"base_url must end with '/': {base_url}")
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    arch = _arch()
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
            source = f"deb [signed-by=/{KEYRING_PATH}] {base_url} /\n".encode()
            build = tmp / "build"
            build.mkdir()
            debs = [_deb(build, "cuda-keyring", "1.1-1", "all",
                         {KEYRING_PATH: (key, 0o644), SOURCE_LIST: (source, 0o644)},
                         "lab stand-in for NVIDIA's cuda-keyring", conffiles=(SOURCE_LIST,))]
            for version, nvcc_build in TOOLKIT_VERSIONS.items():
                release = ".".join(version.split(".")[:2])
                debs.append(_deb(build, "cuda-toolkit-13-0", version, arch, {
                    "usr/local/cuda-13.0/bin/nvcc": (NVCC.format(release=release, build=nvcc_build).encode(), 0o755),
                    "usr/local/cuda-13.0/lib64/README.lab": (b"synthetic toolkit: no libraries\n", 0o644),
                    "usr/local/cuda-13.0/version.json": (f'{{"cuda": {{"version": "{version}"}}}}\n'.encode(), 0o644),
                }, f"lab stand-in for CUDA toolkit 13.0 ({version})"))
            for deb in debs:
                shutil.copy2(deb, dest / deb.name)
            packages = _run(["dpkg-scanpackages", "--multiversion", "."], cwd=dest).stdout
            (dest / "Packages").write_text(packages)
            (dest / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
            lines = ["Origin: lab", "Label: lab CUDA test repository",
                     f"Date: {email.utils.formatdate(usegmt=True)}", f"Architectures: {arch} all", "SHA256:"]
            for name in ("Packages", "Packages.gz"):
                data = (dest / name).read_bytes()
                lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
            (dest / "Release").write_text("\n".join(lines) + "\n")
            _run(gpg + ["--local-user", fingerprint, "--clearsign", "-o", str(dest / "InRelease"), str(dest / "Release")])
            _run(gpg + ["--local-user", fingerprint, "-abs", "-o", str(dest / "Release.gpg"), str(dest / "Release")])
        finally:
            subprocess.run(["gpgconf", "--homedir", str(gnupg), "--kill", "all"], capture_output=True, check=False)
    keyring = (dest / KEYRING_DEB).read_bytes()
    return {"path": str(dest), "url": base_url, "fingerprint": fingerprint, "keyring_deb": KEYRING_DEB,
            "keyring_sha256": hashlib.sha256(keyring).hexdigest(), "versions": sorted(TOOLKIT_VERSIONS)}


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):  # keep a record for tests instead of printing
        self.server.requests.append(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}".strip())


class AptRepo:
    """Build and serve the repository: `with AptRepo(dir, bind="10.213.x.1") as repo: repo.info["url"]`."""

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
