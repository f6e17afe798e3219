"""The torch probe: run standalone on the GPU host as ``<venv>/bin/python probe_script.py OUT_JSON``.

It must run with the target venv's own python, not Ansible's: what it judges is that venv's torch (its CUDA build,
its NCCL) on these GPUs. So it imports nothing of this repository, only the standard library and torch (imported
inside main, so that importing this file on the controller or in a module payload needs no torch).
module_utils/gpu/probe.py reads this file's source (also from inside an AnsiballZ payload) and writes it to a
temporary file on the host: a file, not ``python -c``, because torch.multiprocessing's spawned workers re-import
``__main__``.

What it checks: torch sees every GPU; a 1024x1024 matmul on each matches the CPU's; an NCCL all-reduce in one
process (world size 1) and across one process per GPU gives the expected sums. The report (JSON, always written):
{"ok", "error", "traceback"?, "torch_version", "torch_cuda", "cuda_available", "device_count", "devices",
"nccl_version", "nccl_single", "nccl_multi"}.
"""
import json
import os
import sys
import tempfile
import time
import traceback


def _allreduce_worker(rank, world, init_file, results):
    """One rank of the all-GPU all-reduce (rank r contributes r+1); writes what it got to results.<rank>."""
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


def main(out):
    """Write the report to `out` (JSON); never raises: a failure is the report's error and traceback."""
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
        except Exception:  # NCCL missing from this torch build
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
    with open(out, "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main(sys.argv[1])
