from __future__ import annotations

import pytest
from placement_testkit import (
    GPU,
    GPU_POD,
    LOCAL_BLOCK,
    NETWORK_BLOCK,
    article_nodes,
    busy,
    gang,
    worker,
)

from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    Taint,
    Toleration,
    admitted_usage,
    decide,
)


def admitted(decision: object) -> Admit:
    assert isinstance(decision, Admit), decision
    return decision


def rejected(decision: object) -> Reject:
    assert isinstance(decision, Reject), decision
    return decision


def nodes_of(decision: Admit) -> list[str]:
    return [node for _, node in decision.assignments]


# --- the article's scenarios on its 8-node cluster ------------------------------------------


def test_gang_of_4_with_5_nodes_filled_is_rejected_like_upstream() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3, 4, 5))
    r = rejected(decide(s, gang(4, 4, None)))
    assert r.message == (
        "pod group is unschedulable, 0/1 placements are available, first placement status: "
        "minCount (4) cannot be satisfied: 3 scheduled, 0 remaining"
    )
    assert (r.reason, r.placements_total, r.placements_feasible, r.scheduled, r.remaining) == (
        "Unschedulable",
        1,
        0,
        3,
        0,
    )


def test_gang_of_4_fits_once_a_node_frees_up() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3, 4))
    d = admitted(decide(s, gang(4, 4, None)))
    assert d.domain is None
    assert sorted(nodes_of(d)) == [worker(i) for i in (5, 6, 7, 8)]


def test_local_2_on_empty_cluster_takes_first_local_block_by_name() -> None:
    s = Snapshot.build(article_nodes(), [])
    d = admitted(decide(s, gang(2, 2, LOCAL_BLOCK)))
    assert d.domain == "lb-a1"
    assert d.assignments == (("g-0", worker(1)), ("g-1", worker(2)))


def test_local_4_cannot_fit_any_local_block() -> None:
    s = Snapshot.build(article_nodes(), [])
    r = rejected(decide(s, gang(4, 4, LOCAL_BLOCK)))
    assert "0/4 placements are available" in r.message
    assert "2 scheduled, 1 remaining" in r.message
    assert (r.placements_total, r.scheduled, r.remaining) == (4, 2, 1)


def test_block_4_takes_the_four_nodes_of_nb_a() -> None:
    s = Snapshot.build(article_nodes(), [])
    d = admitted(decide(s, gang(4, 4, NETWORK_BLOCK)))
    assert d.domain == "nb-a"
    assert nodes_of(d) == [worker(i) for i in (1, 2, 3, 4)]


def test_best_fit_prefers_the_block_with_a_busy_node() -> None:
    # block-3: nb-a has 3 free nodes left after was-worker (lb-a1) is busy, nb-b has 4: nb-a fits tighter.
    s = Snapshot.build(article_nodes(), busy(1))
    d = admitted(decide(s, gang(3, 3, NETWORK_BLOCK)))
    assert d.domain == "nb-a"
    assert sorted(nodes_of(d)) == [worker(i) for i in (2, 3, 4)]


def test_best_fit_follows_the_busy_node_to_nb_b() -> None:
    s = Snapshot.build(article_nodes(), busy(5))
    d = admitted(decide(s, gang(3, 3, NETWORK_BLOCK)))
    assert d.domain == "nb-b"
    assert sorted(nodes_of(d)) == [worker(i) for i in (6, 7, 8)]


def test_running_pods_pin_the_domain() -> None:
    # Two pods of the group already run in nb-b; the empty nb-a would otherwise win by name.
    s = Snapshot.build(
        article_nodes(), [BoundPod("g-old-0", worker(7), {GPU: 8}), BoundPod("g-old-1", worker(8), {GPU: 8})]
    )
    d = admitted(decide(s, gang(2, 4, NETWORK_BLOCK, bound=(worker(7), worker(8)))))
    assert d.domain == "nb-b"
    assert sorted(nodes_of(d)) == [worker(5), worker(6)]


def test_pinned_domain_without_room_is_rejected_with_one_placement() -> None:
    s = Snapshot.build(article_nodes(), [BoundPod("g-old-0", worker(1), {GPU: 8}), *busy(2, 3)])
    r = rejected(decide(s, gang(3, 4, NETWORK_BLOCK, bound=(worker(1),))))
    assert r.placements_total == 1
    assert r.message.endswith("minCount (4) cannot be satisfied: 2 scheduled, 1 remaining")


