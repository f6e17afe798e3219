"""How a config lands on a host: on top of the host's own overrides, never in place of them. The one home of that rule,
used by the sweep (each config it measures), apply_proposal (the winner's fragment) and rolling.yml (the config it
rolls out), so what is applied is what the sweep measured.

    config   | sglang_overrides_layer(current)  -> {server, speculative, env, extra_args, validation_overrides}
    fragment | sglang_overrides_on(current)     -> {sglang_service_server_overrides, ..._speculative_overrides, ...}

current is the host's overrides as the service role publishes them (sglang_service_interface.overrides: the short
keys). A config is a sweep config (the short keys, and others such as name, which are not overrides); a fragment is a
proposal's group_vars fragment or rolling_apply (the service role's variable names; any other key is refused). The
rule: server, speculative, env and extra_args are mappings combined key by key with the config's value winning (like
Ansible's combine); validation_overrides is a list, the config's entries appended; a key the config leaves out keeps
the host's value. The H200 rehearsal (tests/fixtures/real_sglang/rehearsal/h200-2026-12-04d) found a fragment's empty
server and env overrides replacing the host's: its context_length 8192 fell back to the group's 32768, which the real
parser refused for an 8192-token model.

`{} | sglang_overrides_on({}) | list` is the list of a fragment's keys (apply_proposal checks a proposal against it).
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

# short key (the service interface's, a sweep config's) -> the service role's variable (a fragment's key)
VARIABLES = {"speculative": "sglang_service_speculative_overrides", "server": "sglang_service_server_overrides",
             "env": "sglang_service_env_overrides", "extra_args": "sglang_service_extra_args",
             "validation_overrides": "sglang_service_validation_overrides"}
LISTS = ("validation_overrides",)


def sglang_overrides_layer(config, current):
    config, current = config or {}, current or {}
    if not isinstance(config, dict) or not isinstance(current, dict):
        raise AnsibleFilterError("sglang_overrides_layer: the config and the host's overrides are mappings")
    out = {}
    for key, variable in VARIABLES.items():
        kind = list if key in LISTS else dict
        have, new = current.get(key) or kind(), config.get(key) or kind()
        if not isinstance(have, kind) or not isinstance(new, kind):
            raise AnsibleFilterError(f"sglang overrides: {variable} ({key}) is a {'list' if kind is list else 'mapping'}"
                                     f" (host: {have!r}, config: {new!r})")
        out[key] = list(have) + list(new) if kind is list else {**have, **new}
    return out


def sglang_overrides_on(fragment, current):
    fragment = fragment or {}
    if not isinstance(fragment, dict):
        raise AnsibleFilterError("sglang_overrides_on: the fragment is a mapping")
    unknown = sorted(set(fragment) - set(VARIABLES.values()))
    if unknown:
        raise AnsibleFilterError(f"sglang_overrides_on: unknown keys {unknown}; known: {list(VARIABLES.values())}")
    short = {key: fragment[variable] for key, variable in VARIABLES.items() if variable in fragment}
    return {VARIABLES[key]: value for key, value in sglang_overrides_layer(short, current).items()}


class FilterModule:
    def filters(self):
        return {"sglang_overrides_on": sglang_overrides_on, "sglang_overrides_layer": sglang_overrides_layer}
