"""Compiled-code cache for modules Python imports from zip files on the lab hosts (lab infrastructure, not product).

Every Ansible task runs its module as an AnsiballZ payload: a zip of the module and its module_utils that Python
imports with zipimport, which never caches bytecode, so each task compiled ansible.module_utils.basic and the rest
again: ~0.13 s of a task's ~0.3 s of CPU on this controller's cores, and about half the suite's CPU ran in the hosts.
This hook keeps what zipimport compiles, keyed by the source's sha256 (and the interpreter's cache tag and optimize
level), in a directory all lab hosts share (bind-mounted from the controller's lab cache), and on a hit gives back
that code object with the file name of this import: the same bytes compile to the same code, so a module runs exactly
as it would have. Any failure (a read-only cache for a become_user task, a full disk) falls back to zipimport's own
compile. Nothing else changes: the hosts' Python, its other imports and the venvs (no system site packages in the lab)
are as before.

Installed per host at creation (`install`): the hook module and a .pth that imports it, in the system Python's
/usr/local dist-packages.
"""
from __future__ import annotations

from pathlib import Path

# the cache on the hosts (nspawn --bind of HOST_DIR below the controller's lab cache)
GUEST_DIR = "/var/cache/lab-zip-pyc"
HOOK = '''\
"""Lab only (lab/zip_pyc.py in the project): cache the code zipimport compiles (AnsiballZ payloads), by source hash."""
import hashlib
import marshal
import os
import sys
import zipimport

_DIR = os.path.join("%(guest)s", sys.implementation.cache_tag, "O%%d" %% sys.flags.optimize)
_compile = zipimport._compile_source


def _named(code, filename):
    consts = tuple(_named(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _compile_source(pathname, source):
    try:
        key = hashlib.sha256(source).hexdigest()
        path = os.path.join(_DIR, key[:2], key)
        try:
            with open(path, "rb") as handle:
                return _named(marshal.loads(handle.read()), pathname)
        except OSError:
            pass
        code = _compile(pathname, source)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        part = "%%s.%%d" %% (path, os.getpid())
        with open(part, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(part, path)
        return code
    except Exception:
        return _compile(pathname, source)


zipimport._compile_source = _compile_source
''' % {"guest": GUEST_DIR}


def host_dir(cache_dir: Path) -> Path:
    """The shared cache on the controller (made here), bind-mounted into every lab host at GUEST_DIR."""
    path = cache_dir / "zip-pyc"
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    return path


def install(rootdir: Path) -> None:
    """The hook and its .pth in the host's system Python (each python3.X of the rootfs)."""
    for lib in sorted(Path(rootdir, "usr/lib").glob("python3.*")):
        if not (lib / "zipimport.py").exists():
            continue
        site = Path(rootdir, "usr/local/lib", lib.name, "dist-packages")
        site.mkdir(parents=True, exist_ok=True)
        (site / "lab_zip_pyc.py").write_text(HOOK)
        # a .pth line that starts with "import" runs at startup; one that fails only warns, the import goes on
        (site / "zz_lab_zip_pyc.pth").write_text("import lab_zip_pyc\n")
