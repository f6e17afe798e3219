"""module_utils/compile_cache/key.py: the cache key, what changes it and what does not, and its flags against every
committed schema."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.key import (EP_FLAGS, NON_KERNEL_FLAGS, TP_FLAGS, cache_key, first_difference,
                                                    kernel_flags, key_doc, parallel_sizes)
from tests.helpers.compile_cache import ARGV, ROOT, facts

SCHEMAS = sorted((ROOT / "schemas/sglang").glob("*.json"))


# ---------------------------------------------------------------------------------------------------------------
# key


def test_key_is_sha256_of_the_canonical_document_and_independent_of_order():
    key, doc = cache_key(facts())
    assert key == hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    shuffled = ARGV[8:] + ARGV[:8]
    key2, _ = cache_key(facts(kernel_flags=kernel_flags(shuffled)))
    assert key2 == key  # flag order in the argv does not matter
    assert cache_key(dict(reversed(list(facts().items()))))[0] == key


@pytest.mark.parametrize("field,value", [
    ("gpu_name", "NVIDIA B300"), ("compute_capability", "10.3"), ("driver_version", "580.65.06"),
    ("cuda_version", "13.1.0"), ("sglang_version", "0.5.23"), ("patch_series_hash", "ef" * 32),
    ("torch_version", "2.14.1"), ("venv_digest", "01" * 32), ("tp_size", 4), ("ep_size", 8),
    ("kernel_flags", kernel_flags(ARGV + ["--page-size", "1"])),
])
def test_every_key_field_changes_the_key(field, value):
    assert cache_key(facts(**{field: value}))[0] != cache_key(facts())[0]
    diff = first_difference(key_doc(facts()), key_doc(facts(**{field: value})))
    assert diff[0] == field


def test_flags_that_cannot_change_kernels_do_not_change_the_key():
    other = ["--model-path", "/srv/models/Kimi-K2.6", "--host=127.0.0.1", "--port", "31000", "--tp-size", "8",
             "--attention-backend", "triton", "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "8",
             "--trust-remote-code", "--api-key", "secret-key", "--enable-metrics", "--chat-template", "x.jinja"]
    assert kernel_flags(other) == kernel_flags(ARGV)
    assert "secret-key" not in json.dumps(key_doc(facts(kernel_flags=kernel_flags(other))))
    # tp has its own field; kernel-relevant flags stay, with their values
    flags = dict((k, v) for k, v in kernel_flags(ARGV))
    assert "--tp-size" not in flags and flags["--speculative-ddtree-budget"] == ["8"] and flags["--trust-remote-code"] == []


def test_parallel_sizes_from_any_spelling():
    assert parallel_sizes([]) == (1, 1)
    assert parallel_sizes(["--tensor-parallel-size", "8", "--ep", "4"]) == (8, 4)
    assert parallel_sizes(["--tp-size=2", "--expert-parallel-size", "2"]) == (2, 2)


def test_a_partial_or_padded_key_is_refused():
    f = facts()
    del f["venv_digest"]
    with pytest.raises(CompileCacheError, match="missing.*venv_digest"):
        cache_key(f)
    with pytest.raises(CompileCacheError, match="unknown.*hostname"):
        cache_key(facts(hostname="b300-01"))
    with pytest.raises(CompileCacheError, match="tp_size"):
        cache_key(facts(tp_size="eight"))


def _schema_flags(path: Path) -> set:
    return {f for o in json.loads(path.read_text())["options"].values() for f in o["flags"]}


@pytest.mark.parametrize("schema", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_every_excluded_and_parallel_flag_exists_in_every_committed_schema(schema):
    flags = _schema_flags(schema)
    assert len(SCHEMAS) >= 2
    missing = sorted(f for f in NON_KERNEL_FLAGS | set(TP_FLAGS) | set(EP_FLAGS) if f not in flags)
    assert not missing, f"{schema.name} lacks {missing}"
    # and every spelling the schema has for tp/ep is known (an alias would otherwise slip into kernel_flags)
    opts = json.loads(schema.read_text())["options"]
    for dest in ("tensor_parallel_size", "tp_size", "expert_parallel_size", "ep_size"):
        if dest in opts:
            known = TP_FLAGS if "t" == dest[0] else EP_FLAGS
            assert set(opts[dest]["flags"]) <= set(known), (schema.name, dest, opts[dest]["flags"])
