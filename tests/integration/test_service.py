"""SGLang service role against the lab (lab "service"): profiles, idempotence, check mode, preflight rejections
that leave the old process running, the stand-in fault matrix with its verdicts, the restart race, secrets."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.helpers.molecule import run_scenario
from tests.helpers.playbook import run_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB_NAME = "service"
B300, CT200 = "b300-lab", "ct200-lab"
SERVICE = "playbooks/service.yml"
RESTART_TASK = "Restart sglang service"
FAST = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5"}


def main_pid(lab, host: str) -> int:
    return int(lab.ssh(host, "systemctl show -p MainPID --value sglang.service").stdout.strip())


def unit_digest(lab, host: str) -> str:
    return lab.ssh(host, "sha256sum /etc/systemd/system/sglang.service /etc/sglang/sglang.env").stdout


def service(lab, limit: str | None = B300, env: dict | None = None, full: bool = False, **extra):
    """A service.yml run; after the first deployment the (idempotent) install step is skipped to save time."""
    extravars = {"sglang_service_env_overrides": {**FAST, **(env or {})}, **extra}
    return run_playbook(lab, SERVICE, limit=limit, extravars=extravars,
                        skip_tags=None if full else "sglang_service_install")


def failed_task(run) -> dict:
    failed = [ev["event_data"] for ev in run.events if ev.get("event") == "runner_on_failed"]
    assert failed, f"nothing failed (rc={run.rc})\n{run.stdout[-2000:]}"
    return {"task": failed[0]["task"], **failed[0]["res"]}


# The service role's and the bench role's molecule scenarios run first in this module, on this lab: the hosts they
# converge (venv, drafter config and the service on both profiles, then a bench that restarts nothing) are where this
# module's tests start, so that convergence is paid once (tests/helpers/molecule.py HOSTED). test_compile_cache.py
# runs on this lab before them, test_service_home.py after them.
def test_molecule_scenario_of_the_service_role_on_this_lab(lab, tmp_path):
    run_scenario("sglang_service", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)


def test_molecule_scenario_of_the_bench_role_on_this_lab(lab, tmp_path):
    run_scenario("sglang_bench", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)


@pytest.fixture(scope="module")
def deployed(lab, lab_prepared):
    run = service(lab, limit=None, full=True)
    assert run.rc == 0, run.stdout[-4000:]
    return run


def test_both_profiles_run_as_the_service_user_and_answer(deployed, lab):
    nv = lab.ssh(B300, "cat /etc/systemd/system/sglang.service").stdout
    pc = lab.ssh(CT200, "cat /etc/systemd/system/sglang.service").stdout
    assert "--speculative-algorithm DDTREE" in nv and "--speculative-ddtree-topk-cap 4" in nv and "NCCL_" not in nv
    assert "sglang_standin.launch_server" in nv and "User=sglang" in nv
    assert '"NCCL_P2P_LEVEL=5"' in pc and "--disable-cuda-graph" in pc and "--speculative" not in pc
    for host, speculative in ((B300, True), (CT200, False)):
        ev = deployed.result("Record the service evidence", host)["ansible_facts"]["sglang_service_evidence"]
        assert float(ev["tok_s"]) > 0 and int(ev["pid"]) == main_pid(lab, host)
        # DDTree on b300: /server_info's running average (warmup + smoke) is above 1; pcie is autoregressive
        assert (float(ev["accept_length"]) > 1.0) if speculative else not ev["accept_length"]
        assert lab.ssh(host, "ps -o user= -p $(systemctl show -p MainPID --value sglang.service)").stdout.strip() == "sglang"


def test_second_run_changes_nothing_and_restarts_nothing(deployed, lab):
    pids = {h: main_pid(lab, h) for h in (B300, CT200)}
    run = service(lab, limit=None, full=True)
    assert run.rc == 0
    assert run.changed_count(B300) == 0 and run.changed_count(CT200) == 0
    assert RESTART_TASK not in run.task_names()
    assert {h: main_pid(lab, h) for h in (B300, CT200)} == pids


def test_check_mode_reports_a_flag_change_and_touches_nothing(deployed, lab):
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    run = run_playbook(lab, SERVICE, limit=B300, check=True, skip_tags="sglang_service_install", extravars={
        "sglang_service_env_overrides": FAST, "sglang_service_server_overrides": {"context_length": 16384}})
    assert run.rc == 0, run.stdout[-3000:]
    assert run.result("Systemd unit", B300)["changed"]
    assert run.result(RESTART_TASK, B300)["changed"]
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)


def test_flags_rejected_by_the_parser_leave_the_old_service_running(deployed, lab):
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    # argparse and the static rules accept it; the version's own semantic check (0.5.11's DFLASH family) refuses it
    run = service(lab, sglang_service_speculative_overrides={"num_draft_tokens": 4})
    assert run.rc != 0
    failure = failed_task(run)
    assert failure["task"] == "Ask the installed server's parser whether the new flags are accepted"
    assert "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ" in \
        failure["msg"]
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)
    assert lab.ssh(B300, "systemctl is-active sglang.service").stdout.strip() == "active"


def test_a_drafter_made_for_another_block_size_is_refused_before_any_change(deployed, lab):
    """The lab drafter (demo/Kimi-K2.6-DFlash from the test Hub, in the directory named after it) is made for block
    size 8; the stand-in's parser accepts 16, the drafter check on the host refuses it naming both."""
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    run = service(lab, sglang_service_speculative_overrides={"block_size": 16})
    failure = failed_task(run)
    assert failure["task"] == "The drafter is made for the block size the server would run (its config.json on the host)"
    assert "the server would run block size 16 (--speculative-dflash-block-size 16 (the server's argv))" in failure["msg"]
    assert "made for 8 (/srv/models/Kimi-K2.6-DFlash/config.json: dflash_config.block_size)" in failure["msg"]
    assert run.stats().get("changed", {}).get(B300, 0) == 0
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)


