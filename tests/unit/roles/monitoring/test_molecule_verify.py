"""The monitoring scenario's verify (roles/monitoring/molecule/default/verify.yml): every dashboard panel must return
series in the lab except those in monitoring_verify_without_series, the panels the SGLang stand-in cannot feed today.
That list stays honest and easy to shrink: every key is a panel of the dashboard, every reason names the series the
panel's query needs, a series real SGLang 0.5.11 defines (so the gap is the stand-in's, not the dashboard's), and the
verify fails when a listed panel returns series (the lab side of this test)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ansible.module_utils.monitoring import dashboard

ROOT = Path(__file__).resolve().parents[4]
VERIFY = ROOT / "roles/monitoring/molecule/default/verify.yml"
SOURCE = json.loads((ROOT / "tests/fixtures/real_sglang/metrics-0.5.11.source.json").read_text())


def _play():
    return yaml.safe_load(VERIFY.read_text())[0]


def _without_series():
    return _play()["vars"]["monitoring_verify_without_series"]


def test_every_listed_panel_is_a_panel_of_the_dashboard():
    titles = [p["title"] for p in dashboard.build()["panels"]]
    listed = _without_series()
    assert set(listed) <= set(titles), set(listed) - set(titles)


def test_every_reason_names_a_series_the_panel_queries_and_real_sglang_defines():
    queries = {}
    for title, expr in dashboard.queries(dashboard.build()):
        queries.setdefault(title, []).append(expr)
    real = {m["name"] for m in SOURCE["metrics"]}
    for title, reason in _without_series().items():
        named = re.findall(r"sglang:[a-z0-9_]+", reason)
        assert named, (title, reason)
        for series in named:
            assert any(series in q for q in queries[title]), (title, series, queries[title])
            assert series in real, (title, series)


def test_panels_outside_the_list_need_only_what_the_stand_in_serves():
    """The panels the lab must see fed use only series the stand-in serves (its FAMILIES, held to the H200 recording
    of real 0.5.11; the verify checks it live)."""
    import sys
    sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
    from sglang_standin.metrics import FAMILIES
    served = {"sglang:" + f[0] for f in FAMILIES}
    listed = _without_series()
    for title, expr in dashboard.queries(dashboard.build()):
        if title not in listed:
            used = set(re.findall(r"sglang:[a-z0-9_]+", expr))
            used = {re.sub(r"_(bucket|sum|count)$", "", u) for u in used}
            assert used <= served, (title, used - served)


def test_the_verify_fails_on_an_empty_unlisted_panel_and_on_a_listed_panel_with_series():
    tasks = {t["name"]: t for t in _play()["tasks"]}
    check = next(t for name, t in tasks.items() if name.startswith("Every panel returns series"))
    that = " ".join(check["ansible.builtin.assert"]["that"])
    assert "monitoring_verify_empty | reject('in', monitoring_verify_without_series)" in that
    assert "monitoring_verify_fed | select('in', monitoring_verify_without_series)" in that
    evaluated = next(t for name, t in tasks.items() if name.startswith("Every dashboard query evaluated"))
    assert evaluated["loop"] == "{{ monitoring_dashboard_json | monitoring_dashboard_queries('1m') }}"
