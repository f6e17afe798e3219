"""The shipped profiles are coherent: each host group's venv flavour runs that group's speculative algorithm, checked
against the flag schema of the version that flavour installs (read from the committed schemas, never assumed)."""
import re
from pathlib import Path

import yaml

from filter_plugins.sglang import flag_problems, sglang_validate

ROOT = Path(__file__).resolve().parents[3]
MODELS = "/srv/models"


def load(*names):
    out = {}
    for name in names:
        out.update(yaml.safe_load((ROOT / name).read_text()) or {})
    return out


def resolve(value):
    """The two templated paths the profiles use, as the role would render them."""
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    if isinstance(value, str):
        return value.replace("{{ sglang_service_models_root }}", MODELS).replace(
            "{{ sglang_service_draft_model_name }}", "Kimi-K2.6-DFlash")
    return value


def profile(group, extra=None):
    v = load(f"group_vars/{group}/sglang_service.yml", f"group_vars/{group}/profile.yml")
    if (ROOT / f"group_vars/{group}/venv.yml").exists():
        v.update(load(f"group_vars/{group}/venv.yml"))
    v.update(extra or {})
    server = dict({"model_path": f"{MODELS}/Kimi-K2.6", "trust_remote_code": True},
                  **load("group_vars/all/sglang_service.yml")["sglang_service_server_model"])
    server.update(resolve(v["sglang_service_server_profile"]))
    return v, server, resolve(v["sglang_service_speculative_profile"])


def pinned_version(flavour):
    text = (ROOT / f"roles/venv/files/requirements/{flavour}.txt").read_text()
    return re.search(r"^sglang==(\S+)$", text, re.M).group(1)


def ctx(group, v, schema):
    return {"group_names": [group], "host_group": group, "gpu_cc": v["deploy_gpu_compute_capability"],
            "gpu_count": v["deploy_gpu_count"], "api_key_set": True, "model_uses_mla": True,
            "env": v.get("sglang_service_env_profile", {}), "overrides": [], "schema": schema}


def test_nvlink_runs_ddtree_on_the_patched_flavour_and_is_clean_on_its_schema(ddtree_schema):
    v, server, spec = profile("nvlink")
    assert v["venv_flavour"] == "ddtree" and spec["algorithm"] == "DDTREE"
    assert sglang_validate(server, spec, ctx("nvlink", v, ddtree_schema)) == []


def test_nvlink_profile_on_the_upstream_flavour_is_refused_naming_the_ddtree_flags():
    v, server, spec = profile("nvlink")
    version = pinned_version("upstream")
    bad = {p["flag"] for p in flag_problems(server, spec, None, version)}
    assert {"--speculative-ddtree-budget", "--speculative-ddtree-topk-cap", "--speculative-ddtree-debug-metrics"} <= bad
    # the base the ddtree flavour patches does not know DDTREE either: only the patch series brings it
    assert any(p["problem"] == "invalid_choice" for p in flag_problems(server, spec, None, pinned_version("ddtree")))


def test_the_public_alternative_works_from_this_repo_alone():
    alt = load("playbooks/vars/nvlink-dflash-upstream.yml")
    v, server, _ = profile("nvlink")
    spec = resolve(alt["sglang_service_speculative_profile"])
    assert alt["venv_flavour"] == "upstream" and spec["algorithm"] == "DFLASH"
    assert sglang_validate(server, spec, ctx("nvlink", v, pinned_version(alt["venv_flavour"]))) == []
    drafter = next(m for m in load("group_vars/all/models.yml")["models_list"] if m["name"] == "Kimi-K2.6-DFlash")
    assert drafter["repo_id"] == "{{ deploy_draft_model_repo }}" and re.match(r"^[0-9a-f]{40}$", drafter["revision"])
    assert load("group_vars/all/deploy.yml")["deploy_draft_model_repo"] == "z-lab/Kimi-K2.6-DFlash"


def test_pcie_profile_is_clean_on_the_upstream_flavour():
    v, server, spec = profile("pcie")
    assert v.get("venv_flavour", "upstream") == "upstream"  # the role default
    assert sglang_validate(server, spec, ctx("pcie", v, pinned_version("upstream"))) == []
    # --disable-cuda-graph is deprecated in 0.5.23: still accepted, reported with the parser's replacement
    assert [p["flag"] for p in flag_problems(server, spec, None, "0.5.23") if p["problem"] == "deprecated"] == [
        "--disable-cuda-graph"]


def test_every_model_is_pinned_to_a_commit():
    for model in load("group_vars/all/models.yml")["models_list"]:
        assert re.match(r"^[0-9a-f]{40}$", model["revision"]), model


def test_kimi_parsers_are_first_class_and_checked_by_the_schema():
    # every group serves Kimi K2.6 with SGLang's kimi_k2 tool-call and reasoning detectors
    from filter_plugins.sglang import sglang_argv
    for group in ("nvlink", "pcie"):
        _, server, spec = profile(group)
        assert server["tool_call_parser"] == "kimi_k2" and server["reasoning_parser"] == "kimi_k2"
    argv = sglang_argv(profile("pcie")[1], profile("pcie")[2], {}, "0.5.11")
    assert argv[argv.index("--tool-call-parser") + 1] == "kimi_k2"
    assert argv[argv.index("--reasoning-parser") + 1] == "kimi_k2"
    # a typo is refused with the version's choices named, before any unit is written
    _, server, spec = profile("pcie")
    problems = [p for p in flag_problems(dict(server, reasoning_parser="kimi-k2"), spec, {}, "0.5.23")
                if p["problem"] != "deprecated"]
    assert [p["problem"] for p in problems] == ["invalid_choice"]
    assert "kimi_k2" in problems[0]["detail"] and "--reasoning-parser" in problems[0]["detail"]


def test_single_gpu_is_the_nvlink_unit_at_tp1_with_dflash_and_clean_on_the_schemas():
    # a child group of nvlink (inventory/h200): the rules see the nvlink profile, the GPU count is one
    v, server, spec = profile("single_gpu")
    nv_v, nv_server, _ = profile("nvlink")
    assert server["tp_size"] == 1 and v["deploy_gpu_count"] == 1
    same = {k for k in nv_server if k not in ("tp_size", "mem_fraction_static")}
    assert {k: server.get(k) for k in same} == {k: nv_server[k] for k in same}  # the nvlink unit's flags
    assert spec["algorithm"] == "DFLASH" and v["venv_flavour"] == "upstream"
    assert v["sglang_service_gpu_daemons_require"] == []
    c = dict(ctx("nvlink", v, None), group_names=["nvlink", "single_gpu"], gpu_cc="9.0")
    for version in ("0.5.11", pinned_version("upstream")):
        assert sglang_validate(server, spec, dict(c, schema=version)) == [], version
    # the nvlink profile's TP8 on this one GPU is refused, named
    assert [p["rule"] for p in sglang_validate(nv_server, spec, dict(c, schema="0.5.11"))] == ["gpu_count"]


def test_the_h200_inventory_puts_its_host_in_single_gpu_under_nvlink():
    inv = yaml.safe_load((ROOT / "inventory/h200/hosts.yml").read_text())
    assert "h200" in inv["all"]["children"]["nvlink"]["children"]["single_gpu"]["hosts"]
    host = yaml.safe_load((ROOT / "inventory/h200/host_vars/h200.yml").read_text())
    assert host["ansible_connection"] == "local" and host["deploy_gpu_compute_capability"] == "9.0"
