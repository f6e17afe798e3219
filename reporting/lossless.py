"""The lossless gate's verdicts: each config's greedy outputs (kind "gate" rows, module_utils/loadgen/lossless.py)
compared with the autoregressive baseline's, prompt by prompt.

Under greedy decoding a speculative config must return the baseline's tokens. Per config and workload: the share of
the gate's prompts whose outputs equal the baseline's (the token ids when both carry them, and the text), for the
others the first differing position (token and character) with both texts cut around it as evidence, and the
agreement: the mean share of the baseline's output a config reproduces before its first difference (1 for an equal
output, token ids when both carry them, else characters; 0 for a prompt without output).

Exact equality cannot be the test on real hardware. Measured on the H200 with real SGLang 0.5.11 (SmolLM2-135M,
bf16, triton attention, radix cache on; tests/fixtures/real_sglang/lossless-0.5.11-h200.json): the autoregressive
baseline reproduced its own greedy outputs on only 16 of 34 prompts run twice at C=1 and 14 of 34 at C=1 vs C=16 -
the prefix cache and the batch change the numerics, and a near-tie of two tokens then flips - while its agreement
stayed at 0.60-0.66, and the correct speculative configs' (NGRAM, DFLASH) at 0.47-0.63 with exact shares of
0.21-0.35. Fluent but wrong text diverges within a few tokens on every prompt: agreement near 0. So the verdict is
relative to the baseline's own agreement (its "self_check" gate rows: the same prompts at a second concurrency): a
config whose agreement on a workload is below `lossless_min_agreement` x the baseline's self-agreement there is
"not lossless", disqualified whatever its speed (objective.disqualifications); the proposal never picks it. Without a
self-check the reference is exact reproduction (1.0) and the report says so.

The factor (`lossless_min_agreement`): `python -m reporting --lossless-min-agreement X` (Run.lossless_min_agreement),
else the one the sweep recorded in its config rows (sglang_bench_lossless_min_agreement), else DEFAULT_FACTOR. 0.5 from
the H200: the correct configs reached 0.78-1.0 of the baseline's self-agreement, wrong text about 0.03.
"""
from __future__ import annotations

from reporting.speedup import baseline_of, config_names

DEFAULT_FACTOR = 0.5      # a config must reach this share of the baseline's self-agreement (see above)
EXCERPT_CHARS = 60        # characters kept each side of the first difference


def first_difference(a, b):
    """Index of the first differing element of two sequences (str or list); len(shorter) when one is a prefix of
    the other; None when equal."""
    if a == b:
        return None
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def excerpt(text, pos, width=EXCERPT_CHARS):
    """The text cut to `width` characters each side of pos, marked where cut."""
    text = text or ""
    start, end = max(0, pos - width), min(len(text), pos + width)
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def compare(base, other):
    """One prompt's outputs compared: {index, prompt_id, prompt, equal, token, char, agreement, baseline, config,
    error} (token/char: the first differing position, None when equal or unknown; agreement: the share of the
    baseline's output reproduced before it, by tokens when both carry ids; baseline/config: the texts cut around the
    first differing character)."""
    out = {"index": base.get("index"), "prompt_id": base.get("prompt_id"), "prompt": base.get("prompt"),
           "equal": False, "token": None, "char": None, "agreement": 0.0, "baseline": "", "config": "", "error": ""}
    if other is None or other.get("error"):
        out["error"] = "no output: %s" % ((other or {}).get("error") or "the prompt was not run")
        return out
    a, b = base.get("text") or "", other.get("text") or ""
    ids_a, ids_b = base.get("output_ids"), other.get("output_ids")
    if isinstance(ids_a, list) and isinstance(ids_b, list):
        out["token"] = first_difference(ids_a, ids_b)
    out["char"] = first_difference(a, b)
    out["equal"] = out["token"] is None and out["char"] is None
    if out["equal"]:
        out["agreement"] = 1.0
    elif out["token"] is not None:
        out["agreement"] = out["token"] / max(len(ids_a), 1)
    else:
        out["agreement"] = (out["char"] if out["char"] is not None else len(a)) / max(len(a), 1)
    if not out["equal"]:
        pos = out["char"] if out["char"] is not None else min(len(a), len(b))
        out["baseline"], out["config"] = excerpt(a, pos), excerpt(b, pos)
    return out


