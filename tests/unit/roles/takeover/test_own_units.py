"""The takeover role's list of our own units (never foreign) names the units the other roles actually make: the router's
(roles/sglang_router: sglang_router_name + ".service") and the models role's transient peer server (models_peer_unit + ".service").
A rename in either role without this list fails here, not on a host
where our own router would then be refused as another deployment."""
from __future__ import annotations

import fnmatch
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())


def test_own_units_cover_the_router_and_the_peer_server_units():
    own = defaults("takeover")["takeover_own_units"]
    router = defaults("sglang_router")
    assert router["sglang_router_unit"] == "{{ sglang_router_name }}.service"
    router_unit = f"{router['sglang_router_name']}.service"
    peer_unit = f"{defaults('models')['models_peer_unit']}.service"
    for unit in (router_unit, peer_unit):
        assert any(fnmatch.fnmatch(unit, pattern) for pattern in own), (unit, own)
    # and nothing broader: a hand-made sglang-k26-*.service must stay foreign
    assert not any(fnmatch.fnmatch("sglang-k26-ddtree.service", pattern) for pattern in own), own
