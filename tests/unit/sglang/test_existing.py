"""module_utils/sglang/existing.py: the hand-made deployment found (units through systemctl, listeners and process
owners through a fake /proc, GPU processes through nvidia-smi's recorded shape) and the refusal's wording."""
from __future__ import annotations

import os
from types import SimpleNamespace

from ansible.module_utils.sglang import existing

OWN = ["sglang.service", "sglang-router.service", "sglang-model-peer*"]
HAND = ("/root/venv_sglang211/bin/python -m sglang.launch_server --model-path /root/models/Kimi-K2.6 --tp 8 "
        "--port 30001")


def show_block(unit, active="active", sub="running", pid=0, state="enabled", user="", cmd="", path=None):
    exec_start = (f"{{ path={cmd.split()[0]} ; argv[]={cmd} ; ignore_errors=no ; start_time=[n/a] ; "
                  "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }") if cmd else ""
    return (f"Id={unit}\nLoadState=loaded\nActiveState={active}\nSubState={sub}\nMainPID={pid}\n"
            f"UnitFileState={state}\nFragmentPath={path or '/etc/systemd/system/' + unit}\nUser={user}\n"
            f"ExecStart={exec_start}\nControlGroup=/system.slice/{unit}\n")


class Systemctl:
    def __init__(self, blocks, loaded, files=""):
        self.blocks, self.loaded, self.files, self.asked = blocks, loaded, files, []

    def __call__(self, argv, **kw):
        self.asked.append(argv)
        if argv[1] == "list-units":
            return 0, self.loaded, ""
        if argv[1] == "list-unit-files":
            return 0, self.files, ""
        wanted = [a for a in argv[2:] if not a.startswith("--")]
        return 0, "\n".join(self.blocks[u] for u in wanted if u in self.blocks), ""


def fake_proc(tmp_path, port, procs):
    """procs: {pid: (unit, cmdline, uid, listens)} -> a /proc with net/tcp, fds, cgroup, cmdline, status."""
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    lines = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"]
    for n, (pid, (unit, cmd, uid, listens)) in enumerate(procs.items()):
        d = proc / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "cgroup").write_text(f"0::/system.slice/{unit}\n" if unit.endswith(".service") else f"0::/user.slice/{unit}\n")
        (d / "cmdline").write_bytes(cmd.replace(" ", "\0").encode() + b"\0")
        (d / "status").write_text(f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "stat").write_text(f"{pid} (python) S 1 0 0\n")
        if listens:
            inode = 5000 + n
            lines.append(f"   {n}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000 "
                         f"0 0 {inode} 1 0000000000000000 100 0 0 10 0")
            os.symlink(f"socket:[{inode}]", d / "fd" / "7")
    (proc / "net" / "tcp").write_text("\n".join(lines) + "\n")
    (proc / "net" / "tcp6").write_text(lines[0] + "\n")
    return str(proc)


def smi(apps, gpus):
    def run(argv, **kw):
        out = apps if argv[1].startswith("--query-compute-apps") else gpus
        return SimpleNamespace(returncode=0, stdout=out, stderr="")
    return run


def test_launches_sglang():
    assert existing.launches_sglang(HAND)
    assert existing.launches_sglang("/root/venv/bin/python -m sglang_standin.launch_server --port 30001")
    assert existing.launches_sglang("/usr/local/bin/sglang serve --model-path x")
    assert existing.launches_sglang("python3 /src/sglang/python/sglang/launch_server.py --port 1")
    assert not existing.launches_sglang("/opt/smg/bin/smg --port 30000")
    assert not existing.launches_sglang("/usr/bin/python3 -m http.server 30001")


