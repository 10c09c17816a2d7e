"""Topology levels: domains as paths (b1/r1 != b2/r1) and Kueue's BestFit inside the chosen domain."""

from __future__ import annotations

from placement_testkit import GPU, gang

from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    decide,
    diagnose,
)

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


def node(name: str, block: str, rack: str, gpus: int = 8) -> NodeInfo:
    return NodeInfo(name, {BLOCK: block, RACK: rack, HOST: name}, {GPU: gpus, "pods": 110})


def repeated_racks() -> list[NodeInfo]:
    """Rack r1 exists in both blocks (the label value repeats); one node of each block's r1."""
    return [node("b1-r1-n1", "b1", "r1"), node("b2-r1-n1", "b2", "r1"), node("b1-r2-n1", "b1", "r2")]


def with_levels(group: GroupRequest, levels: tuple[str, ...] = LEVELS) -> GroupRequest:
    return GroupRequest(
        group.name, group.pending, group.min_count, group.topology_key, group.bound_nodes, levels
    )


def test_a_rack_gang_never_spans_two_blocks_when_the_rack_value_repeats() -> None:
    snapshot = Snapshot.build(repeated_racks(), [])
    # Without levels "r1" is one domain of two nodes in two blocks: today's single-key behaviour.
    plain = decide(snapshot, gang(2, 2, RACK))
    assert isinstance(plain, Admit) and plain.domain == "r1"
    assert {n for _, n in plain.assignments} == {"b1-r1-n1", "b2-r1-n1"}
    # With levels each block's r1 is its own domain: no rack holds two full-node pods.
    refused = decide(snapshot, with_levels(gang(2, 2, RACK)))
    assert isinstance(refused, Reject) and refused.reason == "Unschedulable"
    one = decide(snapshot, with_levels(gang(1, 1, RACK)))
    assert isinstance(one, Admit) and one.domain in {"b1/r1", "b1/r2", "b2/r1"}


def test_domains_are_named_by_their_path_and_diagnosis_uses_them() -> None:
    snapshot = Snapshot.build(repeated_racks(), [BoundPod("x", "b1-r2-n1", {GPU: 8})])
    decision = decide(snapshot, with_levels(gang(1, 1, RACK)))
    # Best fit ties between two empty one-node racks: the smallest path wins.
    assert isinstance(decision, Admit) and decision.domain == "b1/r1"
    summary = diagnose(snapshot, with_levels(gang(2, 2, RACK))).summary()
    assert summary.startswith("b1/r1: 1 of 2 pods fit") and "b2/r1: 1 of 2 pods fit" in summary


def test_two_small_pods_share_one_node_when_one_node_holds_both() -> None:
    nodes = [node("a", "b1", "r1"), node("b", "b1", "r1", gpus=1), node("c", "b1", "r1", gpus=1)]
    snapshot = Snapshot.build(nodes, [])
    small = gang(2, 2, RACK, requirements=PodRequirements(requests=((GPU, 1),)))
    # The node is the lowest level with or without levels: the fewest nodes, so both pods on "a" (before,
    # without levels the fullest nodes went first: "b" and "c", one free GPU each).
    plain = decide(snapshot, small)
    assert isinstance(plain, Admit) and {n for _, n in plain.assignments} == {"a"}
    best = decide(snapshot, with_levels(small))
    assert isinstance(best, Admit) and best.assignments == plain.assignments


def test_inside_a_block_the_fewest_racks_then_the_tightest_rack() -> None:
    # Block b1: r1 has 3 free nodes, r2 has 2, r3 has 1. A gang of 2 takes r2 whole (tightest that holds it);
    # a gang of 4 takes r1 (biggest) plus r3 (the tightest rack that holds the last pod).
    nodes = [node(f"r{r}-n{i}", "b1", f"r{r}") for r, count in ((1, 3), (2, 2), (3, 1)) for i in range(count)]
    snapshot = Snapshot.build(nodes, [])
    two = decide(snapshot, with_levels(gang(2, 2, BLOCK)))
    assert isinstance(two, Admit) and {n for _, n in two.assignments} == {"r2-n0", "r2-n1"}
    four = decide(snapshot, with_levels(gang(4, 4, BLOCK)))
    assert isinstance(four, Admit)
    assert {n for _, n in four.assignments} == {"r1-n0", "r1-n1", "r1-n2", "r3-n0"}


def test_bound_pods_pin_the_path_domain() -> None:
    snapshot = Snapshot.build(repeated_racks(), [BoundPod("g-0", "b2-r1-n1", {GPU: 8})])
    pinned = GroupRequest(
        "g", (PodRequest("g-1", PodRequirements(requests=((GPU, 8),))),), 2, RACK, ("b2-r1-n1",), LEVELS
    )
    decision = decide(snapshot, pinned)
    # b2/r1 has no other node: the pod cannot join its gang's rack, although b1/r1 has room.
    assert isinstance(decision, Reject) and decision.reason == "Unschedulable"


def test_a_key_outside_the_levels_keeps_the_single_key_behaviour() -> None:
    snapshot = Snapshot.build(repeated_racks(), [])
    other = with_levels(gang(2, 2, RACK), (BLOCK, HOST))
    decision = decide(snapshot, other)
    assert isinstance(decision, Admit) and decision.domain == "r1"
