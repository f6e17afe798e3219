"""Minimal PEP 517 build backend (stdlib only) for the pure-Python sglang_standin package: builds a
py3-none-any wheel with zipfile. Exists so installing the stand-in never needs setuptools/wheel downloads."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "sglang_standin"
NAME = "sglang-standin"
SUMMARY = "Test double for the SGLang server (lab only); stdlib only."


def _version() -> str:
    text = (ROOT / PACKAGE / "__init__.py").read_text()
    return re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1)


def _dist_info() -> str:
    return f"{PACKAGE}-{_version()}.dist-info"


def _metadata() -> str:
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\n")


def _files():
    # the modules, and the flag schema of the emulated SGLang version (a link to schemas/sglang/ in the repo: its
    # content goes into the wheel)
    for path in sorted(list((ROOT / PACKAGE).rglob("*.py")) + list((ROOT / PACKAGE).glob("*.json"))):
        yield path.relative_to(ROOT).as_posix(), path.read_bytes()


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    target = Path(metadata_directory) / _dist_info()
    target.mkdir(parents=True, exist_ok=True)
    (target / "METADATA").write_text(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{PACKAGE}-{_version()}-py3-none-any.whl"
    dist = _dist_info()
    entries = list(_files()) + [
        (f"{dist}/METADATA", _metadata().encode()),
        (f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: standin_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist}/top_level.txt", f"{PACKAGE}\n".encode()),
    ]
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in entries) + f"{dist}/RECORD,,\n"
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries + [(f"{dist}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
    return name


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME.replace('-', '_')}-{_version()}"
    name = f"{base}.tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "build_backend/standin_build.py"] + [p for p, _ in _files()]:
            data = (ROOT / rel).read_bytes()
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg_info)
        tf.addfile(info, io.BytesIO(pkg_info))
    return name