def test_static_rules_refuse_before_any_change(deployed, lab):
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    run = service(lab, deploy_gpu_compute_capability="10.3", sglang_service_speculative_overrides={"budget": 16},
                  sglang_service_server_overrides={"attention_backend": "fa3"})
    failure = failed_task(run)
    assert failure["task"].startswith("Static validation")
    assert "[sm103_budget_cuda_graphs]" in failure["msg"] and "[ddtree_triton]" in failure["msg"]
    assert run.stats().get("changed", {}).get(B300, 0) == 0
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)


def test_a_flag_the_hosts_version_lacks_is_refused_at_play_start(deployed, lab):
    """The lab venv's schema (extracted from its own patched parser) does not know a misspelt flag: the static check
    names it before anything changes, with the replacement the schemas suggest."""
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    run = service(lab, sglang_service_extra_args={"speculative-ddtree-bugdet": 8})
    failure = failed_task(run)
    assert failure["task"].startswith("Static validation") and "[flags_in_schema]" in failure["msg"]
    assert "--speculative-ddtree-bugdet is not a flag of SGLang 0.5.11" in failure["msg"]
    assert run.stats().get("changed", {}).get(B300, 0) == 0
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)


@pytest.mark.parametrize("schema,extra,needle", [
    # the nvlink (DDTree) profile checked against upstream 0.5.23
    ("0.5.23", {}, "--speculative-ddtree-budget is not a flag of SGLang 0.5.23; SGLang 0.5.23 has no replacement"),
    # the 0.5.23 spelling of the DFLASH window on 0.5.11
    ("0.5.11", {"sglang_service_extra_args": {"speculative-draft-window-size": 2048},
                "sglang_service_speculative_overrides": {"algorithm": "DFLASH", "budget": None, "topk_cap": None,
                                                         "debug_metrics": None, "draft_window_size": None}},
     "--speculative-draft-window-size is not a flag of SGLang 0.5.11 (the SGLang 0.5.23 spelling); SGLang 0.5.11 "
     "spells it --speculative-dflash-draft-window-size"),
    # a flag 0.5.23 removed
    ("0.5.23", {"sglang_service_server_overrides": {"cuda_graph_max_bs": 16},
                "sglang_service_speculative_overrides": {"algorithm": "NONE"}},
     "--cuda-graph-max-bs is not a flag of SGLang 0.5.23 (the SGLang 0.5.11 spelling); SGLang 0.5.23 spells it "
     "--cuda-graph-max-bs-decode"),
], ids=["ddtree-on-0.5.23", "0.5.23-window-on-0.5.11", "cuda-graph-max-bs-on-0.5.23"])
def test_another_versions_flags_are_refused_before_any_change(deployed, lab, schema, extra, needle):
    pid, digest = main_pid(lab, B300), unit_digest(lab, B300)
    run = service(lab, sglang_service_flag_schema=schema, **extra)
    failure = failed_task(run)
    assert failure["task"].startswith("Static validation") and needle in failure["msg"], failure["msg"]
    assert run.stats().get("changed", {}).get(B300, 0) == 0
    assert (main_pid(lab, B300), unit_digest(lab, B300)) == (pid, digest)


