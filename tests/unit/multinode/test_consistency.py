"""module_utils/multinode/consistency.py: this host's driver / CUDA / venv hash facts, and their comparison across
the ranks of a group."""
from ansible.module_utils.multinode.consistency import RANK_FACT_KEYS, consistency, rank_facts


def test_rank_facts_read_driver_cuda_and_venv_hash(tmp_path):
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}')
    (tmp_path / "digest").write_text("abc123\n")
    sys_version = tmp_path / "sys-version"
    sys_version.write_text("580.95.05\n")
    proc_version = tmp_path / "proc-version"  # the /proc/driver/nvidia/version form (real text of a 580 driver)
    proc_version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                            "(dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:55:41 UTC 2025\nGCC version:  gcc 12\n")
    facts = rank_facts(str(tmp_path / "cuda"), str(tmp_path / "digest"), True, driver_files=(str(sys_version),))
    assert facts == {"driver": "580.95.05", "cuda": "13.0.2", "venv_hash": "abc123"}
    assert rank_facts("", "", True, driver_files=(str(tmp_path / "none"), str(proc_version)))["driver"] == \
        "580.95.05"
    (tmp_path / "cuda" / "version.json").unlink()
    (tmp_path / "cuda" / "version.txt").write_text("CUDA Version 12.8.1\n")
    assert rank_facts(str(tmp_path / "cuda"), "", True, driver_files=())["cuda"] == "12.8.1"
    # missing: "" on a host that declares GPUs (consistency() refuses it), "none" on one that declares none
    assert rank_facts(str(tmp_path / "nope"), str(tmp_path / "nope"), True, driver_files=()) == {
        "driver": "", "cuda": "", "venv_hash": ""}
    assert rank_facts(str(tmp_path / "nope"), str(tmp_path / "digest"), False, driver_files=()) == {
        "driver": "none", "cuda": "none", "venv_hash": "abc123"}
    assert consistency({"r0": rank_facts("", "", True, driver_files=()),
                        "r1": rank_facts("", "", True, driver_files=())})[0]["detail"] == \
        "driver differs across ranks: missing on r0, r1"


def test_consistency_names_the_ranks_that_differ():
    same = {"driver": "580.95.05", "cuda": "13.0", "venv_hash": "ab" * 32}
    assert consistency({"r0": same, "r1": dict(same)}) == []
    assert consistency({"r0": same}) == []
    out = consistency({"r0": same, "r1": dict(same, driver="575.57.08"), "r2": dict(same, venv_hash="")})
    assert [m["key"] for m in out] == ["driver", "venv_hash"]
    assert "'580.95.05' on r0, r2" in out[0]["detail"] and "'575.57.08' on r1" in out[0]["detail"]
    assert out[0]["values"] == {"r0": "580.95.05", "r1": "575.57.08", "r2": "580.95.05"}
    assert "missing on r2" in out[1]["detail"]
    out = consistency({"r0": {}, "r1": {}})
    assert [m["key"] for m in out] == list(RANK_FACT_KEYS)  # nothing to compare is not a match
