"""Why a gang does not fit, per domain, in kube-scheduler's words."""

from __future__ import annotations

from phalanx.placement import (
    BoundPod,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Snapshot,
    Taint,
    Toleration,
    diagnose,
)

GPU = "nvidia.com/gpu"
KEY = "block"


def node(name: str, block: str, taints: tuple[Taint, ...] = ()) -> NodeInfo:
    return NodeInfo(
        name=name, labels={KEY: block}, allocatable={GPU: 8, "cpu": 64_000, "pods": 110}, taints=taints
    )


def gang(count: int, gpus: int = 8) -> GroupRequest:
    req = PodRequirements(requests=((GPU, gpus),))
    return GroupRequest("g", tuple(PodRequest(f"p{i}", req) for i in range(count)), count, KEY)


def test_each_domain_says_how_many_fit_and_what_keeps_the_other_nodes_out() -> None:
    taint = Taint("example.com/x", "", "NoSchedule")
    nodes = [node("a1", "a"), node("a2", "a"), node("a3", "a"), node("a4", "a")]
    nodes += [node("b1", "b"), node("b2", "b", (taint,)), node("b3", "b", (taint,)), node("b4", "b")]
    busy = [BoundPod("x", "a1", {GPU: 8}), BoundPod("y", "b1", {GPU: 8})]
    diagnosis = diagnose(Snapshot.build(nodes, busy), gang(4))
    assert not diagnosis.never_fits
    assert diagnosis.summary() == (
        "a: 3 of 4 pods fit (1 node: Insufficient nvidia.com/gpu); "
        "b: 1 of 4 pods fit (2 nodes: untolerated taint, 1 node: Insufficient nvidia.com/gpu)"
    )


def test_a_gang_larger_than_any_domain_is_told_it_never_fits() -> None:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]
    diagnosis = diagnose(Snapshot.build(nodes, []), gang(3))
    assert diagnosis.never_fits and diagnosis.best_when_empty == 2
    assert "it can never fit in this cluster" in diagnosis.summary()


def test_room_that_only_rules_between_pods_refuse_is_not_reported_as_fitting() -> None:
    from phalanx.placement import Diagnosis, DomainReport

    diagnosis = Diagnosis(need=3, domains=(DomainReport("nb-b", 3, ()),), never_fits=False, best_when_empty=4)
    assert "3 of 3 pods fit" not in diagnosis.summary()
    assert "room for 3 pods, but their pod (anti-)affinity" in diagnosis.summary()


def test_pods_of_two_kinds_are_not_counted_twice_on_the_same_free_nodes() -> None:
    """A leader and the slots of its workers to come (a LeaderReady group): the same 8 GPUs, but not alike
    (the leader pod tolerates what its template does not say). b has 2 free nodes: 2 of the 4 fit, not
    room for 4 refused by rules between pods."""
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]
    nodes += [node("b3", "b"), node("b4", "b")]
    busy = [BoundPod(f"x{n}", n, {GPU: 8}) for n in ("a1", "a2", "b3", "b4")]
    leader = PodRequirements(
        requests=((GPU, 8),), tolerations=(Toleration("node.kubernetes.io/not-ready", "Exists"),)
    )
    slot = PodRequirements(requests=((GPU, 8),))
    pods = (PodRequest("leader", leader), *(PodRequest(f"slot-{i}", slot) for i in (1, 2, 3)))
    diagnosis = diagnose(Snapshot.build(nodes, busy), GroupRequest("g", pods, 4, KEY))
    assert diagnosis.summary() == (
        "b: 2 of 4 pods fit (2 nodes: Insufficient nvidia.com/gpu); "
        "a: 0 of 4 pods fit (2 nodes: Insufficient nvidia.com/gpu)"
    )
