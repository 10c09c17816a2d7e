"""Preferred topology: one domain of the key if any fits, else of each wider level in turn, else anywhere."""

from __future__ import annotations

from placement_testkit import LOCAL_BLOCK, NETWORK_BLOCK, article_nodes, busy, gang

from phalanx.placement import (
    Admit,
    BoundPod,
    Candidate,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    choose_victims,
    decide,
)

SEED_LEVELS = ("oci.oraclecloud.com/rdma.hpc_island_id", NETWORK_BLOCK, LOCAL_BLOCK)


def preferred(group: GroupRequest, levels: tuple[str, ...] = ()) -> GroupRequest:
    return GroupRequest(
        group.name, group.pending, group.min_count, group.topology_key, group.bound_nodes, levels, "preferred"
    )


def seed_nodes() -> list[NodeInfo]:
    return [type(n)(n.name, {**n.labels, SEED_LEVELS[0]: "isl-1"}, n.allocatable) for n in article_nodes()]


def test_local_4_required_waits_preferred_goes_to_one_network_block() -> None:
    snapshot = Snapshot.build(seed_nodes(), [])
    required = decide(snapshot, gang(4, 4, LOCAL_BLOCK))
    assert isinstance(required, Reject) and required.reason == "Unschedulable"
    for levels in ((), SEED_LEVELS):
        decision = decide(snapshot, preferred(gang(4, 4, LOCAL_BLOCK), levels))
        assert isinstance(decision, Admit)
        labels = {n.name: n.labels for n in snapshot.nodes}
        nodes = [node for _, node in decision.assignments]
        assert len(nodes) == 4 and len({labels[n][NETWORK_BLOCK] for n in nodes}) == 1
        # The fewest local blocks: two whole ones.
        assert len({labels[n][LOCAL_BLOCK] for n in nodes}) == 2
    with_levels = decide(snapshot, preferred(gang(4, 4, LOCAL_BLOCK), SEED_LEVELS))
    assert isinstance(with_levels, Admit)
    assert with_levels.level == NETWORK_BLOCK and with_levels.domain == "isl-1/nb-a"


def test_preferred_stays_in_one_domain_of_the_key_when_one_fits() -> None:
    snapshot = Snapshot.build(seed_nodes(), [])
    decision = decide(snapshot, preferred(gang(2, 2, LOCAL_BLOCK), SEED_LEVELS))
    assert isinstance(decision, Admit) and decision.level is None and decision.domain == "isl-1/nb-a/lb-a1"
    assert decision == decide(
        snapshot, GroupRequest("g", gang(2, 2, LOCAL_BLOCK).pending, 2, LOCAL_BLOCK, levels=SEED_LEVELS)
    )


def test_preferred_climbs_to_anywhere_and_waits_only_when_nothing_holds_the_gang() -> None:
    # One free node per network block... plus lb-b2: 4 free nodes spread over both network blocks.
    snapshot = Snapshot.build(seed_nodes(), busy(1, 3, 5, 6))
    decision = decide(snapshot, preferred(gang(4, 4, LOCAL_BLOCK), SEED_LEVELS))
    assert isinstance(decision, Admit) and len(decision.assignments) == 4
    assert decision.level == SEED_LEVELS[0] and decision.domain == "isl-1"  # the island holds every node
    anywhere = decide(snapshot, preferred(gang(4, 4, LOCAL_BLOCK)))
    assert isinstance(anywhere, Admit) and len(anywhere.assignments) == 4
    assert anywhere.level == "" and anywhere.domain is None
    five = decide(snapshot, preferred(gang(5, 5, LOCAL_BLOCK), SEED_LEVELS))
    assert isinstance(five, Reject) and five.reason == "Unschedulable"
    assert "0/1 placements" in five.message


def test_preferred_preempts_only_for_one_domain_of_its_key_whatever_its_pods_shapes() -> None:
    """Racks r1 (n1 n2) and r2 (n3 n4), 8 GPUs each: low-priority v1 on n1, v2 on n2, v4 (4 GPUs) on n4, a
    high-priority pod on n3. A preferred gang of two (8 GPUs, and 8 or 4) is preempted for in one rack (v1
    and v2), never spread (v1 alone would let 8 + 4 spread over n1 and n4): with mixed shapes the search
    checks sets with `decide`, which must be asked for one rack too."""
    gpu = "nvidia.com/gpu"
    nodes = [
        NodeInfo(name=n, labels={"rack": r}, allocatable={gpu: 8, "cpu": 64000, "pods": 110})
        for n, r in (("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2"))
    ]
    held = {"v1": ("n1", 8), "v2": ("n2", 8), "hi": ("n3", 8), "v4": ("n4", 4)}
    snapshot = Snapshot.build(
        nodes, [BoundPod(id=i, node=n, requests={gpu: g}) for i, (n, g) in held.items()]
    )
    candidates = [Candidate(i, n, {gpu: g}, 100 if i == "hi" else 0, 1.0) for i, (n, g) in held.items()]
    for second in (8, 4):
        pending = (
            PodRequest("a", PodRequirements(requests=((gpu, 8),))),
            PodRequest("b", PodRequirements(requests=((gpu, second),))),
        )
        group = GroupRequest(name="g", pending=pending, min_count=2, topology_key="rack", mode="preferred")
        preemption = choose_victims(snapshot, group, 50, candidates)
        assert preemption is not None, second
        assert preemption.victims == ("v1", "v2") and preemption.admit.domain == "r1", second
