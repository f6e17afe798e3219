"""Compile-cache fan-out of the SGLang service role against the lab (the service lab, first: its fixture converges
both hosts and wipes their caches; the service modules after it start from those hosts): the first service run
publishes each key's bundle into the controller's store; a host whose cache was wiped gets it installed before its
service starts (the stand-in then finds every kernel and starts sooner: printed, not asserted); a bundle of another
key under this key's directory is refused and the service comes up cold; a corrupted bundle (bytes flipped,
bundle.json unchanged) is detected, discarded, and the service comes up cold.

The stand-in writes a small cache under its HOME on a cold start, in the directories real SGLang 0.5.11 wrote on the
H200 (tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json), and takes SGLANG_STANDIN_COMPILE_S longer."""
from __future__ import annotations

import json
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from ansible.module_utils.compile_cache.bundle import DEFAULT_DIRS, file_sha256
from ansible.module_utils.compile_cache.install import install
from ansible.module_utils.compile_cache.pack import pack
from ansible.module_utils.compile_cache.record import RECORD_NAME
from tests.helpers.playbook import run_playbook

ROOT = Path(__file__).resolve().parents[2]
LAB_NAME = "service"
B300, CT200 = "b300-lab", "ct200-lab"
HOSTS = (B300, CT200)
SERVICE = "playbooks/service.yml"
HOME = "/var/lib/sglang"
STAGE = "/var/cache/sglang-compile-cache"
KEY_TASK = "Compile-cache key of this host"
INSTALL_TASK = "Install the compile cache before the service starts (sha256, key and every file checked)"
REFUSED_TASK = "Compile cache refused, the service starts cold"
PACK_TASK = "Pack the home's compile caches"
# the stand-in's cold start costs COMPILE_S more than a warm one (a figure the test prints)
ENV = {"SGLANG_STANDIN_LOAD_S": "1", "SGLANG_STANDIN_WARMUP_S": "0.5", "SGLANG_STANDIN_COMPILE_S": "3"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile-cache-store")


def service(lab, store: Path, limit: str | None = B300, full: bool = False):
    return run_playbook(lab, SERVICE, limit=limit, skip_tags=None if full else "sglang_service_install",
                        extravars={"sglang_service_env_overrides": ENV,
                                   "sglang_service_compile_cache_store": str(store),
                                   # pack what is there even if just written (the default leaves out files younger
                                   # than 2 s: a kernel being compiled); the manifest is compared with the home below
                                   "sglang_service_compile_cache_settle_s": 0})


def evidence(run, host: str) -> dict:
    return run.result("Record the service evidence", host)["ansible_facts"]["sglang_service_evidence"]


def wipe_and_stop(lab, host: str) -> None:
    """The service stopped and every compile cache of its home gone (as on a new host)."""
    lab.ssh(host, f"systemctl stop sglang.service && rm -rf {HOME}/.triton {HOME}/.cache {HOME}/.nv "
                  f"{HOME}/{RECORD_NAME}")


def journal_of(lab, host: str, invocation: str, needle: str, timeout: float = 30) -> str:
    """The invocation's journal once it holds needle (journald may lag the process a little; bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        lab.ssh(host, "journalctl --sync", check=False)
        text = lab.ssh(host, f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID={invocation}").stdout
        if needle in text or time.monotonic() > deadline:
            assert needle in text, f"{needle!r} not in the journal of {invocation}:\n{text[-3000:]}"
            return text
        time.sleep(0.5)


def home_files(lab, host: str) -> dict:
    """{relpath: sha256} of every file under the home's cache dirs."""
    out = lab.ssh(host, f"cd {HOME} && find .triton .cache -type f -exec sha256sum {{}} + 2>/dev/null | sort -k2; true"
                  ).stdout
    return {line.split(None, 1)[1].strip(): line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def published(lab, lab_prepared, store):
    for host in HOSTS:  # a clean start: no cache, no record (the lab may be reused)
        lab.ssh(host, f"rm -rf {HOME}/.triton {HOME}/.cache {HOME}/.nv {HOME}/{RECORD_NAME}", check=False)
    run = service(lab, store, limit=None, full=True)
    assert run.rc == 0, run.failures()
    keys = {h: run.result(KEY_TASK, h)["key"] for h in HOSTS}
    return run, keys


def test_the_first_run_publishes_one_bundle_per_key(published, store, lab):
    run, keys = published
    for host in HOSTS:
        meta = json.loads((store / keys[host] / "bundle.json").read_text())
        assert meta["key"] == keys[host] and meta["publisher"] == host
        assert meta["key_doc"] == run.result(KEY_TASK, host)["key_doc"]
        bundle = store / keys[host] / "bundle.tar"
        assert file_sha256(str(bundle)) == meta["sha256"] and bundle.stat().st_size == meta["bytes"]
        with tarfile.open(bundle) as tf:
            manifest = json.loads(tf.extractfile("manifest.json").read())
        assert manifest["key"] == keys[host] and set(manifest["dirs"]) == {".triton/cache", ".cache/flashinfer",
                                                                           ".cache/tvm-ffi", ".cache/sglang"}
        assert {e["path"]: e["sha256"] for e in manifest["files"]} == home_files(lab, host)
        assert run.result(PACK_TASK, host)["changed"] and evidence(run, host)["compile_cache"]["published"]
        record = json.loads(lab.ssh(host, f"cat {HOME}/{RECORD_NAME}").stdout)
        assert record["key"] == keys[host] and record["source"] == "published"
    assert keys[B300] != keys[CT200]  # other flags (DDTREE vs autoregressive, CUDA graphs): other kernels
    assert sorted(p.name for p in store.iterdir()) == sorted(keys.values())  # nothing incoming left behind
    cold = journal_of(lab, B300, evidence(run, B300)["invocation_id"], "stand-in JIT")
    assert "not in the compile cache" in cold
    # a second run: the store has every key and every home records its own: nothing changes
    again = service(lab, store, limit=None)
    assert again.rc == 0, again.failures()
    for host in HOSTS:
        assert again.changed_count(host) == 0, again.stdout[-3000:]
        assert not again.result(PACK_TASK, host).get("changed")


def test_a_wiped_host_gets_the_bundle_before_its_service_starts(published, store, lab):
    run, keys = published
    expected = home_files(lab, B300)
    wipe_and_stop(lab, B300)
    again = service(lab, store)
    assert again.rc == 0, again.failures()
    res = again.result(INSTALL_TASK, B300)
    assert res["installed"] and res["changed"] and res["key"] == keys[B300], res
    assert home_files(lab, B300) == expected
    assert lab.ssh(B300, f"stat -c %U {HOME}/.triton/cache {HOME}/.cache/tvm-ffi").stdout.split() == ["sglang"] * 2
    assert lab.ssh(B300, f"ls -A {STAGE}").stdout.strip() == ""  # the staged bundle is gone
    ev = evidence(again, B300)
    warm = journal_of(lab, B300, ev["invocation_id"], "stand-in JIT")
    assert "all 13 kernels found in the compile cache" in warm
    cold_s, warm_s = float(evidence(run, B300)["time_to_ready"]), float(ev["time_to_ready"])
    print(f"\nstand-in time to ready on {B300}: cold home {cold_s:.2f} s, seeded from the store {warm_s:.2f} s "
          f"(SGLANG_STANDIN_COMPILE_S={ENV['SGLANG_STANDIN_COMPILE_S']})")
    assert ev["compile_cache"]["installed"] and not ev["compile_cache"]["published"]


def _restore(store: Path, key: str, saved: Path) -> None:
    for name in ("bundle.tar", "bundle.json"):
        shutil.copy2(saved / name, store / key / name)


@pytest.fixture
def saved_bundle(published, store, tmp_path):
    _, keys = published
    for name in ("bundle.tar", "bundle.json"):
        shutil.copy2(store / keys[B300] / name, tmp_path / name)
    yield tmp_path
    _restore(store, keys[B300], tmp_path)


def test_a_bundle_of_another_key_is_refused_and_the_service_comes_up_cold(published, store, lab, saved_bundle,
                                                                         tmp_path):
    _, keys = published
    # by hand: the real bundle's files, packed under another key document (another driver), put under this key
    meta = json.loads((saved_bundle / "bundle.json").read_text())
    src = tmp_path / "home"
    src.mkdir()
    assert install(str(saved_bundle / "bundle.tar"), meta["key"], meta["sha256"], str(src), DEFAULT_DIRS,
                      expected_doc=meta["key_doc"])["installed"]
    other_doc = dict(meta["key_doc"], driver_version="999.99")
    packed = pack(str(src), DEFAULT_DIRS, other_doc, str(store / keys[B300] / "bundle.tar"))
    (store / keys[B300] / "bundle.json").write_text(json.dumps(dict(meta, sha256=packed["sha256"],
                                                                     bytes=packed["bytes"])))
    wipe_and_stop(lab, B300)
    run = service(lab, store)
    assert run.rc == 0, run.failures()  # refused, not failed
    res = run.result(INSTALL_TASK, B300)
    assert not res["installed"] and "key mismatch" in res["reason"], res
    assert "key field driver_version" in res["reason"] and "'999.99'" in res["reason"]
    assert "not installed" in run.result(REFUSED_TASK, B300)["msg"]
    ev = evidence(run, B300)
    assert "not in the compile cache" in journal_of(lab, B300, ev["invocation_id"], "stand-in JIT")  # cold
    assert float(ev["tok_s"]) > 0
    assert lab.ssh(B300, f"ls -A {STAGE}").stdout.strip() == ""
    record = lab.ssh(B300, f"cat {HOME}/{RECORD_NAME}", check=False)
    assert record.returncode != 0  # nothing recorded: the next run tries the store again


def test_a_corrupted_bundle_is_discarded_and_the_service_comes_up_cold(published, store, lab, saved_bundle):
    _, keys = published
    bundle = store / keys[B300] / "bundle.tar"
    data = bytearray(bundle.read_bytes())
    for i in range(1024, min(len(data), 1024 + 64)):
        data[i] ^= 0xFF  # bytes flipped, bundle.json unchanged
    bundle.write_bytes(bytes(data))
    wipe_and_stop(lab, B300)
    run = service(lab, store)
    assert run.rc == 0, run.failures()
    res = run.result(INSTALL_TASK, B300)
    assert not res["installed"] and res["reason"].startswith("corrupt bundle: sha256"), res
    assert "the bundle was deleted" in res["reason"]
    assert lab.ssh(B300, f"ls -A {STAGE}").stdout.strip() == ""
    ev = evidence(run, B300)
    assert "not in the compile cache" in journal_of(lab, B300, ev["invocation_id"], "stand-in JIT")
    assert float(ev["tok_s"]) > 0
