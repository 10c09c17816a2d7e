from __future__ import annotations

import numpy as np
import pytest

from phalanx.placement import BoundPod, NodeInfo, PodRequirements, Snapshot

GPU = "nvidia.com/gpu"


def nodes() -> list[NodeInfo]:
    return [
        NodeInfo("b", {"rack": "r2"}, {"cpu": 8000, "pods": 10, GPU: 8}),
        NodeInfo("a", {"rack": "r1"}, {"cpu": 4000, "pods": 10}),
        NodeInfo("c", {}, {"cpu": 2000, "pods": 2}),
    ]


def test_build_sorts_nodes_and_counts_pods() -> None:
    s = Snapshot.build(
        nodes(),
        [
            BoundPod("p1", "b", {"cpu": 1000, GPU: 4}),
            BoundPod(
                "p2", "b", {"cpu": 500, "pods": 99}
            ),  # "pods" in requests is ignored: one pod is one slot
            BoundPod("p3", "gone", {"cpu": 1}),  # node not in the snapshot: ignored
            BoundPod("p4", "a", {"example.com/foo": 3}),  # resource nobody offers: cannot matter
        ],
    )
    assert s.node_names == ("a", "b", "c")
    assert s.resources == ("cpu", GPU, "pods")
    assert s.free("b") == {"cpu": 6500, GPU: 4, "pods": 8}
    assert s.free("a") == {"cpu": 4000, GPU: 0, "pods": 9}  # missing resource = allocatable 0
    assert s.used("c") == {"cpu": 0, GPU: 0, "pods": 0}
    assert s.totals == (14000, 8, 22)
    assert s.bound_pod_ids == frozenset({"p1", "p2", "p4"})
    assert s.domains("rack") == ("r1", "r2")
    assert s.domains("nope") == ()
    with pytest.raises(KeyError):
        s.free("zzz")


def test_arrays_are_read_only() -> None:
    s = Snapshot.build(nodes(), [])
    with pytest.raises(ValueError, match="read-only"):
        s.used_array[0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        s.allocatable_array[0, 0] = 1
    with pytest.raises(ValueError, match="read-only"):
        s.eligible(PodRequirements(requests=()))[0] = False


def test_duplicate_node_names_are_an_error() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        Snapshot.build([NodeInfo("a", {}, {}), NodeInfo("a", {}, {})], [])


def test_duplicate_pod_ids_last_wins() -> None:
    s = Snapshot.build(nodes(), [BoundPod("p", "a", {"cpu": 1000}), BoundPod("p", "b", {"cpu": 2000})])
    assert s.free("a")["cpu"] == 4000
    assert s.free("b")["cpu"] == 6000


def test_assume_returns_new_snapshot_and_shares_static_parts() -> None:
    s = Snapshot.build(nodes(), [BoundPod("p1", "a", {"cpu": 1000})])
    req = PodRequirements(requests=(("cpu", 1),))
    mask = s.eligible(req)
    t = s.assume([("a", {"cpu": 500}), ("a", {"cpu": 500}), ("b", {GPU: 8, "unknown": 1})])
    assert s.free("a") == {"cpu": 3000, GPU: 0, "pods": 9}  # original untouched
    assert t.free("a") == {"cpu": 2000, GPU: 0, "pods": 7}
    assert t.free("b") == {"cpu": 8000, GPU: 0, "pods": 9}
    assert t.eligible(req) is mask  # caches are shared
    assert t.domain_groups("rack") is s.domain_groups("rack")
    assert t.allocatable_by_resource is s.allocatable_by_resource
    assert s.assume([]) is s
    with pytest.raises(KeyError):
        s.assume([("nope", {})])


def test_release_gives_back_what_assume_took_and_never_goes_below_zero() -> None:
    s = Snapshot.build(nodes(), [BoundPod("p1", "a", {"cpu": 1000})])
    held = [("a", {"cpu": 500, GPU: 2}), ("b", {GPU: 8})]
    t = s.assume(held)
    back = t.release(held)
    assert (back.used_array == s.used_array).all()
    assert t.free("a") == {"cpu": 2500, GPU: -2, "pods": 8}  # t untouched
    assert back.release([("a", {"cpu": 10**6})]).free("a")["cpu"] == 4000  # only down to nothing used
    assert s.release([]) is s
    with pytest.raises(KeyError):
        s.release([("nope", {})])


def test_without_removes_bound_pods_once() -> None:
    s = Snapshot.build(
        nodes(), [BoundPod("p1", "b", {"cpu": 1000, GPU: 8}), BoundPod("p2", "b", {"cpu": 1000})]
    )
    t = s.without(["p1", "unknown"])
    assert t.free("b") == {"cpu": 7000, GPU: 8, "pods": 9}
    assert t.without(["p1"]) is t  # already removed: no double subtraction
    assert t.bound_pod_ids == frozenset({"p2"})
    u = t.assume([("b", {GPU: 2})]).without(["p2"])
    assert u.free("b") == {"cpu": 8000, GPU: 6, "pods": 9}
    assert s.free("b") == {"cpu": 6000, GPU: 0, "pods": 8}


def test_domain_groups() -> None:
    s = Snapshot.build(nodes(), [])
    g = s.domain_groups("rack")
    assert g.names == ("r1", "r2")
    assert list(g.codes) == [0, 1, -1]
    assert [list(g.order[a:b]) for a, b in zip(g.starts, g.ends, strict=True)] == [[0], [1]]


def test_huge_amounts_saturate_instead_of_overflowing() -> None:
    big = 2**70
    s = Snapshot.build(
        [NodeInfo("a", {}, {"memory": big, "pods": 10}), NodeInfo("b", {}, {"memory": 1, "pods": 10})],
        [BoundPod(f"p{i}", "a", {"memory": big}) for i in range(4)],
    )
    assert s.allocatable_array.dtype == np.int64
    assert s.free("a")["memory"] <= 0
    t = s.assume([("a", {"memory": big})] * 3)
    assert int(t.used_array.max()) <= 2**62