def test_the_hand_made_deployment_is_refused_with_its_unit_pid_port_memory_and_the_way_out(tmp_path, monkeypatch):
    blocks = {"sglang-k26-ddtree.service": show_block("sglang-k26-ddtree.service", pid=4242, cmd=HAND),
              "nginx.service": show_block("nginx.service", cmd="/usr/sbin/nginx -g daemon"),
              "sglang-k26-old.service": show_block("sglang-k26-old.service", active="inactive", sub="dead",
                                                   state="disabled", cmd=HAND)}
    run = Systemctl(blocks, "sglang-k26-ddtree.service loaded active running K26\nsglang.service loaded active "
                            "running ours\nnginx.service loaded active running web\n",
                    "sglang-k26-old.service disabled enabled\ntemplated@.service static -\n")
    proc = fake_proc(tmp_path, 30001, {4242: ("sglang-k26-ddtree.service", HAND, 0, True),
                                       4300: ("sglang-k26-ddtree.service", "sglang::scheduler_TP0", 0, False)})
    smi_bin = tmp_path / "nvidia-smi"
    smi_bin.write_text("")
    found = existing.find(30001, OWN, str(smi_bin), run=run,
                          smi_run=smi(f"4300, GPU-a, 126000, {HAND.split()[0]}\n",
                                      "0, GPU-a, 0000:1b:00.0, 143771, 580.95.05, 10.3, NVIDIA B300\n"), proc=proc)
    # ours is never read; the template without an instance is left out; nginx is no SGLang unit
    shown = [a for a in run.asked if a[1] == "show"][0]
    assert "sglang.service" not in shown and "templated@.service" not in shown
    assert [u["unit"] for u in found["units"]] == ["sglang-k26-ddtree.service", "sglang-k26-old.service"]
    assert found["units"][0]["user"] == "root" and found["units"][0]["exec_start"] == [HAND]
    assert [(p["pid"], p["unit"]) for p in found["listeners"]] == [(4242, "sglang-k26-ddtree.service")]
    assert found["gpu"]["processes"][0]["percent"] == 87.6

    said = existing.verdict(found, OWN, [])
    msg = said["message"]
    assert said["conflicts"] and said["covered_units"] == []
    for needle in ("unit sglang-k26-ddtree.service (active/running, enabled, user root, pid 4242)", HAND,
                   "pid 4242 (unit sglang-k26-ddtree.service, user root): listens on port 30001",
                   "pid 4300", "holds 126000 MiB on GPU-a (87.6% of 143771 MiB)", "nothing was changed",
                   "takeover_units\": [\"sglang-k26-ddtree.service\"]",
                   "systemctl disable --now sglang-k26-ddtree.service", "playbooks/takeover_revert.yml"):
        assert needle in msg, (needle, msg)
    assert "sglang-k26-old.service" not in msg  # inactive and disabled: not in the way

    handed = existing.verdict(found, OWN, ["sglang-k26-*.service"])
    assert handed["message"] == "" and handed["covered_units"] == ["sglang-k26-ddtree.service"]


def test_our_own_unit_and_its_process_are_not_foreign_and_no_nvidia_smi_is_said(tmp_path):
    run = Systemctl({"sglang.service": show_block("sglang.service", cmd=HAND),
                     "sglang-router.service": show_block("sglang-router.service", cmd="/opt/smg/bin/smg")},
                    "sglang.service loaded active running x\nsglang-router.service loaded active running y\n")
    proc = fake_proc(tmp_path, 30001, {77: ("sglang.service", HAND, 999, True)})
    found = existing.find(30001, OWN, str(tmp_path / "no-nvidia-smi"), run=run, proc=proc)
    assert found["units"] == [] and found["listeners"][0]["unit"] == "sglang.service"
    assert found["gpu"]["checked"] is False and "no nvidia-smi" in found["gpu"]["note"]
    assert existing.verdict(found, OWN, [])["message"] == ""


def test_a_process_in_no_unit_must_be_stopped_by_hand(tmp_path):
    run = Systemctl({}, "")
    proc = fake_proc(tmp_path, 30001, {5150: ("session-3.scope", HAND, 0, True)})
    found = existing.find(30001, OWN, str(tmp_path / "none"), run=run, proc=proc)
    said = existing.verdict(found, OWN, ["sglang-k26-*.service"])
    assert "pid 5150 (unit session-3.scope, user root): listens on port 30001" in said["message"]
    assert "pid 5150 is in no service unit a takeover could stop: stop it yourself (kill 5150)" in said["message"]
    assert "Way out: take them over" not in said["message"]
    assert "GPU: no nvidia-smi" in said["message"]


def test_an_enabled_but_stopped_unit_is_in_the_way_and_another_service_on_the_port_can_be_named():
    found = {"units": [existing.unit_record({"Id": "sglang-k26.service", "ActiveState": "inactive",
                                             "UnitFileState": "enabled", "ExecStart": ""})],
             "listeners": [{"pid": 9, "unit": "nginx.service", "user": "www-data", "cmdline": "nginx", "port": 30001}],
             "gpu": {"checked": True, "note": "", "processes": []}}
    said = existing.verdict(found, OWN, [])
    assert "unit sglang-k26.service (inactive/, enabled" in said["message"]
    assert '"nginx.service", "sglang-k26.service"' in said["message"]
    assert existing.verdict(found, OWN, ["nginx.service", "sglang-k26.service"])["message"] == ""
