"""library/sglang_drafter_check.py as Ansible runs it on a host: reads the drafter's config.json, changes nothing, and
fails with the evidence (both numbers, both sources, or the path) before any restart."""
import json
import os
import subprocess

from tests.helpers.ansible_module import ROOT, module_command


def run(tmp_path, check_mode=False, **args):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": dict(args, _ansible_check_mode=check_mode)}))
    proc = subprocess.run(module_command("sglang_drafter_check", argfile), capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def drafter(tmp_path, block):
    d = tmp_path / "Kimi-K2.6-DFlash"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"block_size": block, "dflash_config": {"block_size": block}}))
    return str(d)


def test_match_is_ok_and_unchanged(tmp_path):
    out = run(tmp_path, path=drafter(tmp_path, 8), block_size=8, source="--speculative-dflash-block-size 8")
    assert not out.get("failed") and out["changed"] is False and out["checked"] is True
    assert (out["block_size"], out["drafter_block_size"], out["drafter_key"]) == (8, 8, "dflash_config.block_size")


def test_mismatch_fails_naming_both_numbers_and_sources_in_check_mode_too(tmp_path):
    path = drafter(tmp_path, 16)
    for check_mode in (False, True):
        out = run(tmp_path, check_mode, path=path, block_size=8, source="--speculative-dflash-block-size 8")
        assert out["failed"] and out["kind"] == "drafter_mismatch"
        assert "block size 8 (--speculative-dflash-block-size 8)" in out["msg"]
        assert f"made for 16 ({path}/config.json: dflash_config.block_size)" in out["msg"]


def test_no_block_size_given_takes_the_drafters_own(tmp_path):
    out = run(tmp_path, path=drafter(tmp_path, 16), source="the server takes the drafter's own")
    assert not out.get("failed") and out["block_size"] == 16


def test_missing_config_fails_with_the_path_but_check_mode_only_reports_it(tmp_path):
    path = str(tmp_path / "Kimi-K2.6-DFlash")
    out = run(tmp_path, path=path, block_size=8, source="s")
    assert out["failed"] and out["kind"] == "drafter_missing" and out["config"] == f"{path}/config.json"
    out = run(tmp_path, True, path=path, block_size=8, source="s")
    assert not out.get("failed") and out["checked"] is False and out["changed"] is False
    assert out["msg"].startswith("check mode: the drafter's config") and f"{path}/config.json" in out["msg"]
