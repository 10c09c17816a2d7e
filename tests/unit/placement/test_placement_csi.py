"""NodeVolumeLimits (CSI attach limits) and CSIStorageCapacity in the engine, case by case."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from placement_testkit import GPU, NETWORK_BLOCK, article_nodes, worker

from phalanx.placement import (
    Admit,
    BoundPod,
    ClaimInfo,
    GroupRequest,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequest,
    PodTraits,
    Reject,
    Snapshot,
    decide,
    diagnose,
    pod_requirements,
    pod_traits,
)
from phalanx.placement.model import CSINodeInfo, CSIView, CSIVolume

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DRIVER = "csi.example.com"


def nodes() -> list[NodeInfo]:
    """The article's 8 nodes of 8 GPUs (nb-a: workers 1-4, nb-b: 5-8), zone z1 for 1-4, z2 for 5-8."""
    return [
        NodeInfo(n.name, {**n.labels, HOST: n.name, ZONE: "z1" if i < 4 else "z2"}, n.allocatable)
        for i, n in enumerate(article_nodes())
    ]


def vol(handle: str, driver: str = DRIVER) -> CSIVolume:
    return CSIVolume(driver, f"{driver}/{handle}")


def gang(
    count: int = 4, shared: bool = False, key: str | None = NETWORK_BLOCK, min_count: int | None = None
) -> GroupRequest:
    """Pods of 4 GPUs (two fit a node); each with its own claim "<pod>-scratch" (an ephemeral volume),
    or all with the claim "data"."""
    volume: dict[str, Any] = (
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
        if shared
        else {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    )
    spec = {"containers": [{"name": "w", "resources": {"limits": {GPU: "4"}}}], "volumes": [volume]}
    req = pod_requirements(spec)
    pods = tuple(
        PodRequest(f"ns/train-{i}", req, pod_traits({"name": f"train-{i}", "namespace": "ns"}, spec))
        for i in range(count)
    )
    return GroupRequest("train", pods, count if min_count is None else min_count, key)


def claims(count: int = 4, **info: Any) -> dict[str, ClaimInfo]:
    """Each pod's own claim, a new volume of DRIVER (unbound: unique to the claim)."""
    return {
        f"ns/train-{i}-scratch": ClaimInfo(csi=vol(f"claim:ns/train-{i}-scratch"), **info)
        for i in range(count)
    }


def limits(count: int | None, *names: str, attached: tuple[tuple[str, str], ...] = ()) -> CSIView:
    """A CSINode on each named node (all nodes when none) with DRIVER limited to `count` (None: no limit)."""
    on = names or tuple(n.name for n in nodes())
    info = CSINodeInfo(
        drivers=frozenset({DRIVER}),
        limits=(((DRIVER, count),) if count is not None else ()),
        attached=attached,
    )
    return CSIView(nodes={name: info for name in on})


def placed(decision: Admit) -> Counter[str]:
    return Counter(node for _, node in decision.assignments)


def admitted(decision: object) -> Admit:
    assert isinstance(decision, Admit), decision
    return decision


def rejected(decision: object) -> Reject:
    assert isinstance(decision, Reject), decision
    return decision


def user(node: str, handle: str, name: str = "user") -> BoundPod:
    """A pod already on `node` using the bound claim "ns/<name>-claim" (volume `handle`)."""
    return BoundPod(f"ns/{name}", node, {}, traits=PodTraits("ns", claims=(f"{name}-claim",)))


@pytest.mark.parametrize(
    ("case", "view", "per_node"),
    [
        ("no CSINode: unlimited, packed two a node", CSIView(), 2),
        ("a CSINode without a count: unlimited", limits(None), 2),
        ("a limit of two: packed", limits(2), 2),
        ("a limit of one: the group's own pods count against each other, one a node", limits(1), 1),
    ],
)
def test_the_groups_own_volumes_count_against_each_node(case: str, view: CSIView, per_node: int) -> None:
    d = admitted(decide(Snapshot.build(nodes(), [], claims(), csi=view), gang()))
    assert len(d.assignments) == 4, case
    assert max(placed(d).values()) == per_node, case
    assert d.domain == "nb-a", "the one-a-node spread still fits a block"


def test_a_volume_shared_by_the_pods_counts_once() -> None:
    shared = {"ns/data": ClaimInfo(csi=vol("h-1"))}
    d = admitted(decide(Snapshot.build(nodes(), [], shared, csi=limits(1)), gang(shared=True)))
    assert max(placed(d).values()) == 2


def test_pods_already_on_a_node_use_its_volumes() -> None:
    resolved = {**claims(), "ns/user-claim": ClaimInfo(csi=vol("h-user"))}
    # workers 1-3 hold a volume each under a limit of 1: nb-a has room for one pod, nb-b for four.
    users = [user(worker(i), "h-user", f"user{i}") for i in (1, 2, 3)]
    resolved |= {f"ns/user{i}-claim": ClaimInfo(csi=vol(f"h-user{i}")) for i in (1, 2, 3)}
    d = admitted(decide(Snapshot.build(nodes(), users, resolved, csi=limits(1)), gang()))
    assert d.domain == "nb-b" and max(placed(d).values()) == 1
    # The same volume as the pod already there is not counted again.
    same = {"ns/data": ClaimInfo(csi=vol("h-user1"))}
    only = [worker(1)]
    view = limits(1, *only)
    d = admitted(
        decide(
            Snapshot.build(nodes()[:1], users[:1], {**resolved, **same}, csi=view),
            gang(2, shared=True, key=None),
        )
    )
    assert placed(d) == Counter({worker(1): 2})


def test_volume_attachments_count_unless_a_pod_there_uses_the_volume() -> None:
    one = nodes()[:1]
    view = limits(1, worker(1), attached=((vol("h-old").id, DRIVER),))
    r = rejected(decide(Snapshot.build(one, [], claims(1), csi=view), gang(1, key=None)))
    assert "node(s) exceed max volume count" in r.message
    # An attachment of a volume a pod there uses counts once, with that pod.
    resolved = {**claims(1), "ns/user-claim": ClaimInfo(csi=vol("h-old"))}
    r = rejected(
        decide(Snapshot.build(one, [user(worker(1), "h-old")], resolved, csi=view), gang(1, key=None))
    )
    assert "exceed max volume count" in r.message
    view = limits(2, worker(1), attached=((vol("h-old").id, DRIVER),))
    d = admitted(
        decide(Snapshot.build(one, [user(worker(1), "h-old")], resolved, csi=view), gang(1, key=None))
    )
    assert placed(d) == Counter({worker(1): 1})


def test_a_gang_that_cannot_spread_enough_waits_with_the_schedulers_words() -> None:
    two = nodes()[:2]
    r = rejected(decide(Snapshot.build(two, [], claims(), csi=limits(1)), gang(key=None)))
    assert r.reason == "Unschedulable"
    assert "node(s) exceed max volume count" in r.message
    d = admitted(decide(Snapshot.build(two, [], claims(), csi=limits(1)), gang(key=None, min_count=2)))
    assert placed(d) == Counter({worker(1): 1, worker(2): 1})


def test_other_drivers_and_uncounted_claims_do_not_count() -> None:
    view = CSIView(
        nodes={
            n.name: CSINodeInfo(frozenset({"other.example.com"}), (("other.example.com", 0),))
            for n in nodes()
        }
    )
    d = admitted(decide(Snapshot.build(nodes(), [], claims(), csi=view), gang()))
    assert max(placed(d).values()) == 2
    plain = {key: ClaimInfo() for key in claims()}
    d = admitted(decide(Snapshot.build(nodes(), [], plain, csi=limits(0)), gang()))
    assert max(placed(d).values()) == 2


def test_a_strict_driver_needs_the_node_to_list_it() -> None:
    view = CSIView(nodes=limits(None, worker(5), worker(6)).nodes, strict_drivers=frozenset({DRIVER}))
    d = admitted(decide(Snapshot.build(nodes(), [], claims(), csi=view), gang(key=None)))
    assert set(placed(d)) == {worker(5), worker(6)}
    view = CSIView(strict_drivers=frozenset({DRIVER}))
    r = rejected(decide(Snapshot.build(nodes(), [], claims(), csi=view), gang()))
    assert f"{DRIVER} CSI driver is not installed on the node" in r.message
    # A migrated in-tree volume is only counted (and checked) on nodes with a CSINode.
    migrated = {
        key: ClaimInfo(csi=CSIVolume(DRIVER, info.csi.id, migrated=True))
        for key, info in claims().items()
        if info.csi
    }
    d = admitted(decide(Snapshot.build(nodes(), [], migrated, csi=view), gang()))
    assert len(d.assignments) == 4


@pytest.mark.parametrize("order", ["csi first", "in-tree first"])
def test_one_volume_as_csi_and_as_migrated_in_tree_is_checked_as_csi(order: str) -> None:
    """A pod mounting the same disk through a CSI volume and a migrated in-tree one: the CSI one counts
    (and needs the strict driver listed) also on nodes without a CSINode, in either order of its volumes."""
    handle = vol("disk-1").id
    spec = {
        "containers": [{"name": "w"}],
        "volumes": [
            {"name": n, "persistentVolumeClaim": {"claimName": n}}
            for n in (("csi", "intree") if order == "csi first" else ("intree", "csi"))
        ],
    }
    pod = PodRequest("ns/p", pod_requirements(spec), pod_traits({"name": "p", "namespace": "ns"}, spec))
    resolved = {
        "ns/csi": ClaimInfo(csi=CSIVolume(DRIVER, handle)),
        "ns/intree": ClaimInfo(csi=CSIVolume(DRIVER, handle, migrated=True)),
    }
    view = CSIView(strict_drivers=frozenset({DRIVER}))
    r = rejected(decide(Snapshot.build(nodes(), [], resolved, csi=view), GroupRequest("g", (pod,), 1, None)))
    assert f"{DRIVER} CSI driver is not installed on the node" in r.message


Z2 = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(ZONE, "In", ("z2",)),))


