"""How a config fragment (a sweep proposal's group_vars fragment, a rolling change) lands on a host: on top of the
host's own overrides, as the sweep measured it (roles/sglang_bench/tasks/sweep_one.yml: the host's overrides combined
with the config's), never in place of them.

    fragment | sglang_overrides_on(current)   -> {sglang_service_speculative_overrides: current ⊕ fragment, ...}

current and the result have the five keys of the fragment (sglang_service_speculative_overrides, _server_overrides,
_env_overrides, _extra_args: mappings, combined key by key with the fragment's value winning, like Ansible's
combine; _validation_overrides: a list, the fragment's entries appended). A key the fragment leaves out keeps the
host's value. The H200 rehearsal (tests/fixtures/real_sglang/rehearsal/h200-2026-12-04d) found the fragment's empty
server and env overrides replacing the host's: its context_length 8192 fell back to the group's 32768, which the
real parser refused for an 8192-token model.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

MAPPINGS = ("sglang_service_speculative_overrides", "sglang_service_server_overrides",
            "sglang_service_env_overrides", "sglang_service_extra_args")
LISTS = ("sglang_service_validation_overrides",)


def sglang_overrides_on(fragment, current):
    fragment, current = fragment or {}, current or {}
    if not isinstance(fragment, dict) or not isinstance(current, dict):
        raise AnsibleFilterError("sglang_overrides_on: the fragment and the host's overrides are mappings")
    unknown = sorted(set(fragment) - set(MAPPINGS) - set(LISTS))
    if unknown:
        raise AnsibleFilterError(f"sglang_overrides_on: unknown keys {unknown}; known: {list(MAPPINGS + LISTS)}")
    out = {}
    for key in MAPPINGS:
        have, new = current.get(key) or {}, fragment.get(key) or {}
        if not isinstance(have, dict) or not isinstance(new, dict):
            raise AnsibleFilterError(f"sglang_overrides_on: {key} is a mapping (host: {have!r}, fragment: {new!r})")
        out[key] = {**have, **new}
    for key in LISTS:
        have, new = current.get(key) or [], fragment.get(key) or []
        if not isinstance(have, list) or not isinstance(new, list):
            raise AnsibleFilterError(f"sglang_overrides_on: {key} is a list (host: {have!r}, fragment: {new!r})")
        out[key] = list(have) + list(new)
    return out


class FilterModule:
    def filters(self):
        return {"sglang_overrides_on": sglang_overrides_on}
