"""The goal book of `make bench` (bench/goals.py) and its runner (bench/__main__.py): verdicts, the closing table,
the exit code, and benchmarks that could not run (MISS with the reason, never a silent skip)."""
import types

import pytest

from bench import goals
from bench import __main__ as bench_main
from bench import bench_models

RATIO = goals.Goal("bench_x", "ours vs baseline", ">=", 0.9)
BOUND = goals.Goal("bench_x", "re-fetch / bound", "<=", 1.0)
SECONDS = goals.Goal("bench_y", "warm up", "<=", 10.0, "s")


@pytest.mark.parametrize("goal,value,verdict", [
    (RATIO, 0.95, goals.PASS), (RATIO, 0.9, goals.PASS), (RATIO, 0.89, goals.MISS),
    (BOUND, 1.0, goals.PASS), (BOUND, 1.01, goals.MISS), (BOUND, 0.2, goals.PASS),
    (RATIO, None, goals.MISS), (RATIO, float("nan"), goals.MISS),
])
def test_verdict_follows_the_goal(goal, value, verdict):
    book = goals.Book()
    assert goals.record(goal, value, book=book).verdict == verdict


def test_a_failed_reason_makes_a_miss_whatever_the_figure():
    book = goals.Book()
    r = goals.record(RATIO, 2.0, note="regime X", failed="C=8: status timeout", book=book)
    assert r.verdict == goals.MISS
    assert "C=8: status timeout" in r.note and "regime X" in r.note


def test_unknown_operator_is_refused():
    with pytest.raises(ValueError):
        goals.Goal("b", "f", ">", 1.0)


def test_exit_code_zero_only_when_every_goal_passed():
    book = goals.Book()
    passed = [goals.record(RATIO, 1.2, book=book), goals.record(SECONDS, 3.0, book=book)]
    assert goals.exit_code(passed) == 0
    missed = passed + [goals.record(BOUND, 1.5, book=book)]
    assert goals.exit_code(missed) == 1
    assert goals.exit_code([]) == 1  # nothing measured is not a pass


def test_table_has_one_row_per_goal_with_measured_goal_and_verdict_and_the_load():
    book = goals.Book()
    results = [goals.record(RATIO, 0.85, note="link-bound", book=book), goals.record(SECONDS, 2.5, book=book)]
    text = goals.table(results, (0.5, 0.4, 0.3), (1.5, 1.0, 0.8))
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["benchmark", "figure"] and "verdict" in lines[0]
    miss = next(line for line in lines if "ours vs baseline" in line)
    assert "0.85x" in miss and ">= 0.90x" in miss and "MISS" in miss and "link-bound" in miss
    ok = next(line for line in lines if "warm up" in line)
    assert "2.50 s" in ok and "<= 10.00 s" in ok and "PASS" in ok
    assert "1 of 2 goals met; 1 MISSED (bench_x)" in text
    assert "at the start 0.50 / 0.40 / 0.30" in text and "at the end 1.50 / 1.00 / 0.80" in text


def test_a_later_record_of_the_same_goal_replaces_the_earlier():
    book = goals.Book()
    goals.record(RATIO, 0.5, book=book)
    goals.record(RATIO, 1.5, book=book)
    assert [(r.measured, r.verdict) for r in book.results] == [(1.5, goals.PASS)]


def test_goal_not_recorded_is_a_miss_with_the_modules_exception():
    book = goals.Book()

    def main():
        goals.record(RATIO, 1.0, book=book)
        raise RuntimeError("lab did not start: no sshd")

    results = goals.run_module("bench_x", main, [RATIO, BOUND], book)
    by = {r.goal.figure: r for r in results}
    assert by["ours vs baseline"].verdict == goals.PASS
    assert by["re-fetch / bound"].verdict == goals.MISS
    assert "RuntimeError: lab did not start: no sshd" in by["re-fetch / bound"].note
    assert by["ran to the end (exit status)"].verdict == goals.MISS  # the module itself failed
    assert goals.exit_code(results) == 1


