"""lab/sglang_standin/sglang_standin/metrics.py held to the recording of real SGLang 0.5.11's /metrics on the H200
(tests/fixtures/real_sglang/metrics-0.5.11-h200/: raw scrapes, digest.json derived from them by summarize.py):
the summary matches the raw files; the stand-in's /metrics, for NONE and speculative configs, has every recorded
family with the recorded type and label names (values may differ); its speculative gauges are a decode-log window
that keeps its value while idle, as real 0.5.11's; the alert rules and the dashboard read only series the
recording (or the router's, the node exporter's, the GPU textfile's) has; the run-time acceptance file."""
from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
REC = ROOT / "tests" / "fixtures" / "real_sglang" / "metrics-0.5.11-h200"
sys.path.insert(0, str(ROOT / "lab" / "sglang_standin"))
sys.path.insert(0, str(REC))

import summarize  # noqa: E402
from sglang_standin import engine  # noqa: E402
from sglang_standin.local import LocalServer  # noqa: E402

from ansible.module_utils.monitoring import dashboard, rules  # noqa: E402

SUMMARY = json.loads((REC / "digest.json").read_text())
FAST = {"SGLANG_STANDIN_LOAD_S": "0.2", "SGLANG_STANDIN_WARMUP_S": "0.2", "SGLANG_STANDIN_TTFT_MS": "2",
        "SGLANG_STANDIN_ITL_MS": "1"}
BASE = ["--model-path", "/srv/models/Kimi-K2.6", "--host", "127.0.0.1", "--enable-metrics"]
CONFIGS = {"NONE": [], "NGRAM": ["--speculative-algorithm", "NGRAM"],
           "DFLASH": ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "/srv/models/drafter",
                      "--speculative-dflash-block-size", "8"]}
CODE = "def add(x, y):\n    return x + y  # python function code"


def shapes(text):
    """{family: (type, label names without a bucket's le, sample suffixes)} of a /metrics text."""
    out = {}
    for name, fam in summarize.parse(text).items():
        labels, suffixes = set(), set()
        for sample, lab, _ in fam["samples"]:
            labels |= set(lab) - ({"le"} if sample.endswith("_bucket") else set())
            suffixes.add(sample[len(name):] or "(bare)")
        out[name] = (fam["type"], sorted(labels), sorted(suffixes))
    return out


def post(url, path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read())


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def gauge(text, name):
    """The sum of the samples called `name` (a family's own name or a histogram's name_count)."""
    found = [v for fam in summarize.parse(text).values() for n, _, v in fam["samples"] if n == name]
    assert found, name
    return sum(found)


def test_the_summary_is_what_the_raw_recordings_give():
    assert summarize.render(summarize.summarize(REC)) == (REC / "digest.json").read_text(), \
        "digest.json drifted from the raw files: run tests/fixtures/real_sglang/metrics-0.5.11-h200/summarize.py"


def test_the_recorded_facts_the_readme_states():
    algos = SUMMARY["algorithms"]
    assert set(algos) == {"NONE", "NGRAM", "DFLASH"} and all(v == [] for v in SUMMARY["only_in"].values())
    assert algos["NONE"] == algos["NGRAM"]  # the same 54 families, types and labels with and without speculation
    sched = ["engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"]
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate"):
        assert algos["NONE"][name] == {"type": "gauge", "labels": sched, "samples": ["(bare)"]}
        assert all(v[name] == 0.0 for stem, v in SUMMARY["spec"].items() if stem not in ("ngram-after", "ngram-idle"))
    assert SUMMARY["spec"]["ngram-after"] == SUMMARY["spec"]["ngram-idle"]
    assert 3.3 < SUMMARY["spec"]["ngram-after"]["sglang:spec_accept_length"] < 3.5
    assert not [n for n in algos["NGRAM"] if "spec" in n and n not in SUMMARY["spec"]["ngram-after"]]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def standin(request):
    with LocalServer(BASE + CONFIGS[request.param] + ["--decode-log-interval", "4"], env=FAST) as srv:
        srv.wait_for_line("fired up")
        url = f"http://127.0.0.1:{srv.port}"
        urllib.request.urlopen(url + "/health", timeout=10).close()  # as the recorder waited for ready
        fresh = scrape(url)
        for n in (1, 2):
            post(url, "/generate", {"text": CODE + " " * n, "sampling_params": {"max_new_tokens": 48}})
        yield request.param, url, fresh, scrape(url)


