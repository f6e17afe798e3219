"""The Hub once per fleet: time to have the models verified on all N lab hosts (N = 2, 4, 6) with the LAN fan-out
(roles/models, models_source: peers) against every host pulling from the Hub at once (models_source: hub), under the
same limits in both runs: the test Hub serves at most HUB_MBPS MB/s in all (however many ask), every host's link on
the lab bridge is shaped to LINK_MBIT Mbit/s each way (tc). Both are the same playbook (playbooks/models.yml) on the
same hosts, with the tool venv already in place and the models root wiped before each run; the baseline fetches
with the same module and settings, so the only difference is where the bytes come from.

Figures: the whole play (start to every host verified), its fetch phase (first peer server / fetch task start to the
last host's result), and the bytes the Hub served (its own counters) in copies of the models.
Goals: with N = 6 the fan-out's play takes <= 0.5x the all-from-Hub play; the Hub serves one copy (<= 1.02 copies)
at every N; the fan-out's fetch phase grows no faster than log2(N) transfers: F(6) <= log2(6) x F(2).
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import goals  # noqa: E402
from lab.host_sets import FLEET_HOSTS  # noqa: E402
from lab.lab import Lab  # noqa: E402
from lab.testhub import HubProcess  # noqa: E402

LAB = "bench-fleet"
INVENTORY = "inventory/fleet-lab"
HUB_MBPS = 2.0  # MB/s, the test Hub's total (its rate_mbps)
LINK_MBIT = 100  # Mbit/s each way per host
REPOS = ["bench/Kimi-K2.6:shards=6,shard_size=8MiB", "bench/Kimi-K2.6-DFlash:shards=1,shard_size=4MiB"]
MODELS = [("Kimi-K2.6", "bench/Kimi-K2.6"), ("Kimi-K2.6-DFlash", "bench/Kimi-K2.6-DFlash")]  # dir = repo's name part
MODELS_ROOT = "/srv/bench-fleet-models"
SIZES = (2, 4, 6)
# Transfer settings of both modes. Six hosts x 2 lanes x 6 connections share the Hub's 2 MB/s in the baseline: with
# the lab's 8 MiB chunks and 10 s watchdog a chunk takes longer than the watchdog allows (hf_transfer writes a chunk
# once all of it arrived), and the baseline would crawl through stalls and retries. 1 MiB chunks and a 60 s
# watchdog let it run as fast as the Hub's limit allows: the baseline gets every advantage the fan-out gets.
TRANSFER = {"models_chunk_size_mb": 1, "models_stall_timeout": 60}

RATIO = goals.Goal("bench_fanout", "N=6: fan-out play / all-from-Hub play (same Hub limit, same links)", "<=", 0.5)
COPIES = goals.Goal("bench_fanout", "Hub bytes with fan-out, in copies of the models (worst of N=2,4,6)", "<=", 1.02,
                    " copies")
GROWTH = goals.Goal("bench_fanout", "fan-out fetch phase F(6) / F(2) (log2(N) growth: <= log2 6)", "<=",
                    round(math.log2(6), 2))
GOALS = [RATIO, COPIES, GROWTH]


def _events_time(events, prefixes, which):
    stamps = [datetime.fromisoformat(ev["created"]).timestamp() for ev in events
              if ev.get("event") in which and any(str(ev.get("event_data", {}).get("task", "")).startswith(p)
                                                  for p in prefixes)]
    return stamps


def play(lab: Lab, hub: HubProcess, hosts: list[str], source: str) -> dict:
    import ansible_runner
    extravars = {"target_hosts": "fleet", "models_source": source, "models_root": MODELS_ROOT,
                 "models_hf_endpoint": hub.endpoint, **TRANSFER,
                 "models_list": [{"name": n, "repo_id": r, "revision": "main"} for n, r in MODELS]}
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "LAB_NAME": lab.name, "PYTHONPATH": str(ROOT),
           "ANSIBLE_NOCOLOR": "1"}
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as pdd:
        t0 = time.monotonic()
        r = ansible_runner.run(private_data_dir=pdd, project_dir=str(ROOT), playbook=str(ROOT / "playbooks/models.yml"),
                               inventory=str(ROOT / INVENTORY), limit=",".join(hosts), extravars=extravars,
                               envvars=env, quiet=True, timeout=1800)
        wall = time.monotonic() - t0
        events = list(r.events)
        if r.rc != 0:
            raise RuntimeError(f"{source} N={len(hosts)} failed:\n{r.stdout.read()[-3000:]}")
    starts = _events_time(events, ("Start this host's peer server", "Start fetching"), ("runner_on_start",))
    ends = _events_time(events, ("Result of",), ("runner_on_ok",))
    return {"wall": wall, "fetch": (max(ends) - min(starts)) if starts and ends else float("nan")}


def one_copy(hub: HubProcess) -> int:
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    total = 0
    for _n, repo in MODELS:
        with opener.open(f"{hub.endpoint}/api/models/{repo}/tree/main?recursive=true", timeout=10) as resp:
            total += sum(e["size"] for e in json.loads(resp.read()) if e.get("type") == "file")
    return total


def main() -> int:
    lab = Lab(LAB, hosts=FLEET_HOSTS)
    lab.up(log=lambda *_: None)
    try:
        with HubProcess(bind=lab.state()["gateway"], seed=61, repos=REPOS) as hub:
            return measure(lab, hub)
    finally:
        if os.environ.get("BENCH_KEEP_LAB") != "1":
            lab.down(log=lambda *_: None)


def wipe(lab: Lab, hosts) -> None:
    for h in hosts:
        lab.ssh(h, f"rm -rf {MODELS_ROOT}")


def measure(lab: Lab, hub: HubProcess) -> int:
    copy = one_copy(hub)
    # warm-up (unmeasured): every host gets the tool venv, so neither mode pays for pip
    play(lab, hub, list(FLEET_HOSTS), "peers")
    hub.set_link(rate_mbps=HUB_MBPS)
    for h in FLEET_HOSTS:
        lab.set_link(h, LINK_MBIT)
    rows = {}
    for n in SIZES:
        hosts = list(FLEET_HOSTS[:n])
        for source in ("hub", "peers"):
            wipe(lab, FLEET_HOSTS)
            hub.reset()
            got = play(lab, hub, hosts, source)
            got["copies"] = hub.stats()["bytes"] / copy
            rows[(n, source)] = got
            print(f"N={n} {source:5s}: play {got['wall']:6.1f}s, fetch phase {got['fetch']:6.1f}s, "
                  f"Hub served {got['copies']:.3f} copies", flush=True)
    print(f"\nlimits: Hub {HUB_MBPS} MB/s in all, each host {LINK_MBIT} Mbit/s each way; models {copy / 2**20:.1f} MiB")
    print(f"{'N':>3} {'all-from-Hub play':>18} {'fan-out play':>13} {'ratio':>6} {'fetch hub':>10} {'fetch fan':>10} "
          f"{'Hub copies (hub / fan-out)':>27}")
    for n in SIZES:
        b, f = rows[(n, "hub")], rows[(n, "peers")]
        print(f"{n:>3} {b['wall']:>17.1f}s {f['wall']:>12.1f}s {f['wall'] / b['wall']:>6.2f} {b['fetch']:>9.1f}s "
              f"{f['fetch']:>9.1f}s {b['copies']:>13.2f} / {f['copies']:.3f}")
    ratio = rows[(6, "peers")]["wall"] / rows[(6, "hub")]["wall"]
    goals.record(RATIO, ratio, note=f"{rows[(6, 'peers')]['wall']:.1f}s vs {rows[(6, 'hub')]['wall']:.1f}s")
    worst = max(rows[(n, "peers")]["copies"] for n in SIZES)
    goals.record(COPIES, worst, note="per N: " + ", ".join(f"{rows[(n, 'peers')]['copies']:.3f}" for n in SIZES))
    growth = rows[(6, "peers")]["fetch"] / rows[(2, "peers")]["fetch"]
    goals.record(GROWTH, growth, note="F(N) = " + ", ".join(f"{rows[(n, 'peers')]['fetch']:.1f}s" for n in SIZES))
    return 0


if __name__ == "__main__":
    sys.exit(goals.standalone("bench_fanout", main, GOALS))
