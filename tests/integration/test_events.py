"""Events aggregate like Kubernetes' own: the same event posted again raises `count` on one Event, and an
event whose message carries a changing number ("retrying in 4 s") updates that one Event, keyed by object,
type and reason."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from phalanx.controller.apply.events import EventKey, EventRecorder
from phalanx.controller.model.refs import ObjectRef
from phalanx.devcluster.cluster import ClusterState
from phalanx.kubeclient import ApiClient, load

from .kube import Namespace, delete_namespace, new_namespace

pytestmark = pytest.mark.integration


@pytest.fixture
async def api(stock_cluster: ClusterState) -> AsyncIterator[ApiClient]:
    """Phalanx's own client, as the operator makes it; the tests read back through the dev cluster's."""
    async with ApiClient(load(str(stock_cluster.kubeconfig), in_cluster_first=True)) as api_client:
        yield api_client


def config_map(ns: Namespace, name: str) -> ObjectRef:
    created: dict[str, Any] = ns.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}
    )
    created.setdefault("apiVersion", "v1")
    created.setdefault("kind", "ConfigMap")
    return ObjectRef.of(created)


def events_of(ns: Namespace, ref: ObjectRef) -> list[dict[str, Any]]:
    return ns.events(f"involvedObject.uid={ref.uid}")


async def test_the_same_event_three_times_is_one_event_with_count_3(
    stock_cluster: ClusterState, api: ApiClient
) -> None:
    ns = new_namespace(stock_cluster, "events")
    try:
        ref = config_map(ns, "subject")
        recorder = EventRecorder(api, instance="test-replica")
        for _ in range(3):
            await recorder.post(ref, "Warning", "Unschedulable", "0/8 nodes are available")
        events = events_of(ns, ref)
        print([(e["metadata"]["name"], e["count"]) for e in events])
        assert len(events) == 1
        event = events[0]
        assert event["count"] == 3
        assert event["metadata"]["name"] == EventKey.of(ref, "Warning", "Unschedulable").event_name
        assert (event["type"], event["reason"], event["message"]) == (
            "Warning",
            "Unschedulable",
            "0/8 nodes are available",
        )
        assert event["reportingInstance"] == "test-replica"
        assert event["source"]["component"] == "phalanx"
        assert event["lastTimestamp"] >= event["firstTimestamp"]

        # A restarted process (empty LRU) finds the Event by its name and keeps counting.
        await EventRecorder(api, instance="test-replica").post(
            ref, "Warning", "Unschedulable", "0/8 nodes are available"
        )
        # Another reason is another Event.
        await recorder.post(ref, "Normal", "Admitted", "admitted to nb-a")
        by_reason = {e["reason"]: e["count"] for e in events_of(ns, ref)}
        assert by_reason == {"Unschedulable": 4, "Admitted": 1}

        # Deleted meanwhile (or expired): the next repeat starts a new Event instead of failing.
        name = EventKey.of(ref, "Normal", "Admitted").event_name
        ns.api.request("DELETE", f"/api/v1/namespaces/{ns.name}/events/{name}")
        await recorder.post(ref, "Normal", "Admitted", "admitted to nb-a")
        by_reason = {e["reason"]: e["count"] for e in events_of(ns, ref)}
        assert by_reason == {"Unschedulable": 4, "Admitted": 1}
    finally:
        delete_namespace(ns)


async def test_a_message_with_changing_numbers_updates_one_event(
    stock_cluster: ClusterState, api: ApiClient
) -> None:
    """Posted "retrying in 1 s", "retrying in 2 s", ...: one Event, its count the number of posts, its
    message and lastTimestamp the latest; a restarted recorder (empty LRU) and another replica keep
    updating it."""
    ns = new_namespace(stock_cluster, "events-numbers")
    try:
        ref = config_map(ns, "subject")
        recorder = EventRecorder(api, instance="replica-a")
        messages = [
            f"releasing pod p-{i} failed: 503; {i} of 4 pods fit; retrying in {2**i} s" for i in range(4)
        ]
        for message in messages:
            await recorder.post(ref, "Warning", "FailedSync", message)
        await recorder.post(ref, "Normal", "Admitted", "4 of 4 pods admitted in nb-a")
        first = {e["reason"]: e for e in events_of(ns, ref)}
        print({r: (e["count"], e["message"]) for r, e in first.items()})
        assert sorted(first) == ["Admitted", "FailedSync"]
        failed = first["FailedSync"]
        assert failed["count"] == 4
        assert failed["message"] == messages[-1]
        assert failed["metadata"]["name"] == EventKey.of(ref, "Warning", "FailedSync").event_name

        await EventRecorder(api, instance="replica-b").post(ref, "Warning", "FailedSync", "retrying in 32 s")
        again = {e["reason"]: e for e in events_of(ns, ref)}
        assert sorted(again) == ["Admitted", "FailedSync"]
        assert (again["FailedSync"]["count"], again["FailedSync"]["message"]) == (5, "retrying in 32 s")
        assert again["FailedSync"]["lastTimestamp"] >= failed["lastTimestamp"]
        assert again["FailedSync"]["firstTimestamp"] == failed["firstTimestamp"]
        assert again["Admitted"]["count"] == 1
    finally:
        delete_namespace(ns)


async def test_losing_an_event_does_not_raise(stock_cluster: ClusterState, api: ApiClient) -> None:
    gone = ObjectRef("v1", "ConfigMap", "no-such-namespace-x1", "subject", "uid")
    await EventRecorder(api).post(gone, "Normal", "Test", "the namespace does not exist")
