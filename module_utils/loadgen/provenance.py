# -*- coding: utf-8 -*-
"""Provenance of a benchmark, read on the target (stdlib only): what exactly was measured.

collect() returns a flat dict put into every JSONL row:
  driver            nvidia-smi's driver_version (or "none: <why>"), through gpu/nvidia_smi.py (query_gpus)
  gpu               GPU names and count from the same query (or "none")
  cuda              CUDA toolkit version (gpu/cuda_toolkit.py: version.json, version.txt, else include/cuda.h)
  venv_*            the venv role's local fact /etc/ansible/facts.d/sglang_venv.fact when present:
                    venv_content_hash, sglang_version, patch_series_hash (and the fact's other keys, prefixed)
  model_revision    revision sha (and repo id) from the models role's <model dir>/.hf_model/manifest.json,
                    one entry per model path (target, drafter)
  flags             the running service's full argv (secrets redacted), from /proc/<MainPID>/cmdline (server.py)
A missing source is recorded as such, never guessed.
"""
from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.gpu.cuda_toolkit import toolkit_version
from ansible.module_utils.gpu.nvidia_smi import BINARY, NvidiaSmiError, NvidiaSmiParseError, query_gpus
from ansible.module_utils.loadgen.server import service_argv

MANIFEST = os.path.join(".hf_model", "manifest.json")


def nvidia_smi(run=subprocess.run, binary=BINARY):
    """(driver, gpu) from gpu/nvidia_smi.py's query_gpus: the distinct driver versions joined with ",", and
    "<count>x <the distinct GPU names joined with ','>"; ("none: <why>", "none") when nvidia-smi is absent, fails,
    answers in another format or lists no GPU."""
    try:
        gpus = query_gpus(binary, run, timeout=30)
    except NvidiaSmiError as exc:
        if "rc" in exc.evidence:
            return "none: nvidia-smi rc=%d %s" % (exc.evidence["rc"], exc.evidence.get("output", "")[:200]), "none"
        return "none: nvidia-smi not runnable (%s)" % (exc.__context__ or exc).__class__.__name__, "none"
    except NvidiaSmiParseError as exc:
        return "none: nvidia-smi answered in another format (%s)" % str(exc)[:200], "none"
    if gpus is None:
        return "none: nvidia-smi not runnable (FileNotFoundError)", "none"
    if not gpus:
        return "none: nvidia-smi listed no GPU", "none"
    drivers = sorted({g["driver_version"] or "[N/A]" for g in gpus})
    names = sorted({g["name"] or "[N/A]" for g in gpus})
    return ",".join(drivers), "%dx %s" % (len(gpus), ",".join(names))


def cuda_version(cuda_home):
    """The toolkit's version as the cuda role reads it (gpu/cuda_toolkit.py: version.json, else version.txt, else
    include/cuda.h, the layout of the H200 image's /usr/local/cuda-13.0, which has no version file), or
    "none: <why>"."""
    if not cuda_home:
        return "none: no cuda_home"
    version, source = toolkit_version(cuda_home)
    if not version:
        return "none: no version.json, version.txt or include/cuda.h with a version under %s" % cuda_home
    return version if source.startswith("version.") else "%s (%s)" % (version, source)


def venv_fact(fact_path):
    """Fields of the venv role's local fact, renamed for rows; {"venv": "none: ..."} when absent."""
    try:
        with open(fact_path) as handle:
            fact = json.load(handle)
    except (OSError, ValueError) as exc:
        return {"venv": "none: %s unreadable (%s)" % (fact_path, exc.__class__.__name__)}
    if not isinstance(fact, dict):
        return {"venv": "none: %s is not a JSON object" % fact_path}
    out = {"venv_content_hash": fact.get("content_hash"), "sglang_version": fact.get("sglang_version")
           or fact.get("sglang"), "patch_series_hash": fact.get("patch_series_hash")}
    for key, value in fact.items():
        if key not in ("content_hash", "sglang_version", "patch_series_hash") and isinstance(
                value, (str, int, float, bool)):
            out["venv_" + key] = value
    return out


def model_revisions(model_paths):
    """{model_path: "repo_id@revision"} from each model's manifest; "none: ..." when absent."""
    out = {}
    for path in model_paths or []:
        if not path:
            continue
        manifest = os.path.join(path, MANIFEST)
        try:
            with open(manifest) as handle:
                data = json.load(handle)
            revision = data.get("revision")
            out[path] = "%s@%s" % (data.get("repo_id") or "?", revision) if revision else "none: no revision"
        except (OSError, ValueError, AttributeError) as exc:
            out[path] = "none: %s unreadable (%s)" % (manifest, exc.__class__.__name__)
    return out


MODEL_FLAGS = ("--model-path", "--model", "--speculative-draft-model-path", "--speculative-draft-model")


def model_paths_from_argv(argv):
    """Model directories the running server was started with (target, then drafter)."""
    out = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in MODEL_FLAGS:
            path = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if path and path not in out:
                out.append(path)
    return out


def collect(fact_path="/etc/ansible/facts.d/sglang_venv.fact", cuda_home="", model_paths=None, unit="",
            run=subprocess.run):
    """Every provenance field; model paths default to those in the running server's argv."""
    driver, gpu = nvidia_smi(run)
    prov = {"driver": driver, "gpu": gpu, "cuda": cuda_version(cuda_home)}
    prov.update(venv_fact(fact_path))
    prov["flags"] = service_argv(unit) if unit else []
    prov["model_revision"] = model_revisions(model_paths or model_paths_from_argv(prov["flags"]))
    return prov