def compare_rows(base_row, row):
    """A config's gate row against the baseline's (same workload): {workload, max_concurrency, prompts, matched,
    match_rate, agreement (mean over the prompts), diverged: [compare() of each unequal prompt], skipped: prompts the
    baseline has no output for}."""
    base_outputs = [o for o in base_row.get("outputs") or [] if not o.get("error")]
    skipped = len(base_row.get("outputs") or []) - len(base_outputs)
    mine = {o.get("index"): o for o in (row or {}).get("outputs") or []}
    diverged, matched, agreed = [], 0, 0.0
    for base in base_outputs:
        other = mine.get(base.get("index"))
        if other is not None and other.get("prompt_id") != base.get("prompt_id"):
            other = dict(other, error="a different prompt (%s) at this index" % other.get("prompt_id"))
        result = compare(base, other)
        agreed += result["agreement"]
        if result["equal"]:
            matched += 1
        else:
            diverged.append(result)
    prompts = len(base_outputs)
    return {"workload": base_row.get("workload"), "max_concurrency": (row or {}).get("max_concurrency"),
            "prompts": prompts, "matched": matched, "match_rate": matched / prompts if prompts else None,
            "agreement": agreed / prompts if prompts else None, "diverged": diverged, "skipped": skipped}


def gate_rows(run, config, host=None, which="primary"):
    """{workload: gate row} of the config's gate of that kind (primary | self_check) on the host (last wins)."""
    out = {}
    for row in run.gate:
        if (row.get("config") or "default") == config and row.get("gate") == which and \
                (host is None or row.get("host") == host):
            out[row.get("workload")] = row
    return out


def tolerance(run, host=None):
    """(factor of the baseline's self-agreement a config must reach, where it comes from): the reporting option, the
    sweep's recorded setting, or DEFAULT_FACTOR."""
    override = run.lossless_min_agreement
    if override is not None:
        return float(override), "given to the report: --lossless-min-agreement"
    recorded = [r.get("lossless_min_agreement") for r in run.configs
                if r.get("lossless_min_agreement") is not None and (host is None or r.get("host") == host)]
    if recorded:
        return float(recorded[-1]), "recorded by the sweep: sglang_bench_lossless_min_agreement"
    return DEFAULT_FACTOR, "none recorded: the default factor"


def _overall(summaries, key="match_rate"):
    """The prompt-weighted mean of a per-workload figure (match_rate or agreement)."""
    judged = [s for s in summaries if s.get(key) is not None]
    prompts = sum(s["prompts"] for s in judged)
    return sum(s[key] * s["prompts"] for s in judged) / prompts if prompts else None


def self_check(run, host=None):
    """The baseline's outputs at its second concurrency against its own primary ones: {workload: compare_rows()}
    plus the overall rate, or None when no self-check was measured."""
    baseline = baseline_of(run, host)
    if not baseline:
        return None
    primary, second = gate_rows(run, baseline, host), gate_rows(run, baseline, host, "self_check")
    per = {w: compare_rows(primary[w], second[w]) for w in primary if w in second}
    if not per:
        return None
    first = next(iter(per))
    return {"baseline": baseline, "workloads": per, "match_rate": _overall(per.values()),
            "agreement": _overall(per.values(), "agreement"), "concurrencies": [primary[first].get("max_concurrency"), second[first].get("max_concurrency")]}


