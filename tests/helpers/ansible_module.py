"""Run a library/ module as its own process, as Ansible would on a host, with the repository's module_utils under the
one import name the modules use (ansible.module_utils.<package>.<module>): the args file is the module's argv[1]."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# argv: [-c, module_utils dir, module path, args file]; the module then sees argv = [module path, args file].
_BOOT = ("import runpy, sys, ansible.module_utils as mu; mu.__path__.append(sys.argv.pop(1)); "
         "sys.argv.pop(0); runpy.run_path(sys.argv[0], run_name='__main__')")


def module_command(name: str, argsfile, root: Path = ROOT, python: str = sys.executable) -> list[str]:
    """The argv that runs library/<name>.py with `argsfile` (ANSIBLE_MODULE_ARGS JSON)."""
    return [python, "-c", _BOOT, str(root / "module_utils"), str(root / "library" / f"{name}.py"), str(argsfile)]
