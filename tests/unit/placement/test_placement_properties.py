"""Property tests: the engine against an independent brute force on small random clusters."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, replace
from fractions import Fraction

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_testkit import (
    brute_force,
    eligible_for,
    fits,
    node_capacity,
    normalised_free,
    reference_packing,
    scored_resources,
    totals,
    usage,
)

from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    Taint,
    Toleration,
    decide,
)

KEY = "example.com/block"
PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Scenario:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    group: GroupRequest


def _requests(draw: st.DrawFn, resources: list[str], high: int) -> dict[str, int]:
    return {r: draw(st.integers(0, high)) for r in resources}


@st.composite
def scenarios(draw: st.DrawFn, mixed: bool = False) -> Scenario:
    resources = draw(st.sampled_from([["cpu"], ["nvidia.com/gpu"], ["cpu", "nvidia.com/gpu"]]))
    values = [f"d{i}" for i in range(draw(st.integers(1, 4)))]
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        allocatable = {r: draw(st.integers(0, 8)) for r in resources if draw(st.integers(0, 7))}
        allocatable["pods"] = draw(st.integers(1, 6))
        labels = {KEY: draw(st.sampled_from(values))} if draw(st.integers(0, 7)) else {}
        nodes.append(
            NodeInfo(
                name=f"node-{i}",
                labels=labels,
                allocatable=allocatable,
                taints=(Taint("dedicated", "x", "NoSchedule"),) if not draw(st.integers(0, 7)) else (),
                unschedulable=not draw(st.integers(0, 9)),
                ready=bool(draw(st.integers(0, 9))),
            )
        )
    pods = [
        BoundPod(f"b-{n.name}-{j}", n.name, _requests(draw, resources, 5))
        for n in nodes
        for j in range(draw(st.integers(0, 2)))
    ]

    def requirements() -> PodRequirements:
        req = _requests(draw, resources, 4)
        return PodRequirements(
            requests=tuple(sorted((r, v) for r, v in req.items() if v > 0)),
            tolerations=(Toleration("dedicated", "Exists"),) if draw(st.booleans()) else (),
        )

    kinds = [requirements() for _ in range(2 if mixed else 1)]
    count = draw(st.integers(1, 5))
    pending = tuple(PodRequest(f"p{i}", kinds[draw(st.integers(0, len(kinds) - 1))]) for i in range(count))
    bound: tuple[str, ...] = ()
    if draw(st.integers(0, 3)) == 0:
        names = [n.name for n in nodes] + ["ghost"]
        bound = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=2)))
    group = GroupRequest(
        name="g",
        pending=pending,
        # Mostly reachable thresholds; sometimes more than the group has (the "too few pods" path).
        min_count=draw(
            st.integers(-1, count) if draw(st.integers(0, 9)) else st.integers(count + 1, count + 3)
        ),
        topology_key=draw(st.sampled_from([KEY, KEY, None])),
        bound_nodes=bound,
    )
    return Scenario(nodes, pods, group)


def check_invariants(sc: Scenario, decision: Admit | Reject) -> None:
    group = sc.group
    m = max(1, group.min_count)
    if isinstance(decision, Reject):
        assert decision.placements_feasible == 0
        return
    by_name = {n.name: n for n in sc.nodes}
    pods = {p.id: p for p in group.pending}
    # All-or-nothing.
    assert len(decision.assignments) + len(group.bound_nodes) >= m
    # Pending order, each pod at most once.
    ids = [pid for pid, _ in decision.assignments]
    assert ids == [p.id for p in group.pending if p.id in set(ids)]
    # One domain, the bound one if any.
    if group.topology_key is not None:
        assert decision.domain is not None
        for _, node in decision.assignments:
            assert by_name[node].labels.get(group.topology_key) == decision.domain
        for node in group.bound_nodes:
            assert by_name[node].labels.get(group.topology_key) == decision.domain
    else:
        assert decision.domain is None
    # Never over capacity, only on eligible nodes.
    used = usage(sc.nodes, sc.pods)
    for pid, node in decision.assignments:
        req = pods[pid].requirements
        assert eligible_for(by_name[node], req)
        assert fits(by_name[node], used[node], dict(req.requests))
        u = used[node]
        u["pods"] = u.get("pods", 0) + 1
        for r, v in req.requests:
            u[r] = u.get(r, 0) + v


def check_deterministic(sc: Scenario, decision: Admit | Reject, seed: int) -> None:
    assert decide(Snapshot.build(sc.nodes, sc.pods), sc.group) == decision
    rng = random.Random(seed)
    nodes, pods = list(sc.nodes), list(sc.pods)
    rng.shuffle(nodes)
    rng.shuffle(pods)
    assert decide(Snapshot.build(nodes, pods), sc.group) == decision


@PROPERTY_SETTINGS
@given(scenarios(), st.integers(0, 2**32))
def test_homogeneous_groups_match_brute_force(sc: Scenario, seed: int) -> None:
    snapshot = Snapshot.build(sc.nodes, sc.pods)
    decision = decide(snapshot, sc.group)
    check_invariants(sc, decision)
    check_deterministic(sc, decision, seed)

    group = sc.group
    m = max(1, group.min_count)
    bound = len(group.bound_nodes)
    ref = brute_force(sc.nodes, sc.pods, group)
    event(ref.kind if ref.best is None else f"admit, {ref.best.placed} placed")
    if ref.kind == "TooFew":
        assert isinstance(decision, Reject)
        assert (decision.reason, decision.placements_total) == ("Unschedulable", 0)
        assert (decision.scheduled, decision.remaining) == (bound, len(group.pending))
    elif ref.kind in ("NoDomain", "DomainConflict"):
        assert isinstance(decision, Reject)
        assert decision.reason == ref.kind
    elif ref.kind == "Unschedulable":
        assert isinstance(decision, Reject), "brute force found no feasible domain"
        assert decision.reason == "Unschedulable"
        assert decision.placements_total == len(ref.results)
        closest = max(r.placed for r in ref.results)
        assert decision.scheduled == bound + closest
        assert decision.remaining == max(0, m - decision.scheduled - 1)
        status = f"{decision.scheduled} scheduled, {decision.remaining} remaining"
        assert decision.message.endswith(f"minCount ({m}) cannot be satisfied: {status}")
    else:
        assert isinstance(decision, Admit), f"brute force admits into {ref.best}"
        assert ref.best is not None
        assert decision.domain == ref.best.domain
        assert len(decision.assignments) == ref.best.placed
        assert leftover(sc, decision) == ref.best.leftover
        assert list(decision.assignments) == reference_packing(sc.nodes, sc.pods, group, decision.domain)


def leftover(sc: Scenario, decision: Admit) -> Fraction:
    """Normalised free capacity left in the chosen domain after the engine's own assignments."""
    group = sc.group
    req = group.pending[0].requirements
    key = group.topology_key
    used = usage(sc.nodes, sc.pods)
    total = totals(sc.nodes)
    resources = scored_resources(group)
    members = [
        n for n in sc.nodes if (key is None or n.labels.get(key) == decision.domain) and eligible_for(n, req)
    ]
    placed = Fraction(0)
    for _ in decision.assignments:
        for r in resources:
            if total.get(r, 0) > 0:
                placed += Fraction(dict(req.requests).get(r, 1 if r == "pods" else 0), total[r])
    return normalised_free(members, used, resources, total) - placed


