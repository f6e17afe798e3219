"""Prometheus' own checker on rule files: `promtool check rules` (does it parse, are the expressions valid PromQL)
and `promtool test rules` (the unit tests of alerts over synthetic series). promtool comes from Debian's `prometheus`
package (the Makefile's APT_PACKAGES on the controller); a missing promtool is an error here, never a pass.

    check_rules(text)                   -> promtool's output; MonitoringError with it when the file is refused
    run_rule_tests(rules_text, tests_text) -> promtool's output; MonitoringError with it when a test fails
    (tests_text names the rules file as `rule_files: [rules.yml]`, which is where rules_text is written)
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ansible.module_utils.monitoring.rules import MonitoringError

RULES_NAME = "rules.yml"


def promtool_path(promtool="promtool"):
    path = shutil.which(promtool)
    if not path:
        raise MonitoringError(f"{promtool} not found: install Debian's prometheus package (make deps)",
                              kind="promtool_missing", evidence={"promtool": promtool})
    return path


def _run(argv, cwd, what, timeout):
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise MonitoringError(f"{what}: promtool did not finish in {timeout} s", kind="promtool_timeout",
                              evidence={"argv": argv}) from exc
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise MonitoringError(f"{what}: promtool refused it (rc {proc.returncode}):\n{output}", kind="promtool",
                              evidence={"argv": argv, "rc": proc.returncode, "output": output})
    return output


def check_rules(text, promtool="promtool", timeout=60):
    """`promtool check rules` on the text; its output, or MonitoringError carrying it."""
    binary = promtool_path(promtool)
    with tempfile.TemporaryDirectory(prefix="rules-check-") as tmp:
        (Path(tmp) / RULES_NAME).write_text(text, encoding="utf-8")
        return _run([binary, "check", "rules", RULES_NAME], tmp, "the alert rules", timeout)


def run_rule_tests(rules_text, tests_text, promtool="promtool", timeout=120):
    """`promtool test rules` of tests_text against rules_text (written beside it as rules.yml)."""
    binary = promtool_path(promtool)
    with tempfile.TemporaryDirectory(prefix="rules-test-") as tmp:
        (Path(tmp) / RULES_NAME).write_text(rules_text, encoding="utf-8")
        (Path(tmp) / "tests.yml").write_text(tests_text, encoding="utf-8")
        return _run([binary, "test", "rules", "tests.yml"], tmp, "the alert rules' tests", timeout)