def test_the_standin_serves_every_recorded_family_with_its_type_labels_and_samples(standin):
    algo, _, fresh, after = standin
    recorded = SUMMARY["algorithms"]["NONE" if algo == "NONE" else "NGRAM"]
    got = shapes(after)
    missing = sorted(set(recorded) - set(got))
    assert not missing, missing
    for name, rec in recorded.items():
        assert got[name] == (rec["type"], rec["labels"], rec["samples"]), name
    assert set(got) == set(recorded)  # nothing the real server does not have either
    # before any request but the warmup: the recorded fresh set (no ITL observation, no cache hit yet)
    fresh_rec = set(summarize.parse((REC / "none-fresh.txt").read_text()))
    assert set(shapes(fresh)) == fresh_rec
    assert gauge(fresh, "sglang:num_requests_total") == 1.0 and gauge(fresh, "sglang:generation_tokens_total") == 8


def test_the_warmup_alone_closes_no_decode_window_at_the_default_interval():
    """Fresh real servers (all three) show spec_accept_length 0.0: the warmup's 7 decode steps < 40."""
    from sglang_standin.metrics import Metrics
    shape = engine.SpecShape.resolve("NGRAM")
    m = Metrics("/m", shape, 40)
    m.warmup(6, 8, shape.schedule(8, "prose"))
    assert gauge(m.text(), "sglang:spec_accept_length") == 0.0
    assert gauge(m.text(), "sglang:generation_tokens_total") == 8.0


def test_the_values_the_rules_and_dashboard_read_follow_the_standins_state(standin):
    algo, _, fresh, after = standin
    assert gauge(after, "sglang:num_requests_total") == 3.0
    assert gauge(after, "sglang:generation_tokens_total") == 8 + 2 * 48
    assert gauge(after, "sglang:time_to_first_token_seconds_count") == 3.0
    assert gauge(after, "sglang:e2e_request_latency_seconds_count") == 3.0
    itl = summarize.parse(after)["sglang:inter_token_latency_seconds"]["samples"]
    assert [v for n, _, v in itl if n.endswith("_count")] == [2 * 47.0]  # one observation per decoded token
    assert gauge(after, "sglang:max_total_num_tokens") == gauge(after, "sglang:kv_available_tokens") + \
        gauge(after, "sglang:kv_used_tokens")
    length = gauge(after, "sglang:spec_accept_length")
    if algo == "NONE":
        assert length == 0.0 and gauge(after, "sglang:spec_accept_rate") == 0.0
    else:  # the window of code prompts: near the engine's expected accept length
        shape = engine.SpecShape.resolve(algo, 8 if algo == "DFLASH" else None)
        assert abs(length - shape.expected("code")) < 0.6, (length, shape.expected("code"))
        assert 0 < gauge(after, "sglang:spec_accept_rate") < 1


def test_the_spec_gauges_keep_the_last_window_while_idle_and_the_idle_log_refreshes_the_rest(tmp_path):
    """Real 0.5.11: _maybe_log_idle_metrics (every 30 s idle; SGLANG_STANDIN_IDLE_METRICS_S here) sets running,
    queue, KV pool and gen_throughput 0, never the speculative gauges (kept from the last decode-log window)."""
    env = dict(FAST, SGLANG_STANDIN_IDLE_METRICS_S="0.5")
    with LocalServer(BASE + CONFIGS["NGRAM"] + ["--decode-log-interval", "4"], env=env) as srv:
        srv.wait_for_line("fired up")
        url = f"http://127.0.0.1:{srv.port}"
        post(url, "/generate", {"text": CODE, "sampling_params": {"max_new_tokens": 48}})
        after = scrape(url)
        deadline = time.monotonic() + 30
        idle = scrape(url)        # the idle log runs when /metrics is read 0.5 s after the last activity: await it
        while gauge(idle, "sglang:gen_throughput") != 0.0 and time.monotonic() < deadline:
            time.sleep(0.05)
            idle = scrape(url)
    assert gauge(after, "sglang:spec_accept_length") > 1.5
    assert gauge(idle, "sglang:spec_accept_length") == gauge(after, "sglang:spec_accept_length")
    assert gauge(idle, "sglang:spec_accept_rate") == gauge(after, "sglang:spec_accept_rate")
    assert gauge(idle, "sglang:num_running_reqs") == 0.0 and gauge(idle, "sglang:gen_throughput") == 0.0
    assert gauge(idle, "sglang:kv_used_tokens") == 0.0


