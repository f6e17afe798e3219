"""GPU facts for the gpu_facts module: run nvidia-smi (and optionally a torch probe), gate on expectations.

Stdlib only; runs on the target. `collect()` is the one entry point the module calls. Commands go through a
`runner(argv, timeout) -> (rc, stdout, stderr)` so tests can feed captured text instead of running anything.
"""

import json
import os
import shutil
import subprocess
import tempfile

try:
    from ansible.module_utils.nvidia_smi import (
        QUERY_ARGS, TOPO_ARGS, NvidiaSmiParseError, driver_major, parse_query_gpu, parse_topology,
        suggest_profile, summarize_links)
except ImportError:
    from module_utils.nvidia_smi import (
        QUERY_ARGS, TOPO_ARGS, NvidiaSmiParseError, driver_major, parse_query_gpu, parse_topology,
        suggest_profile, summarize_links)

# NVLink multicast (NVLS) stays off in every probe: on shared hosts it can take the GPUs out of service.
PROBE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# Run with the venv's python as `python FILE OUT_JSON` (a file, not -c: spawned workers re-import __main__).
TORCH_PROBE_SCRIPT = r'''
import json, os, sys, tempfile, time, traceback

OUT = sys.argv[1]


def _allreduce_worker(rank, world, init_file, results):
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    try:
        t = torch.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        got = t[0].item()
        uniform = bool((t == got).all().item())
    finally:
        dist.destroy_process_group()
    with open(results + ".%d" % rank, "w") as fh:
        json.dump({"rank": rank, "value": got, "uniform": uniform}, fh)


def main():
    report = {"ok": False, "error": None}
    try:
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        report["torch_version"] = torch.__version__
        report["torch_cuda"] = torch.version.cuda
        report["cuda_available"] = torch.cuda.is_available()
        n = torch.cuda.device_count()
        report["device_count"] = n
        report["devices"] = []
        if n == 0:
            raise RuntimeError("torch sees no CUDA device (cuda_available=%s)" % report["cuda_available"])
        try:
            report["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception as exc:  # NCCL missing from this torch build
            report["nccl_version"] = None
        torch.backends.cuda.matmul.allow_tf32 = False
        gen = torch.Generator().manual_seed(1234)
        a = torch.randn(1024, 1024, generator=gen)
        b = torch.randn(1024, 1024, generator=gen)
        ref = a @ b
        for d in range(n):
            props = torch.cuda.get_device_properties(d)
            t0 = time.monotonic()
            got = (a.to(d) @ b.to(d)).cpu()
            err = (got - ref).abs().max().item()
            report["devices"].append({
                "index": d, "name": props.name, "capability": "%d.%d" % (props.major, props.minor),
                "memory_total_mib": props.total_memory // (1024 * 1024),
                "matmul_max_abs_err": err, "matmul_ok": bool(torch.allclose(got, ref, rtol=1e-3, atol=1e-3)),
                "matmul_s": round(time.monotonic() - t0, 4)})
        with tempfile.TemporaryDirectory() as tmp:
            # one process, world size 1, on GPU 0
            dist.init_process_group("nccl", init_method="file://" + os.path.join(tmp, "single"), rank=0,
                                    world_size=1, device_id=torch.device("cuda", 0))
            try:
                t = torch.full((1 << 20,), 3.0, device="cuda:0")
                dist.all_reduce(t)
                torch.cuda.synchronize()
                single = t[0].item()
            finally:
                dist.destroy_process_group()
            report["nccl_single"] = {"world_size": 1, "value": single, "expected": 3.0, "ok": single == 3.0}
            # one process per GPU, rank r contributes r+1
            results = os.path.join(tmp, "multi")
            t0 = time.monotonic()
            mp.spawn(_allreduce_worker, args=(n, os.path.join(tmp, "init"), results), nprocs=n, join=True)
            ranks = []
            for r in range(n):
                with open(results + ".%d" % r) as fh:
                    ranks.append(json.load(fh))
            expected = float(n * (n + 1) // 2)
            report["nccl_multi"] = {
                "world_size": n, "expected": expected, "values": [x["value"] for x in ranks],
                "ok": all(x["value"] == expected and x["uniform"] for x in ranks),
                "seconds": round(time.monotonic() - t0, 3)}
        report["ok"] = (all(d["matmul_ok"] for d in report["devices"]) and report["nccl_single"]["ok"]
                        and report["nccl_multi"]["ok"])
    except Exception as exc:
        report["error"] = "%s: %s" % (type(exc).__name__, exc)
        report["traceback"] = traceback.format_exc()[-2000:]
    with open(OUT, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main()
'''


