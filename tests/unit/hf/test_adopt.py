"""module_utils/hf/adopt.py: an old deployment's copy is checked against the Hub's hashes and hard-linked into the
models root with the models role's manifest (so hf_model's plan then has nothing to fetch or hash); bad and missing
files are left for the models role; another filesystem is refused unless copying; a rerun changes nothing."""
from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible.module_utils.hf import adopt as adopt_mod
from ansible.module_utils.hf.adopt import AdoptError, adopt
from ansible.module_utils.hf.hub import tree_from_dicts
from ansible.module_utils.hf.model import plan
from ansible.module_utils.hf.verify import Manifest

SHA = "a" * 40
FILES = {"model-00001.safetensors": b"W" * 5000, "config.json": b'{"a": 1}', "sub/tokenizer.model": b"tok" * 100}
LFS = {"model-00001.safetensors", "sub/tokenizer.model"}


def tree(files=FILES):
    out = []
    for path, data in files.items():
        entry = {"path": path, "size": len(data),
                 "blob_sha1": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
        if path in LFS:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
        out.append(entry)
    return {"sha": SHA, "files": out}


def old_copy(root, files=FILES, leaf="Kimi-K2.6-tiny"):
    for path, data in files.items():
        p = root / leaf / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(0o600)
    return root / leaf


def test_adopts_by_hard_link_and_the_models_plan_has_nothing_left(tmp_path):
    src = old_copy(tmp_path / "root-models")
    dest = tmp_path / "srv" / "Kimi-K2.6"
    args = ("Kimi-K2.6", str(dest), tree(), "demo/Kimi-K2.6-tiny", [str(tmp_path / "root-models")])
    check = adopt(*args, check=True)
    assert check["changed"] and check["files_adopted"] == 3 and not dest.exists()
    done = adopt(*args)
    assert done["changed"] and done["method"] == "hardlink" and done["source"] == str(src)
    assert done["files_adopted"] == 3 and done["bytes_adopted"] == sum(map(len, FILES.values()))
    for path in FILES:
        assert os.stat(dest / path).st_ino == os.stat(src / path).st_ino
        assert os.stat(dest / path).st_mode & 0o444 == 0o444
    manifest = Manifest.load(str(dest / ".hf_model" / "manifest.json"))
    assert manifest.revision == SHA and manifest.repo_id == "demo/Kimi-K2.6-tiny"
    _sha, remote = tree_from_dicts(tree())
    ok, to_hash, to_fetch = plan(remote, str(dest), manifest, "quick")
    assert (len(ok), to_hash, to_fetch) == (3, [], [])
    progress = json.loads((dest / ".hf_model" / "progress.json").read_text())
    assert progress["state"] == "done" and progress["bytes_done"] == progress["bytes_total"]
    again = adopt(*args)
    assert not again["changed"] and again["files_vouched"] == 3 and again["source"] is None


def test_bad_and_missing_files_are_left_for_the_models_role(tmp_path):
    broken = dict(FILES)
    broken["model-00001.safetensors"] = b"X" * 5000  # same size, other bytes
    del broken["config.json"]
    old_copy(tmp_path / "old", broken, leaf="Kimi-K2.6")  # matched by the entry name too
    dest = tmp_path / "srv" / "Kimi-K2.6"
    done = adopt("Kimi-K2.6", str(dest), tree(), "demo/Kimi-K2.6-tiny", [str(tmp_path / "old")])
    assert done["files_adopted"] == 1 and done["files_bad"] == ["model-00001.safetensors"]
    assert done["files_missing"] == ["config.json"]
    assert not (dest / "model-00001.safetensors").exists() and (dest / "sub/tokenizer.model").exists()


def test_no_old_copy_is_no_change(tmp_path):
    done = adopt("Kimi-K2.6", str(tmp_path / "srv" / "K"), tree(), "demo/Kimi-K2.6-tiny", [str(tmp_path / "none")])
    assert not done["changed"] and done["source"] is None and "the models role fetches it" in done["msg"]
    assert done["looked_in"] == [str(tmp_path / "none" / "Kimi-K2.6-tiny"), str(tmp_path / "none" / "Kimi-K2.6")]


def test_another_filesystem_is_refused_unless_copying(tmp_path, monkeypatch):
    old_copy(tmp_path / "old")
    dest = tmp_path / "srv" / "Kimi-K2.6"
    monkeypatch.setattr(adopt_mod, "_device", lambda p: 1 if "old" in str(p) else 2)
    with pytest.raises(AdoptError, match="another filesystem") as err:
        adopt("Kimi-K2.6", str(dest), tree(), "demo/Kimi-K2.6-tiny", [str(tmp_path / "old")])
    assert err.value.evidence["bytes"] == sum(map(len, FILES.values())) and not dest.exists()
    done = adopt("Kimi-K2.6", str(dest), tree(), "demo/Kimi-K2.6-tiny", [str(tmp_path / "old")], copy=True)
    assert done["method"] == "copy" and done["files_adopted"] == 3
    assert os.stat(dest / "config.json").st_ino != os.stat(tmp_path / "old/Kimi-K2.6-tiny/config.json").st_ino
