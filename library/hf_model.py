#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: bring a directory to a pinned Hugging Face Hub revision (resumable, verified)."""
from __future__ import absolute_import, division, print_function

DOCUMENTATION = r"""
---
module: hf_model
short_description: Fetch a Hugging Face Hub model or dataset repository at a pinned revision, resumably and verified
description:
  - Resolves I(revision) to its commit sha, lists the tree (huggingface_hub HfApi when importable, else a stdlib
    client speaking the same protocol), refuses hostile entries (absolute paths, C(..), duplicates, sizes that
    disagree), and fetches what the verified manifest (C(<dest>/.hf_model/manifest.json)) does not vouch for.
  - Bytes move with hf_transfer in child processes. Resume uses the sparse map of each partial file, so a rerun
    after any interruption re-fetches about I(connections) x I(chunk_size_mb) MiB (48 MiB by default) plus the chunks whose writes were
    still queued in hf_transfer when it died (at most 64 MiB measured by default) per file that was in flight.
  - Every LFS file is checked against the Hub sha256, every other file against its git blob sha1, before it is
    moved into place; a mismatch deletes it and fetches it again (bounded by I(hash_retries)).
  - A byte-progress watchdog kills a transfer that made no progress for I(stall_timeout) seconds and retries it
    with exponential backoff (at most I(retries) times per file).
  - A server (or a proxy or cache in front of it) that answers a ranged request with 200 and the whole file, now and
    then or always, is used anyway, in bounded memory - the slice needed is cut out of the body, or the body fills
    every missing byte of the file, whichever reads fewer bytes; a server that never honours Range costs one stream
    per file - but only when the 200's Content-Length is the tree's size (else it is refused as a size lie). The
    sha256 check still decides; RV(range_ignored) counts such answers.
  - Progress is written to C(<dest>/.hf_model/progress.json) about once a second (see hf_model_progress).
  - A dataset repository (I(repo_type=dataset), e.g. a ShareGPT-format JSON file for the benchmark) gets exactly
    the same treatment; it is read from the Hub's C(/api/datasets/) and C(/datasets/<repo_id>/resolve/) routes.
  - Runs on the target. hf_transfer must be importable by the interpreter that runs the module (the models role
    runs it from its tool venv); check mode needs only the standard library.
options:
  repo_id:
    description: Repository id, C(namespace/name).
    type: str
    required: true
  repo_type:
    description:
      - Kind of Hub repository, as huggingface_hub's C(repo_type). C(model) reads C(/api/models/<repo_id>) and
        C(<endpoint>/<repo_id>/resolve/...); C(dataset) reads C(/api/datasets/<repo_id>) and
        C(<endpoint>/datasets/<repo_id>/resolve/...). Recorded in the manifest.
      - A repository asked for under the wrong type is not found (the Hub answers 404 RepoNotFound); the error
        names the type that was asked for.
    type: str
    choices: [model, dataset]
    default: model
  revision:
    description: Branch, tag or full commit sha. A sha must come back unchanged.
    type: str
    default: main
  dest:
    description:
      - Model (or dataset) directory. Created when missing; C(.hf_model/) inside it holds the manifest, progress,
        lock and partial files.
    type: path
    required: true
  endpoint:
    description: Hub endpoint (HF_ENDPOINT).
    type: str
    default: https://huggingface.co
  token:
    description: Hub access token. Sent to the Hub host only (never to the LFS file server), never written to disk.
    type: str
  allow_patterns:
    description: Fetch only files matching one of these fnmatch patterns (a trailing C(/) matches a directory).
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Skip files matching one of these fnmatch patterns.
    type: list
    elements: str
    default: []
  verify:
    description:
      - C(quick) trusts manifest entries whose size and mtime are unchanged (a rerun is O(files)); other files
        are hashed. C(full) rehashes every file, in parallel across files.
    type: str
    choices: [quick, full]
    default: quick
  fetch:
    description: When false, fail instead of fetching anything missing (a pure verification pass).
    type: bool
    default: true
  lanes:
    description: Files transferred at the same time (one hf_transfer process each).
    type: int
    default: 2
  connections:
    description: Parallel ranged requests per file (hf_transfer max_files).
    type: int
    default: 6
  chunk_size_mb:
    description: Size of each ranged request in MiB (hf_transfer chunk_size).
    type: int
    default: 8
  stall_timeout:
    description: Seconds without byte progress after which a transfer is killed and retried.
    type: int
    default: 60
  retries:
    description: Attempts per file after the first before the run fails.
    type: int
    default: 5
  inner_retries:
    description: hf_transfer's own per-chunk retries on a direct transfer (0 disables them).
    type: int
    default: 3
  hash_retries:
    description: Fresh fetches of a file whose hash did not match before the run fails.
    type: int
    default: 2
  backoff:
    description: First retry delay in seconds; doubles per attempt (a 429 Retry-After wins).
    type: float
    default: 2.0
  backoff_max:
    description: Largest retry delay in seconds.
    type: float
    default: 60.0
  free_space_margin_mb:
    description: Free space that must remain after the bytes still to fetch; checked before fetching.
    type: int
    default: 1024
  lock_timeout:
    description: Seconds to wait for a previous worker on the same directory to stop (it is asked, then killed).
    type: int
    default: 60
  name:
    description: Label used in progress lines (default the basename of I(dest)).
    type: str
  tree:
    description:
      - The Hub's tree at I(revision) as the controller read it once for the fleet (hf_tree's C(sha) and C(files)).
        When given, the Hub is not asked for the revision or the tree, I(revision) must be that sha, and every file is
        checked against these hashes. Required with I(peers).
    type: dict
  peers:
    description:
      - LAN fan-out (roles/models, C(models_source=peers)) - every host of the fan-out in order, each C(name) and
        C(url) of its peer server (module model_peer); index 0 is the seeder, which fetches from the Hub. The parent of
        host i is host (i - 1) // I(fanout); files come from the nearest live ancestor that holds a verified copy, or
        another earlier host that holds one, and from the Hub only when no earlier host will ever hold them
        (I(hub_fallback)); see module_utils/fanout/sources.py.
      - A peer that dies or stalls mid-transfer is left for another source (the partial file is kept); a copy that fails
        the hash check is fetched again elsewhere and that peer is never asked for the file again.
    type: list
    elements: dict
  peer_self:
    description: This host's name in I(peers).
    type: str
  peer_token:
    description: The run's token for the peer servers (sent only to them).
    type: str
  fanout:
    description: Children per host in the fan-out tree (>= 1).
    type: int
    default: 2
  hub_fallback:
    description: Fetch from the Hub a file that no earlier host of the fan-out holds or will hold (the seeder died).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details:
      - Reads the Hub (revision and tree) and the directory (manifest, sizes, partial files); writes nothing.
      - C(changed) is true when a real run would change something - a file to fetch, a file present but not vouched
        for by the manifest (hashed, then adopted or replaced), a manifest of another commit or repository type -
        and C(msg) says what, for example C(check mode - would fetch 3 files, 1.2 GiB of Kimi-K2.6 from <endpoint>).
        C(changed) is false when every file is present and vouched for.
      - With I(verify=full) a real run rehashes every file; files the manifest vouches for count as a change only
        when their bytes are bad, which check mode cannot see without reading them (RV(files_to_rehash)).
author:
  - sglang-deploy
"""

