#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: the SGLang service's compile-cache key, bundle (pack) and install."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: compile_cache
short_description: Key, pack or install the compile caches (Triton, FlashInfer, tvm-ffi, SGLang) of an SGLang home
description:
  - Real SGLang JIT-compiles kernels into its HOME on a cold start (measured on an H200 with SGLang 0.5.11 -
    C(.triton/cache), C(.cache/flashinfer), C(.cache/tvm-ffi), C(.cache/sglang); a seeded HOME was ready 22 s sooner,
    see tests/fixtures/real_sglang/compile_cache/0.5.11-h200.json). The service role spreads them host to host
    through a store on the controller; this module does the host's part. The logic is module_utils/compile_cache/
    (key.py, host.py, bundle.py, pack.py, record.py, install.py).
  - I(state=key) reads what invalidates the caches - GPU name, compute capability and driver (nvidia-smi; all empty on
    a host without it), the CUDA toolkit's version (I(cuda_home)), SGLang's version and the patch-series hash (the venv
    role's provenance fact I(fact_path)), torch's version (the venv's dist-info), the venv's content digest, tp/ep and
    the kernel-relevant flags of I(argv) - and returns the key (sha256 of the canonical JSON document), the document,
    and what the home records as installed. Read-only.
  - I(state=packed) writes the bundle of the home's cache dirs to I(dest) (a tar with a manifest of every file's
    sha256; deterministic) and records the key in the home (the publisher never installs its own bundle).
  - I(state=installed) installs the bundle I(bundle) when its sha256 is I(sha256) and its key is the host's. A corrupt
    bundle (sha256, a file's bytes, an unsafe member - absolute, C(..), links, devices) is deleted and nothing is
    installed; a key mismatch installs nothing and names the first differing key field. Neither is a failure - the
    service then starts cold - C(installed=false), the reason in C(reason) and as a warning.
options:
  state:
    description: What to do.
    type: str
    choices: [key, packed, installed]
    required: true
  home:
    description: The service home (HOME of the server), holding the cache dirs and the record C(.sglang-compile-cache.json).
    type: path
    required: true
  dirs:
    description: Cache directories relative to I(home) (none inside another).
    type: list
    elements: str
    default: [.triton/cache, .cache/flashinfer, .cache/tvm-ffi, .cache/sglang, .cache/deep_gemm, .nv/ComputeCache]
  argv:
    description: The server argv (I(state=key)); the flags that cannot change kernels are left out of the key.
    type: list
    elements: str
    default: []
  venv_path:
    description: The SGLang venv (its dist-info gives torch's and, without a provenance fact, SGLang's version).
    type: path
  venv_digest_path:
    description: The venv's content digest file (written by the venv role at every swap).
    type: path
  fact_path:
    description: The venv role's provenance fact (sglang_version, patch_series_hash).
    type: path
    default: /etc/ansible/facts.d/sglang_venv.fact
  sglang_dist:
    description: Distribution whose version is SGLang's when the fact has none.
    type: str
    default: sglang
  cuda_home:
    description: The CUDA toolkit whose version.json (or version.txt) names the CUDA version.
    type: path
    default: ""
  nvidia_smi:
    description: nvidia-smi to ask for the GPUs; a host without it gets empty GPU fields.
    type: str
    default: nvidia-smi
  key_doc:
    description: The key document (from I(state=key)) of I(state=packed) and I(state=installed); the key is its hash.
    type: dict
  dest:
    description: Where I(state=packed) writes the bundle (atomically).
    type: path
  settle_s:
    description: I(state=packed) leaves out files modified in the last I(settle_s) seconds (a JIT compile in progress).
    type: float
    default: 2.0
  bundle:
    description: The bundle I(state=installed) installs (on the host).
    type: path
  sha256:
    description: The bundle's sha256 as the controller recorded it (I(state=installed)).
    type: str
  owner:
    description: Owner of the installed cache dirs (the service user).
    type: str
  group:
    description: Group of the installed cache dirs.
    type: str
attributes:
  check_mode:
    support: full
    details:
      - I(state=key) runs unchanged (read-only).
      - I(state=packed) writes nothing and reports the files it would pack (C(changed) when there is any).
      - I(state=installed) checks the bundle's sha256 and manifest when the bundle is on the host and reports what it
        would do; a bundle not copied yet (the copy is skipped in check mode) reports C(changed) with that reason.
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: Compile-cache key of this host
  compile_cache:
    state: key
    home: /var/lib/sglang
    argv: "{{ sglang_service_argv }}"
    venv_path: /opt/sglang/venv
    venv_digest_path: /opt/sglang/venv/.sglang-venv-digest
    cuda_home: /usr/local/cuda-13.0
  register: cc_key

- name: Install the bundle the controller copied
  compile_cache:
    state: installed
    home: /var/lib/sglang
    bundle: /var/cache/sglang-compile-cache/bundle.tar
    key_doc: "{{ cc_key.key_doc }}"
    sha256: "{{ bundle_meta.sha256 }}"
    owner: sglang
    group: sglang
"""

RETURN = r"""
key:
  description: The cache key (sha256 hex of the canonical key document).
  type: str
  returned: always
key_doc:
  description: The key document (state=key computes it; the other states return the one given).
  type: dict
  returned: always
recorded:
  description: The home's record (key, sha256, installed_at, files, bytes, source); empty when there is none.
  type: dict
  returned: always
installed:
  description: state=key - the home records this key; state=installed - the home now holds the bundle's caches.
  type: bool
  returned: always
reason:
  description: What happened or why not - corrupt (deleted), key mismatch naming the first differing field, already installed.
  type: str
  returned: always
sha256:
  description: state=packed - the bundle's sha256.
  type: str
  returned: always
bytes:
  description: state=packed - the bundle's size; state=installed - the bytes installed.
  type: int
  returned: always
files:
  description: Files packed or installed (state=packed in check mode - the files it would pack).
  type: int
  returned: always
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.compile_cache.bundle import DEFAULT_DIRS
from ansible.module_utils.compile_cache.error import CompileCacheError
from ansible.module_utils.compile_cache.host import host_facts
from ansible.module_utils.compile_cache.install import install
from ansible.module_utils.compile_cache.key import cache_key
from ansible.module_utils.compile_cache.pack import pack, plan
from ansible.module_utils.compile_cache.record import read_record, record_published


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["key", "packed", "installed"]),
            home=dict(type="path", required=True),
            dirs=dict(type="list", elements="str", default=list(DEFAULT_DIRS)),
            argv=dict(type="list", elements="str", default=[]),
            venv_path=dict(type="path"),
            venv_digest_path=dict(type="path"),
            fact_path=dict(type="path", default="/etc/ansible/facts.d/sglang_venv.fact"),
            sglang_dist=dict(type="str", default="sglang"),
            cuda_home=dict(type="path", default=""),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            key_doc=dict(type="dict"),
            dest=dict(type="path"),
            settle_s=dict(type="float", default=2.0),
            bundle=dict(type="path"),
            sha256=dict(type="str"),
            owner=dict(type="str"),
            group=dict(type="str"),
        ),
        required_if=[("state", "key", ("venv_path", "venv_digest_path")),
                     ("state", "packed", ("key_doc", "dest")),
                     ("state", "installed", ("key_doc", "bundle", "sha256"))],
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False, key="", key_doc={}, recorded={}, installed=False, reason="", sha256="", bytes=0,
                  files=0)
    try:
        if p["state"] == "key":
            facts = host_facts(p["argv"], p["venv_path"], p["venv_digest_path"], p["fact_path"], p["cuda_home"],
                               p["nvidia_smi"], p["sglang_dist"])
            key, doc = cache_key(facts)
            rec = read_record(p["home"])
            result.update(key=key, key_doc=doc, recorded=rec, installed=rec.get("key") == key,
                          reason="the home records this key" if rec.get("key") == key else
                          "the home records another key" if rec else "the home records no compile cache")
        elif p["state"] == "packed":
            key, doc = cache_key(p["key_doc"])
            result.update(key=key, key_doc=doc)
            if module.check_mode:
                pl = plan(p["home"], p["dirs"], p["settle_s"])
                n = len(pl["files"])
                result.update(changed=n > 0, files=n, bytes=sum(s for _, s in pl["files"]),
                              reason=f"check mode: would pack {n} files of {pl['dirs']}")
            else:
                res = pack(p["home"], p["dirs"], doc, p["dest"], p["settle_s"])
                if res["files"]:
                    record_published(p["home"], key, res["sha256"], res["files"], res["bytes"])
                result.update(changed=True, sha256=res["sha256"], bytes=res["bytes"], files=res["files"],
                              reason=f"packed {res['files']} files of {res['dirs']} ({res['bytes']} bytes); "
                                     f"left out {res['skipped']}")
            result["recorded"] = read_record(p["home"])
        else:
            key, doc = cache_key(p["key_doc"])
            res = install(p["bundle"], key, p["sha256"], p["home"], p["dirs"], p["owner"], p["group"],
                          expected_doc=doc, check_mode=module.check_mode)
            result.update(key=key, key_doc=doc, changed=res["changed"], installed=res["installed"],
                          reason=res["reason"], files=res.get("files", 0), bytes=res.get("bytes", 0),
                          recorded=read_record(p["home"]))
            if not res["installed"] and not module.check_mode:
                module.warn(f"compile cache not installed on this host, the service starts cold: {res['reason']}")
    except CompileCacheError as exc:
        module.fail_json(msg=f"compile cache ({p['state']}): {exc}", **result)
    except Exception as exc:  # noqa: BLE001 - a module reports, with the evidence, instead of a bare traceback
        module.fail_json(msg=f"compile cache ({p['state']}): {type(exc).__name__}: {exc}",
                         exception=traceback.format_exc(), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
