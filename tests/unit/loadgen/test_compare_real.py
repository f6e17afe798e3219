"""The bench_serving comparison recorded on the H200 (tests/fixtures/real_sglang/compare-0.5.11-h200-ids, issue 27):
the README's ratios are what compare_table.py derives from the recorded cells, and the per-cell control (the server's
own decode rate from its log) says which pair's gap was the server's, not the clients'."""
import importlib.util
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[2] / "fixtures/real_sglang"
spec = importlib.util.spec_from_file_location("compare_table", FIX / "compare_table.py")
compare_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_table)
FIGURES = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "median_itl_ms")


def ratios(machine):
    return compare_table.ratios(compare_table.cells_of(FIX / "compare-0.5.11-h200-ids" / machine))


def figures(row):
    return [round(row[k], 3) for k in FIGURES]


def test_machine_2_ratio_of_medians_is_the_readmes():
    rows = ratios("machine-2")
    assert figures(rows[(8, "median of 2")]) == [0.984, 1.040, 1.037, 1.051]
    assert figures(rows[(1, 0)]) == [1.057, 0.962, 0.984, 0.956]
    assert rows[(1, 0)]["server"] is None          # that run kept no server log: no control


def test_machine_3_server_control_explains_the_first_pair():
    rows = ratios("machine-3")
    first, second = rows[(32, 0)], rows[(32, 1)]
    # the first pair's 14.5% gap in throughput: the server itself decoded 28.8% faster in the built-in's window
    assert figures(first)[0] == 1.145 and first["server"] == pytest.approx(1.288, abs=5e-4)
    # the second pair: the server ran alike (0.993) and the clients agree within 5% on all four figures
    assert second["server"] == pytest.approx(0.993, abs=5e-4)
    assert all(abs(v - 1) <= 0.05 for v in figures(second)), second
