"""The role's cell settings (time-sized cells, repeats, spread bound): documented defaults, argument specs, what the
module gets, the async bound counting repeats, and the lab keeping its cells as short as before."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles/sglang_bench"
SETTINGS = {"sglang_bench_min_cell_seconds": 30, "sglang_bench_cell_repeats": 3, "sglang_bench_max_spread": 0.10}


def test_defaults_are_documented_and_specified():
    text = (ROLE / "defaults/main.yml").read_text()
    defaults = yaml.safe_load(text)
    specs = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    lines = text.splitlines()
    for name, value in SETTINGS.items():
        assert defaults[name] == value
        assert specs[name]["default"] == value
        index = next(i for i, line in enumerate(lines) if line.startswith(name + ":"))
        assert lines[index - 1].startswith("# "), name            # one comment above each


def test_the_module_gets_them_in_preflight_and_in_the_measurement():
    for task_file in ("preflight.yml", "verify.yml"):
        text = (ROLE / "tasks" / task_file).read_text()
        for option in ("min_cell_seconds", "cell_repeats", "max_spread"):
            assert f'{option}: "{{{{ sglang_bench_{option} }}}}"' in text, (task_file, option)


def test_the_async_bound_counts_every_repeat():
    text = (ROLE / "tasks/configure.yml").read_text()
    assert "* (sglang_bench_cell_repeats | int) * (sglang_bench_cell_timeout_s | float)" in text


def test_the_lab_keeps_cells_sized_by_count_and_measured_once():
    lab = yaml.safe_load((ROOT / "group_vars/lab/sglang_bench.yml").read_text())
    assert lab["sglang_bench_min_cell_seconds"] == 0 and lab["sglang_bench_cell_repeats"] == 1
    converge = (ROLE / "molecule/default/converge.yml").read_text()
    assert "sglang_bench_min_cell_seconds: 0" in converge and "sglang_bench_cell_repeats: 1" in converge