# The fault matrix, two faults per playbook run (one per lab host; extra vars are templated per host).
FAULT_RUNS = [
    {B300: "crash_loading", CT200: "crash_warmup"},
    {B300: "bind_then_die", CT200: "garbage"},
    {B300: "sm103", CT200: "hang"},
    {B300: "hang_warmup"},
]
CRASHES = {"crash_loading": "crash_loading", "crash_warmup": "crash_warmup", "bind_then_die": "bind_then_die",
           "sm103": "illegal memory access"}
HANGS = {"hang": "not listening", "hang_warmup": "warming up"}


def _fault_env(fault: str) -> dict:
    return {**FAST, **({"SGLANG_STANDIN_GPU_CC": "10.3"} if fault == "sm103" else {"SGLANG_STANDIN_FAULT": fault})}


@pytest.fixture(scope="module")
def fault_results(deployed, lab) -> dict:
    """{fault: the failed task's event data}, from len(FAULT_RUNS) playbook runs."""
    out = {}
    for pairing in FAULT_RUNS:
        envs = {host: _fault_env(fault) for host, fault in pairing.items()}
        extravars = {
            "sglang_service_env_overrides": "{{ %r[inventory_hostname] }}" % envs,
            "sglang_service_speculative_overrides": "{{ {'budget': 16} if inventory_hostname == %r else {} }}" % (
                next((h for h, f in pairing.items() if f == "sm103"), ""),),
            "sglang_service_ready_timeout": 5 if {"hang", "hang_warmup"} & set(pairing.values()) else 60,
        }
        run = run_playbook(lab, SERVICE, limit=",".join(pairing), extravars=extravars,
                           skip_tags="sglang_service_install")
        for ev in run.events:
            if ev.get("event") == "runner_on_failed":
                data = ev["event_data"]
                out[pairing[data["host"]]] = {"task": data["task"], **data["res"]}
        missing = set(pairing.values()) - set(out)
        assert not missing, f"faults {missing} did not fail the play\n{run.stdout[-3000:]}"
    return out


@pytest.mark.parametrize("fault", sorted(CRASHES))
def test_crash_verdict_names_the_crash_with_this_invocations_journal(fault_results, fault):
    failure = fault_results[fault]
    assert failure["task"] == RESTART_TASK and failure["kind"] == "failed", failure["msg"]
    assert CRASHES[fault] in failure["msg"] and "Main process exited" in failure["msg"]
    assert "[REDACTED]" in failure["msg"]  # the stand-in logs server_args with the key, like SGLang
    latency = failure.get("crash_to_verdict_s")
    print(f"\n{fault}: crash-to-verdict {latency} s (phase {failure['phase']!r})")
    assert latency is not None


@pytest.mark.parametrize("fault", sorted(HANGS))
def test_hang_times_out_naming_the_phase(fault_results, fault):
    failure, phase = fault_results[fault], HANGS[fault]
    assert failure["task"] == RESTART_TASK and failure["kind"] == "timeout"
    assert failure["phase"] == phase and f"phase '{phase}'" in failure["msg"]


def test_garbage_output_fails_the_smoke_test_showing_outputs(fault_results):
    failure = fault_results["garbage"]
    assert failure["task"].startswith("Known-answer prompts")
    assert "U+FFFD" in failure["msg"] and failure["answers"][0]["output"].startswith("\ufffd")


SMOKE_TASK = "Known-answer prompts, degenerate-output check, tool call, tok/s and accept length"


def test_production_parsers_on_the_standin_think_call_tools_and_pass_the_smoke(deployed, lab):
    """group_vars/all gives every host Kimi K2.6's --reasoning-parser and --tool-call-parser kimi_k2: the stand-in
    thinks before each answer and writes Kimi's tool-call markup; the deployment's smoke read the answers past the
    thinking and got a parsed get_weather call (no extra playbook run: the module's deployment)."""
    for host in (B300, CT200):
        unit = lab.ssh(host, "cat /etc/systemd/system/sglang.service").stdout
        assert "--tool-call-parser kimi_k2" in unit and "--reasoning-parser kimi_k2" in unit
        smoke = deployed.result(SMOKE_TASK, host)
        assert [a["output"] for a in smoke["answers"]] == ["Paris", "42", "blue harbour lantern"]
        assert all(a["reasoning_chars"] > 0 for a in smoke["answers"]), smoke["answers"]
        call = smoke["tool_call"]
        assert call["verdict"] == "ok" and call["finish_reason"] == "tool_calls", call
        assert call["tool_calls"][0]["id"] == "functions.get_weather:0"
        # the lab model has no chat template: no switch to send, so each request had the thinking budget
        assert smoke["thinking_switch"]["chat_template_kwargs"] == {}


