"""Benchmark of the built-in load harness (module_utils/loadgen/client.py) against the SGLang stand-in on loopback.

1. Accuracy: the stand-in set to a known TTFT and ITL (no batching slope, no prefill cost); the harness must
   measure mean TTFT, mean ITL, median ITL and mean TPOT within 5% of the configured values at C = 1..128.
   Baseline = the configured value; each figure is printed as measured/configured, next to what a plain
   http.client client sees in the same run (when both deviate alike, the stand-in itself was late).
2. Capacity: the stand-in with zero delays; the harness pinned to one core (the stand-in on the other) must
   sustain >= 25,000 output tok/s. Two figures: the wall throughput (bounded by the stand-in, a Python server on
   the other core, whenever the client's core is not saturated) and the client's capacity on one core = output
   tokens per CPU-second of the client process (what its core delivers when it is the bottleneck); the verdict
   uses the capacity. Both are printed against a baseline measured in the same run: a plain stdlib client
   (http.client, one thread per concurrent request) doing the same work on the same core.
The figures assume a quiet machine: the load average is printed first, since a loaded host makes the stand-in late.

Only 127.0.0.1 is contacted. `python -m bench harness`.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import goals  # noqa: E402
import local_module_utils  # noqa: E402

local_module_utils.install()
from ansible.module_utils.loadgen import client as bench_client  # noqa: E402
from ansible.module_utils.loadgen.server import check_serving  # noqa: E402
from ansible.module_utils.loadgen.transport import split_url  # noqa: E402

STANDIN = ROOT / "lab" / "sglang_standin"
TTFT_MS = 400.0
ITL_MS = 40.0
TOLERANCE = 0.05
CONCURRENCIES = (1, 8, 32, 64, 128)
CAPACITY_TARGET = 25000.0
ACCURACY = goals.Goal("bench_harness", f"harness TTFT/ITL/TPOT vs stand-in settings, worst deviation, C = "
                      f"{CONCURRENCIES[0]}..{CONCURRENCIES[-1]}", "<=", TOLERANCE * 100, "%")
CAPACITY = goals.Goal("bench_harness", "harness client capacity on one core (output tok per client CPU-second)",
                      ">=", CAPACITY_TARGET, "tok/s")
GOALS = [ACCURACY, CAPACITY]


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StandIn:
    """The lab's SGLang stand-in as a loopback subprocess pinned to `cpus`."""

    def __init__(self, ttft_ms, itl_ms, cpus):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=str(STANDIN), SGLANG_STANDIN_LOAD_S="0", SGLANG_STANDIN_WARMUP_S="0",
                   SGLANG_STANDIN_TTFT_MS=str(ttft_ms), SGLANG_STANDIN_ITL_MS=str(itl_ms),
                   SGLANG_STANDIN_ITL_SLOPE_MS="0", SGLANG_STANDIN_PREFILL_US_PER_TOKEN="0",
                   SGLANG_STANDIN_FAULT="none")
        argv = [sys.executable, "-m", "sglang_standin.launch_server", "--model-path", "standin-model",
                "--host", "127.0.0.1", "--port", str(self.port), "--max-running-requests", "512",
                "--disable-cuda-graph"]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=lambda: os.sched_setaffinity(0, cpus))

    def __enter__(self):
        deadline = time.monotonic() + 30
        reason = "not started"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stand-in exited rc={self.proc.returncode}: {self.proc.stderr.read()[-500:]}")
            reason = check_serving(self.url, timeout=2)
            if reason is None:
                return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"stand-in not ready within 30 s: {reason}")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def accuracy(cpus_client, cpus_server):
    print(f"-- accuracy: stand-in TTFT {TTFT_MS:.0f} ms, ITL {ITL_MS:.0f} ms; ratio = measured / configured "
          f"(pass within {TOLERANCE:.0%})")
    ok = True
    worst, bad = 0.0, []
    os.sched_setaffinity(0, cpus_client)
    with StandIn(TTFT_MS, ITL_MS, cpus_server) as server:
        print(f"{'C':>4} {'TTFT mean':>10} {'ITL mean':>9} {'ITL p50':>8} {'TPOT mean':>10}  verdict")
        for conc in CONCURRENCIES:
            row = bench_client.run_cell(base_url=server.url, input_len=60, output_len=32, concurrency=conc,
                                        num_prompts=4 if conc == 1 else 3 * conc, warmup_requests=1,
                                        request_timeout=60, cell_timeout=120)
            ratios = (row["mean_ttft_ms"] / TTFT_MS, row["mean_itl_ms"] / ITL_MS,
                      row["median_itl_ms"] / ITL_MS, row["mean_tpot_ms"] / ITL_MS)
            good = row["status"] == "ok" and all(abs(r - 1) <= TOLERANCE for r in ratios)
            ok &= good
            worst = max([worst] + [abs(r - 1) * 100 for r in ratios])
            if row["status"] != "ok":
                bad.append(f"C={conc}: status {row['status']}")
            _, _, base_ttft, base_itl = naive_client(server.url, conc, 4 if conc == 1 else 3 * conc, 32)
            print(f"{conc:>4} " + " ".join(f"{r:>9.3f}x" for r in ratios)
                  + f"  {'ok' if good else 'OUT OF TOLERANCE'} ({row['status']}, {row['completed']} requests,"
                    f" TTFT {row['mean_ttft_ms']:.1f} ms, ITL {row['mean_itl_ms']:.2f} ms; same-run http.client"
                    f" baseline sees TTFT {base_ttft / TTFT_MS:.3f}x, ITL {base_itl / ITL_MS:.3f}x)")
    goals.record(ACCURACY, worst, note=f"stand-in TTFT {TTFT_MS:.0f} ms, ITL {ITL_MS:.0f} ms",
                 failed=", ".join(bad))
    return ok


