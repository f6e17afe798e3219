"""report.md's lossless gate section of one host: the tolerance and where it comes from, the baseline's agreement with
itself across batch sizes (what the tolerance should be set from), and per config and workload the share of greedy
outputs equal to the baseline's, the verdict, and the first diverging prompt with both texts around the difference."""
from __future__ import annotations

from reporting.lossless import divergence_text, verdicts


def _rate(value):
    return "–" if value is None else f"{value:.2f}"


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fence(text):
    return ["```", str(text).replace("```", "'''").rstrip(), "```"]


def lossless_section(run, host):
    judged = verdicts(run, host)
    lines = ["## Lossless gate", ""]
    if not judged["baseline"]:
        return lines + ["Not judged: no autoregressive baseline.", ""]
    limit = judged["tolerance"]
    lines += [f"Greedy outputs (temperature 0, the same prompts and max tokens) of every config against the baseline "
              f"`{judged['baseline']}`'s. Tolerance: a match rate of at least **{limit:.2f}** per workload "
              f"({judged['tolerance_source']}); below it a config is **not lossless**, disqualified whatever its "
              "speed.", ""]
    own = judged["self_check"]
    if own:
        c1, c2 = own["concurrencies"]
        per = ", ".join(f"{w} {s['matched']}/{s['prompts']}" for w, s in own["workloads"].items())
        lines += [f"Baseline against itself (C={c1} vs C={c2}, batch-dependent numerics): match rate "
                  f"**{_rate(own['match_rate'])}** ({per}).", ""]
        if own["match_rate"] is not None and own["match_rate"] < limit:
            lines += [f"**Warning**: the tolerance {limit:.2f} is stricter than the baseline's agreement with itself "
                      f"({own['match_rate']:.2f}): a correct config may fail it. Set sglang_bench_lossless_min_match "
                      "from this measurement.", ""]
    else:
        lines += ["Baseline against itself: not measured (sglang_bench_lossless_self_concurrency 0, or a plain "
                  "bench run): the tolerance is not backed by a measurement in this run.", ""]
    rows, evidence = [], []
    for name, entry in judged["configs"].items():
        verdict = {True: "lossless", False: "**NOT LOSSLESS**", None: "not judged"}[entry["lossless"]]
        if not entry["workloads"]:
            rows.append([name, "–", "–", "–", verdict, _cell(entry["why"])])
            continue
        for workload, s in entry["workloads"].items():
            first = divergence_text(s["diverged"][0]) if s["diverged"] else ""
            rows.append([name, workload, f"{s['matched']}/{s['prompts']}", _rate(s["match_rate"]), verdict,
                         _cell(first)])
            if entry["lossless"] is False and s["diverged"]:
                evidence.append((name, workload, s["diverged"][0]))
        if entry["why"].startswith("lossless gate not measured"):
            rows.append([name, "–", "–", "–", verdict, _cell(entry["why"])])
    if not rows:
        return lines + ["No speculative config to judge.", ""]
    lines += ["| config | workload | equal | match rate | verdict | first divergence |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    for name, workload, d in evidence:
        lines += [f"`{name}` on {workload}, {divergence_text(d)}. Prompt: {_cell(d['prompt'])}", ""]
        if not d["error"]:
            lines += _fence(f"baseline: {d['baseline']}\nconfig:   {d['config']}") + [""]
    return lines