def test_the_old_content_only_smoke_fails_on_a_model_that_thinks_longer_and_the_smoke_passes(deployed, lab):
    """40 tokens of thought before the answer (the production model thinks for far longer): the request the smoke made
    before issue 25 (max_tokens 32, message.content only) sees no answer, "empty output" by the product's own
    degenerate check; the smoke of this run passes on the same server, answers and tool call."""
    from ansible.module_utils.sglang.degenerate import degenerate
    run = service(lab, limit=CT200, env={"SGLANG_STANDIN_THINK_TOKENS": "40"})
    assert run.rc == 0, run.stdout[-3000:]
    smoke = run.result(SMOKE_TASK, CT200)
    assert [a["output"] for a in smoke["answers"]] == ["Paris", "42", "blue harbour lantern"]
    assert smoke["tool_call"]["verdict"] == "ok", smoke["tool_call"]
    auth = "-H \"Authorization: Bearer $(sed -n 's/^SGLANG_SERVICE_API_KEY=//p' /etc/sglang/sglang.env)\""
    model = json.loads(lab.ssh(CT200, f"curl -sf {auth} http://127.0.0.1:30001/v1/models").stdout)["data"][0]["id"]
    body = {"model": model, "temperature": 0, "max_tokens": 32,
            "messages": [{"role": "user", "content": "What is the capital of France? Answer with one word."}]}
    old = lab.ssh(CT200, f"curl -sf {auth} -H 'Content-Type: application/json' -d @- "
                         "http://127.0.0.1:30001/v1/chat/completions", input=json.dumps(body)).stdout
    message = json.loads(old)["choices"][0]["message"]
    assert message["reasoning_content"] and degenerate(message["content"] or "") == "empty output", message


def test_a_model_that_never_stops_thinking_fails_the_smoke_naming_it(deployed, lab):
    run = service(lab, limit=CT200, env={"SGLANG_STANDIN_FAULT": "think_forever"},
                  sglang_service_smoke_thinking_tokens=64)
    failure = failed_task(run)
    assert failure["task"] == SMOKE_TASK, failure
    assert "the model was still thinking when max_tokens=96 ran out: reasoning_content " in failure["msg"]
    assert "chars, content empty" in failure["msg"] and "empty output" not in failure["msg"]
    assert "tool call (kimi_k2): the model was still thinking when max_tokens=192 ran out" in failure["msg"]


def test_restart_race_never_reports_ready_from_the_old_process(fault_results, lab):
    slow = {"SGLANG_STANDIN_FAULT": "slow_shutdown", "SGLANG_STANDIN_SHUTDOWN_S": "4"}
    first = service(lab, env=slow)  # also recovers b300-lab from the hung start the fault matrix left
    assert first.rc == 0, first.stdout[-3000:]
    old_pid = main_pid(lab, B300)
    # Any change restarts; the old process keeps answering /health 200 for 4 s after SIGTERM.
    run = service(lab, env={**slow, "SGLANG_STANDIN_TTFT_MS": "41"})
    assert run.rc == 0, run.stdout[-3000:]
    res = run.result(RESTART_TASK, B300)
    assert res["pid"] != old_pid and res["pid"] == main_pid(lab, B300)
    stopping = [p for p in res["phases"] if p["phase"] == "stopping previous process"]
    assert stopping and stopping[0]["seconds"] >= 3.0, res["phases"]  # waited out the old answering process