def naive_client(url, concurrency, num_prompts, output_len):
    """Baseline: stdlib http.client, one thread per concurrent request, line-by-line SSE reading.

    Returns (wall tok/s, tok per client CPU-second, mean TTFT ms, mean ITL ms)."""
    host, port = split_url(url)
    prompts = bench_client.make_prompts(num_prompts, 60, 1)
    lock = threading.Lock()
    tokens = [0]
    ttfts, itls = [], []

    def work(indices):
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.connect()
        for i in indices:
            body = bench_client.build_body("sglang", "m", prompts[i], output_len)
            start = time.perf_counter()
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            last, last_t, gaps, first = 0, start, [], None
            for line in resp:
                if line.startswith(b"data:") and not line.startswith(b"data: [DONE]"):
                    n = json.loads(line[5:])["meta_info"]["completion_tokens"]
                    now = time.perf_counter()
                    if n > last:
                        if first is None:
                            first = now - start
                        else:
                            gaps += [(now - last_t) / (n - last)] * (n - last)
                        last, last_t = n, now
            with lock:
                tokens[0] += last
                ttfts.append(first or 0.0)
                itls.extend(gaps)
        conn.close()

    threads = [threading.Thread(target=work, args=(range(k, num_prompts, concurrency),))
               for k in range(concurrency)]
    cpu0 = time.process_time()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    wall = time.perf_counter() - start
    return (tokens[0] / wall, tokens[0] / max(time.process_time() - cpu0, 1e-9),
            1000 * sum(ttfts) / max(len(ttfts), 1), 1000 * sum(itls) / max(len(itls), 1))


def capacity(cpus_client, cpus_server):
    print(f"-- capacity: zero-delay stand-in on core(s) {sorted(cpus_server)}, client on core(s) "
          f"{sorted(cpus_client)}; target >= {CAPACITY_TARGET:,.0f} output tok/s")
    os.sched_setaffinity(0, cpus_client)
    best = 0.0
    best_wall = 0.0
    with StandIn(0, 0, cpus_server) as server:
        base_wall, base_cpu, _, _ = naive_client(server.url, 32, 64, 256)
        print(f"baseline (http.client + threads, C=32): {base_wall:,.0f} tok/s wall, {base_cpu:,.0f} tok per "
              f"client CPU-second")
        for conc in (8, 32, 128):
            row = bench_client.run_cell(base_url=server.url, input_len=60, output_len=256, concurrency=conc,
                                        num_prompts=max(4 * conc, 64), warmup_requests=1, request_timeout=60,
                                        cell_timeout=120)
            per_cpu = row["total_output_tokens"] / max(row["client_cpu_s"], 1e-9)
            best = max(best, per_cpu)
            best_wall = max(best_wall, row["output_throughput"])
            print(f"harness C={conc:<3}: {row['output_throughput']:>9,.0f} output tok/s wall "
                  f"({row['output_throughput'] / base_wall:.2f}x baseline), {per_cpu:>9,.0f} tok per client "
                  f"CPU-second ({per_cpu / base_cpu:.2f}x baseline), client CPU "
                  f"{row['client_cpu_s'] / row['duration']:.0%} of one core, status {row['status']}")
    verdict = best >= CAPACITY_TARGET
    print(f"capacity on one core: {best:,.0f} output tok/s = {best / CAPACITY_TARGET:.2f}x the {CAPACITY_TARGET:,.0f} "
          f"target -> {'ok' if verdict else 'BELOW TARGET'}; best wall throughput {best_wall:,.0f} tok/s "
          f"({best_wall / CAPACITY_TARGET:.2f}x target; bounded by the stand-in when the client core is not saturated)")
    goals.record(CAPACITY, best, note=f"best wall {best_wall:,.0f} tok/s; same-run http.client baseline "
                                      f"{base_cpu:,.0f} tok per CPU-second")
    return verdict


def main() -> int:
    if not (STANDIN / "sglang_standin" / "launch_server.py").exists():
        for g in GOALS:
            goals.fail(g, f"stand-in missing at {STANDIN}")
        return 1
    load1, _, _ = os.getloadavg()
    print(f"load average {load1:.2f} on {os.cpu_count()} CPU(s)"
          + ("  (busy machine: the stand-in will be late, accuracy figures are pessimistic)"
             if load1 > (os.cpu_count() or 1) * 0.5 else ""))
    cpus = sorted(os.sched_getaffinity(0))
    client_cpus, server_cpus = {cpus[0]}, ({cpus[1]} if len(cpus) > 1 else {cpus[0]})
    if len(cpus) < 2:
        print("only one CPU: client and stand-in share it (figures are pessimistic)")
    original = os.sched_getaffinity(0)
    try:
        ok_accuracy = accuracy(client_cpus, server_cpus)
        ok_capacity = capacity(client_cpus, server_cpus)
    finally:
        os.sched_setaffinity(0, original)
    print(f"harness: accuracy {'ok' if ok_accuracy else 'FAILED'}, capacity {'ok' if ok_capacity else 'FAILED'}")
    return 0  # the verdicts are the goals recorded above


if __name__ == "__main__":
    sys.exit(goals.standalone("bench_harness", main, GOALS))