def test_min_count_below_count_places_the_extras_too() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2))
    d = admitted(decide(s, gang(4, 2, NETWORK_BLOCK)))
    # nb-a has 2 free nodes, nb-b 4: placing all 4 pods beats the tighter nb-a.
    assert d.domain == "nb-b"
    assert len(d.assignments) == 4


def test_pods_beyond_capacity_are_left_out() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3))
    d = admitted(decide(s, gang(6, 3, None)))
    assert len(d.assignments) == 5
    assert [pid for pid, _ in d.assignments] == [f"g-{i}" for i in range(5)]


# --- rules ---------------------------------------------------------------------------------


def test_too_few_pods_for_min_count() -> None:
    s = Snapshot.build(article_nodes(), [])
    r = rejected(decide(s, gang(2, 4, NETWORK_BLOCK, bound=(worker(1),))))
    assert (
        r.message == "pod group is unschedulable, minCount (4) cannot be satisfied: 1 scheduled, 2 remaining"
    )
    assert (r.reason, r.placements_total, r.scheduled, r.remaining) == ("Unschedulable", 0, 1, 2)


def test_min_count_zero_or_negative_means_one() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3, 4, 5, 6, 7, 8))
    for m in (0, -3):
        r = rejected(decide(s, gang(1, m, None)))
        assert "minCount (1)" in r.message
        assert (r.scheduled, r.remaining) == (0, 0)
    assert rejected(decide(s, gang(0, 0, None))).reason == "Unschedulable"


def test_no_node_has_the_key() -> None:
    s = Snapshot.build(article_nodes(), [])
    r = rejected(decide(s, gang(2, 2, "example.com/block")))
    assert r.reason == "NoDomain"
    assert r.message == (
        "pod group is unschedulable, 0/0 placements are available: no node has the label example.com/block"
    )


def test_bound_nodes_in_two_domains_conflict() -> None:
    s = Snapshot.build(article_nodes(), [])
    r = rejected(decide(s, gang(2, 2, LOCAL_BLOCK, bound=(worker(1), worker(3)))))
    assert r.reason == "DomainConflict"
    assert "lb-a1, lb-a2" in r.message


def test_bound_node_without_the_key_or_unknown_conflicts() -> None:
    extra = NodeInfo("loner", {}, {GPU: 8, "pods": 110})
    s = Snapshot.build([*article_nodes(), extra], [])
    assert rejected(decide(s, gang(1, 2, LOCAL_BLOCK, bound=("loner",)))).reason == "DomainConflict"
    assert rejected(decide(s, gang(1, 2, LOCAL_BLOCK, bound=("ghost",)))).reason == "DomainConflict"
    # Without a topology key the bound nodes pin nothing.
    assert admitted(decide(s, gang(1, 2, None, bound=("ghost",)))).domain is None


def test_nodes_without_the_key_are_not_placements() -> None:
    extra = NodeInfo("loner", {}, {GPU: 64, "pods": 110})
    s = Snapshot.build([extra, *article_nodes()], busy(1, 2, 3, 4, 5, 6, 7, 8))
    r = rejected(decide(s, gang(1, 1, NETWORK_BLOCK)))
    assert r.placements_total == 2
    assert admitted(decide(s, gang(1, 1, None))).assignments == (("g-0", "loner"),)


def test_nothing_pending_and_enough_bound_is_admitted() -> None:
    s = Snapshot.build(article_nodes(), [])
    d = admitted(decide(s, gang(0, 2, LOCAL_BLOCK, bound=(worker(5), worker(6)))))
    assert d == Admit(domain="lb-b1", assignments=())


def test_extended_resource_missing_on_node() -> None:
    cpu_only = [NodeInfo(f"cpu-{i}", {"b": "x"}, {"cpu": 64_000, "pods": 110}) for i in range(3)]
    s = Snapshot.build(cpu_only, [])
    r = rejected(decide(s, gang(1, 1, "b")))
    assert "0 scheduled, 0 remaining" in r.message
    # A resource that no node reports at all behaves the same.
    odd = PodRequirements(requests=(("example.com/fpga", 1),))
    assert isinstance(decide(s, gang(1, 1, None, requirements=odd)), Reject)


