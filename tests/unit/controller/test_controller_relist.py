"""After Kopf lists a kind again (a watch that expired), what was deleted meanwhile leaves the cache."""

from __future__ import annotations

import asyncio
from typing import Any

from test_controller_cache import node, pod

from phalanx.controller.cache.store import COMPOSITE as COMPOSITE_POD_GROUPS
from phalanx.controller.cache.store import NODE as NODES
from phalanx.controller.cache.store import POD as PODS
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.watch.relist import Relister


def relister(cache: ClusterCache, listed: dict[str, list[dict[str, Any]]], during: Any = None) -> Relister:
    async def lister(kind: str) -> list[dict[str, Any]]:
        if during is not None:
            during()  # what the watch delivers while the list is on its way
        return listed[kind]

    return Relister(cache, {kind: (lambda k=kind: lister(k)) for kind in listed}, quiet=0.01)


def test_a_pod_missing_from_the_list_is_dropped_and_frees_its_node() -> None:
    cache = ClusterCache()
    cache.upsert("Node", node("n1"))
    cache.upsert("Pod", pod("kept", 1, node="n1"))
    cache.upsert("Pod", pod("ghost", 2, node="n1"))
    assert cache.snapshot().free("n1")["nvidia.com/gpu"] == -8
    dropped = asyncio.run(relister(cache, {PODS: [pod("kept", 3, node="n1")]}).reconcile(PODS))
    assert dropped == 1
    assert set(cache.pods) == {"ns/kept"}
    assert cache.snapshot().free("n1")["nvidia.com/gpu"] == 0


def test_what_arrives_while_the_list_is_asked_stays() -> None:
    """A pod created after the list was asked for (seen by the watch meanwhile) is newer than the answer."""
    cache = ClusterCache()
    cache.upsert("Pod", pod("old", 1, node="n1"))
    during = lambda: cache.upsert("Pod", pod("new", 5, node="n1"))  # noqa: E731
    dropped = asyncio.run(relister(cache, {PODS: [pod("old", 1, node="n1")]}, during).reconcile(PODS))
    assert dropped == 0
    assert set(cache.pods) == {"ns/old", "ns/new"}


def test_a_pod_recreated_under_the_same_name_is_not_dropped_for_its_predecessor() -> None:
    cache = ClusterCache()
    cache.upsert("Pod", pod("p", 1, node="n1"))

    def recreate() -> None:
        body = pod("p", 7, node="n1")
        body["metadata"]["uid"] = "uid-p-second"
        cache.delete("Pod", {"metadata": {"namespace": "ns", "name": "p"}})
        cache.upsert("Pod", body)

    dropped = asyncio.run(relister(cache, {PODS: []}, recreate).reconcile(PODS))
    assert dropped == 0
    assert cache.pods["ns/p"].uid == "uid-p-second"


def test_a_burst_of_listed_events_lists_once_after_it_is_quiet() -> None:
    cache = ClusterCache()
    cache.upsert("Node", node("n1"))
    cache.upsert("Node", node("gone"))
    calls: list[str] = []

    async def list_nodes() -> list[dict[str, Any]]:
        calls.append(NODES)
        return [node("n1")]

    async def scenario() -> None:
        r = Relister(cache, {NODES: list_nodes}, quiet=0.05)
        for _ in range(20):
            r.listed(NODES)
            r.listed("priorityclasses")  # not a kind it reconciles
            await asyncio.sleep(0.001)
        while r._task is not None and not r._task.done():
            await asyncio.sleep(0.01)
        assert r.dropped == 1

    asyncio.run(scenario())
    assert calls == [NODES]
    assert set(cache.nodes) == {"n1"}


def test_a_composite_pod_group_deleted_while_the_watch_was_away_is_dropped() -> None:
    def cpg(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {
                "workloadRef": {"workloadName": "w", "templateName": "job"},
                "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            },
        }

    cache = ClusterCache()
    cache.upsert("CompositePodGroup", cpg("kept"))
    cache.upsert("CompositePodGroup", cpg("gone"))
    listing = relister(cache, {COMPOSITE_POD_GROUPS: [cpg("kept")]})
    dropped = asyncio.run(listing.reconcile(COMPOSITE_POD_GROUPS))
    assert dropped == 1
    assert set(cache.composite_pod_groups.items) == {"ns/kept"}