def test_module_returning_nonzero_is_a_miss_even_with_its_goals_passed():
    book = goals.Book()

    def main():
        goals.record(RATIO, 1.0, book=book)
        return 3

    results = goals.run_module("bench_x", main, [RATIO], book)
    assert goals.exit_code(results) == 1
    assert any(r.goal.figure.startswith("ran to the end") and r.measured == 3 for r in results)


def test_module_that_returns_without_measuring_is_a_miss():
    book = goals.Book()
    results = goals.run_module("bench_x", lambda: 0, [RATIO], book)
    assert [r.verdict for r in results] == [goals.MISS]
    assert "did not record" in results[0].note


def _module(main, goal_list):
    return types.SimpleNamespace(main=main, GOALS=goal_list)


def test_runner_exit_code_and_table(monkeypatch, capsys):
    book = goals.Book()
    mods = {
        "bench.bench_good": _module(lambda: goals.record(SECONDS, 4.0, book=book) and 0, [SECONDS]),
        "bench.bench_bad": _module(lambda: goals.record(RATIO, 0.5, book=book) and 0, [RATIO]),
    }

    def importer(name):
        if name == "bench.bench_broken":
            raise ImportError("no module named lab.lab")
        return mods[name]

    passed = bench_main.run(["bench_good"], book, importer)
    assert goals.exit_code(passed) == 0
    both = bench_main.run(["bench_good", "bench_bad"], book, importer)
    assert goals.exit_code(both) == 1
    broken = bench_main.run(["bench_broken"], book, importer)
    assert goals.exit_code(broken) == 1 and "import failed: ImportError" in broken[0].note


def test_main_exit_code_follows_the_verdicts(monkeypatch, capsys):
    def fake_run(names, book=goals.BOOK, importer=None):
        b = goals.Book()
        return [goals.record(RATIO, 1.0 if names == ["bench_harness"] else 0.1, book=b)]

    monkeypatch.setattr(bench_main, "run", fake_run)
    assert bench_main.main(["harness"]) == 0
    assert bench_main.main(["models"]) == 1
    out = capsys.readouterr().out
    assert "load average at the start" in out and "MISS" in out and "PASS" in out
    assert bench_main.main(["nosuch"]) == 2


def test_standalone_prints_table_and_returns_the_verdict(capsys):
    ok = goals.Goal("bench_z", "standalone figure", ">=", 1.0)
    assert goals.standalone("bench_z", lambda: goals.record(ok, 2.0) and 0, [ok]) == 0
    bad = goals.Goal("bench_z", "standalone missing figure", ">=", 1.0)
    assert goals.standalone("bench_z", lambda: 0, [bad]) == 1
    assert "standalone missing figure" in capsys.readouterr().out


# ---- the models benchmark's regime and baseline helpers -----------------------------------------------------------

def test_link_regime_accepts_the_default_pacing():
    conns = bench_models.connections(2)
    assert conns["ours"] == conns["aria2c"] == min(bench_models.LANES, 2) * bench_models.CONNECTIONS
    assert conns["curl"] == min(bench_models.LANES, 2)
    assert bench_models.link_regime_problem(200, 25, conns, ours_unpaced=340, aria2c_paced=195) == ""


@pytest.mark.parametrize("total,per_conn,unpaced,aria2c,words", [
    (300, 20, 600, 295, "the per-connection cap, not the link, decides"),  # 12 x 20 = 240 < 1.25 x 300
    (300, 200, 600, 295, "the connection count decides nothing"),  # curl's 2 x 200 fill the link
    (300, 40, 340, 295, "CPU-bound, not link-bound"),  # 340 < 1.25 x 300
    (300, 40, 600, 240, "the link did not bound it"),  # aria2c at 80% of the link
    (0, 40, 600, 295, "must be > 0"),
])
def test_link_regime_problems_are_named(total, per_conn, unpaced, aria2c, words):
    conns = {"ours": 12, "aria2c": 12, "curl": 2}
    assert words in bench_models.link_regime_problem(total, per_conn, conns, unpaced, aria2c)