def verdicts(run, host=None):
    """{baseline, tolerance, tolerance_source, self_check, configs: {name: {workloads: {w: compare_rows() + floor},
    match_rate, agreement, lossless (True | False | None = not judged), why}}} for the host's configs other than the
    baseline. A workload's floor: tolerance x the baseline's self-agreement on it (1.0 without a self-check).
    Not judged: no baseline, or the baseline measured no gate (the gate was off). A config with no gate row for a
    workload the baseline gated is not lossless ("not measured") unless its sweep failed (disqualified already)."""
    baseline = baseline_of(run, host)
    limit, source = tolerance(run, host)
    out = {"baseline": baseline, "tolerance": limit, "tolerance_source": source, "self_check": self_check(run, host),
           "configs": {}}
    base = gate_rows(run, baseline, host) if baseline else {}
    own = (out["self_check"] or {}).get("workloads") or {}
    floors = {w: limit * (own[w]["agreement"] if w in own and own[w]["agreement"] is not None else 1.0)
              for w in base}
    for name in config_names(run, host):
        if name == baseline:
            continue
        entry = {"workloads": {}, "match_rate": None, "agreement": None, "lossless": None, "why": ""}
        out["configs"][name] = entry
        if not base:
            entry["why"] = "no baseline gate to compare with" if baseline else "no autoregressive baseline"
            continue
        outcome = run.outcome_of(name, host) or {}
        mine = gate_rows(run, name, host)
        if not mine and outcome.get("status") == "failed":
            entry["why"] = "not measured: the config failed its sweep"
            continue
        missing = [w for w in base if w not in mine]
        entry["workloads"] = {w: dict(compare_rows(base[w], mine[w]), floor=floors[w]) for w in base if w in mine}
        entry["match_rate"] = _overall(entry["workloads"].values())
        entry["agreement"] = _overall(entry["workloads"].values(), "agreement")
        below = [s for s in entry["workloads"].values() if s["agreement"] is not None and s["agreement"] < s["floor"]]
        judged = [s for s in entry["workloads"].values() if s["agreement"] is not None]
        if missing:
            entry["lossless"] = False
            entry["why"] = "lossless gate not measured on %s" % ", ".join(missing)
        elif below:
            entry["lossless"] = False
            entry["why"] = "; ".join(_below_text(s) for s in below)
        elif not judged:
            entry["why"] = "not judged: the baseline's gate produced no output to compare with"
        else:
            entry["lossless"] = True
    return out


def _position(d):
    parts = ([f"token {d['token']}"] if d["token"] is not None else []) + \
        ([f"char {d['char']}"] if d["char"] is not None else [])
    return ", ".join(parts) or "?"


def divergence_text(d):
    """One diverging prompt in a line: which prompt, where, or why there is no output."""
    where = d["error"] if d["error"] else f"first difference at {_position(d)}"
    return f"prompt #{d['index']} ({d['prompt_id']}): {where}"


def _below_text(summary):
    first = f"; first: {divergence_text(summary['diverged'][0])}" if summary["diverged"] else ""
    return (f"{summary['workload']}: agreement {summary['agreement']:.2f} < floor {summary['floor']:.2f} "
            f"({summary['matched']} of {summary['prompts']} greedy outputs equal the baseline's){first}")


def disqualification(run, name, host=None, judged=None):
    """The objective's evidence item for a config the gate finds not lossless, else None."""
    judged = judged or verdicts(run, host)
    entry = judged["configs"].get(name)
    if not entry or entry["lossless"] is not False:
        return None
    evidence = []
    for summary in entry["workloads"].values():
        for d in summary["diverged"][:2]:
            evidence.append({"reason": f"not lossless: {divergence_text(d)}; prompt: {d['prompt']}",
                             "workload": summary["workload"], "max_concurrency": summary["max_concurrency"],
                             "text": f"baseline: {d['baseline']}\nconfig:   {d['config']}" if not d["error"] else
                             d["error"]})
    return {"kind": "not_lossless", "why": f"not lossless: {entry['why']}", "journal": "", "evidence": evidence[:3]}


def not_lossless(run, name, host=None):
    """True when the gate finds the config not lossless on the host (any host when None)."""
    hosts = [host] if host is not None else (run.hosts() or [None])
    return any(verdicts(run, h)["configs"].get(name, {}).get("lossless") is False for h in hosts)


def document(run):
    """lossless.json: every host's verdicts (the baseline's self-match rate among them)."""
    return {"run": run.name, "hosts": {h or "": verdicts(run, h) for h in (run.hosts() or [None])}}