def test_the_runtime_acceptance_file_lowers_acceptance_without_a_restart(tmp_path, monkeypatch):
    knob = tmp_path / "accept.json"
    env = dict(FAST, SGLANG_STANDIN_ACCEPT_FILE=str(knob))
    with LocalServer(BASE + CONFIGS["DFLASH"] + ["--decode-log-interval", "2"], env=env) as srv:
        srv.wait_for_line("fired up")
        url = f"http://127.0.0.1:{srv.port}"
        body = {"text": CODE, "sampling_params": {"max_new_tokens": 64}}
        high = post(url, "/generate", body)["meta_info"]["spec_accept_length"]
        high_gauge = gauge(scrape(url), "sglang:spec_accept_length")
        knob.write_text('{"*": 0.0}')
        low = post(url, "/generate", body)["meta_info"]["spec_accept_length"]
        low_gauge = gauge(scrape(url), "sglang:spec_accept_length")
        knob.write_text("")  # back to the start-up model
        back = post(url, "/generate", body)["meta_info"]["spec_accept_length"]
    assert high > 2.5 and high_gauge > 2.5
    assert low < 1.2 and low_gauge < 1.2
    assert back == high
    # the engine reads it per call; bad content is logged and ignored
    monkeypatch.setenv("SGLANG_STANDIN_ACCEPT_FILE", str(knob))
    knob.write_text('{"code": 0.1}')
    assert engine.runtime_accept_p() == {"code": 0.1}
    assert engine.expected_accept_length("code", "NGRAM") == pytest.approx(1.111)
    knob.write_text('{"code": 2}')
    assert engine.runtime_accept_p() == {}
    knob.unlink()
    assert engine.runtime_accept_p() == {}


# Series outside the SGLang worker's /metrics that the rules and the dashboard read, each from its own home:
# Prometheus' own `up`; the router's (tests/fixtures/router recordings); the GPU textfile (monitoring/gpu_textfile.py);
# the node exporter's (Debian prometheus-node-exporter: filesystem and systemd collectors).
NODE_EXPORTER = {"node_filesystem_avail_bytes", "node_filesystem_size_bytes", "node_systemd_unit_state"}


def test_the_rules_and_dashboard_read_only_series_the_recording_or_their_documented_sources_have():
    recorded = set(SUMMARY["algorithms"]["NGRAM"])
    router = (ROOT / "tests" / "fixtures" / "router" / "smg-1.13.0-real-sglang" / "steps.json").read_text()
    template = (ROOT / "roles" / "monitoring" / "templates" / "rules.yml.j2").read_text()
    text = template + "\n".join(e for _, e in dashboard.queries(dashboard.build()))
    used = set(re.findall(r"\b([a-z_]+:?[a-z0-9_]+)\{", text.replace("{{", " ").replace("}}", " ")))
    used = {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("sglang:") else n for n in used}
    sglang = {n for n in used if n.startswith("sglang:")}
    assert sglang and sglang <= recorded, sorted(sglang - recorded)
    others = used - sglang - {"up"}
    smg = {n for n in others if n.startswith("smg_")}
    assert smg and all(n + "{" in router for n in smg), smg
    rest = others - smg
    assert rest <= set(rules.GPU_TEXTFILE_METRICS) | NODE_EXPORTER, sorted(rest - set(rules.GPU_TEXTFILE_METRICS)
                                                                          - NODE_EXPORTER)
