"""hf_hub.hub_tree / tree_from_dicts (the tree the controller reads once and hands to every host) and the module
documentation of hf_tree / hf_model / model_peer against their argument specs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from lab.testhub import HubProcess
from ansible.module_utils.hf.hub import HubError, hub_tree, tree_from_dicts

ROOT = Path(__file__).resolve().parents[3]


def _module(name):
    spec = importlib.util.spec_from_file_location(f"lib_{name}", ROOT / "library" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["hf_tree", "hf_model", "model_peer"])
def test_documented_options_are_the_argument_spec(name):
    mod = _module(name)
    doc = yaml.safe_load(mod.DOCUMENTATION)["options"]
    spec = getattr(mod, "ARGS", None) or getattr(mod, "ARGUMENT_SPEC", None)
    assert spec is not None, f"{name}: no ARGS / ARGUMENT_SPEC"
    assert set(doc) == set(spec), set(doc) ^ set(spec)
    for key, opt in spec.items():
        assert doc[key].get("type", "str") == opt.get("type", "str"), key
        if opt.get("no_log"):
            assert "token" in key or "key" in key, key


def test_hub_tree_and_the_handed_tree_agree(tmp_path):
    with HubProcess(seed=3, repos=["t/tree:shards=2,shard_size=1MiB"], cache_dir=str(tmp_path)) as hub:
        sha, files = hub_tree(hub.endpoint, "t/tree", "main", ignore_patterns=["*.md"])
    assert len(sha) == 40 and files and not any(f.path.endswith(".md") for f in files)
    handed = {"sha": sha, "files": [f.as_dict() for f in files]}
    sha2, files2 = tree_from_dicts(handed)
    assert sha2 == sha and [f.as_dict() for f in files2] == handed["files"]
    assert any(f.lfs for f in files2) and any(not f.lfs for f in files2)


@pytest.mark.parametrize("tree,needle", [
    ({"sha": "main", "files": []}, "40-hex"),
    ({"sha": "a" * 40, "files": []}, "lists no file"),
    ({"sha": "a" * 40, "files": [{"path": "../etc/passwd", "size": 1, "sha256": None, "blob_sha1": "b" * 40}]},
     "hostile"),
    ({"sha": "a" * 40, "files": [{"path": "x", "size": 1, "sha256": "zz", "blob_sha1": None}]}, "not a sha256"),
    ({"sha": "a" * 40, "files": [{"path": "x", "size": -1, "sha256": None, "blob_sha1": "b" * 40}]}, "non-negative"),
])
def test_a_handed_tree_gets_the_same_refusals_as_the_hubs(tree, needle):
    with pytest.raises(HubError, match=needle):
        tree_from_dicts(tree)
