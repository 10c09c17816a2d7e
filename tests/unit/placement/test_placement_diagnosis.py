"""Why a gang does not fit, per domain, in kube-scheduler's words."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcde"), st.integers(0, 8)), min_size=1, max_size=14),
    st.integers(1, 6),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([None, 2, 3]),
)
def test_each_domains_count_is_what_its_nodes_take_one_by_one(
    nodes_used: list[tuple[str, int]], count: int, gpus: int, leader_gpus: int | None
) -> None:
    """Reference, written here alone: per domain, each node takes min(free // request) pods of a kind; one
    kind: the domain's count is the sum, at most the gang; two kinds (a leader of another request, then
    the rest), both packed on the same nodes, at most that sum and exactly it when it is 0. The domains
    are reported best first (then by name), at most SHOWN_DOMAINS, and the best count when empty too."""
    nodes = [node(f"{block}{i}", block) for i, (block, _) in enumerate(nodes_used)]
    busy = [
        BoundPod(f"x{i}", f"{block}{i}", {GPU: used}) for i, (block, used) in enumerate(nodes_used) if used
    ]
    slot = PodRequirements(requests=((GPU, gpus),))
    pods = [PodRequest(f"p{i}", slot) for i in range(count)]
    if leader_gpus is not None:
        pods[0] = PodRequest("leader", PodRequirements(requests=((GPU, leader_gpus),)))
    diagnosis = diagnose(Snapshot.build(nodes, busy), GroupRequest("g", tuple(pods), count, KEY))

    def takes(free: int, request: int, cap: int) -> int:
        return min(cap, free // request)

    by_block: dict[str, list[int]] = {}
    for block, used in nodes_used:
        by_block.setdefault(block, []).append(8 - used)
    expected: dict[str, int] = {}
    for block, frees in by_block.items():
        if leader_gpus is None:
            expected[block] = min(count, sum(takes(f, gpus, count) for f in frees))
        else:
            bound = min(count, sum(takes(f, leader_gpus, 1) + takes(f, gpus, count - 1) for f in frees))
            expected[block] = bound
    reported = {str(d.domain): d.fit for d in diagnosis.domains}
    for block, fit in reported.items():
        if leader_gpus is None or expected[block] == 0:
            assert fit == expected[block], (block, fit, expected)
        else:
            assert 0 < fit <= expected[block] or (fit == 0 and expected[block] == 0), (block, fit, expected)
    best = sorted(expected, key=lambda b: (-reported.get(b, -1), b))
    assert [d.domain for d in diagnosis.domains] == best[: len(diagnosis.domains)]
    empty = max(min(count, sum(takes(8, gpus, count) for _ in frees)) for frees in by_block.values())
    if leader_gpus is None:
        assert diagnosis.best_when_empty == empty
