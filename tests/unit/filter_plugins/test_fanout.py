"""filter_plugins/fanout.py: the fan-out order, peer URLs and the printed tree (the receivers' own tree)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.fanout import fanout_order, fanout_parents, fanout_peers


def test_order_puts_the_seeder_first_and_keeps_the_play_order():
    assert fanout_order(["a", "b", "c"]) == ["a", "b", "c"]
    assert fanout_order(["a", "b", "c"], "c") == ["c", "a", "b"]
    with pytest.raises(AnsibleFilterError, match="not a host of this play"):
        fanout_order(["a", "b"], "z")


def test_peer_urls_from_each_hosts_address_ipv6_bracketed():
    hv = {"a": {"models_peer_address": "10.0.0.1"}, "b": {"models_peer_address": "fd00::2"}}
    assert fanout_peers(["a", "b"], hv, 8095) == [{"name": "a", "url": "http://10.0.0.1:8095"},
                                                   {"name": "b", "url": "http://[fd00::2]:8095"}]
    with pytest.raises(AnsibleFilterError, match="not an IP address"):
        fanout_peers(["a"], {"a": {"models_peer_address": "eth0"}}, 8095)


def test_parents_are_the_tree_the_receivers_follow():
    order = ["s", "b", "c", "d", "e", "f"]
    assert fanout_parents(order, 2) == {"s": None, "b": "s", "c": "s", "d": "b", "e": "b", "f": "c"}
    assert fanout_parents(order, 1)["f"] == "e"
    with pytest.raises(AnsibleFilterError, match=">= 1"):
        fanout_parents(order, 0)
