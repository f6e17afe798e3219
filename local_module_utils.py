"""The one import name of this repository's module_utils, outside Ansible too: ansible.module_utils.<package>.<module>.

Ansible ships module_utils/<package>/<module>.py inside each module's payload under that name, so the modules import
it that way. Code that runs outside Ansible (tests, benchmarks, the lab, the device scripts) calls install() once
before importing, and then imports the same files under the same name:

    import local_module_utils
    local_module_utils.install()
    from ansible.module_utils.hf import verify

With ansible-core installed, its ansible.module_utils package gets this repository's module_utils/ appended to its
search path (after its own: ours never shadow ansible-core's). Where ansible-core is absent (the device machine's
Python), the two package objects are made with only our path; none of our module_utils imports ansible-core's own.
The filter plugins do the same in their first lines (Ansible loads them by path, before this file is importable).
"""
from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent
MODULE_UTILS = str(ROOT / "module_utils")


def install(module_utils: str = MODULE_UTILS) -> None:
    """Make `ansible.module_utils.<package>` find the packages under module_utils (idempotent)."""
    try:
        import ansible.module_utils as mu
    except ImportError:
        mu = _standalone()
    if module_utils not in mu.__path__:
        mu.__path__.append(module_utils)


def _standalone():
    """ansible and ansible.module_utils as bare namespace packages, for a Python without ansible-core."""
    for name in ("ansible", "ansible.module_utils"):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = []
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            sys.modules[name] = mod
    sys.modules["ansible"].module_utils = sys.modules["ansible.module_utils"]
    return sys.modules["ansible.module_utils"]
