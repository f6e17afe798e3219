"""roles/cuda/files/openpgp_fingerprints.py (the apt route's key check) against gpg's own fingerprints,
and the lab's synthetic CUDA repository it is used on."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "roles" / "cuda" / "files" / "openpgp_fingerprints.py"
spec = importlib.util.spec_from_file_location("openpgp_fingerprints", SCRIPT)
fpr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fpr)

needs_gpg = pytest.mark.skipif(not shutil.which("gpg"), reason="gpg (gnupg, in the Makefile's APT_PACKAGES) missing")


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        for uid, algo in (("rsa <a@lab>", "rsa2048"), ("ed <b@lab>", "ed25519")):
            subprocess.run(gpg + ["--quick-gen-key", uid, algo, "sign", "never"], check=True, capture_output=True)
        listing = subprocess.run(gpg + ["--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
        expected = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
        binary = subprocess.run(gpg + ["--export"], check=True, capture_output=True).stdout
        armored = subprocess.run(gpg + ["--export", "--armor"], check=True, capture_output=True).stdout
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False)
    return expected, binary, armored


@needs_gpg
def test_fingerprints_match_gpg_binary_and_armored(keys):
    expected, binary, armored = keys
    assert len(expected) == 2   # primary keys only (ed25519 has no subkey here; rsa neither)
    assert fpr.fingerprints(binary) == expected
    assert fpr.fingerprints(armored) == expected


def test_rejects_non_openpgp_data():
    with pytest.raises(ValueError):
        fpr.fingerprints(b"\x00not a key")


@needs_gpg
def test_reads_the_key_inside_the_lab_keyring_deb(tmp_path):
    from lab.aptrepo import build_repo
    info = build_repo(tmp_path / "repo", "http://127.0.0.1:9/")   # only written into the source list
    deb = tmp_path / "repo" / info["keyring_deb"]
    out = subprocess.run([sys.executable, str(SCRIPT), str(deb), "/usr/share/keyrings/cuda-archive-keyring.gpg"],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == {"fingerprints": [info["fingerprint"]]}
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True).stdout
    assert "./etc/apt/sources.list.d/cuda-debian12-x86_64.list" in listing
    packages = (tmp_path / "repo" / "Packages").read_text()
    assert packages.count("Package: cuda-toolkit-13-0") == 2
    assert "Version: 13.0.2-1" in packages and "Version: 13.0.3-1" in packages
