"""Which flagged (degenerate) outputs count against a config, and which are the model's own.

Speculative decoding is lossless under greedy decoding, so a loop the autoregressive baseline's output shows on the
same prompt is the model's, not the config's: real SGLang's SmolLM2-135M loops on one chat prompt ("On Monday,
Monday, ...") under NONE, NGRAM and DFLASH alike (tests/fixtures/real_sglang/0.5.11/bench; the playbooks' sweep on the
H200, rehearsal/h200-2026-12-04d, disqualified NGRAM and DFLASH for it). The bench
checks one output of every distinct prompt of a text cell under every config (loadgen/client.py _sampled_outputs),
and each flagged output carries its prompt id (degenerate.flagged_prompts), so the baseline's own loops are known
per (host, workload, prompt) and excuse the same prompt under another config at any concurrency (greedy loops come and
go with the batch's numerics). Rows without prompt ids (random ids, or rows written before them) fall back to the
cell: a flag counts unless the baseline was flagged in the same (host, workload, C).

The baseline itself is never disqualified for degenerate output (its correctness gate is the smoke's expected answer);
its loops are reported as the model's.
"""
from __future__ import annotations

from reporting.speedup import baseline_of, workload_of


def _flags(cell):
    deg = cell.get("degenerate")
    return deg if isinstance(deg, dict) and (deg.get("flagged") or 0) > 0 else None


def model_loops(run, host=None):
    """(prompts, cells): {(host, workload, prompt_id)} whose output the baseline flagged, and {(host, workload, C)} of
    its flagged cells."""
    prompts, cells = set(), set()
    baseline = baseline_of(run, host)
    for c in run.cells_of(baseline, host) + run.soak_of(baseline, host) if baseline else []:
        deg = _flags(c)
        if not deg:
            continue
        cells.add((c.get("host"), workload_of(c), c.get("max_concurrency")))
        for pid in deg.get("flagged_prompts") or []:
            if pid is not None:
                prompts.add((c.get("host"), workload_of(c), pid))
    return prompts, cells


def counted(run, name, host=None, loops=None):
    """[{cell, flagged, checked, evidence, excused}] for the config's cells (matrix and soak) with a flagged output:
    flagged = the outputs that count against it (0 when every one is the model's own loop), excused = the
    (host, workload, prompt id) keys the baseline loops on too ([] when the cell rule excused the cell). The
    baseline's cells never count."""
    if name == baseline_of(run, host):
        return []
    prompts, cells = loops if loops is not None else model_loops(run, host)
    out = []
    for c in run.cells_of(name, host) + run.soak_of(name, host):
        deg = _flags(c)
        if not deg:
            continue
        where = (c.get("host"), workload_of(c))
        pids = deg.get("flagged_prompts")
        if where + (c.get("max_concurrency"),) in cells and \
                not (isinstance(pids, list) and pids and all(p is not None for p in pids)):
            out.append({"cell": c, "flagged": 0, "checked": deg.get("checked") or 0, "evidence": [], "excused": []})
            continue
        if not isinstance(pids, list) or len(pids) != deg.get("flagged"):
            out.append({"cell": c, "flagged": deg.get("flagged") or 0, "checked": deg.get("checked") or 0,
                        "evidence": list(deg.get("evidence") or []), "excused": []})
            continue
        excused = sorted({where + (p,) for p in pids if p is not None and where + (p,) in prompts}, key=str)
        ids = {key[2] for key in excused}
        evidence = [e for e in deg.get("evidence") or [] if not isinstance(e, dict) or e.get("prompt_id") not in ids]
        out.append({"cell": c, "flagged": sum(1 for p in pids if p is None or p not in ids),
                    "checked": deg.get("checked") or 0, "evidence": evidence, "excused": excused})
    return out


def disqualifying(run, name, host=None, loops=None):
    """True when some flagged output counts against the config."""
    return any(item["flagged"] > 0 for item in counted(run, name, host, loops))