@PROPERTY_SETTINGS
@given(scenarios(mixed=True), st.integers(0, 2**32))
def test_mixed_groups_keep_the_promises(sc: Scenario, seed: int) -> None:
    decision = decide(Snapshot.build(sc.nodes, sc.pods), sc.group)
    check_invariants(sc, decision)
    check_deterministic(sc, decision, seed)
    event(type(decision).__name__ if isinstance(decision, Admit) else decision.reason)
    if isinstance(decision, Reject) and decision.reason == "Unschedulable" and decision.placements_total:
        m = max(1, sc.group.min_count)
        assert decision.scheduled < m
        assert decision.remaining == max(0, m - decision.scheduled - 1)


@PROPERTY_SETTINGS
@given(scenarios(), st.lists(st.integers(0, 7), max_size=4))
def test_assume_then_decide_equals_building_with_those_pods(sc: Scenario, picks: list[int]) -> None:
    extra = [(sc.nodes[i % len(sc.nodes)].name, {"cpu": i, "nvidia.com/gpu": i % 3}) for i in picks]
    assumed = Snapshot.build(sc.nodes, sc.pods).assume(extra)
    rebuilt = Snapshot.build(
        sc.nodes, [*sc.pods, *(BoundPod(f"x{i}", node, req) for i, (node, req) in enumerate(extra))]
    )
    assert (assumed.used_array == rebuilt.used_array).all()
    assert decide(assumed, sc.group) == decide(rebuilt, sc.group)
    removed = rebuilt.without(f"x{i}" for i in range(len(extra)))
    assert (removed.used_array == Snapshot.build(sc.nodes, sc.pods).used_array).all()
    released = assumed.release(extra)
    assert (released.used_array == Snapshot.build(sc.nodes, sc.pods).used_array).all()
    assert decide(released, sc.group) == decide(Snapshot.build(sc.nodes, sc.pods), sc.group)


