"""Accept length recomputed from the per-request figures, the mismatch flag, and how sources are labelled."""
import pytest

from reporting import load_run, render_report
from reporting.acceptance import cell_acceptance, request_totals, workload_acceptance
from tests.helpers.reporting_rows import CODE, RANDOM, cell, requests, sweep_rows, write_run


def test_recomputed_from_requests():
    c = cell("dd", CODE, 1, 100.0, accept_length=3.9, accept_length_source="per_request",
             requests=requests([(100, 25), (60, 20)]))
    # the unverified request (spec_verify_ct 0) and the failed one are left out
    assert request_totals(c) == {"completion_tokens": 160, "verify_ct": 45, "accepted_drafts": 115,
                                 "proposed_drafts": 180, "requests": 2}
    acc = cell_acceptance(c)
    assert acc["accept_length"] == pytest.approx(160 / 45)
    assert acc["accept_rate"] == pytest.approx(115 / 180)
    assert acc["recomputed"] and acc["stored"] == 3.9
    assert acc["mismatch"] is True                      # 3.9 vs 3.556: 9.7% off


def test_mismatch_tolerance_is_one_percent():
    length = 160 / 45                                   # 3.5556
    inside = cell("dd", CODE, 1, 1.0, accept_length=round(length * 1.009, 4), requests=requests([(100, 25), (60, 20)]))
    outside = cell("dd", CODE, 1, 1.0, accept_length=round(length * 1.011, 4), requests=requests([(100, 25), (60, 20)]))
    assert cell_acceptance(inside)["mismatch"] is False
    assert cell_acceptance(outside)["mismatch"] is True


def test_stored_figure_without_requests():
    c = cell("dd", CODE, 1, 1.0, accept_length=2.1, accept_rate=0.3, accept_length_source="server_running_average")
    acc = cell_acceptance(c)
    assert acc == {"accept_length": 2.1, "accept_rate": 0.3, "source": "server_running_average", "stored": 2.1,
                   "stored_source": "server_running_average", "mismatch": False, "recomputed": False}
    assert request_totals(cell("ar", CODE, 1, 1.0)) is None


def test_workload_weighting_by_verify_steps():
    a = cell("dd", CODE, 1, 1.0, requests=requests([(100, 50)], fail_extra=False))          # 2.0
    b = cell("dd", CODE, 8, 1.0, requests=requests([(400, 100)], fail_extra=False))         # 4.0
    out = workload_acceptance([a, b])
    assert out[CODE]["accept_length"] == pytest.approx(500 / 150)      # weighted, not (2 + 4) / 2
    c = cell("dd", RANDOM, 1, 1.0, spec_totals={"completion_tokens": 90, "verify_ct": 30, "accepted_drafts": 60,
                                                "proposed_drafts": 120, "requests": 3})
    d = cell("dd", RANDOM, 8, 1.0, accept_length=5.0)                  # no totals: plain mean of the cells
    assert workload_acceptance([c])[RANDOM]["accept_length"] == pytest.approx(3.0)
    assert workload_acceptance([c])[RANDOM]["accept_rate"] == pytest.approx(0.5)
    assert workload_acceptance([c, d])[RANDOM]["accept_length"] == pytest.approx((3.0 + 5.0) / 2)


def test_acceptance_section(tmp_path):
    cells, configs = sweep_rows()
    text = render_report(load_run(write_run(tmp_path / "sweep-x", cells, configs)))
    section = text.split("## Acceptance")[1].split("## Config `ar`")[0]
    assert ("| `dd8` | prompts/code | 3.56 | 0.639 | per request (recomputed from requests) | 3 | "
            "MISMATCH in 1 cell(s) |") in section
    assert ("| `dd16` | prompts/code | 2.10 | 0.300 | server running average (not a per-cell figure) | 3 | "
            "running average of the server, not a per-cell figure |") in section
    assert "| `dd8` | random-ids/ctx1024 † | 1.20 | 0.050 | per request | 3 |  |" in section
    # the random-ids note is said once, under the table, not in every row
    assert section.count("throughput only: acceptance on random ids says nothing about real traffic") == 1
    assert ("- **MISMATCH** `dd8` prompts/code C=1: stored accept_length 3.900 vs 3.556 recomputed from the "
            "requests (differs by more than 1%).") in section
    assert section.count("**MISMATCH**") == 1            # 3.55 at C=8/64 is within 1% of 3.5556
    assert "`ar`" not in section                         # the baseline reports no acceptance


def test_a_configs_accept_length_over_cells_is_weighted_not_a_mean_of_cells():
    from reporting.acceptance import combined_acceptance
    short = {"requests": [{"completion_tokens": 4, "spec_verify_ct": 3, "spec_accepted_drafts": 0,
                           "spec_proposed_drafts": 9, "success": True}]}
    long = {"requests": [{"completion_tokens": 100, "spec_verify_ct": 20, "spec_accepted_drafts": 79,
                          "spec_proposed_drafts": 60, "success": True}]}
    length, rate = combined_acceptance([short, long])
    assert length == pytest.approx(104 / 23) and rate == pytest.approx(79 / 69)   # not (1.33 + 5.0) / 2
    assert combined_acceptance([{"accept_length": 2.0}, {"accept_length": 3.0}])[0] == pytest.approx(2.5)
