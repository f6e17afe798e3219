"""library/sglang_router_worker: out of rotation (refused below the minimum), back in (a failed worker re-added
explicitly), against a fake of the router's worker API with the shapes recorded from smg 1.13.0."""
import importlib.util
from pathlib import Path

import pytest

from ansible.module_utils.router.client import RouterClient, RouterError

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("sglang_router_worker", ROOT / "library" / "sglang_router_worker.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)

A, B = "http://10.0.0.1:30001", "http://10.0.0.2:30001"


class FakeFleet(RouterClient):
    """RouterClient whose HTTP is a dict of workers: {url: status}; ready means healthy."""

    def __init__(self, workers, routed_after=1):
        super().__init__(url="http://router:1", api_key="k", metrics_url="http://router:2",
                         sleep=lambda s: None)
        self.fleet = dict(workers)
        self.calls = []
        self.counter = {u: 0.0 for u in workers}
        self.routed_after = routed_after
        self.sends = 0

    def health(self):
        healthy = sum(s == "ready" for s in self.fleet.values())
        return {"live": True, "ready": healthy > 0, "http": 200 if healthy else 503, "error": "",
                "healthy_workers": healthy, "total_workers": len(self.fleet), "status": "", "reason": ""}

    def workers(self):
        return [{"url": u, "id": f"id-{u[-7:-6]}", "healthy": s == "ready", "status": s, "load": 0,
                 "model_id": "m"} for u, s in self.fleet.items()]

    def remove_worker(self, url):
        self.calls.append(("DELETE", url))
        del self.fleet[url]
        return {"worker_id": "x", "status": 202, "body": {}}

    def add_worker(self, url, worker_api_key=None):
        self.calls.append(("POST", url, worker_api_key))
        if url in self.fleet:
            raise RouterError("conflict", "exists")
        self.fleet[url] = "ready"
        return {"worker_id": "new", "status": 202}

    def worker_requests(self):
        self.sends += 1  # each look after the first `routed_after` ones sees one more request per worker
        if self.sends > self.routed_after:
            for u in self.fleet:
                self.counter[u] = self.counter.get(u, 0.0) + 1
        return dict(self.counter)


def test_removal_refused_when_too_few_healthy_workers_would_remain():
    fleet = FakeFleet({A: "ready", B: "ready"})
    with pytest.raises(RouterError) as err:
        mod.remove(fleet, A, min_healthy_after=2, timeout=5, interval=0.1, check=False)
    assert err.value.kind == "refused" and "leave 1 healthy worker(s)" in err.value.message
    assert fleet.calls == []


def test_removal_of_an_unhealthy_worker_does_not_count_against_the_minimum():
    fleet = FakeFleet({A: "failed", B: "ready"})
    changed, out = mod.remove(fleet, A, min_healthy_after=1, timeout=5, interval=0.1, check=False)
    assert changed and out["before"] == "failed" and fleet.calls == [("DELETE", A)] and A not in fleet.fleet


def test_removal_in_check_mode_and_of_an_absent_worker_changes_nothing():
    fleet = FakeFleet({A: "ready", B: "ready"})
    assert mod.remove(fleet, A, 1, 5, 0.1, check=True)[0] is True and fleet.calls == []
    assert mod.remove(fleet, "http://10.0.0.9:30001", 1, 5, 0.1, check=False)[0] is False


def test_add_posts_with_the_workers_key_and_waits_until_routed():
    fleet = FakeFleet({B: "ready"})
    changed, out = mod.add(fleet, A, "wk", wait_routed=True, probe=False, timeout=5, interval=0.1, check=False)
    assert changed and fleet.calls == [("POST", A, "wk")] and out["routed"]["url"] == A
    assert A in out["healthy_workers"] and out["routed"]["after"] > out["routed"]["before"]


def test_a_failed_worker_is_deleted_and_added_again():
    fleet = FakeFleet({A: "failed", B: "ready"})
    changed, out = mod.add(fleet, A, "wk", wait_routed=False, probe=False, timeout=5, interval=0.1, check=False)
    assert changed and out["before"] == "failed"
    assert fleet.calls == [("DELETE", A), ("POST", A, "wk")] and fleet.fleet[A] == "ready"


def test_a_healthy_listed_worker_is_left_alone():
    fleet = FakeFleet({A: "ready"})
    changed, _ = mod.add(fleet, A, "wk", wait_routed=False, probe=False, timeout=5, interval=0.1, check=False)
    assert not changed and fleet.calls == []


def test_never_routed_to_fails_bounded_with_the_counters():
    fleet = FakeFleet({B: "ready"}, routed_after=10 ** 9)
    clock = iter(range(0, 10 ** 6))
    fleet.clock = lambda: next(clock)
    with pytest.raises(RouterError) as err:
        mod.add(fleet, A, "wk", wait_routed=True, probe=False, timeout=3, interval=0.1, check=False)
    assert err.value.kind == "timeout" and "no request reached" in err.value.message