def test_resources_requested_zero_are_not_checked() -> None:
    n = NodeInfo("n", {}, {"cpu": 1000, "pods": 110})
    s = Snapshot.build([n], [BoundPod("hog", "n", {"memory": 10**12})])
    zero = PodRequirements(requests=(("cpu", 500), ("memory", 0), ("nvidia.com/gpu", 0)))
    assert admitted(decide(s, gang(2, 2, None, requirements=zero))).assignments == (
        ("g-0", "n"),
        ("g-1", "n"),
    )


def test_pod_slots_are_checked() -> None:
    n = NodeInfo("n", {}, {"cpu": 100_000, "pods": 3})
    s = Snapshot.build([n], [BoundPod("x", "n", {})])
    tiny = PodRequirements(requests=(("cpu", 1),))
    assert len(admitted(decide(s, gang(5, 1, None, requirements=tiny))).assignments) == 2


def test_cordoned_not_ready_and_tainted_nodes_are_skipped() -> None:
    def change(n: NodeInfo) -> NodeInfo:
        if n.name == worker(2):
            return NodeInfo(n.name, n.labels, n.allocatable, unschedulable=True)
        if n.name == worker(3):
            return NodeInfo(n.name, n.labels, n.allocatable, ready=False)
        if n.name == worker(4):
            return NodeInfo(n.name, n.labels, n.allocatable, taints=(Taint("maint", "", "NoSchedule"),))
        return n

    s = Snapshot.build([change(n) for n in article_nodes()], [])
    assert admitted(decide(s, gang(4, 4, NETWORK_BLOCK))).domain == "nb-b"
    assert rejected(decide(s, gang(2, 3, NETWORK_BLOCK, bound=(worker(1),)))).scheduled == 2
    tolerant = PodRequirements(requests=((GPU, 8),), tolerations=(Toleration("maint", "Exists"),))
    d = admitted(decide(s, gang(2, 3, NETWORK_BLOCK, bound=(worker(1),), requirements=tolerant)))
    assert nodes_of(d) == [worker(1), worker(4)]


def test_free_capacity_of_ineligible_nodes_does_not_count_for_best_fit() -> None:
    nodes = [
        NodeInfo(n.name, n.labels, n.allocatable, unschedulable=True) if n.name == worker(3) else n
        for n in article_nodes()
    ]
    s = Snapshot.build(nodes, [])
    # lb-a2 only offers was-worker4 now: an exact fit, better than lb-a1's two free nodes.
    d = admitted(decide(s, gang(1, 1, LOCAL_BLOCK)))
    assert d == Admit(domain="lb-a2", assignments=(("g-0", worker(4)),))


def test_node_affinity_restricts_domains() -> None:
    s = Snapshot.build(article_nodes(), [])
    only_b = PodRequirements(
        requests=((GPU, 8),),
        affinity_terms=(NodeSelectorTerm((NodeSelectorRequirement(NETWORK_BLOCK, "In", ("nb-b",)),)),),
    )
    assert admitted(decide(s, gang(2, 2, LOCAL_BLOCK, requirements=only_b))).domain == "lb-b1"
    selector = PodRequirements(requests=((GPU, 8),), node_selector=((LOCAL_BLOCK, "lb-b2"),))
    assert admitted(decide(s, gang(2, 2, None, requirements=selector))).assignments == (
        ("g-0", worker(7)),
        ("g-1", worker(8)),
    )


def test_best_fit_counts_only_eligible_nodes_and_fills_the_fewest_nodes() -> None:
    half = [NodeInfo(f"n{i}", {"rack": "r"}, {GPU: 8, "pods": 110}) for i in range(4)]
    s = Snapshot.build(half, [BoundPod("x", "n2", {GPU: 6}), BoundPod("y", "n0", {GPU: 2})])
    small = PodRequirements(requests=((GPU, 2),))
    d = admitted(decide(s, gang(5, 1, "rack", requirements=small)))
    # n1 and n3 hold 4 pods each, n0 3, n2 1: two nodes are needed, n1 (the first of the biggest) and then
    # n2, the tightest node that holds the fifth pod (fullest-first would have used n2, n0 and n1).
    assert nodes_of(d) == ["n1", "n1", "n1", "n1", "n2"]


