"""lab/zip_pyc.py: what zipimport compiles on a lab host is kept by source hash and given back with this import's file
name; a cache it cannot write to changes nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from lab import zip_pyc

MODULE = "def where():\n    raise RuntimeError('from the zip')\nVALUE = 41 + 1\n"
PROBE = """
import sys, traceback
sys.path.insert(0, {hookdir!r})
import lab_zip_pyc
sys.path.insert(0, {zip!r})
import payload
assert payload.VALUE == 42
try:
    payload.where()
except RuntimeError:
    print(traceback.extract_tb(sys.exc_info()[2])[-1].filename)
"""


def probe(tmp_path: Path, cache: Path, name: str) -> str:
    hookdir = tmp_path / "hook"
    hookdir.mkdir(exist_ok=True)
    (hookdir / "lab_zip_pyc.py").write_text(zip_pyc.HOOK.replace(zip_pyc.GUEST_DIR, str(cache)))
    payload = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(payload, "w") as z:
        z.writestr("payload.py", MODULE)
    out = subprocess.run([sys.executable, "-c", PROBE.format(hookdir=str(hookdir), zip=str(payload))],
                         capture_output=True, text=True, check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return out.stdout.strip()


def cached(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())


def test_the_second_import_is_served_from_the_cache_under_its_own_file_name(tmp_path):
    cache = tmp_path / "cache"
    first = probe(tmp_path, cache, "first")
    assert first == str(tmp_path / "first.zip" / "payload.py")
    entries = cached(cache)
    assert len(entries) == 1 and sys.implementation.cache_tag in str(entries[0])
    stamp = entries[0].stat().st_mtime_ns
    second = probe(tmp_path, cache, "second")
    # served from the entry (not rewritten), and a traceback names the zip of this run, not the first one's
    assert cached(cache) == entries and entries[0].stat().st_mtime_ns == stamp
    assert second == str(tmp_path / "second.zip" / "payload.py")


def test_a_cache_it_cannot_write_to_falls_back_to_zipimports_compile(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be")
    assert probe(tmp_path, blocked, "ro") == str(tmp_path / "ro.zip" / "payload.py")


def test_install_puts_the_hook_and_its_pth_in_each_system_python(tmp_path):
    (tmp_path / "usr/lib/python3.11").mkdir(parents=True)
    (tmp_path / "usr/lib/python3.11/zipimport.py").write_text("")
    (tmp_path / "usr/lib/python3").mkdir(parents=True)          # Debian's version-less dir: no zipimport, skipped
    zip_pyc.install(tmp_path)
    site = tmp_path / "usr/local/lib/python3.11/dist-packages"
    assert (site / "zz_lab_zip_pyc.pth").read_text() == "import lab_zip_pyc\n"
    assert f'"{zip_pyc.GUEST_DIR}"' in (site / "lab_zip_pyc.py").read_text()
    assert not (tmp_path / "usr/local/lib/python3").exists()
    assert zip_pyc.host_dir(tmp_path / "cache").is_dir()
