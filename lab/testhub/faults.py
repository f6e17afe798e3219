"""Fault injection of the test Hub: which rule, if any, a request triggers (TestHub.take_fault consumes it).

Fault rules (dicts) apply to byte transfers (non-LFS resolve GET and file server GET) unless "where": "api"|"any":
  kind: drop (close the socket at `offset`), stall (stop sending at `offset`, socket open, for stall_s),
        status (answer `status`, default 503), 429 (with Retry-After: retry_after), flip (xor the byte at
        `offset`), truncate (206 whose body ends at `offset` while Content-Range claims the whole requested range),
        ignore_range (what some proxies and caches do: a *ranged* GET is answered 200 with the whole file, no
        Content-Range; unranged GETs never match. Options: `offset` (only ranged requests whose range covers that
        absolute offset match; default: any ranged request), `size_delta` (bytes added to (or, negative, cut from)
        the whole body and its Content-Length: another object than the tree's, e.g. a stale cached version;
        padding is zeros; default 0)). The whole body then passes through the other rules: a drop, stall, flip or
        truncate rule listed after it whose offset lies in the file applies to it too (a flaky link behind the
        proxy). norange is another name for ignore_range.
  path / repo: fnmatch globs (default "*"); offset: absolute file offset (default: middle of the file; for
  ignore_range: none); times: triggers left (default 1, -1 = forever).
"""
from __future__ import annotations

import fnmatch

RANGE_KINDS = ("ignore_range", "norange")  # answer a ranged GET with 200 + the whole file
BYTE_KINDS = ("drop", "stall", "flip", "truncate")  # act at an offset of the bytes sent


def take_rule(rules: list[dict], where: str, repo_id: str, path: str, start: int, end: int, size: int,
              ranged: bool = False, kinds: tuple[str, ...] | None = None) -> dict | None:
    """First matching rule for a request covering [start, end] (inclusive) of a file (`ranged`: it carried a
    Range header); consumes one trigger and returns what fired (the rule with the request's repo, file and range).
    `kinds` limits the rules considered. The caller holds the hub's lock."""
    for rule in rules:
        if rule.get("times", 1) == 0:
            continue
        rw = rule.get("where", "file")
        if rw != "any" and rw != where:
            continue
        if not fnmatch.fnmatchcase(repo_id, rule.get("repo", "*")):
            continue
        if not fnmatch.fnmatchcase(path, rule.get("path", "*")):
            continue
        kind = rule["kind"]
        if kinds is not None and kind not in kinds:
            continue
        if kind in BYTE_KINDS:
            off = rule.get("offset")
            off = size // 2 if off is None else int(off)
            if not (start <= off <= end):
                continue
        if kind in RANGE_KINDS:
            if not ranged:
                continue
            if rule.get("offset") is not None and not (start <= int(rule["offset"]) <= end):
                continue
        if rule.get("times", 1) > 0:
            rule["times"] = rule.get("times", 1) - 1
        return dict(rule, repo_id=repo_id, file=path, start=start, end=end)
    return None
