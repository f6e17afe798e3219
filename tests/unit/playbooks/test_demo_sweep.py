"""`make demo`'s sweep (playbooks/vars/demo-sweep.yml): it measures an autoregressive baseline beside speculative
configs (the demo's report used to end with "no autoregressive baseline measured"), with the shapes the lab's
speedup sweep (tests/integration/test_bench.py) runs, and stays small."""
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_make_demo_runs_the_demo_sweep():
    makefile = (ROOT / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "playbooks/sweep.yml -l b300 -e @playbooks/vars/demo-sweep.yml" in demo
    assert "playbooks/bench.yml" not in demo


def test_demo_sweep_has_a_baseline_and_speculative_configs_and_stays_small():
    demo = yaml.safe_load((ROOT / "playbooks/vars/demo-sweep.yml").read_text())
    defaults = yaml.safe_load((ROOT / "roles/sglang_bench/defaults/main.yml").read_text())
    assert demo["sglang_bench_sweep_baseline_config"]["speculative"]["algorithm"] == "NONE"
    algorithms = [c["speculative"]["algorithm"] for c in demo["sglang_bench_sweep_configs"]]
    assert algorithms == ["DFLASH", "DDTREE"]
    for config in demo["sglang_bench_sweep_configs"]:
        assert set(config) <= set(defaults["sglang_bench_sweep_config_keys"]), config
    assert not set(demo) - set(defaults), "a demo setting the role does not have"
    cells = len(demo["sglang_bench_prompt_sets"]) * len(demo["sglang_bench_concurrencies"])
    assert demo["sglang_bench_context_lengths"] == [] and cells <= 9