def test_secrets_never_in_verbose_output_nor_readable_files(deployed, lab, tmp_path):
    key = "vk-" + secrets.token_hex(16)
    password = tmp_path / "vault-pass"
    password.write_text(secrets.token_hex(16))
    password.chmod(0o600)
    venv_bin = ROOT / ".venv" / "bin"
    env = {**os.environ, "LAB_NAME": lab.name, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONPATH": str(ROOT),
           "PATH": f"{venv_bin}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    enc = subprocess.run([str(venv_bin / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password),
                          "--name", "vault_sglang_service_api_key", key], capture_output=True, text=True, env=env,
                         check=True)
    varsfile = tmp_path / "vault.yml"
    varsfile.write_text("---\n" + enc.stdout)
    proc = subprocess.run([str(venv_bin / "ansible-playbook"), "-vvvv", SERVICE, "-l", B300, "-e", f"@{varsfile}",
                           "--vault-password-file", str(password), "-e",
                           '{"sglang_service_env_overrides": %s}' % str(FAST).replace("'", '"')],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Restart sglang service" in proc.stdout  # the key changed, so the service restarted with it
    assert key not in proc.stdout and key not in proc.stderr
    # Every file on the host holding the key must be root-only; the journal holds it redacted.
    # Everywhere a deployment writes (/usr outside /usr/local is the distribution's, untouched by plays).
    found = lab.ssh(B300, f"grep -rlF --exclude-dir=host -- '{key}' /etc /var /opt /srv /tmp /root /home /run "
                          "/usr/local || true", timeout=300).stdout.split()
    assert found == ["/etc/sglang/sglang.env"], found
    mode = lab.ssh(B300, "stat -c '%a %U' /etc/sglang /etc/sglang/sglang.env").stdout.split()
    assert mode == ["700", "root", "600", "root"]
    pid = main_pid(lab, B300)
    assert key not in lab.ssh(B300, f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
    assert lab.ssh(B300, f"journalctl -u sglang.service --no-pager | grep -c -F -- '{key}' || true").stdout.strip() == "0"
    # The service answers with the vault key.
    ok = lab.ssh(B300, f"curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {key}' "
                       "http://127.0.0.1:30001/v1/models").stdout
    assert ok == "200"


def _invocation_journal(lab, host: str, invocation: str) -> str:
    """The invocation's lines: its processes' output and systemd's own messages about it."""
    lab.ssh(host, "journalctl --sync", check=False)
    return lab.ssh(host, f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation} + "
                         f"INVOCATION_ID={invocation}").stdout


def _wait_journal(lab, host: str, invocation: str, needle: str, timeout: float = 60) -> str:
    """Poll the invocation's journal until a line contains needle (journald may lag the process a little)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        text = _invocation_journal(lab, host, invocation)
        if needle in text or time.monotonic() > deadline:
            assert needle in text, f"{needle!r} not in the journal of {invocation} within {timeout}s:\n{text[-3000:]}"
            return text
        time.sleep(0.5)


def test_plain_stop_and_restart_end_clean_and_the_journal_never_holds_the_key(deployed, lab):
    """The stand-in exits like real SGLang (SIGKILLs itself after the SIGTERM drain); under KillMode=mixed the
    launcher makes that exit 0: restart and stop read Result=success, not code=killed status=9/KILL. The key is
    redacted from the journal, server_args line included, and never in any process's cmdline."""
    if lab.ssh(B300, "systemctl is-active sglang.service", check=False).stdout.strip() != "active":
        recover = service(lab)
        assert recover.rc == 0, recover.failures()
    key = lab.ssh(B300, "sed -n 's/^SGLANG_SERVICE_API_KEY=//p' /etc/sglang/sglang.env").stdout.strip()
    assert key  # the lab binds 0.0.0.0, so the unit always has a key

    def invocation() -> str:
        return lab.ssh(B300, "systemctl show -p InvocationID --value sglang.service").stdout.strip()

    def show() -> dict:
        out = lab.ssh(B300, "systemctl show sglang.service -p Result -p ExecMainCode -p ExecMainStatus").stdout
        return dict(line.split("=", 1) for line in out.split())

    first = invocation()
    _wait_journal(lab, B300, first, "fired up and ready to roll")
    pid = main_pid(lab, B300)
    children = lab.ssh(B300, f"pgrep -P {pid}").stdout.split()
    assert children, "the launcher supervises the server as its child"
    # the pattern comes from a file: the key on grep's own command line would be found in grep's own cmdline
    found = lab.ssh(B300, "sed -n 's/^SGLANG_SERVICE_API_KEY=//p' /etc/sglang/sglang.env > /run/k && "
                          "grep -laF -f /run/k /proc/[0-9]*/cmdline; rm -f /run/k; true").stdout.strip()
    assert found == ""

    lab.ssh(B300, "systemctl restart sglang.service")
    old = _wait_journal(lab, B300, first, "clean stop, exit 0")
    assert "Gracefully exiting" in old and "status=9/KILL" not in old and "Failed with result" not in old, old[-3000:]

    second = invocation()
    assert second and second != first
    _wait_journal(lab, B300, second, "fired up and ready to roll")
    lab.ssh(B300, "systemctl stop sglang.service")
    try:
        assert show() == {"Result": "success", "ExecMainCode": "1", "ExecMainStatus": "0"}
        text = _wait_journal(lab, B300, second, "clean stop, exit 0")
        assert "SIGKILL after SIGTERM was forwarded" in text and "status=9/KILL" not in text, text[-3000:]
        for journal in (old, text):
            assert "server_args=" in journal and "[REDACTED]" in journal
            assert key not in journal
    finally:
        lab.ssh(B300, "systemctl start sglang.service")
