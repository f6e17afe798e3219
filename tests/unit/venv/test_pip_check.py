"""ansible.module_utils.venv.pip_check: pip check's lines about a flavour's exempt requirements are tolerated, any other
line fails the build."""
from ansible.module_utils.venv.pip_check import unexempted

OUT = """sglang 0.5.11 requires anthropic, which is not installed.
sglang 0.5.11 requires flash-attn-4, which is not installed.
sglang 0.5.11 has requirement timm==1.0.16, but you have timm 1.0.29.
datasets 4.4.1 has requirement fsspec[http]<=2025.10.0,>=2023.1.0, but you have fsspec 2026.7.0.
"""


def test_exempt_requirements_are_tolerated_others_fail():
    failing, tolerated = unexempted(OUT, ["anthropic", "flash_attn_4", "Timm", "fsspec"])
    assert failing == [] and len(tolerated) == 4
    failing, tolerated = unexempted(OUT, ["anthropic", "timm"])
    assert failing == ["sglang 0.5.11 requires flash-attn-4, which is not installed.",
                       "datasets 4.4.1 has requirement fsspec[http]<=2025.10.0,>=2023.1.0, but you have fsspec 2026.7.0."]
    assert tolerated == [OUT.splitlines()[0], OUT.splitlines()[2]]


def test_nothing_exempt_by_default_and_unknown_lines_fail():
    assert unexempted("No broken requirements found.\n") == ([], [])
    assert unexempted(OUT)[0] == OUT.splitlines()
    assert unexempted("foo 1.0 is not supported on this platform\n", ["foo"]) == (
        ["foo 1.0 is not supported on this platform"], [])
