"""Composite groups (CompositePodGroup) on the article's seed topology: slices, all or nothing, reasons."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_testkit import GPU, LOCAL_BLOCK, NETWORK_BLOCK, article_nodes, busy, worker

from phalanx.placement import (
    BoundPod,
    Candidate,
    CompositeAdmit,
    CompositeReject,
    CompositeRequest,
    GroupRequest,
    LabelSelector,
    NodeInfo,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    PodTraits,
    Snapshot,
    Toleration,
    TopologyMode,
    choose_composite_victims,
    composite_usage,
    decide_composite,
)

HOST = "kubernetes.io/hostname"


def slice_(
    name: str, pods: int = 2, gpus: int = 8, key: str | None = LOCAL_BLOCK, min_count: int = 0
) -> GroupRequest:
    req = PodRequirements(requests=((GPU, gpus),))
    pending = tuple(PodRequest(f"{name}-{i}", req) for i in range(pods))
    return GroupRequest(name, pending, min_count or pods, key)


def job(
    *children: GroupRequest | CompositeRequest, min_count: int = 0, key: str | None = NETWORK_BLOCK
) -> CompositeRequest:
    return CompositeRequest("slices", tuple(children), min_count or len(children), key)


def blocks(snapshot: Snapshot, admit: CompositeAdmit) -> dict[str, tuple[str, str]]:
    """Pod -> (network block, local block) of its node."""
    labels = {n.name: n.labels for n in snapshot.nodes}
    return {
        pod: (labels[node][NETWORK_BLOCK], labels[node][LOCAL_BLOCK])
        for _, a in admit.admits
        for pod, node in a.assignments
    }


def test_empty_cluster_each_slice_in_its_own_local_block_both_in_one_network_block() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    decision = decide_composite(snapshot, job(slice_("slices-0"), slice_("slices-1")))
    assert isinstance(decision, CompositeAdmit)
    where = blocks(snapshot, decision)
    assert len(where) == 4
    assert len({nb for nb, _ in where.values()}) == 1
    assert where["slices-0-0"][1] == where["slices-0-1"][1]
    assert where["slices-1-0"][1] == where["slices-1-1"][1]
    assert where["slices-0-0"][1] != where["slices-1-0"][1]
    # Deterministic: the same answer again, and the smallest names win the ties.
    assert decide_composite(snapshot, job(slice_("slices-0"), slice_("slices-1"))) == decision
    assert decision.domain("slices") == "nb-a"
    assert {decision.domain("slices-0"), decision.domain("slices-1")} == {"lb-a1", "lb-a2"}


def test_one_busy_node_in_three_local_blocks_the_whole_job_waits_with_a_reason_per_slice() -> None:
    snapshot = Snapshot.build(article_nodes(), busy(1, 3, 5))
    decision = decide_composite(snapshot, job(slice_("slices-0"), slice_("slices-1")))
    assert isinstance(decision, CompositeReject)
    assert decision.reason == "Unschedulable"
    # The closest network block is nb-b: lb-b2 holds one slice, lb-b1 has one free node.
    assert decision.why("slices-0") == "slices-0: fits in lb-b2, waits for the rest of the tree"
    assert decision.why("slices-1") == (
        "slices-1: lb-b1: 1 of 2 pods fit (1 node: Insufficient nvidia.com/gpu); "
        "lb-b2: 0 of 2 pods fit (2 nodes: Insufficient nvidia.com/gpu)"
    )
    assert decision.message.startswith(
        f"composite group is unschedulable: 2 of 2 child groups must fit in one domain of {NETWORK_BLOCK}; "
        "1 of 2 child groups fit in nb-b"
    )
    assert "slices-1: lb-b1: 1 of 2 pods fit (1 node: Insufficient nvidia.com/gpu)" in decision.message


NOT_READY = Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoExecute")


@pytest.mark.parametrize(
    "tolerations",
    [((), ()), ((NOT_READY,), ()), ((), (NOT_READY,))],
    ids=["alike", "the first pod tolerates more (a live leader)", "the second does (a slot beside it)"],
)
def test_a_leaf_of_two_pod_shapes_is_told_where_it_fits_as_a_leaf_of_one_shape(
    tolerations: tuple[tuple[Toleration, ...], ...],
) -> None:
    """A leaf whose pods differ only in what they tolerate (a live pod carries the tolerations the apiserver
    adds, the slot of a pod still to come does not) gets the same verdict as one of alike pods: it fits in
    lb-b2 and waits for the rest of the tree. Before, the closest domain by the search's bound (lb-b1, one
    free node counted once per shape) was the only one tried, and the diagnosis then said lb-b2 had room
    "but their pod (anti-)affinity ... do not allow them there together"."""
    snapshot = Snapshot.build(article_nodes(), busy(1, 3, 5))
    pending = tuple(
        PodRequest(f"s0-{i}", PodRequirements(requests=((GPU, 8),), tolerations=t))
        for i, t in enumerate(tolerations)
    )
    decision = decide_composite(snapshot, job(GroupRequest("s0", pending, 2, LOCAL_BLOCK), slice_("s1")))
    assert isinstance(decision, CompositeReject)
    assert decision.why("s0") == "s0: fits in lb-b2, waits for the rest of the tree"
    assert decision.why("s1") == (
        "s1: lb-b1: 1 of 2 pods fit (1 node: Insufficient nvidia.com/gpu); "
        "lb-b2: 0 of 2 pods fit (2 nodes: Insufficient nvidia.com/gpu)"
    )


def test_four_gpu_pods_each_slice_packs_on_one_node() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    decision = decide_composite(snapshot, job(slice_("s0", gpus=4), slice_("s1", gpus=4)))
    assert isinstance(decision, CompositeAdmit)
    for name in ("s0", "s1"):
        admit = decision.admit(name)
        assert admit is not None and len(admit.assignments) == 2
        assert len({node for _, node in admit.assignments}) == 1
    # Both slices' pods count against each other: two slices of two 4-GPU pods fill two nodes.
    nodes = {node for _, a in decision.admits for _, node in a.assignments}
    assert len(nodes) == 2


def test_slices_count_against_each_other_so_a_third_slice_goes_elsewhere_in_the_block() -> None:
    snapshot = Snapshot.build(article_nodes(), busy(3, 4))
    decision = decide_composite(snapshot, job(slice_("s0"), slice_("s1")))
    # nb-a has one free local block only: both slices go to nb-b.
    assert isinstance(decision, CompositeAdmit)
    assert decision.domain("slices") == "nb-b"
    assert {decision.domain("s0"), decision.domain("s1")} == {"lb-b1", "lb-b2"}


def test_min_count_of_children_leaves_out_a_slice_that_does_not_fit_and_places_it_when_it_does() -> None:
    snapshot = Snapshot.build(article_nodes(), busy(1, 3, 5, 7))
    # Four 1-node slices fit one per free node of a network block: 2 of 3 needed, the third left out.
    three = job(slice_("a", 1), slice_("b", 1), slice_("c", 1), min_count=2)
    decision = decide_composite(snapshot, three)
    assert isinstance(decision, CompositeAdmit)
    assert len(decision.admits) == 2
    everything = job(slice_("a", 1), slice_("b", 1), slice_("c", 1))
    assert isinstance(decide_composite(snapshot, everything), CompositeReject)
    on_empty = decide_composite(Snapshot.build(article_nodes(), []), three)
    assert isinstance(on_empty, CompositeAdmit) and len(on_empty.admits) == 3


def test_pods_above_min_count_are_placed_when_they_fit_but_never_at_a_siblings_expense() -> None:
    nodes = [n for n in article_nodes() if n.labels[NETWORK_BLOCK] == "nb-a"]
    # One free node, room for two 4-GPU pods. A wants 1 of 2 pods, B needs 1: A gets its minimum only.
    snapshot = Snapshot.build(nodes, busy(1, 2, 3))
    a = slice_("a", pods=2, gpus=4, min_count=1, key=NETWORK_BLOCK)
    b = slice_("b", pods=1, gpus=4, key=NETWORK_BLOCK)
    decision = decide_composite(snapshot, CompositeRequest("j", (a, b), 2, NETWORK_BLOCK))
    assert isinstance(decision, CompositeAdmit)
    assert {name: len(admit.assignments) for name, admit in decision.admits} == {"a": 1, "b": 1}
    # With room for both pods of A and B's pod, A gets both.
    roomy = decide_composite(
        Snapshot.build(nodes, busy(1, 2)), CompositeRequest("j", (a, b), 2, NETWORK_BLOCK)
    )
    assert isinstance(roomy, CompositeAdmit)
    assert {name: len(admit.assignments) for name, admit in roomy.admits} == {"a": 2, "b": 1}


def test_nested_tree_of_depth_three() -> None:
    nodes = [
        NodeInfo(
            f"n{b}{r}{i}",
            {"block": f"b{b}", "rack": f"b{b}r{r}", HOST: f"n{b}{r}{i}"},
            {GPU: 8, "pods": 110},
        )
        for b in range(2)
        for r in range(2)
        for i in range(2)
    ]
    snapshot = Snapshot.build(nodes, [BoundPod("x", "n000", {GPU: 8})])
    inner = [
        CompositeRequest(
            f"half-{h}", (slice_(f"h{h}-s0", 1, key=HOST), slice_(f"h{h}-s1", 1, key=HOST)), 2, "rack"
        )
        for h in range(2)
    ]
    decision = decide_composite(snapshot, CompositeRequest("root", tuple(inner), 2, "block"))
    assert isinstance(decision, CompositeAdmit)
    assert decision.domain("root") == "b1"  # b0 has only three free nodes
    assert {decision.domain("half-0"), decision.domain("half-1")} == {"b1r0", "b1r1"}
    assert len(composite_usage(CompositeRequest("root", tuple(inner), 2, "block"), decision)) == 4


def test_bound_pods_pin_their_slice_and_the_parent() -> None:
    snapshot = Snapshot.build(article_nodes(), [BoundPod("s0-0", worker(7), {GPU: 8})])
    s0 = GroupRequest(
        "s0", (PodRequest("s0-1", PodRequirements(requests=((GPU, 8),))),), 2, LOCAL_BLOCK, (worker(7),)
    )
    decision = decide_composite(snapshot, job(s0, slice_("s1")))
    assert isinstance(decision, CompositeAdmit)
    assert decision.domain("slices") == "nb-b" and decision.domain("s0") == "lb-b2"
    assert decision.admit("s0") is not None
    assert decision.admit("s0").assignments == (("s0-1", worker(8)),)  # type: ignore[union-attr]
    assert decision.domain("s1") == "lb-b1"


def test_invalid_trees_are_refused_with_a_reason() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    deep: GroupRequest | CompositeRequest = slice_("leaf", 1)
    for depth in range(4):
        deep = CompositeRequest(f"c{depth}", (deep,), 1)
    decision = decide_composite(snapshot, deep)  # type: ignore[arg-type]
    assert isinstance(decision, CompositeReject) and decision.reason == "Invalid"
    assert "deeper than 4" in decision.message
    twice = decide_composite(snapshot, job(slice_("s"), slice_("s")))
    assert isinstance(twice, CompositeReject) and twice.reason == "Invalid"
    too_few = decide_composite(snapshot, job(slice_("s0"), min_count=2))
    assert isinstance(too_few, CompositeReject) and too_few.reason == "Unschedulable"


def test_the_tree_pods_count_against_each_other_in_the_filters_of_one_gang() -> None:
    # Required anti-affinity across slices: no two pods of the job on one node, even with 1-GPU pods.
    term = PodAffinityTerm(LabelSelector(), HOST, all_namespaces=True)
    req = PodRequirements(requests=((GPU, 1),), pod_anti_affinity=(term,))
    nodes = [n for n in article_nodes() if n.labels[NETWORK_BLOCK] == "nb-a"]
    nodes = [NodeInfo(n.name, {**n.labels, HOST: n.name}, n.allocatable) for n in nodes]

    def group(name: str) -> GroupRequest:
        pods = tuple(PodRequest(f"{name}-{i}", req, PodTraits("ns", (("app", "x"),))) for i in range(2))
        return GroupRequest(name, pods, 2, LOCAL_BLOCK)

    decision = decide_composite(Snapshot.build(nodes, []), job(group("s0"), group("s1")))
    assert isinstance(decision, CompositeAdmit)
    used = [node for _, a in decision.admits for _, node in a.assignments]
    assert len(used) == 4 and len(set(used)) == 4
    three = decide_composite(Snapshot.build(nodes, []), job(group("s0"), group("s1"), group("s2"), key=None))
    assert isinstance(three, CompositeReject)


def slice_of(name: str, mode: TopologyMode, count: int = 2) -> GroupRequest:
    pods = tuple(PodRequest(f"{name}-{i}", PodRequirements(requests=((GPU, 8),))) for i in range(count))
    return GroupRequest(name, pods, count, LOCAL_BLOCK, mode=mode)


def test_a_preferred_leaf_stays_in_one_domain_of_its_key_when_the_tree_fits_so() -> None:
    decision = decide_composite(
        Snapshot.build(article_nodes(), []), job(slice_of("s", "preferred"), key=NETWORK_BLOCK)
    )
    assert isinstance(decision, CompositeAdmit)
    admit = decision.admit("s")
    assert admit is not None and admit.level is None and admit.domain == "lb-a1"


def test_a_preferred_leaf_takes_its_parents_domain_when_no_domain_of_its_key_holds_it() -> None:
    # One node of each local block is busy: no local block holds a 2-node slice, a network block does.
    snapshot = Snapshot.build(article_nodes(), busy(1, 3, 5, 7))
    strict = decide_composite(snapshot, job(slice_of("s", "required"), key=NETWORK_BLOCK))
    assert isinstance(strict, CompositeReject)
    decision = decide_composite(snapshot, job(slice_of("s", "preferred"), key=NETWORK_BLOCK))
    assert isinstance(decision, CompositeAdmit)
    admit = decision.admit("s")
    assert admit is not None and admit.level == "" and admit.domain == "nb-a"
    assert {node for _, node in admit.assignments} == {worker(2), worker(4)}
    # A second, required slice keeps its rule: the tree waits rather than break it.
    both = job(slice_of("s", "preferred"), slice_of("t", "required"), key=NETWORK_BLOCK)
    assert isinstance(decide_composite(snapshot, both), CompositeReject)


def test_preferred_leaves_go_wider_only_when_the_tree_cannot_fit_with_them_at_their_keys() -> None:
    # nb-a has lb-a1 free and lb-a2 half busy; two preferred slices of 2: one lb-a1, the other cannot fit a
    # local block of nb-a, so the whole tree goes to nb-b (empty) with both slices in their local blocks.
    snapshot = Snapshot.build(article_nodes(), busy(3))
    tree = job(slice_of("s", "preferred"), slice_of("t", "preferred"), key=NETWORK_BLOCK)
    decision = decide_composite(snapshot, tree)
    assert isinstance(decision, CompositeAdmit) and decision.domain("slices") == "nb-b"
    assert all(a.level is None for _, a in decision.admits)


def test_an_auto_leaf_is_required_where_it_can_ever_fit() -> None:
    # A slice of 3 can never fit a 2-node local block: auto takes its parent's network block.
    decision = decide_composite(
        Snapshot.build(article_nodes(), []), job(slice_of("s", "auto", 3), key=NETWORK_BLOCK)
    )
    assert isinstance(decision, CompositeAdmit)
    admit = decision.admit("s")
    assert admit is not None and admit.level == "" and admit.domain == "nb-a"
    assert admit.mode_note.startswith("auto: 3 pods can never fit one domain of")
    fits = decide_composite(
        Snapshot.build(article_nodes(), busy(1, 3, 5, 7)), job(slice_of("s", "auto"), key=NETWORK_BLOCK)
    )
    assert isinstance(fits, CompositeReject)  # 2 pods fit a local block when it is free: it waits


def test_an_outer_domain_with_room_but_no_whole_inner_domain_gives_way_to_the_next() -> None:
    # b0: four racks of one node; b1: two racks of two nodes. Both hold four pods, b0 wins the tie by name,
    # but only b1 holds two slices of two pods each in one rack: the search must go back and take b1.
    layout = [("b0", f"r{i}") for i in range(4)] + [("b1", "r0"), ("b1", "r0"), ("b1", "r1"), ("b1", "r1")]
    nodes = [
        NodeInfo(f"n{i}", {"block": b, "rack": r, HOST: f"n{i}"}, {GPU: 8, "pods": 110})
        for i, (b, r) in enumerate(layout)
    ]
    levels = ("block", "rack", HOST)
    root = CompositeRequest("job", (slice_("s0", key="rack"), slice_("s1", key="rack")), 2, "block", levels)
    decision = decide_composite(Snapshot.build(nodes, []), root)
    assert isinstance(decision, CompositeAdmit)
    assert decision.domain("job") == "b1"
    assert {decision.domain("s0"), decision.domain("s1")} == {"b1/r0", "b1/r1"}


def test_children_alike_share_the_room_of_one_node() -> None:
    # Found by the property test: two 1-pod children fit on one 2-GPU node (the search's bound on how many
    # children a domain holds must count the room of all of them, not of one).
    node = NodeInfo("n0", {HOST: "n0"}, {GPU: 2, "pods": 2})
    kids = (slice_("g0", 1, gpus=1, key=None), slice_("g1", 1, gpus=1, key=None))
    decision = decide_composite(Snapshot.build([node], []), CompositeRequest("c", kids, 2))
    assert isinstance(decision, CompositeAdmit) and len(decision.admits) == 2


def test_the_search_gives_up_after_its_step_budget_and_says_so() -> None:
    snapshot = Snapshot.build(article_nodes(), [])
    root = job(slice_("s0"), slice_("s1"))
    assert isinstance(decide_composite(snapshot, root, max_steps=2), CompositeAdmit)
    decision = decide_composite(snapshot, root, max_steps=1)
    assert isinstance(decision, CompositeReject) and decision.reason == "Unschedulable"
    assert "(gave up after 1 packings)" in decision.message


def test_a_preferred_root_goes_wider_only_when_no_domain_of_its_key_holds_the_tree() -> None:
    """Two slices of two in one network block; workers 1 and 5 busy leave 3 nodes per block. Required: the
    tree waits. Preferred: it is placed over both blocks (anywhere: no level above the key), each slice still
    in one local block, and the admit says the level used; with room in one block it stays there."""
    crowded = Snapshot.build(article_nodes(), busy(1, 5))
    tree = job(slice_("slices-0"), slice_("slices-1"))
    assert isinstance(decide_composite(crowded, tree), CompositeReject)
    preferred = replace(tree, mode="preferred")
    decision = decide_composite(crowded, preferred)
    assert isinstance(decision, CompositeAdmit) and decision.level == ""
    where = blocks(crowded, decision)
    assert len(where) == 4 and len({nb for nb, _ in where.values()}) == 2
    assert len({where[f"slices-{s}-{i}"][1] for s in (0, 1) for i in (0, 1)}) == 2  # each slice whole
    roomy = Snapshot.build(article_nodes(), busy(1))
    kept = decide_composite(roomy, preferred)
    assert isinstance(kept, CompositeAdmit) and kept.level is None
    assert {nb for nb, _ in blocks(roomy, kept).values()} == {"nb-b"}


def test_a_preferred_root_is_preempted_for_in_one_domain_of_its_key() -> None:
    """One busy pod of lower priority in every local block: the tree of two slices fits nowhere, not even
    spread. The victim search frees two local blocks of one network block, although the two cheapest
    victims (priority 0, one per network block) would let it spread: a spread placement is no reason to
    preempt."""
    crowded = Snapshot.build(article_nodes(), busy(1, 3, 5, 7))
    priority = {1: 0, 3: 50, 5: 0, 7: 50}
    candidates = [Candidate(f"busy-{i}", worker(i), {GPU: 8}, p, 1.0) for i, p in priority.items()]
    tree = replace(job(slice_("slices-0"), slice_("slices-1")), mode="preferred")
    assert isinstance(decide_composite(crowded, tree), CompositeReject)
    preemption = choose_composite_victims(crowded, tree, 100, candidates)
    assert preemption is not None and len(preemption.victims) == 2
    assert preemption.victims in (("busy-1", "busy-3"), ("busy-5", "busy-7"))
    roomy = replace(tree, mode="required")
    assert choose_composite_victims(crowded, roomy, 100, candidates) == preemption
