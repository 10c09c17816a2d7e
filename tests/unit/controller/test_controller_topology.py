"""Topologies in the controller: the label lookup, conflicts, node counts, status planning, the cache and the
webhook function (with the cache as its source, as when no API client is up)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import kopf
import pytest
from hypothesis import given
from hypothesis import strategies as st
from testkit import StaticContext

from phalanx.api import conditions as c
from phalanx.api.topology import ACTIVE, REASON_ACTIVE, REASON_LABEL_CONFLICT
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.model.actions import PatchTopologyStatus
from phalanx.controller.model.topology import TopologyIndex, TopologyRecord, label_conflicts
from phalanx.controller.plan.topologies import NodeCounts, nodes_with_all, plan_status
from phalanx.controller.watch.registry import VALIDATE_TOPOLOGY_ID, build_registry
from phalanx.controller.watch.webhooks import Webhooks
from phalanx.placement import NodeInfo

NB, LB, RACK = "example.com/block", "example.com/local-block", "example.com/rack"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)


def body(name: str, *levels: str, created: int = 0, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "Topology",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": (T0 + dt.timedelta(minutes=created)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
        **({"status": status} if status is not None else {}),
    }


def record(name: str, *levels: str, created: int = 0) -> TopologyRecord:
    return TopologyRecord.from_body(body(name, *levels, created=created))


def node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo(name=name, labels=labels, allocatable={"pods": 110})


def test_the_lookup_gives_the_levels_of_the_topology_listing_a_key() -> None:
    index = TopologyIndex.build([record("rdma", NB, LB), record("racks", RACK)])
    assert index.levels_for(LB) == (NB, LB)
    assert index.levels_for(NB) == (NB, LB)
    topology = index.topology_for(RACK)
    assert topology is not None and topology.name == "racks"
    assert index.levels_for("example.com/unknown") is None and index.topology_for("") is None
    assert not index.conflicts


def test_of_two_topologies_sharing_a_label_the_oldest_is_used_and_the_other_not_at_all() -> None:
    index = TopologyIndex.build([record("young", RACK, LB, created=5), record("old", NB, LB, created=1)])
    assert index.levels_for(LB) == (NB, LB)
    assert index.levels_for(RACK) is None, "the conflicting Topology is not used for its other labels either"
    conflict = index.conflicts["young"]
    assert (conflict.label, conflict.with_topology) == (LB, "old")


def test_of_two_made_in_the_same_second_the_one_already_in_use_stays_in_use() -> None:
    """creationTimestamp has whole seconds: a newcomer whose name sorts first must not displace the Topology
    already in use (seen: the integration test made both within one second)."""
    active = {
        "conditions": [
            {
                "type": "Active",
                "status": "True",
                "reason": "Active",
                "message": "used",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    in_use = TopologyRecord.from_body(body("rdma", NB, LB, created=1, status=active))
    newcomer = record("racks", LB, RACK, created=1)
    index = TopologyIndex.build([newcomer, in_use])
    assert index.levels_for(LB) == (NB, LB)
    assert index.conflicts["racks"].with_topology == "rdma"


@given(st.permutations([("a", (NB,), 3), ("b", (NB, LB), 3), ("c", (LB, RACK), 1), ("d", (RACK,), 9)]))
def test_the_index_does_not_depend_on_the_order_records_come_in(order: list[Any]) -> None:
    index = TopologyIndex.build([record(n, *levels, created=t) for n, levels, t in order])
    # c is oldest; a and b are as old: a comes first by name, and b shares NB with it; d shares RACK with c.
    assert {label: t.name for label, t in index.by_label.items()} == {LB: "c", RACK: "c", NB: "a"}
    assert {name: k.with_topology for name, k in index.conflicts.items()} == {"b": "a", "d": "c"}


def test_the_webhook_message_names_each_shared_label_and_its_topology() -> None:
    others = [("rdma", [NB, LB]), ("racks", [RACK]), ("mine", [NB])]
    assert label_conflicts("mine", [NB, RACK], others) == [
        f"nodeLabel {RACK!r} is already a level of Topology 'racks'",
        f"nodeLabel {NB!r} is already a level of Topology 'rdma'",
        "at most one Topology may list a given label: add levels to that one, or delete it",
    ]
    assert label_conflicts("mine", ["other.io/x"], others) == []
    assert label_conflicts("rdma", [NB, LB], others[:1]) == [], "an update does not conflict with itself"


def test_only_nodes_with_every_level_label_are_counted() -> None:
    nodes = [node("n1", **{NB: "b1", LB: "l1"}), node("n2", **{NB: "b1"}), node("n3", **{LB: "l2"})]
    assert nodes_with_all((NB, LB), nodes) == 1
    assert nodes_with_all((NB,), nodes) == 2
    assert nodes_with_all((RACK,), nodes) == 0


def test_counts_are_recomputed_only_when_node_labels_or_topologies_change() -> None:
    counts = NodeCounts()
    nodes = {"n1": node("n1", **{NB: "b1"})}
    topologies = [record("t", NB)]
    assert counts.get(1, topologies, nodes) == {(NB,): 1}
    nodes["n2"] = node("n2", **{NB: "b2"})
    assert counts.get(1, topologies, nodes) == {(NB,): 1}, "same generation: the memo answers"
    assert counts.get(2, topologies, nodes) == {(NB,): 2}
    assert counts.get(2, [*topologies, record("u", LB)], nodes) == {(NB,): 2, (LB,): 0}


def test_status_is_patched_once_per_change_and_keeps_its_transition_time() -> None:
    topology = record("rdma", NB, LB)
    index = TopologyIndex.build([topology])
    (first,) = plan_status([topology], index, {(NB, LB): 8}, NOW)
    (action,) = first.actions
    assert isinstance(action, PatchTopologyStatus) and action.topology.name == "rdma"
    assert action.status.nodes == 8
    active = action.status.condition(ACTIVE)
    assert active is not None and (active.status, active.reason) == (c.TRUE, REASON_ACTIVE)
    assert active.last_transition_time == NOW and active.observed_generation == 1
    # What the API answers to that patch, as the cache then holds it.
    written = TopologyRecord.from_body(body("rdma", NB, LB, status=action.status.to_api()))
    later = NOW + dt.timedelta(hours=1)
    assert plan_status([written], index, {(NB, LB): 8}, later) == (), "nothing changed: no patch"
    (second,) = plan_status([written], index, {(NB, LB): 7}, later)
    (recount,) = second.actions
    assert isinstance(recount, PatchTopologyStatus) and recount.status.nodes == 7
    kept = recount.status.condition(ACTIVE)
    assert kept is not None and kept.last_transition_time == NOW, "Active did not change: same time"
    assert plan_status([written], index, {(NB, LB): 7}, later, frozenset({"Topology/rdma"})) == ()


def test_a_topology_that_is_not_used_says_why() -> None:
    old, young = record("old", NB, LB, created=0), record("young", LB, created=1)
    index = TopologyIndex.build([old, young])
    plans = {p.key: p.actions[0] for p in plan_status([old, young], index, {(NB, LB): 8, (LB,): 8}, NOW)}
    action = plans["Topology/young"]
    assert isinstance(action, PatchTopologyStatus)
    active = action.status.condition(ACTIVE)
    assert active is not None and (active.status, active.reason) == (c.FALSE, REASON_LABEL_CONFLICT)
    assert f"nodeLabel {LB!r} is also a level of the older Topology 'old'" in active.message


def test_the_cache_keeps_topologies_their_index_and_a_node_label_generation() -> None:
    cache = ClusterCache()
    cache.upsert("Topology", body("rdma", NB, LB))
    assert cache.topology_index.levels_for(LB) == (NB, LB)
    assert cache.changed.is_set()
    generation = cache.node_labels_generation
    cache.upsert("Node", {"metadata": {"name": "n1", "labels": {NB: "b1"}}, "status": {}})
    assert cache.node_labels_generation == generation + 1
    cache.upsert("Node", {"metadata": {"name": "n1", "labels": {NB: "b1"}}, "spec": {"unschedulable": True}})
    assert cache.node_labels_generation == generation + 1, "not a label change"
    cache.delete("Node", {"metadata": {"name": "n1"}})
    assert cache.node_labels_generation == generation + 2
    cache.delete("Topology", {"metadata": {"name": "rdma"}})
    assert cache.topology_index.levels_for(LB) is None and not cache.topologies


def test_a_watch_event_older_than_our_status_write_does_not_undo_it() -> None:
    cache = ClusterCache()
    cache.upsert("Topology", body("rdma", NB))
    written = body("rdma", NB, status={"nodes": 3})
    written["metadata"]["resourceVersion"] = "2"
    cache.upsert("Topology", written, own_write=True)
    cache.upsert("Topology", body("rdma", NB))  # the watch's older version arrives late
    assert cache.topologies["rdma"].status.nodes == 3
    cache.upsert("Topology", written)
    assert cache.topologies["rdma"].status.nodes == 3


def test_the_registered_topology_webhook_refuses_too_as_kopf_calls_it() -> None:
    """What Kopf runs for validate-topology (an async handler: registry.py must register it as it is, not
    wrapped into a coroutine that returns it un-awaited, which accepted every Topology)."""
    cache = ClusterCache()
    registry = build_registry(StaticContext(cache), rows=())
    (hook,) = [h for h in registry._webhooks.get_all_handlers() if h.id == VALIDATE_TOPOLOGY_ID]
    cache.upsert("Topology", body("rdma", NB, LB))
    with pytest.raises(kopf.AdmissionError, match="already a level of Topology 'rdma'"):
        asyncio.run(hook.fn(body=kopf.Body(body("copy", RACK, LB))))
    assert asyncio.run(hook.fn(body=kopf.Body(body("racks", RACK)))) is None


def test_the_webhook_refuses_a_second_topology_listing_a_label() -> None:
    cache = ClusterCache()
    hooks = Webhooks(StaticContext(cache))
    cache.upsert("Topology", body("rdma", NB, LB))
    with pytest.raises(kopf.AdmissionError) as error:
        asyncio.run(hooks.validate_topology(body=kopf.Body(body("copy", RACK, LB))))
    assert str(error.value) == (
        f"Topology copy: nodeLabel {LB!r} is already a level of Topology 'rdma'; "
        "at most one Topology may list a given label: add levels to that one, or delete it"
    )
    asyncio.run(hooks.validate_topology(body=kopf.Body(body("racks", RACK))))
    asyncio.run(hooks.validate_topology(body=kopf.Body(body("rdma", NB, LB, RACK))))  # its own update
