#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module sglang_bench: run a benchmark matrix on the target against its own SGLang server."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_bench
short_description: Benchmark matrix (workload x concurrency) against a local SGLang server
description:
  - Proves the server is serving (C(/health_generate) or C(/health) 200 and a model in C(/v1/models)) and that an
    O(dataset_path) exists, then measures every cell with the built-in stdlib asyncio harness or
    C(python -m sglang.bench_serving) from the target venv, each cell bounded by O(cell_timeout_s).
  - Workloads are random token ids per O(context_lengths) (throughput only), each of O(prompt_sets) and the
    O(dataset_path) file (real text through the served model's chat template, O(prompt_format)).
  - Per-cell acceptance comes from the requests' own figures (C(/generate)'s final meta_info), weighted
    (sum of completion tokens over sum of verify steps), never from the server's running average unless no request
    carried figures (then labelled C(server_running_average)). Sampled outputs go through the smoke test's
    degenerate-output detector.
  - The lossless gate follows the matrix. Per workload, O(lossless_prompts) fixed prompts generated greedily
    (temperature 0, O(output_len) max tokens) at O(lossless_concurrency), and at O(lossless_self_concurrency) too when
    it is not 0 (the baseline's agreement with itself across batch sizes); every output's text and token ids are kept
    in a row of kind C(gate). The controller's report compares them with the autoregressive baseline's.
  - With O(soak_concurrency), a shrinking-batch soak follows the matrix with O(service_unit) watched.
  - Each cell's GPU power is sampled on the target every O(power_interval) seconds (mean/max W, limit, GPU count,
    output tokens per joule) and its goodput computed under O(goodput_ttft_ms) and O(goodput_tpot_ms).
  - Appends one JSON row per cell to O(output_path) with sglang.bench_serving's metric names, the cell status
    (ok, timeout, error) and reason, O(labels) and O(provenance) (plus the running service's argv).
  - Run it with C(async)/C(poll) so the task itself is bounded too.
options:
  base_url:
    description: Server base URL, normally loopback (http://127.0.0.1:PORT).
    type: str
    required: true
  context_lengths:
    description:
      - Input lengths in tokens of the random token-id workload (throughput only); one workload each.
      - May be empty when O(prompt_sets) or O(dataset_path) gives a workload; otherwise must not be.
    type: list
    elements: int
    default: []
  prompt_sets:
    description: >-
      Conversation sets by name (each a list of C({"id", "messages": [{"role", "content"}]})); one workload each.
    type: dict
    default: {}
  dataset_path:
    description: A ShareGPT-format JSON file on the target (fetched by the models role); one workload. Must exist.
    type: path
    default: ""
  dataset_name:
    description: Name of the dataset workload (default the file's base name).
    type: str
    default: ""
  dataset_limit:
    description: Conversations read from O(dataset_path) (0 = all).
    type: int
    default: 200
  prompt_format:
    description:
      - C(chat-template) renders conversations with the served model's template in the target venv (transformers, else
        jinja2 over tokenizer_config.json) and fails when it cannot; C(plain) sends role lines; C(auto) uses the
        template when it renders, else plain. Rows record which.
    type: str
    default: auto
    choices: [auto, chat-template, plain]
  sample_outputs:
    description: Outputs per text cell checked by the degenerate-output detector.
    type: int
    default: 4
  lossless_prompts:
    description: Prompts per workload of the lossless gate (0 = no gate).
    type: int
    default: 8
  lossless_concurrency:
    description: Concurrency of the lossless gate's requests.
    type: int
    default: 1
  lossless_self_concurrency:
    description: A second concurrency the gate's prompts are generated at (the baseline's self-check; 0 = none).
    type: int
    default: 0
  soak_concurrency:
    description: Requests of the shrinking-batch soak (0 = no soak).
    type: int
    default: 0
  soak_rounds:
    description: Rounds of the soak.
    type: int
    default: 2
  soak_output_len:
    description: Longest output of a soak request (0 = O(output_len)).
    type: int
    default: 0
  goodput_ttft_ms:
    description:
      - Goodput's TTFT bound in ms (null = none); a request is good when it succeeded within every bound. Each row
        carries the bounds, its good requests, their share and good requests per second.
    type: float
  goodput_tpot_ms:
    description: Goodput's TPOT bound in ms (null = none), TPOT = (latency - TTFT) / (output tokens - 1).
    type: float
  power_interval:
    description:
      - Seconds between GPU power samples (nvidia-smi power.draw, power.limit) while each cell runs; 0 = off. A host
        without nvidia-smi gets null power figures with the reason.
    type: float
    default: 1.0
  concurrencies:
    description: Concurrency levels (max concurrent requests); one matrix column each. Must not be empty.
    type: list
    elements: int
    required: true
  output_len:
    description: Output tokens per request (fixed, ignore_eos).
    type: int
    default: 256
  prompts_per_concurrency:
    description: Requests per cell = max(concurrency * this, O(min_prompts)).
    type: int
    default: 4
  connection:
    description:
      - How the built-in client holds its HTTP connections. C(keep-alive) opens them before the timed phase and reuses
        them; C(per-request) opens one per request inside it, as sglang.bench_serving does, so TTFT includes the
        connection setup and the figures compare with bench_serving's. Every row says which.
    type: str
    choices: [keep-alive, per-request]
    default: keep-alive
  min_prompts:
    description: Minimum requests per cell.
    type: int
    default: 8
  min_cell_seconds:
    description:
      - A cell runs until at least this many seconds have passed and at least the cell's request count
        (O(prompts_per_concurrency) x C, at least O(min_prompts)) has completed, the client issuing more requests
        (the same seeded prompts, text cycled) until both hold; bounded by O(cell_timeout_s), which must be larger.
      - 0 sizes cells by count only. The C(sglang.bench_serving) route reruns a shorter cell with its count scaled up.
    type: float
    default: 0
  cell_repeats:
    description:
      - Times every cell is measured; its row keeps each repeat's key figures, their median as the row's figure and
        their spread ((max - min) / median).
    type: int
    default: 1
  max_spread:
    description: A cell whose output throughput or median TPOT spreads more than this share over its repeats is flagged.
    type: float
    default: 0.1
  warmup_requests:
    description: Warmup requests before each cell (not measured); 0 disables.
    type: int
    default: 1
  cell_timeout_s:
    description: Bound of one cell (each repeat) in seconds; a cell past it is cancelled and recorded as C(timeout).
    type: float
    default: 900
  request_timeout_s:
    description: Bound of one request in seconds.
    type: float
    default: 600
  backend:
    description: bench_serving backend name (C(sglang) = /generate).
    type: str
    default: sglang
    choices: [sglang, sglang-oai, sglang-oai-chat]
  client:
    description: C(builtin) harness, C(sglang.bench_serving), or C(auto) (bench_serving when importable).
    type: str
    default: auto
    choices: [builtin, sglang.bench_serving, auto]
  venv_python:
    description: Python of the target venv (for sglang.bench_serving).
    type: path
  model:
    description: Model id to send; empty asks C(/v1/models).
    type: str
    default: ""
  tokenizer:
    description: Tokenizer path for sglang.bench_serving.
    type: str
    default: ""
  api_key:
    description: Bearer token of the server, if any.
    type: str
    default: ""
  service_unit:
    description: systemd unit whose running argv goes into provenance.flags.
    type: str
    default: ""
  output_path:
    description: JSONL file on the target the rows are appended to.
    type: path
    required: true
  labels:
    description: Keys added to every row (run, config, host).
    type: dict
    default: {}
  provenance:
    description:
      - Controller-side provenance (host group, ...) merged over what the module reads on the target (driver, GPU,
        CUDA version, the venv fact, model revisions, the service argv); stored in every row under C(provenance).
    type: dict
    default: {}
  venv_fact_path:
    description: The venv role's local fact (content hash, sglang version, patch series hash).
    type: path
    default: /etc/ansible/facts.d/sglang_venv.fact
  cuda_home:
    description: CUDA toolkit directory whose version.json gives the CUDA version.
    type: path
    default: ""
  model_paths:
    description: Model directories whose .hf_model/manifest.json gives the revision sha (target, drafter).
    type: list
    elements: path
    default: []
author: sglang-deploy
"""

EXAMPLES = r"""
- name: Benchmark matrix
  sglang_bench:
    base_url: http://127.0.0.1:30001
    context_lengths: [60, 1024]
    concurrencies: [1, 8]
    output_path: /var/lib/sglang-bench/run1/baseline.jsonl
  async: 3600
  poll: 5
"""

RETURN = r"""
rows:
  description: Cells measured.
  type: int
  returned: always
ok_cells:
  description: Cells with status ok.
  type: int
  returned: always
failed_cells:
  description: Cells with status timeout or error.
  type: int
  returned: always
failures:
  description: "C(cell: reason) per failed cell."
  type: list
  returned: always
client:
  description: The client actually used.
  type: str
  returned: always
best_output_throughput:
  description: Highest output tok/s of an ok cell.
  type: float
  returned: always
degenerate_cells:
  description: "C(cell: reason) per cell whose sampled outputs the degenerate detector flagged."
  type: list
  returned: always
spread_flagged_cells:
  description: "C(cell: figure spread) per cell whose repeats spread more than O(max_spread)."
  type: list
  returned: success
gate:
  description: "The lossless gate: rows written and C(workload C=N: reason) per gate run that failed."
  type: dict
  returned: always
soak:
  description: The soak's status (ok or failed), error, concurrency, rounds, requests, failed; null without a soak.
  type: dict
  returned: always
workloads:
  description: Workload id to how its prompts were made (rendering used).
  type: dict
  returned: success
elapsed_s:
  description: Wall time of the matrix.
  type: float
  returned: success
output_path:
  description: The JSONL file on the target.
  type: str
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.loadgen.matrix import run_matrix
from ansible.module_utils.loadgen.server import check_serving
from ansible.module_utils.loadgen.workloads import check_workloads, validate_spec
from ansible.module_utils.loadgen.provenance import collect


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base_url=dict(type="str", required=True),
            context_lengths=dict(type="list", elements="int", default=[]),
            prompt_sets=dict(type="dict", default={}),
            dataset_path=dict(type="path", default=""),
            dataset_name=dict(type="str", default=""),
            dataset_limit=dict(type="int", default=200),
            prompt_format=dict(type="str", default="auto", choices=["auto", "chat-template", "plain"]),
            sample_outputs=dict(type="int", default=4),
            lossless_prompts=dict(type="int", default=8),
            lossless_concurrency=dict(type="int", default=1),
            lossless_self_concurrency=dict(type="int", default=0),
            soak_concurrency=dict(type="int", default=0),
            soak_rounds=dict(type="int", default=2),
            soak_output_len=dict(type="int", default=0),
            goodput_ttft_ms=dict(type="float"),
            goodput_tpot_ms=dict(type="float"),
            power_interval=dict(type="float", default=1.0),
            concurrencies=dict(type="list", elements="int", required=True),
            output_len=dict(type="int", default=256),
            prompts_per_concurrency=dict(type="int", default=4),
            min_prompts=dict(type="int", default=8),
            connection=dict(type="str", default="keep-alive", choices=["keep-alive", "per-request"]),
            min_cell_seconds=dict(type="float", default=0.0),
            cell_repeats=dict(type="int", default=1),
            max_spread=dict(type="float", default=0.1),
            warmup_requests=dict(type="int", default=1),
            cell_timeout_s=dict(type="float", default=900.0),
            request_timeout_s=dict(type="float", default=600.0),
            backend=dict(type="str", default="sglang", choices=["sglang", "sglang-oai", "sglang-oai-chat"]),
            client=dict(type="str", default="auto", choices=["builtin", "sglang.bench_serving", "auto"]),
            venv_python=dict(type="path"),
            model=dict(type="str", default=""),
            tokenizer=dict(type="str", default=""),
            api_key=dict(type="str", default="", no_log=True),
            service_unit=dict(type="str", default=""),
            output_path=dict(type="path", required=True),
            labels=dict(type="dict", default={}),
            provenance=dict(type="dict", default={}),
            venv_fact_path=dict(type="path", default="/etc/ansible/facts.d/sglang_venv.fact"),
            cuda_home=dict(type="path", default=""),
            model_paths=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    spec = {k: v for k, v in params.items()
            if k not in ("labels", "provenance", "output_path", "venv_fact_path", "cuda_home", "model_paths")}
    result = dict(changed=False, rows=0, ok_cells=0, failed_cells=0, failures=[], client=params["client"],
                  best_output_throughput=0.0, degenerate_cells=[], soak=None, gate={"rows": 0, "failed": []})
    errors = validate_spec(spec) + check_workloads(spec)
    if errors:
        module.fail_json(msg="invalid bench matrix: " + "; ".join(errors), **result)
    reason = check_serving(params["base_url"], api_key=params["api_key"] or None, timeout=20.0)
    if reason:
        module.fail_json(msg=reason, **result)
    if module.check_mode:
        module.exit_json(**result)
    provenance = collect(fact_path=params["venv_fact_path"], cuda_home=params["cuda_home"],
                         model_paths=params["model_paths"], unit=params["service_unit"])
    provenance.update(params["provenance"])
    try:
        summary = run_matrix(spec, labels=params["labels"], provenance=provenance,
                             output_path=params["output_path"])
    except ValueError as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(summary)
    result["changed"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
