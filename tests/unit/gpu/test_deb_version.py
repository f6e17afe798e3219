"""module_utils/gpu/deb_version.py: dpkg's version order (lib/dpkg/version.c verrevcmp), checked against the real
`dpkg --compare-versions` where this machine has dpkg."""
import itertools
import shutil
import subprocess

import pytest

from ansible.module_utils.gpu import deb_version as dv

VERSIONS = ["13.0.96-1", "13.0.88-1", "13.0.100-1", "13.0.2-1", "13.0.3-1", "0:13.0.2-1", "1:0.9", "2.0",
            "1.0~rc1", "1.0~", "1.0~~", "1.0~~a", "1.0", "1.0-0", "1.0-1", "1.0a", "1.0A", "1.0+", "1.0.0", "1.00",
            "1.0-1~bpo1", "1.0-1+b1", "1.0-a", "1.0-1-2", "1.0-1.1", "1:1.0-1", "9", "10",
            "2025.3.1.4-1", "1.2.3-4ubuntu1", "1.2.3-4ubuntu10", "580.95.05-0ubuntu1", "580.105.08-1"]


@pytest.mark.parametrize("a,b,want", [
    ("13.0.96-1", "13.0.88-1", 1), ("13.0.100-1", "13.0.96-1", 1), ("13.0.2-1", "13.0.2-1", 0),
    ("0:13.0.2-1", "13.0.2-1", 0), ("1:0.9", "2.0", 1), ("1.0~rc1", "1.0", -1), ("1.0~~", "1.0~", -1),
    ("1.0", "1.0a", -1), ("1.0a", "1.0+", -1), ("1.0.0", "1.0", 1), ("1.00", "1.0", 0), ("1.0-1~bpo1", "1.0-1", -1),
    ("1.2.3-4ubuntu10", "1.2.3-4ubuntu1", 1), ("1.0-1-2", "1.0-1.1", 1), ("13.1.0.3-1", "13.0.96-1", 1),
])
def test_known_orders(a, b, want):
    assert dv.compare(a, b) == want and dv.compare(b, a) == -want


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="no dpkg on this machine")
def test_the_port_agrees_with_dpkg_on_every_pair():
    ours = {}
    for a, b in itertools.combinations(VERSIONS, 2):
        ours[a, b] = dv.compare(a, b)
    script = "".join(f"for op in lt eq gt; do dpkg --compare-versions '{a}' $op '{b}' && echo $op; done\n"
                     for a, b in ours)
    out = subprocess.run(["sh", "-c", script + "true\n"], capture_output=True, text=True, check=False).stdout.split()
    assert len(out) == len(ours)
    assert {k: {"lt": -1, "eq": 0, "gt": 1}[o] for k, o in zip(ours, out)} == ours


def test_bad_versions_are_refused():
    for bad in ("", "a1", "1.0-", "1.0:1", "1.0:1-1", "x:1.0", "1 0"):   # dpkg refuses these too
        with pytest.raises(dv.DebVersionError, match="not a Debian version"):
            dv.compare(bad, "1.0")