EXAMPLES = r"""
- name: "Fetch the drafter (long runs: use async + hf_model_progress, as roles/models does)"
  hf_model:
    repo_id: example-org/Kimi-K2.6-DFlash
    revision: 0123456789abcdef0123456789abcdef01234567
    dest: /srv/models/Kimi-K2.6-DFlash
    token: "{{ models_hf_token }}"
  no_log: false
  vars:
    ansible_python_interpreter: /opt/sglang/hf-tools/bin/python

- name: Fetch a ShareGPT-format benchmark dataset (a Hub dataset repository)
  hf_model:
    repo_id: example-org/sharegpt-bench
    repo_type: dataset
    revision: 0123456789abcdef0123456789abcdef01234567
    dest: /srv/models/sharegpt-bench
    allow_patterns: ["*.json"]
  vars:
    ansible_python_interpreter: /opt/sglang/hf-tools/bin/python
"""

RETURN = r"""
msg:
  description:
    - One line. In check mode, what a real run would do (C(check mode), then C(would fetch 3 files, 1.2 GiB of
      Kimi-K2.6 from <endpoint>)), or that nothing is to be fetched. After a run, what it fetched and adopted, and
      how often the server ignored Range.
  type: str
  returned: success
would_change:
  description: A real run would change something (files to fetch or adopt, a stale manifest); C(changed) in check mode.
  type: bool
  returned: always
repo_type:
  description: Kind of repository fetched (model or dataset; recorded in the manifest as C(repo_type)).
  type: str
  returned: always
sha:
  description: Commit sha the revision resolved to (recorded in the manifest).
  type: str
  returned: always
files_total:
  description: Files selected from the tree.
  type: int
  returned: always
bytes_total:
  description: Their total size.
  type: int
  returned: always
files_to_fetch:
  description: Files the manifest did not vouch for and that were absent or of the wrong size.
  type: int
  returned: always
bytes_to_fetch:
  description: Their total size.
  type: int
  returned: always
would_fetch:
  description: Paths of those files (first 200).
  type: list
  returned: always
files_to_adopt:
  description: Files present with the right size that the manifest does not vouch for (hashed, then adopted or
    replaced).
  type: int
  returned: always
bytes_to_adopt:
  description: Their total size.
  type: int
  returned: always
files_to_rehash:
  description: Files the manifest vouches for that I(verify=full) rehashes (a change only if one is bad).
  type: int
  returned: always
free_bytes:
  description: Free bytes on the filesystem of dest.
  type: int
  returned: always
files_fetched:
  description: Files fetched and verified by this run.
  type: int
  returned: when fetching
bytes_fetched:
  description: Bytes received by this run (including failed attempts).
  type: int
  returned: when fetching
bytes_resumed:
  description: Bytes of partial files kept from an interrupted run.
  type: int
  returned: when fetching
range_ignored:
  description:
    - Answers to ranged requests that were a 200 with the whole file (the server, or a proxy or cache on the way,
      ignored Range). They were used within bounded memory and the files were sha256-checked; a count above 0 is
      evidence for the operator (a proxy in the path?), not a failure.
  type: int
  returned: when fetching
range_ignored_files:
  description: Files for which that happened (first 50).
  type: list
  returned: when fetching
whole_body_streams:
  description: Files (attempts) filled from such a whole-file answer by one stream instead of parallel ranges.
  type: int
  returned: when fetching
bytes_by_source:
  description: Bytes received per source (C(hub) or a peer's name), failed attempts included.
  type: dict
  returned: when fetching
files_by_source:
  description: Files verified per source.
  type: dict
  returned: when fetching
peer_failures:
  description: Transfers from a peer that failed (dead, stalled, file no longer vouched) and went to another source.
  type: int
  returned: when fetching
peer_hash_mismatches:
  description: Copies from peers that failed the hash check (C(file), C(peer), C(detail)); each was fetched again.
  type: list
  returned: when fetching
fanout_position:
  description: This host's index in I(peers) (0 = the seeder).
  type: int
  returned: with peers
fanout_parent:
  description: Its parent in the fan-out tree (null for the seeder).
  type: str
  returned: with peers
manifest:
  description: Path of the verified manifest (repo_id, repo_type, revision and every verified file).
  type: str
  returned: always
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.hf.model import SyncError, sync
from ansible.module_utils.hf.hub import REPO_ARGS, HubError

ARGS = dict(
    REPO_ARGS,
    dest=dict(type="path", required=True),
    verify=dict(type="str", choices=["quick", "full"], default="quick"),
    fetch=dict(type="bool", default=True),
    lanes=dict(type="int", default=2),
    connections=dict(type="int", default=6),
    chunk_size_mb=dict(type="int", default=8),
    stall_timeout=dict(type="int", default=60),
    retries=dict(type="int", default=5),
    inner_retries=dict(type="int", default=3),
    hash_retries=dict(type="int", default=2),
    backoff=dict(type="float", default=2.0),
    backoff_max=dict(type="float", default=60.0),
    free_space_margin_mb=dict(type="int", default=1024),
    lock_timeout=dict(type="int", default=60),
    name=dict(type="str"),
    tree=dict(type="dict"),
    peers=dict(type="list", elements="dict"),
    peer_self=dict(type="str"),
    peer_token=dict(type="str", no_log=True),
    fanout=dict(type="int", default=2),
    hub_fallback=dict(type="bool", default=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    p = module.params
    for key in ("lanes", "connections", "chunk_size_mb", "stall_timeout"):
        if p[key] < 1:
            module.fail_json(msg="%s must be >= 1, got %d" % (key, p[key]))
    if p["fanout"] < 1:
        module.fail_json(msg="fanout must be >= 1, got %d" % p["fanout"])
    for key in ("retries", "inner_retries", "hash_retries", "free_space_margin_mb"):
        if p[key] < 0:
            module.fail_json(msg="%s must be >= 0, got %d" % (key, p[key]))
    try:
        result = sync(dict(p), check_mode=module.check_mode)
    except SyncError as err:
        module.fail_json(msg=str(err), **err.evidence)
    except HubError as err:
        module.fail_json(msg=str(err), error_code=err.code, http_status=err.status)
    except Exception as err:  # pylint: disable=broad-except
        module.fail_json(msg="%s: %s" % (type(err).__name__, err), exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