HOST = "kubernetes.io/hostname"


def with_hostnames(sc: Scenario) -> tuple[list[NodeInfo], GroupRequest]:
    """The same cluster with every node labelled by its hostname, and the group given the levels (its key,
    hostname): a Topology whose lowest level is the node."""
    nodes = [replace(n, labels={**n.labels, HOST: n.name}) for n in sc.nodes]
    key = sc.group.topology_key
    return nodes, replace(sc.group, levels=(HOST,) if key is None else (key, HOST))


@PROPERTY_SETTINGS
@given(scenarios())
def test_inside_the_domain_the_fewest_nodes_the_same_rule_with_or_without_levels(sc: Scenario) -> None:
    decision = decide(Snapshot.build(sc.nodes, sc.pods), sc.group)
    # One rule: a Topology whose only level below the key is the node decides exactly the same.
    nodes, leveled = with_hostnames(sc)
    assert decide(Snapshot.build(nodes, sc.pods), leveled) == decision
    if not isinstance(decision, Admit) or not decision.assignments:
        return
    group = sc.group
    req = group.pending[0].requirements
    used = usage(sc.nodes, sc.pods)
    key = group.topology_key
    members = [
        n for n in sc.nodes if (key is None or n.labels.get(key) == decision.domain) and eligible_for(n, req)
    ]
    cap = [node_capacity(n, used[n.name], dict(req.requests), len(group.pending)) for n in members]
    placed = len(decision.assignments)
    # Brute force: the smallest number of the domain's nodes that together hold the pods placed.
    fewest = next(
        k
        for k in range(1, len(members) + 1)
        if any(sum(cap[i] for i in combo) >= placed for combo in itertools.combinations(range(len(cap)), k))
    )
    used_nodes = {node for _, node in decision.assignments}
    event(f"{len(used_nodes)} of {len(members)} nodes")
    assert len(used_nodes) == fewest, "not the fewest nodes"


@PROPERTY_SETTINGS
@given(scenarios(mixed=True))
def test_mixed_groups_follow_the_same_node_rule_with_or_without_levels(sc: Scenario) -> None:
    nodes, leveled = with_hostnames(sc)
    plain = decide(Snapshot.build(sc.nodes, sc.pods), sc.group)
    assert decide(Snapshot.build(nodes, sc.pods), leveled) == plain
