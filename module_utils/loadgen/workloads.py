# -*- coding: utf-8 -*-
"""What a bench spec asks to measure (stdlib only): the spec checked, its workloads and cells in run order, the
run's worst case, and each text workload's prompts prepared.

Workloads: `random-ids/ctx<N>` per context length (exact input length, fixed output: throughput only, acceptance
on random ids says nothing about real traffic), `prompts/<name>` per shipped prompt set and `dataset/<name>` for an
operator ShareGPT file on the target (real text through the model's chat template, see prompts.py). Cells are
workload x concurrency, workload outer.

validate_spec() refuses bad input with every problem named (no workload, an empty prompt set, non-positive
lengths, unknown client/backend, bounds that cannot hold, a minimum cell time not below the cell bound, repeats < 1,
a spread bound <= 0); check_workloads() refuses a dataset path that does not
exist on the target. prepare_workload() renders a text workload's conversations into request items.
"""
from __future__ import annotations

import os

from ansible.module_utils.loadgen import goodput, power
from ansible.module_utils.loadgen import prompts as bench_prompts
from ansible.module_utils.loadgen.client import BACKENDS
from ansible.module_utils.loadgen.server import server_tokenizer

CLIENTS = ("builtin", "sglang.bench_serving", "auto")


def _positive_int_list(name, value, errors):
    if not isinstance(value, (list, tuple)) or not value:
        errors.append("%s is empty: the bench matrix needs at least one value" % name)
        return
    bad = [v for v in value if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if bad:
        errors.append("%s must hold integers >= 1, got %r" % (name, bad))
    if len(set(v for v in value if not isinstance(v, (list, dict)))) != len(value):
        errors.append("%s has duplicates: %r" % (name, list(value)))


def validate_spec(spec):
    """List of human-readable problems with a matrix spec (empty list = valid)."""
    errors = goodput.spec_problems(spec) + power.spec_problems(spec)
    prompt_sets = spec.get("prompt_sets") or {}
    if not isinstance(prompt_sets, dict):
        errors.append("prompt_sets must be a mapping of set name to conversations, got %r" % (prompt_sets,))
        prompt_sets = {}
    if spec.get("context_lengths") or not (prompt_sets or spec.get("dataset_path")):
        _positive_int_list("context_lengths", spec.get("context_lengths"), errors)
    for name, items in prompt_sets.items():
        errors += bench_prompts.check_conversations(name, items)
    _positive_int_list("concurrencies", spec.get("concurrencies"), errors)
    if spec.get("prompt_format", "auto") not in bench_prompts.FORMATS:
        errors.append("prompt_format must be one of %s, got %r" % (", ".join(bench_prompts.FORMATS),
                                                                   spec.get("prompt_format")))
    for key in ("sample_outputs", "soak_concurrency", "lossless_prompts", "lossless_self_concurrency"):
        value = spec.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors.append("%s must be an integer >= 0, got %r" % (key, value))
    if spec.get("soak_concurrency"):
        rounds = spec.get("soak_rounds", 1)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            errors.append("soak_rounds must be an integer >= 1, got %r" % (rounds,))
    for key in ("output_len", "prompts_per_concurrency", "min_prompts"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            errors.append("%s must be an integer >= 1, got %r" % (key, value))
    gate_conc = spec.get("lossless_concurrency", 1)
    if isinstance(gate_conc, bool) or not isinstance(gate_conc, int) or gate_conc < 1:
        errors.append("lossless_concurrency must be an integer >= 1, got %r" % (gate_conc,))
    warm = spec.get("warmup_requests", 1)
    if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
        errors.append("warmup_requests must be an integer >= 0, got %r" % (warm,))
    for key in ("cell_timeout_s", "request_timeout_s"):
        value = spec.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            errors.append("%s must be a number > 0, got %r" % (key, value))
    repeats = spec.get("cell_repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        errors.append("cell_repeats must be an integer >= 1, got %r" % (repeats,))
    min_s, bound = spec.get("min_cell_seconds", 0), spec.get("cell_timeout_s")
    if isinstance(min_s, bool) or not isinstance(min_s, (int, float)) or min_s < 0:
        errors.append("min_cell_seconds must be a number >= 0, got %r" % (min_s,))
    elif isinstance(bound, (int, float)) and not isinstance(bound, bool) and min_s >= bound:
        errors.append("min_cell_seconds (%g) must be below cell_timeout_s (%g): a cell could never end in time"
                      % (min_s, bound))
    max_spread = spec.get("max_spread", 0.1)
    if isinstance(max_spread, bool) or not isinstance(max_spread, (int, float)) or max_spread <= 0:
        errors.append("max_spread must be a number > 0 (a share of the median, e.g. 0.1), got %r" % (max_spread,))
    if spec.get("client", "auto") not in CLIENTS:
        errors.append("client must be one of %s, got %r" % (", ".join(CLIENTS), spec.get("client")))
    if spec.get("backend", "sglang") not in BACKENDS:
        errors.append("backend must be one of %s, got %r" % (", ".join(BACKENDS), spec.get("backend")))
    base_url = spec.get("base_url") or ""
    if not base_url.startswith("http://"):
        errors.append("base_url must be http://host:port, got %r" % (base_url,))
    return errors


def check_workloads(spec):
    """Problems only the target can see (a dataset path that is not there), before anything is measured."""
    path = spec.get("dataset_path")
    if path and not os.path.isfile(path):
        return ["dataset_path %s does not exist on this host (fetch it with the models role as a dataset repo)"
                % path]
    return []


def _slug(text):
    return "".join(c if c.isalnum() or c in "-." else "-" for c in str(text))


def workloads(spec):
    """The workloads in run order: random ids per context length, the prompt sets, the dataset."""
    out = [{"id": "random-ids/ctx%d" % ctx, "kind": "random-ids", "slug": "ctx%d" % ctx, "context_length": ctx}
           for ctx in spec.get("context_lengths") or []]
    for name in sorted(spec.get("prompt_sets") or {}):
        out.append({"id": "prompts/%s" % name, "kind": "prompts", "slug": _slug(name), "name": name})
    if spec.get("dataset_path"):
        name = spec.get("dataset_name") or os.path.splitext(os.path.basename(spec["dataset_path"]))[0]
        out.append({"id": "dataset/%s" % name, "kind": "dataset", "slug": "ds-" + _slug(name), "name": name,
                    "path": spec["dataset_path"]})
    return out


def cells(spec):
    """The cells in run order: workload outer, concurrency inner."""
    return [(w, conc) for w in workloads(spec) for conc in spec["concurrencies"]]


def worst_case_seconds(spec):
    """Upper bound of one matrix run: every repeat of every cell at its bound (the caller adds its own margin)."""
    return len(cells(spec)) * int(spec.get("cell_repeats") or 1) * float(spec["cell_timeout_s"])


def prepare_workload(spec, workload):
    """Fill a text workload's items ({"text", "messages"}) and how they were rendered; random ids need nothing.
    Raises prompts.PromptError when a prompt set or dataset cannot become request texts."""
    if workload["kind"] == "random-ids":
        return workload
    if workload["kind"] == "prompts":
        convs = spec["prompt_sets"][workload["name"]]
    else:
        convs = bench_prompts.load_sharegpt(workload["path"], limit=spec.get("dataset_limit") or None)
    tokenizer = spec.get("tokenizer") or server_tokenizer(spec["base_url"], spec.get("api_key"))
    texts, how = bench_prompts.render(convs, spec.get("prompt_format", "auto"), spec.get("venv_python"), tokenizer)
    workload = dict(workload, prompt_format=how, conversations=len(convs))
    workload["items"] = [{"text": t, "messages": c["messages"], "id": c.get("id")} for t, c in zip(texts, convs)]
    return workload