@pytest.mark.parametrize(
    ("case", "capacity", "expected"),
    [
        ("not checked", None, {"nb-a"}),
        ("capacity in z2 only", (Z2,), {"nb-b"}),
        ("no capacity anywhere", (), None),
    ],
)
def test_storage_capacity_limits_the_nodes(
    case: str, capacity: tuple[NodeSelectorTerm, ...] | None, expected: set[str] | None
) -> None:
    resolved = claims(capacity_terms=capacity)
    decision = decide(Snapshot.build(nodes(), [], resolved), gang())
    if expected is None:
        r = rejected(decision)
        assert r.reason == "Unschedulable"
        assert "node(s) did not have enough free storage" in r.message, case
    else:
        d = admitted(decision)
        assert {d.domain} == expected, case


def test_the_diagnosis_names_the_volume_filter_that_keeps_a_domain_out() -> None:
    """nb-a has room for the gang but no storage capacity, and nb-b is full: per domain, the cause is named
    (not "room for 4 pods, but ... together")."""
    full = [BoundPod(f"ns/fill-{i}", worker(i), {GPU: 8}) for i in range(5, 9)]
    snapshot = Snapshot.build(nodes(), full, claims(capacity_terms=(Z2,)))
    rejected(decide(snapshot, gang()))
    summary = diagnose(snapshot, gang()).summary()
    assert "nb-a: 0 of 4 pods fit (4 nodes: node(s) did not have enough free storage)" in summary, summary
    assert "nb-b: 0 of 4 pods fit (4 nodes: Insufficient nvidia.com/gpu)" in summary, summary
    assert "never fit" not in summary, summary
