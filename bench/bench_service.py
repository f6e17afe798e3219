"""Crash-to-verdict latency of the SGLang service readiness check (sglang_ready), on a lab host (systemd PID 1).

Deploys the service on b300-lab of its own lab (LAB_NAME=bench-service), then alternates, ROUNDS times:
  - a healthy restart: the baseline, time from `systemctl restart` to a verified ready answer;
  - a restart whose process crashes (stand-in fault via `systemctl set-environment`): the figure, seconds from
    the main process exit (systemd's ExecMainExitTimestampMonotonic) to the module's failure verdict, journal
    excerpt included.
Prints each figure as a ratio against the healthy time-to-ready measured in the same run, and against the
3 s requirement of issue 4. Leaves the lab up only with LAB_KEEP=1.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench import goals  # noqa: E402

LAB_NAME = os.environ.get("BENCH_SERVICE_LAB", "bench-service")
HOST = "b300-lab"
ROUNDS = int(os.environ.get("BENCH_SERVICE_ROUNDS", "5"))
FAULTS = ("crash_loading", "crash_warmup")
REQUIREMENT_S = 3.0
API_KEY = "lab-only-standin-key"  # group_vars/lab/sglang_service.yml
FAST = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5"}
VERDICT = {f: goals.Goal("bench_service", f"service crash-to-verdict ({f}), max of {ROUNDS}", "<=", REQUIREMENT_S, "s")
           for f in FAULTS}
GOALS = list(VERDICT.values())


def _runner_env(lab) -> dict:
    return {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "LAB_NAME": lab.name, "PYTHONPATH": str(ROOT),
            "ANSIBLE_NOCOLOR": "1"}


def _playbook(lab, playbook: str, extravars: dict | None = None) -> None:
    import ansible_runner
    with tempfile.TemporaryDirectory(prefix="bench-") as pdd:
        r = ansible_runner.run(private_data_dir=pdd, project_dir=str(ROOT), playbook=str(ROOT / playbook),
                               inventory=str(ROOT / "inventory/lab"), limit=HOST, extravars=extravars or {},
                               envvars=_runner_env(lab), quiet=True)
        if r.rc != 0:
            raise RuntimeError(f"{playbook} failed:\n{r.stdout.read()[-3000:]}")


def _module(lab, module: str, args: dict) -> dict:
    import ansible_runner
    with tempfile.TemporaryDirectory(prefix="bench-") as pdd:
        r = ansible_runner.run(private_data_dir=pdd, project_dir=str(ROOT), host_pattern=HOST, module=module,
                               module_args=json.dumps(args), inventory=str(ROOT / "inventory/lab"),
                               envvars=_runner_env(lab), quiet=True)
        for ev in r.events:
            if ev.get("event") in ("runner_on_ok", "runner_on_failed"):
                return {"failed": ev["event"] == "runner_on_failed", **ev["event_data"]["res"]}
    raise RuntimeError(f"{module}: no result")


def _restart(lab) -> dict:
    return _module(lab, "sglang_ready", {"name": "sglang.service", "url": "http://127.0.0.1:30001",
                                         "model_id": "/srv/models/Kimi-K2.6", "api_key": API_KEY,
                                         "state": "restarted", "timeout": 60})


def _set_fault(lab, fault: str | None) -> None:
    cmd = f"systemctl set-environment SGLANG_STANDIN_FAULT={fault}" if fault else \
        "systemctl unset-environment SGLANG_STANDIN_FAULT"
    lab.ssh(HOST, cmd)


def main() -> int:
    from lab.lab import Lab
    lab = Lab(LAB_NAME)
    started = time.monotonic()
    lab.up(log=lambda *_: None)
    try:
        _playbook(lab, "roles/sglang_service/molecule/default/prepare.yml")
        _playbook(lab, "playbooks/service.yml", {"sglang_service_env_overrides": FAST,
                                                 "sglang_service_smoke_enabled": False})
        print(f"lab + deploy: {time.monotonic() - started:.1f}s")
        healthy, verdicts = [], {f: [] for f in FAULTS}
        for i in range(ROUNDS):
            _set_fault(lab, None)
            ok = _restart(lab)
            if ok["failed"]:
                raise RuntimeError(f"healthy restart failed: {ok.get('msg')}")
            healthy.append(ok["time_to_ready"])
            for fault in FAULTS:
                _set_fault(lab, fault)
                res = _restart(lab)
                if not res["failed"] or res.get("kind") != "failed" or res.get("crash_to_verdict_s") is None:
                    raise RuntimeError(f"{fault}: expected a crash verdict, got {res.get('kind')}: "
                                       f"{res.get('msg', '')[:300]}")
                verdicts[fault].append(res["crash_to_verdict_s"])
        _set_fault(lab, None)
        base = statistics.median(healthy)
        print(f"baseline: healthy restart-to-ready median {base:.3f}s over {ROUNDS} "
              f"(stand-in load 1 s + warmup 0.5 s)")
        for fault, values in verdicts.items():
            med = statistics.median(values)
            print(f"crash-to-verdict [{fault}]: median {med:.3f}s, max {max(values):.3f}s over {len(values)} | "
                  f"ratio vs healthy time-to-ready {med / base:.3f} | vs the {REQUIREMENT_S:.0f} s requirement "
                  f"{max(values) / REQUIREMENT_S:.3f}")
            goals.record(VERDICT[fault], max(values), note=f"median {med:.3f} s; healthy restart-to-ready {base:.3f} s")
        return 0
    finally:
        if os.environ.get("LAB_KEEP") != "1":
            lab.down(log=lambda *_: None)


if __name__ == "__main__":
    sys.exit(goals.standalone("bench_service", main, GOALS))
