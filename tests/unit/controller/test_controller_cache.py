"""The cache: which pods hold capacity where, and that late watch events never undo our own writes."""

from __future__ import annotations

from typing import Any

from phalanx.controller.cache import ClusterCache, PodRecord
from phalanx.controller.scheduler import build_snapshot

GATE = {"name": "phalanx.dev/admission"}


def pod(
    name: str,
    rv: int,
    *,
    node: str = "",
    gated: bool = False,
    selector: str = "",
    group: str = "",
    phase: str = "Pending",
    deleting: bool = False,
    job_uid: str = "job-1",
) -> dict[str, Any]:
    labels = {"batch.kubernetes.io/controller-uid": job_uid}
    if group:
        labels["phalanx.dev/pod-group"] = group
    spec: dict[str, Any] = {
        "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
    }
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [GATE]
    if selector:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": str(rv),
        "labels": labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "112", "memory": "2Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_capacity_is_held_by_bound_terminating_and_released_pods_only() -> None:
    records = {
        "bound": PodRecord.from_body(pod("a", 1, node="n1", phase="Running")),
        "terminating": PodRecord.from_body(pod("b", 1, node="n2", phase="Running", deleting=True)),
        "released": PodRecord.from_body(pod("c", 1, selector="n3", group="g")),
        "gated": PodRecord.from_body(pod("d", 1, gated=True, selector="", group="g")),
        "finished": PodRecord.from_body(pod("e", 1, node="n4", phase="Succeeded")),
        "someone's pin": PodRecord.from_body(pod("f", 1, selector="n5")),  # not ours: the scheduler decides
    }
    where = {k: r.usage_node for k, r in records.items()}
    assert where == {
        "bound": "n1",
        "terminating": "n2",
        "released": "n3",
        "gated": "",
        "finished": "",
        "someone's pin": "",
    }
    assert records["gated"].gated and records["released"].released
    assert records["bound"].requests == {"nvidia.com/gpu": 8}


def test_a_late_watch_event_does_not_undo_our_write() -> None:
    cache = ClusterCache()
    cache.upsert_pod(pod("a", 5, gated=True))
    cache.upsert_pod(pod("a", 7, selector="n1", group="g"))  # our release, written through
    cache.upsert_pod(pod("a", 6, gated=True))  # the watch catching up with an older version
    assert cache.pods["ns/a"].released


def test_pods_are_indexed_by_job_and_forgotten_on_delete() -> None:
    cache = ClusterCache()
    cache.upsert_pod(pod("a", 1, gated=True))
    cache.upsert_pod(pod("b", 1, gated=True, job_uid="job-2"))
    assert [p.name for p in cache.job_pods("job-1")] == ["a"]
    cache.delete_pod("ns", "a", "uid-a")
    assert list(cache.job_pods("job-1")) == []
    assert cache.changed.is_set()


def test_snapshot_counts_what_holds_capacity() -> None:
    cache = ClusterCache()
    for name in ("n1", "n2"):
        cache.upsert_node(node(name))
    cache.upsert_pod(pod("a", 1, node="n1", phase="Running"))
    cache.upsert_pod(pod("b", 1, selector="n2", group="g"))
    cache.upsert_pod(pod("c", 1, gated=True))
    snapshot = build_snapshot(cache)
    assert snapshot.free("n1")["nvidia.com/gpu"] == 0
    assert snapshot.free("n2")["nvidia.com/gpu"] == 0


def job_body(completions: int | None, succeeded: int, parallelism: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism, "template": {"spec": {}}}
    if completions is not None:
        spec["completions"] = completions
    return {
        "metadata": {
            "name": "train",
            "namespace": "ns",
            "uid": "job-1",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T00:00:00Z",
        },
        "spec": spec,
        "status": {"succeeded": succeeded},
    }


def pod_group(min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pg",
            "namespace": "ns",
            "uid": "pg-1",
            "resourceVersion": "1",
            "ownerReferences": [{"kind": "Job", "uid": "job-1", "controller": True, "name": "train"}],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def test_the_gang_shrinks_to_what_is_left_of_the_job() -> None:
    from phalanx.controller.cache import JobRecord
    from phalanx.controller.scheduler import view_of

    cache = ClusterCache()
    group = cache.upsert_group(pod_group(4))
    assert view_of(cache, JobRecord.from_body(job_body(8, 0)), group).min_count == 4
    assert view_of(cache, JobRecord.from_body(job_body(8, 6)), group).min_count == 2
    assert view_of(cache, JobRecord.from_body(job_body(8, 8)), group).min_count == 1
    assert view_of(cache, JobRecord.from_body(job_body(None, 0)), group).min_count == 4