def test_parallel_baseline_command_and_parsing():
    cmd = bench_models.parallel_hash_cmd("openssl", 8)
    assert cmd[:6] == ["xargs", "-0", "-n", "1", "-P", "8"] and cmd[6:] == ["openssl", "dgst", "-sha256"]
    assert bench_models.parallel_hash_cmd("sha256sum", 2)[-1] == "sha256sum"
    got = bench_models.parse_hashes("openssl", "SHA2-256(/d/a b.safetensors)= ab12\n")
    assert got == {"/d/a b.safetensors": "ab12"}
    assert bench_models.parse_hashes("sha256sum", "cd34  /d/x\n\n") == {"/d/x": "cd34"}


def test_parallel_baseline_really_hashes_the_files(tmp_path):
    import hashlib
    import subprocess
    paths = []
    for i in range(3):
        p = tmp_path / f"f{i} x"
        p.write_bytes(bytes([i]) * (1000 + i))
        paths.append(str(p))
    truth = {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths}
    for tool in ("sha256sum", "openssl"):
        out = subprocess.run(bench_models.parallel_hash_cmd(tool, 2), input="\0".join(paths) + "\0",
                             capture_output=True, text=True, check=True).stdout
        assert bench_models.parse_hashes(tool, out) == truth


# ---- the venv benchmark: every method on the role's ssh cipher ----------------------------------------------------

class FakeLab:
    def __init__(self):
        self.commands = []

    def state(self):
        return {"hosts": {"ct200-lab": {"address": "10.9.0.2"}, "b300-lab": {"address": "10.9.0.3"}},
                "ssh_key": "/tmp/lab-key"}

    def ssh(self, host, cmd, **kw):
        self.commands.append((host, cmd))
        return types.SimpleNamespace(stdout="")


def test_venv_ciphers_come_from_the_role_defaults(tmp_path):
    import yaml
    from bench import bench_venv
    role = yaml.safe_load((bench_venv.ROOT / "roles/venv/defaults/main.yml").read_text())
    assert bench_venv.CIPHERS == role["venv_stream_ssh_ciphers"]
    bad = tmp_path / "main.yml"
    bad.write_text('venv_stream_ssh_ciphers: "{{ other }}"\n')
    with pytest.raises(ValueError):
        bench_venv.role_ciphers(bad)


def test_venv_baselines_and_ours_use_the_same_cipher(monkeypatch):
    import shlex
    from bench import bench_venv
    lab = FakeLab()
    b = bench_venv.Bench(lab)
    popened = []

    class FakePopen:
        def __init__(self, argv, **kw):
            popened.append(argv)
            self.stdout = types.SimpleNamespace(close=lambda: None)

        def wait(self):
            return 0

    monkeypatch.setattr(bench_venv.subprocess, "Popen", FakePopen)
    b.raw()
    assert len(popened) == 2
    for argv in popened:  # both hops of the raw pipe
        assert argv[argv.index("-c") + 1] == bench_venv.CIPHERS
    popened.clear()
    b.raw("")  # context: ssh's own choice
    assert all("-c" not in argv for argv in popened)

    b.rsync()
    host, cmd = lab.commands[-1]
    rsh = shlex.split(cmd)[shlex.split(cmd).index("-e") + 1]
    assert host == "ct200-lab" and shlex.split(rsh)[:3] == ["ssh", "-c", bench_venv.CIPHERS]

    seen = {}

    def fake_stream(src, dst, *args, **kw):
        seen.update(kw)
        return {}

    monkeypatch.setattr(bench_venv.venv_stream, "stream", fake_stream)
    monkeypatch.setattr(b, "source_manifest", lambda cache="": "[]")
    monkeypatch.setattr(b, "prepare", lambda entries, cache="": {"in_sync": False, "full": True, "send": []})
    monkeypatch.setattr(b, "commit", lambda digest, cache="": {"how": "swap", "hashed_at_commit_bytes": 0})
    monkeypatch.setattr("ansible.module_utils.venv.manifest.decode", lambda entries: [])
    monkeypatch.setattr("ansible.module_utils.venv.manifest.digest", lambda entries: "d")
    b.engine()
    assert seen["ciphers"] == bench_venv.CIPHERS
