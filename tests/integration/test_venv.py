"""The venv role on the lab: build the lab flavour on ct200-lab (its full lock of real PyPI wheels through the lab
proxy, hash-checked by pip; the SGLang stand-in; the lab patch series), refuse a lock with a tampered hash, stream it
to b300-lab with byte-code compiled there before the swap, repair a corrupted file, survive a killed transfer, refuse
bad input before the target changes. Tests run in file order and share the lab "venv"."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from ansible.module_utils.venv import lock as venv_lock
from ansible.module_utils.venv import patch as venv_patch
from tests.helpers.molecule import run_scenario
from tests.helpers.playbook import start_playbook

LAB_NAME = "venv"
ROOT = Path(__file__).resolve().parents[2]
VENV = "/opt/sglang/venv"
STAGE = "/opt/sglang/.venv.stage"
FACT = "/etc/ansible/facts.d/sglang_venv.fact"
PLAYBOOK = "playbooks/venv.yml"
STREAM = {"venv_method": "stream", "venv_stream_source": "ct200-lab"}
SERIES_DIR = ROOT / "roles/venv/files/patches/lab"
SERIES_HASH = venv_patch.series_hash(str(SERIES_DIR), venv_patch.read_series(str(SERIES_DIR)))
MANIFEST_SRC = (ROOT / "module_utils/venv/manifest.py").read_text()
BYTECODE_SRC = (ROOT / "module_utils/venv/bytecode.py").read_text()
LAB_LOCK = ROOT / "roles/venv/files/locks/lab.txt"


def remote_summary(lab, host: str, path: str = VENV) -> dict:
    """Content hash of a venv computed on the host itself by the same manifest code the modules use."""
    code = MANIFEST_SRC + f"\nimport json\nprint(json.dumps(summary(scan({path!r}))))\n"
    return json.loads(lab.ssh(host, "python3 -", input=code).stdout)


def remote_bytecode(lab, host: str, path: str = VENV) -> dict:
    """The byte-code check of a venv (importlib's rules: magic, flags, source hash or mtime+size, mode), run on the
    host by the venv's own interpreter with the code the role uses."""
    return json.loads(lab.ssh(host, f"{path}/bin/python -I -B - check", input=BYTECODE_SRC).stdout)


def fact(lab, host: str) -> dict:
    return json.loads(lab.ssh(host, f"cat {FACT}").stdout)


def sh(lab, host: str, cmd: str) -> str:
    return lab.ssh(host, cmd).stdout.strip()


def test_build_lab_flavour_then_noop(lab, playbook):
    run = playbook(PLAYBOOK, limit="ct200-lab", extravars={"venv_method": "build"})
    assert run.rc == 0, run.stdout[-5000:]
    src = remote_summary(lab, "ct200-lab")
    f = fact(lab, "ct200-lab")
    assert f["content_hash"] == src["digest"] and f["patch_series_hash"] == SERIES_HASH
    assert f["sglang_version"] == "0.5.11.post0+standin" and f["python_version"].startswith("3.11.")
    assert f["method"] == "build" and f["flavour"] == "lab" and len(f["recipe_hash"]) == 64
    # the full lock, hash-checked, nothing resolved: only what the lock holds, the stand-in (--no-deps) and the venv's
    # own pip/setuptools (python -m venv) are installed; pip check passed
    built = run.result(BUILD_TASK, "ct200-lab")
    assert built["steps"][:4] == ["venv", "lock", "local_packages", "pip_check"], built["steps"]
    assert built["recipe"]["lock_packages"] == 2 and len(built["recipe"]["lock"]) == 64
    dists = {d["name"].lower(): d["version"]
             for d in json.loads(sh(lab, "ct200-lab", f"{VENV}/bin/python -m pip list --format=json"))}
    assert dists.pop("six") == "1.17.0" and dists.pop("idna") == "3.10"
    assert dists.pop("sglang-standin") == "0.5.11.post0+standin" and set(dists) <= {"pip", "setuptools"}, dists
    # the venv's own flag schema, in the venv: the stand-in's 0.5.11 parser plus the DDTREE flags of the lab series
    schema_text = sh(lab, "ct200-lab", f"cat {VENV}/sglang-flag-schema.json")
    schema = json.loads(schema_text)
    assert schema["sglang_version"] == "0.5.11" and f["flag_schema_sglang_version"] == "0.5.11"
    assert "--speculative-ddtree-budget" in {flag for o in schema["options"].values() for flag in o["flags"]}
    assert f["flag_schema_sha256"] == sh(lab, "ct200-lab", f"sha256sum {VENV}/sglang-flag-schema.json").split()[0]
    # the patch series is in the installed six, in order; pins and the stand-in import
    out = sh(lab, "ct200-lab", f"{VENV}/bin/python -c 'import six, idna, sglang_standin; print(six.lab_patched())'")
    assert out == "('0001', '0002')"
    # shebangs carry the live path although the build happened in the stage
    assert sh(lab, "ct200-lab", f"head -n1 {VENV}/bin/pip").startswith(f"#!{VENV}/bin/python")
    assert sh(lab, "ct200-lab", f"ls -a {os.path.dirname(VENV)}").split() == [".", "..", "venv"]

    again = playbook(PLAYBOOK, limit="ct200-lab", extravars={"venv_method": "build"})
    assert again.rc == 0, again.stdout[-4000:]
    assert again.changed_count("ct200-lab") == 0, again.stdout[-4000:]
    assert again.result("Build the venv (skipped when the live venv matches the recipe and its recorded content)",
                        "ct200-lab")["built"] is False


def test_a_lock_with_a_tampered_hash_is_refused_by_pips_hash_check_and_the_live_venv_stays(lab, playbook, tmp_path):
    """The lab lock with six's sha256 lines replaced (a well-formed lock: preflight accepts it): the recipe changed, so
    the host builds, and pip's hash check refuses the six wheel it downloads. The play fails at the build naming six;
    nothing is swapped: the live venv, its fact and its imports are what they were. The real lock again is a no-op
    that removes the failed build's stage."""
    good = LAB_LOCK.read_text()
    six = next(e for e in venv_lock.parse(good)["entries"] if e["name"] == "six")
    bad = good
    for h in six["hashes"]:
        bad = bad.replace(h, "sha256:" + hashlib.sha256(h.encode()).hexdigest())
    assert bad != good and venv_lock.parse(bad)["names"] == ["idna", "six"]
    lock = tmp_path / "lab.txt"
    lock.write_text(bad)
    before = remote_summary(lab, "ct200-lab")["digest"]
    fact_before = sh(lab, "ct200-lab", f"md5sum {FACT}")

    run = playbook(PLAYBOOK, limit="ct200-lab", extravars={"venv_method": "build", "venv_lock_file": str(lock)})
    assert run.rc != 0
    failed = run.result(BUILD_TASK, "ct200-lab")
    assert failed["_event"] == "runner_on_failed", failed
    assert "pip install --require-hashes (the lock) failed" in failed["msg"], failed["msg"][-3000:]
    assert "DO NOT MATCH THE HASHES" in failed["msg"] and "six==1.17.0" in failed["msg"], failed["msg"][-3000:]
    assert not run.results("Swap the built venv in")
    assert remote_summary(lab, "ct200-lab")["digest"] == before
    assert sh(lab, "ct200-lab", f"md5sum {FACT}") == fact_before
    assert sh(lab, "ct200-lab", f"{VENV}/bin/python -c 'import six; print(six.lab_patched())'") == "('0001', '0002')"

    again = playbook(PLAYBOOK, limit="ct200-lab", extravars={"venv_method": "build"})
    assert again.rc == 0, again.failures() + again.stdout[-3000:]
    noop = again.result(BUILD_TASK, "ct200-lab")
    assert noop["built"] is False and noop["recovered"] == [f"removed stale {STAGE}"], noop
    assert sh(lab, "ct200-lab", f"ls -a {os.path.dirname(VENV)}").split() == [".", "..", "venv"]
    assert remote_summary(lab, "ct200-lab")["digest"] == before


def test_stream_to_b300_then_second_run_moves_nothing(lab, playbook):
    run = playbook(PLAYBOOK, extravars=STREAM)
    assert run.rc == 0, run.stdout[-5000:]
    stage = run.result("Compare with the source and prepare the stage", "b300-lab")
    assert stage["full"] or stage["send_count"] > 0
    src, dst = remote_summary(lab, "ct200-lab"), remote_summary(lab, "b300-lab")
    assert dst["digest"] == src["digest"] and dst["files"] == src["files"] > 10
    f = fact(lab, "b300-lab")
    assert f["content_hash"] == src["digest"] and f["method"] == "stream" and f["source"] == "ct200-lab"
    assert f["patch_series_hash"] == SERIES_HASH and f["sglang_version"] == "0.5.11.post0+standin"
    assert f["flag_schema_sha256"] == fact(lab, "ct200-lab")["flag_schema_sha256"] != ""  # the schema came along
    assert sh(lab, "b300-lab", f"{VENV}/bin/python -c 'import six; print(six.lab_patched())'") == "('0001', '0002')"
    assert any(r["_host"] == "b300-lab" for r in run.results("Report the venv swap"))  # the swap notified
    report = json.loads(run.result("Stream the differing files from the source into the stage (controller-side ssh "
                                   "relay)", "b300-lab")["stdout"])
    # the receiver wrote (and hashed) every file that travelled; "auto" sends plain tar from a 2-CPU lab host
    assert report["files_written"] == (src["files"] if stage["full"] else stage["send_count"]), report
    assert report["compressed"] is False and report["tar_bytes"] > 0, report
    # byte-code never travels: b300 compiled its own in the stage before the swap, valid for every module
    committed = run.result("Verify the stage against the source manifest and swap it in", "b300-lab")
    compiled = committed["bytecode"]["compiled"] + committed["bytecode"]["kept"]  # kept: an earlier session's b300 venv
    assert compiled > 10 and committed["bytecode"]["errors"] == [], committed["bytecode"]
    code = remote_bytecode(lab, "b300-lab")
    assert code["invalid"] == 0 and code["sources"] == code["valid"] + code["uncompilable_count"], code
    assert code["valid"] == compiled and set(code["modes"]) == {"checked-hash"}, code
    verified = run.result("Byte-code of the live venv is valid (importing any module as the service user compiles "
                          "nothing)", "b300-lab")
    assert verified["_event"] == "runner_on_ok" and verified["invalid"] == 0 and verified["valid"] == code["valid"]
    inode = sh(lab, "b300-lab", f"stat -c %i {VENV}/pyvenv.cfg")

    again = playbook(PLAYBOOK, extravars=STREAM)
    assert again.rc == 0, again.stdout[-4000:]
    assert again.changed_count("b300-lab") == 0 and again.changed_count("ct200-lab") == 0, again.stdout[-4000:]
    assert again.result("Compare with the source and prepare the stage", "b300-lab")["in_sync"] is True
    moved = again.result("Stream the differing files from the source into the stage (controller-side ssh relay)",
                         "b300-lab")
    assert moved["_event"] == "runner_on_skipped"  # no transfer at all: no bytes moved
    assert not again.results("Report the venv swap")
    assert sh(lab, "b300-lab", f"stat -c %i {VENV}/pyvenv.cfg") == inode


def test_importing_the_streamed_venv_as_an_unprivileged_user_compiles_nothing(lab):
    """The service user cannot write into the root-owned venv: without byte-code every start would compile every
    module. Every module of the stand-in, six and idna loads from its pyc (python -v: "code object from '<pyc>'",
    never from the .py), and root, who could write, rewrites no pyc on the same imports."""
    imports = "import six, idna, sglang_standin, sglang_standin.server_args"
    proc = lab.ssh("b300-lab", f"cd / && runuser -u nobody -- env -i {VENV}/bin/python -v -c '{imports}'")
    loaded = [line.split("code object from ", 1)[1].strip("'")
              for line in proc.stderr.splitlines() if line.startswith("# code object from ") and VENV in line]
    assert any("/sglang_standin/" in p for p in loaded) and any(p.endswith("six.cpython-311.pyc") for p in loaded)
    compiled = [p for p in loaded if p.endswith(".py")]
    assert compiled == [] and all(p.endswith(".pyc") for p in loaded), compiled or loaded
    assert not [line for line in proc.stderr.splitlines() if "could not create" in line and VENV in line]
    snapshot = f"find {VENV} -name '*.pyc' -printf '%p %s %T@ %i\\n' | sort | sha256sum"
    before = sh(lab, "b300-lab", snapshot)
    sh(lab, "b300-lab", f"cd / && env -u PYTHONDONTWRITEBYTECODE {VENV}/bin/python -c '{imports}'")
    assert sh(lab, "b300-lab", snapshot) == before


def test_molecule_scenario_of_the_venv_role_on_this_lab(lab, tmp_path):
    """The venv role's molecule scenario here, where this lab already holds what it converges (the lab flavour built on
    ct200-lab and streamed to b300-lab, by the tests above): its converge and idempotence are no-ops, its verify runs
    on these hosts; the convergence is paid once (tests/helpers/molecule.py HOSTED)."""
    run_scenario("venv", tmp_path / "molecule.log", lab_name=LAB_NAME, keep_lab=True)


def test_corrupted_file_is_detected_and_repaired(lab, playbook):
    six = f"{VENV}/lib/python3.11/site-packages/six.py"
    good = remote_summary(lab, "ct200-lab")["digest"]
    sh(lab, "b300-lab", f"echo 'raise SystemExit(3)' >> {six}")
    untouched_inode = sh(lab, "b300-lab", f"stat -c %i {VENV}/lib/python3.11/site-packages/idna/core.py")

    check = playbook(PLAYBOOK, limit="b300-lab", extravars=STREAM, check=True)
    assert check.rc == 0, check.stdout[-4000:]
    assert check.result("Compare with the source and prepare the stage", "b300-lab")["in_sync"] is False
    assert sh(lab, "b300-lab", f"tail -n1 {six}") == "raise SystemExit(3)"  # check mode changed nothing
    assert sh(lab, "b300-lab", f"test -e {STAGE} && echo yes || echo no") == "no"

    run = playbook(PLAYBOOK, limit="b300-lab", extravars=STREAM)
    assert run.rc == 0, run.stdout[-5000:]
    stage = run.result("Compare with the source and prepare the stage", "b300-lab")
    assert stage["send"] == ["lib/python3.11/site-packages/six.py"] and stage["delete"] == []
    assert remote_summary(lab, "b300-lab")["digest"] == good
    # only the corrupted file travelled: the others are the same inodes (hard-linked into the stage)
    assert sh(lab, "b300-lab", f"stat -c %i {VENV}/lib/python3.11/site-packages/idna/core.py") == untouched_inode
    assert sh(lab, "b300-lab", f"{VENV}/bin/python -c 'import six; print(six.lab_patched())'") == "('0001', '0002')"


def test_killed_transfer_leaves_live_venv_intact(lab):
    before = remote_summary(lab, "b300-lab")["digest"]
    sh(lab, "ct200-lab", f"head -c 48M /dev/urandom > {VENV}/big.bin")
    proc = start_playbook(lab, PLAYBOOK, {**STREAM, "venv_stream_bwlimit_mbps": 4}, "b300-lab")
    try:
        deadline = time.monotonic() + 180
        size = 0
        while time.monotonic() < deadline and proc.poll() is None:
            out = lab.ssh("b300-lab", f"stat -c %s {STAGE}/big.bin 2>/dev/null || echo 0", check=False).stdout
            size = int(out.strip() or 0)
            if size > 1 << 20:
                break
            time.sleep(0.5)
        assert proc.poll() is None and 0 < size < 48 << 20, f"transfer not caught midway (size {size})"
        os.killpg(proc.pid, signal.SIGKILL)  # the playbook and its ssh relay, all at once
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # the live venv is exactly what it was, and works
    assert remote_summary(lab, "b300-lab")["digest"] == before
    assert sh(lab, "b300-lab", f"test -e {VENV}/big.bin && echo yes || echo no") == "no"
    assert sh(lab, "b300-lab", f"{VENV}/bin/python -c 'import six; print(six.lab_patched())'") == "('0001', '0002')"

    from tests.helpers.playbook import run_playbook
    run = run_playbook(lab, PLAYBOOK, limit="b300-lab", extravars=STREAM)
    assert run.rc == 0, run.stdout[-5000:]
    stage = run.result("Compare with the source and prepare the stage", "b300-lab")
    assert any("removed stale" in a for a in stage["recovered"]) and stage["send"] == ["big.bin"]
    assert remote_summary(lab, "b300-lab")["digest"] == remote_summary(lab, "ct200-lab")["digest"]
    # back to the built venv on both hosts for the tests after this one
    sh(lab, "ct200-lab", f"rm {VENV}/big.bin")
    run = run_playbook(lab, PLAYBOOK, limit="b300-lab", extravars=STREAM)
    assert run.rc == 0 and run.result("Compare with the source and prepare the stage", "b300-lab")["delete"] == \
        ["big.bin"]


def test_direct_host_to_host_stream_repairs_without_the_controller_relaying(lab, playbook):
    """venv_stream_via=direct: the source ssh-es to the target itself (it holds a key the target accepts)."""
    key = Path(lab.state()["ssh_key"]).read_text()
    sh(lab, "ct200-lab", "install -d -m 700 /root/.ssh && install -m 600 /dev/stdin /root/.ssh/venv_direct_key <<'EOF'\n"
       + key + "EOF")
    six = f"{VENV}/lib/python3.11/site-packages/six.py"
    sh(lab, "b300-lab", f"echo 'raise SystemExit(4)' >> {six}")
    run = playbook(PLAYBOOK, limit="b300-lab", extravars={
        **STREAM, "venv_stream_via": "direct",
        "venv_stream_direct_ssh_args": "-i /root/.ssh/venv_direct_key -o StrictHostKeyChecking=no "
                                       "-o UserKnownHostsFile=/dev/null -o BatchMode=yes"})
    assert run.rc == 0, run.stdout[-5000:]
    report = json.loads(run.result("Stream the differing files from the source into the stage (controller-side ssh "
                                   "relay)", "b300-lab")["stdout"])
    assert report["via"] == "direct" and report["files_written"] == 1, report
    assert remote_summary(lab, "b300-lab")["digest"] == remote_summary(lab, "ct200-lab")["digest"]
    assert sh(lab, "b300-lab", f"{VENV}/bin/python -c 'import six; print(six.lab_patched())'") == "('0001', '0002')"
    sh(lab, "ct200-lab", "rm -f /root/.ssh/venv_direct_key")


def test_check_mode_on_a_host_without_the_venv_changes_nothing(lab, playbook):
    run = playbook(PLAYBOOK, limit="b300-lab", check=True,
                   extravars={"venv_method": "build", "venv_path": "/opt/checkmode/venv",
                              "venv_build_dir": "/var/lib/checkmode"})
    assert run.rc == 0, run.stdout[-4000:]
    assert run.result("Build the venv (skipped when the live venv matches the recipe and its recorded content)",
                      "b300-lab")["built"] is True
    assert sh(lab, "b300-lab", "ls -d /opt/checkmode /var/lib/checkmode 2>/dev/null | wc -l") == "0"


@pytest.mark.parametrize("case", ["unknown_flavour", "missing_patch_file", "empty_ddtree_series", "source_without_venv",
                                  "bad_zstd_level", "unhashed_lock_line", "stale_lock"])
def test_bad_input_fails_before_the_target_changes(lab, playbook, tmp_path, case):
    before = sh(lab, "b300-lab", f"stat -c %i {VENV}/pyvenv.cfg; md5sum {FACT}")
    extravars = {"venv_method": "build"}
    if case == "unknown_flavour":
        extravars["venv_flavour"] = "bogus"
        expect = "venv_flavour=bogus"
    elif case == "missing_patch_file":
        (tmp_path / "series").write_text("0001-six-lab-marker.patch\n0009-not-there.patch\n")
        (tmp_path / "0001-six-lab-marker.patch").write_text((SERIES_DIR / "0001-six-lab-marker.patch").read_text())
        extravars["venv_patch_source_dir"] = str(tmp_path)
        expect = "names missing patch file(s): 0009-not-there.patch"
    elif case == "empty_ddtree_series":
        extravars.update({"venv_flavour": "ddtree", "venv_ddtree_patch_dir": str(tmp_path)})
        expect = "holds no patches"
    elif case == "unhashed_lock_line":  # pip would refuse it on the host: preflight names the line first
        (tmp_path / "lab.txt").write_text(LAB_LOCK.read_text() + "requests==2.32.3\n")
        extravars["venv_lock_file"] = str(tmp_path / "lab.txt")
        expect = f"{tmp_path / 'lab.txt'}:{len(LAB_LOCK.read_text().splitlines()) + 1}: 'requests==2.32.3': " \
                 "requests==2.32.3 has no --hash=sha256"
    elif case == "stale_lock":  # the pins changed, nobody re-ran lock.sh
        pins = (ROOT / "roles/venv/files/requirements/lab.txt").read_text()
        (tmp_path / "pins.txt").write_text(pins + "attrs==25.1.0\n")
        extravars["venv_lock_input"] = str(tmp_path / "pins.txt")
        expect = "was generated from another pins.txt"
    elif case == "bad_zstd_level":
        extravars = {**STREAM, "venv_stream_zstd_level": "fast"}
        expect = "venv_stream_zstd_level=fast (auto, or 0-19)"
    else:
        extravars = {**STREAM, "venv_path": "/opt/nothing/venv"}
        expect = "stream source ct200-lab has no usable venv"
    run = playbook(PLAYBOOK, limit="b300-lab", extravars=extravars)
    assert run.rc != 0
    assert expect in run.stdout, run.stdout[-3000:]
    assert run.changed_count("b300-lab") == 0
    assert sh(lab, "b300-lab", f"stat -c %i {VENV}/pyvenv.cfg; md5sum {FACT}") == before
    assert sh(lab, "b300-lab", "test -e /opt/nothing && echo yes || echo no") == "no"


# The clone route builds into a path, build dir and fact of its own on ct200-lab, so the lab venv the tests above
# built (and the module's other tests rely on) stays as it is; everything it made is removed at the end.
CLONE_VENV = "/opt/sglang-clone/venv"
CLONE_FACT = "/etc/ansible/facts.d/sglang_venv_clone.fact"
CLONE = {"venv_method": "build", "venv_source": "clone", "venv_clone_repo": "{{ lab_services.gitfork.url }}",
         "venv_clone_subdir": "", "venv_local_packages": [], "venv_path": CLONE_VENV,
         "venv_build_dir": "/var/lib/sglang-venv-clone", "venv_fact_path": CLONE_FACT}
BUILD_TASK = "Build the venv (skipped when the live venv matches the recipe and its recorded content)"


def test_clone_route_builds_the_forks_pinned_commit_from_the_labs_git_service(lab, playbook, tmp_path):
    """venv_source=clone against the lab's gitfork service (the stand-in with the DDTree patch committed, served
    with git's dumb HTTP protocol on the gateway): the host fetches exactly the pinned commit (dumb HTTP refuses a
    shallow fetch: the full-fetch fallback), pip installs it with no local package and no patch series, and the
    venv's parser has the fork's DDTree flags; a branch name is refused before any change; a rerun is a no-op."""
    from lab import gitfork
    service = lab.state()["services"]["gitfork"]
    expected = gitfork.build_repo(tmp_path)  # deterministic: the test computes the commit the lab serves
    commit = expected["commit"]
    assert service["commit"] == commit and service["url"].endswith("/" + gitfork.REPO_NAME)
    made = "ls -d /opt/sglang-clone /var/lib/sglang-venv-clone 2>/dev/null | wc -l"
    try:
        refused = playbook(PLAYBOOK, limit="ct200-lab", extravars={**CLONE, "venv_clone_commit": gitfork.BRANCH})
        assert refused.rc != 0 and refused.changed_count("ct200-lab") == 0
        assert "venv_clone_commit 'ddtree' is not a pinned commit" in refused.stdout, refused.stdout[-3000:]
        assert sh(lab, "ct200-lab", made) == "0"

        check = playbook(PLAYBOOK, limit="ct200-lab", extravars={**CLONE, "venv_clone_commit": commit}, check=True)
        assert check.rc == 0, check.stdout[-4000:]
        planned = check.result(BUILD_TASK, "ct200-lab")
        assert planned["built"] and f"would fetch {commit} from {service['url']}" in planned["reason"], planned
        assert sh(lab, "ct200-lab", made) == "0"  # check mode fetched and made nothing

        run = playbook(PLAYBOOK, limit="ct200-lab", extravars={**CLONE, "venv_clone_commit": commit})
        assert run.rc == 0, run.failures() + run.stdout[-4000:]
        built = run.result(BUILD_TASK, "ct200-lab")
        assert built["built"] and built["clone"]["fetched"] and built["clone"]["fetch"] == "full", built["clone"]
        assert built["steps"][:1] == ["fetch"] and "clone" in built["steps"] and "local_packages" not in built["steps"]
        assert built["patches_applied"] == [] and built["recipe"]["clone"]["commit"] == commit
        f = json.loads(sh(lab, "ct200-lab", f"cat {CLONE_FACT}"))
        assert f["venv_source"] == "clone" and f["clone_commit"] == commit and f["clone_repo"] == service["url"]
        assert f["content_hash"] == remote_summary(lab, "ct200-lab", CLONE_VENV)["digest"] and f["patches"] == []
        assert f["sglang_version"] == "0.5.11.post0+standin" and f["flag_schema_sglang_version"] == "0.5.11"
        # the fork's DDTree patch took effect: the venv's own parser (its extracted schema) has the flags
        schema = json.loads(sh(lab, "ct200-lab", f"cat {CLONE_VENV}/sglang-flag-schema.json"))
        assert "--speculative-ddtree-budget" in {flag for o in schema["options"].values() for flag in o["flags"]}
        assert f["flag_schema_sha256"] == sh(lab, "ct200-lab",
                                             f"sha256sum {CLONE_VENV}/sglang-flag-schema.json").split()[0]
        # the stand-in came from the checkout of the pinned commit, not from the lab's local package; no series
        out = sh(lab, "ct200-lab", f"{CLONE_VENV}/bin/python -c 'import six, sglang_standin.server_args_patch; "
                                   "print(hasattr(six, \"lab_patched\"))'")
        assert out == "False"
        assert sh(lab, "ct200-lab", "git -C /var/lib/sglang-venv-clone/lab/clone rev-parse HEAD") == commit

        again = playbook(PLAYBOOK, limit="ct200-lab", extravars={**CLONE, "venv_clone_commit": commit})
        assert again.rc == 0, again.stdout[-4000:]
        assert again.changed_count("ct200-lab") == 0, again.stdout[-4000:]
        noop = again.result(BUILD_TASK, "ct200-lab")
        assert noop["built"] is False and noop["clone"]["fetched"] is False
    finally:
        sh(lab, "ct200-lab", f"rm -rf /opt/sglang-clone /var/lib/sglang-venv-clone {CLONE_FACT}")
