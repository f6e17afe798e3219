"""lab/gpu_daemons.py (lab fixtures only): the stub GPU daemon units written into a host before boot, and the shell
commands that make one present, absent or failed on a running host."""
import os
import subprocess

import pytest

from lab import gpu_daemons as gd


def test_install_writes_both_stubs_enabled(tmp_path):
    gd.install(tmp_path)
    gd.install(tmp_path)  # again: the links are replaced, not refused
    for unit in gd.STUB_UNITS:
        text = (tmp_path / gd.UNIT_DIR / unit).read_text()
        assert text.startswith("# LAB FIXTURE ONLY") and "exec sleep infinity" in text and "WantedBy=multi-user" in text
        assert os.readlink(tmp_path / gd.WANTS_DIR / unit) == f"/{gd.UNIT_DIR}/{unit}"


@pytest.mark.parametrize("mode", gd.MODES)
def test_state_commands_are_valid_shell(mode):
    cmd = gd.state_command("nvidia-fabricmanager.service", mode)
    assert subprocess.run(["sh", "-n", "-c", cmd]).returncode == 0
    assert ("rm -f" in cmd) == (mode == "absent")
    assert (gd.FAILURE in cmd) == (mode == "failed")


def test_unknown_stub_or_mode_refused():
    with pytest.raises(ValueError):
        gd.state_command("sglang.service", "absent")
    with pytest.raises(ValueError):
        gd.state_command("nvidia-fabricmanager.service", "broken")