def test_two_half_node_pods_take_one_empty_node_not_two_half_busy_ones() -> None:
    # Issue 18: workers 1 and 2 of nb-a are half busy, worker 3 is empty, worker 4 full; nb-b is empty.
    pods = [BoundPod(f"half-{w}", worker(w), {GPU: 4}) for w in (1, 2)] + busy(4)
    s = Snapshot.build(article_nodes(), pods)
    half = PodRequirements(requests=((GPU, 4),))
    d = admitted(decide(s, gang(2, 2, NETWORK_BLOCK, requirements=half)))
    assert d.domain == "nb-a"  # best fit: the fuller block
    assert nodes_of(d) == [worker(3), worker(3)]  # the fewest nodes (fullest-first took workers 1 and 2)


def test_several_small_pods_share_a_node() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3, 4, 5, 6))
    quarter = PodRequirements(requests=((GPU, 2),))
    d = admitted(decide(s, gang(6, 6, None, requirements=quarter)))
    assert nodes_of(d) == [worker(7)] * 4 + [worker(8)] * 2


def test_mixed_requirements_first_fit_decreasing() -> None:
    s = Snapshot.build(article_nodes(), busy(1, 2, 3, 4, 5, 6))
    big = PodRequirements(requests=((GPU, 8),))
    small = PodRequirements(requests=((GPU, 4),))
    pods = (
        PodRequest("s0", small),
        PodRequest("b0", big),
        PodRequest("s1", small),
        PodRequest("s2", small),
    )
    d = admitted(decide(s, GroupRequest("mix", pods, 3, None)))
    # The big pod goes first to the fullest node with room, then the small ones.
    assert dict(d.assignments) == {"b0": worker(7), "s0": worker(8), "s1": worker(8)}
    assert [pid for pid, _ in d.assignments] == ["s0", "b0", "s1"]  # pending order
    r = rejected(decide(s, GroupRequest("mix", pods, 4, None)))
    assert r.message.endswith("minCount (4) cannot be satisfied: 3 scheduled, 0 remaining")


def test_mixed_requirements_choose_domain_by_rules() -> None:
    s = Snapshot.build(article_nodes(), busy(1))
    pinned_small = PodRequirements(requests=((GPU, 4),), node_selector=((LOCAL_BLOCK, "lb-a2"),))
    pods = (PodRequest("a", GPU_POD), PodRequest("b", pinned_small), PodRequest("c", pinned_small))
    d = admitted(decide(s, GroupRequest("mix", pods, 3, NETWORK_BLOCK)))
    assert d.domain == "nb-a"
    # The fewest nodes: worker 3 holds "a" (or both small pods), so two nodes of lb-a2 do, not lb-a1's too.
    assert dict(d.assignments) == {"a": worker(3), "b": worker(4), "c": worker(4)}


def test_admitted_usage_feeds_assume_for_the_next_group() -> None:
    s = Snapshot.build(article_nodes(), [])
    first = gang(4, 4, NETWORK_BLOCK, name="first")
    d = admitted(decide(s, first))
    s2 = s.assume(admitted_usage(first, d))
    second = admitted(decide(s2, gang(4, 4, NETWORK_BLOCK, name="second")))
    assert second.domain == "nb-b"
    assert rejected(decide(s2, gang(5, 5, None, name="third"))).scheduled == 4


@pytest.mark.parametrize("key", [None, LOCAL_BLOCK, NETWORK_BLOCK])
def test_same_input_same_output(key: str | None) -> None:
    s = Snapshot.build(article_nodes(), busy(2, 7))
    assert decide(s, gang(3, 2, key)) == decide(s, gang(3, 2, key))
    s_rev = Snapshot.build(list(reversed(article_nodes())), list(reversed(busy(2, 7))))
    assert decide(s, gang(3, 2, key)) == decide(s_rev, gang(3, 2, key))


def test_empty_cluster() -> None:
    s = Snapshot.build([], [])
    r = rejected(decide(s, gang(1, 1, None)))
    assert (r.reason, r.placements_total, r.scheduled, r.remaining) == ("Unschedulable", 1, 0, 0)
    assert rejected(decide(s, gang(1, 1, LOCAL_BLOCK))).reason == "NoDomain"


def test_group_asking_for_nothing_packs_by_pod_slots() -> None:
    s = Snapshot.build([NodeInfo("a", {}, {"pods": 2}), NodeInfo("b", {}, {"pods": 3})], [])
    d = admitted(decide(s, gang(4, 4, None, requirements=PodRequirements(requests=()))))
    assert nodes_of(d) == ["b", "b", "b", "a"]  # b holds 3, a (the tightest) the fourth
