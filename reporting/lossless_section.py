"""report.md's lossless gate section of one host: the factor and where it comes from, the baseline's agreement with
itself across batch sizes (the reference each workload's floor is taken from), and per config and workload the share
of greedy outputs equal to the baseline's, the agreement against its floor, the verdict, and the first diverging
prompt with both texts around the difference."""
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
              f"`{judged['baseline']}`'s. Agreement: the mean share of the baseline's output a config reproduces "
              f"before its first difference. A config whose agreement on a workload is below **{limit:.2f}** x the "
              f"baseline's agreement with itself there ({judged['tolerance_source']}) is **not lossless**, "
              "disqualified whatever its speed. Exact equality is not the test: on real hardware the prefix cache "
              "and the batch change the numerics, and greedy decoding then flips at near-ties (on the H200 the "
              "baseline reproduced only 14-16 of 34 of its own outputs exactly, agreement 0.60-0.66).", ""]
    own = judged["self_check"]
    if own:
        c1, c2 = own["concurrencies"]
        per = ", ".join(f"{w} {s['matched']}/{s['prompts']} ({_rate(s['agreement'])})"
                        for w, s in own["workloads"].items())
        lines += [f"Baseline against itself (C={c1} vs C={c2}, batch-dependent numerics): agreement "
                  f"**{_rate(own['agreement'])}**, equal outputs {_rate(own['match_rate'])} ({per}).", ""]
    else:
        lines += ["Baseline against itself: not measured (sglang_bench_sweep_lossless_self_concurrency 0, or a "
                  "plain bench run): each floor is taken against exact reproduction (1.0).", ""]
    rows, evidence = [], []
    for name, entry in judged["configs"].items():
        verdict = {True: "lossless", False: "**NOT LOSSLESS**", None: "not judged"}[entry["lossless"]]
        if not entry["workloads"]:
            rows.append([name, "–", "–", "–", "–", verdict, _cell(entry["why"])])
            continue
        for workload, s in entry["workloads"].items():
            first = divergence_text(s["diverged"][0]) if s["diverged"] else ""
            rows.append([name, workload, f"{s['matched']}/{s['prompts']}", _rate(s["match_rate"]),
                         f"{_rate(s['agreement'])} / {_rate(s['floor'])}", verdict, _cell(first)])
            if entry["lossless"] is False and s["diverged"]:
                evidence.append((name, workload, s["diverged"][0]))
        if entry["why"].startswith("lossless gate not measured"):
            rows.append([name, "–", "–", "–", "–", verdict, _cell(entry["why"])])
    if not rows:
        return lines + ["No speculative config to judge.", ""]
    lines += ["| config | workload | equal | match rate | agreement / floor | verdict | first divergence |",
              "|---|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    for name, workload, d in evidence:
        lines += [f"`{name}` on {workload}, {divergence_text(d)}. Prompt: {_cell(d['prompt'])}", ""]
        if not d["error"]:
            lines += _fence(f"baseline: {d['baseline']}\nconfig:   {d['config']}") + [""]
    return lines