def default_runner(argv, timeout, env=None):
    """Run argv; never raise for a missing program or a timeout: report them as rc 127 / 124."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, check=False)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, "timed out after %ss" % timeout
    return proc.returncode, proc.stdout, proc.stderr


def read_nvidia_smi(nvidia_smi, runner, timeout=60):
    """Facts from nvidia-smi: {"present", "error", "gpus", "topology", "links", "raw": {...}}."""
    facts = {"present": False, "error": None, "gpus": [], "topology": None, "links": None,
             "raw": {"query": "", "topo": ""}}
    binary = nvidia_smi if os.path.sep in nvidia_smi else shutil.which(nvidia_smi)
    if not binary or not os.path.exists(binary):
        facts["error"] = "nvidia-smi not found (looked for %r)" % nvidia_smi
        return facts
    facts["present"] = True
    rc, out, err = runner([binary] + list(QUERY_ARGS), timeout)
    facts["raw"]["query"] = out
    if rc != 0:
        facts["error"] = "nvidia-smi --query-gpu failed rc=%s: %s" % (rc, (err or out).strip()[:500])
        return facts
    try:
        facts["gpus"] = parse_query_gpu(out)
    except NvidiaSmiParseError as exc:
        facts["error"] = str(exc)
        return facts
    rc, out, err = runner([binary] + list(TOPO_ARGS), timeout)
    facts["raw"]["topo"] = out
    if rc != 0:
        facts["error"] = "nvidia-smi topo -m failed rc=%s: %s" % (rc, (err or out).strip()[:500])
        return facts
    if len(facts["gpus"]) > 0:
        try:
            facts["topology"] = parse_topology(out)
        except NvidiaSmiParseError as exc:
            facts["error"] = str(exc)
            return facts
        facts["links"] = summarize_links(facts["topology"])
    return facts


def run_torch_probe(python, runner, timeout=300):
    """Run TORCH_PROBE_SCRIPT with `python` (a venv's interpreter); returns its JSON report."""
    if not os.path.exists(python):
        return {"ok": False, "error": "probe python %s does not exist" % python}
    with tempfile.TemporaryDirectory(prefix="gpu_probe_") as tmp:
        script = os.path.join(tmp, "torch_probe.py")
        out = os.path.join(tmp, "report.json")
        with open(script, "w") as fh:
            fh.write(TORCH_PROBE_SCRIPT)
        rc, stdout, stderr = runner([python, script, out], timeout, PROBE_ENV)
        try:
            with open(out) as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            report = {"ok": False, "error": "probe wrote no report (rc=%s): %s" % (rc, (stderr or stdout)[-1000:])}
        report["rc"] = rc
        if rc != 0 and report.get("ok"):
            report["ok"] = False
            report["error"] = "probe exited rc=%s: %s" % (rc, (stderr or stdout)[-1000:])
    return report


def evaluate_gate(gpus, smi_error, expected_count, expected_capability, min_driver):
    """The driver gate: {"status": "pass"|"fail"|"skipped", "reasons": [...], "found": "..."}.

    expected_count 0 means the host declares no GPU: the gate is "skipped" (never "pass") and says what
    was found anyway. Otherwise every check that fails adds a reason quoting what was found.
    """
    drivers = sorted({g["driver_version"] for g in gpus if g["driver_version"]})
    caps = sorted({g["compute_capability"] for g in gpus if g["compute_capability"]})
    names = sorted({g["name"] for g in gpus if g["name"]})
    if smi_error and not gpus:
        found = smi_error
    else:
        found = "%d GPU(s) %s, compute capability %s, driver %s" % (
            len(gpus), "/".join(names) or "?", "/".join(caps) or "?", "/".join(drivers) or "?")
    if not expected_count:
        reasons = ["host declares no GPU (expected count 0): driver gate NOT run; found: %s" % found]
        if gpus:
            reasons.append("note: the host does have GPUs although it declares none")
        return {"status": "skipped", "reasons": reasons, "found": found}
    reasons = []
    if smi_error:
        reasons.append("nvidia-smi: %s" % smi_error)
    if len(gpus) != expected_count:
        reasons.append("expected %d GPU(s), found %d" % (expected_count, len(gpus)))
    if expected_capability:
        wrong = ["GPU%d=%s" % (g["index"], g["compute_capability"]) for g in gpus
                 if g["compute_capability"] != expected_capability]
        if wrong:
            reasons.append("expected compute capability %s on every GPU, found %s"
                           % (expected_capability, ", ".join(wrong)))
    if min_driver:
        low = ["GPU%d=%s" % (g["index"], g["driver_version"]) for g in gpus
               if (driver_major(g["driver_version"]) or 0) < min_driver]
        if low:
            reasons.append("expected driver >= %d, found %s" % (min_driver, ", ".join(low)))
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "found": found}


def collect(nvidia_smi="nvidia-smi", expected_count=None, expected_capability="", min_driver=0,
            torch_python=None, probe_timeout=300, runner=None):
    """Everything gpu_facts returns. expected_count None = no gate at all (facts only)."""
    runner = runner or default_runner
    smi = read_nvidia_smi(nvidia_smi, runner)
    gpus = smi["gpus"]
    if smi["links"]:
        profile, reason = suggest_profile(smi["links"])
    else:
        profile, reason = "", "no topology read" if not gpus else "no GPU-to-GPU links"
    driver = gpus[0]["driver_version"] if gpus else None
    facts = {
        "nvidia_smi_present": smi["present"],
        "nvidia_smi_error": smi["error"],
        "gpu_count": len(gpus),
        "gpus": gpus,
        "driver_version": driver,
        "driver_major": driver_major(driver),
        "compute_capabilities": sorted({g["compute_capability"] for g in gpus if g["compute_capability"]}),
        "interconnect": smi["links"]["interconnect"] if smi["links"] else "none",
        "links": smi["links"],
        "topology": smi["topology"],
        "suggested_profile": profile,
        "suggested_profile_reason": reason,
        "raw": smi["raw"],
    }
    result = {"gpu_facts": facts, "gate": None, "torch_probe": None}
    if expected_count is not None:
        result["gate"] = evaluate_gate(gpus, smi["error"], expected_count, expected_capability, min_driver)
    if torch_python:
        result["torch_probe"] = run_torch_probe(torch_python, runner, probe_timeout)
    return result
