"""Bounded waiting (placement/reservation.py): which nodes to hold for a large gang; examples, then properties
against a reference written from NodeInfo/BoundPod directly and a brute force of the fewest nodes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_testkit import (
    GPU,
    NETWORK_BLOCK,
    article_nodes,
    busy,
    eligible_for,
    gang,
    node_capacity,
    usage,
    worker,
)

from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    Hold,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Snapshot,
    decide,
    reserve,
)

HALF = PodRequirements(requests=((GPU, 4),))


def test_the_block_with_the_least_missing_is_held_and_small_gangs_backfill_elsewhere() -> None:
    # nb-a: workers 1 and 2 free, 3 and 4 busy; nb-b: one free node. An 8-pod... a 4-node gang of the
    # network block waits; nb-a misses the least (2 nodes), so workers 1-4 are held.
    s = Snapshot.build(article_nodes(), busy(3, 4, 5, 6, 7))
    big = gang(4, 4, NETWORK_BLOCK, name="big")
    hold = reserve(s, big)
    assert hold == Hold("nb-a", tuple(worker(i) for i in (1, 2, 3, 4)), 4, 2)
    assert hold.missing == 2
    # A small gang that would take workers 1 and 2 goes to nb-b's free node instead, or waits.
    held = s.holding(hold.nodes)
    small = decide(held, gang(1, 1, NETWORK_BLOCK, name="small"))
    assert isinstance(small, Admit) and small.assignments == (("small-0", worker(8)),)
    assert not isinstance(decide(held, gang(2, 2, NETWORK_BLOCK, name="pair")), Admit)
    # Once workers 3 and 4 free, the big gang fits on the held nodes.
    freed = Snapshot.build(article_nodes(), busy(5, 6, 7))
    assert isinstance(decide(freed, big), Admit)


def test_fewest_nodes_held_those_with_room_now_first() -> None:
    # Two 4-GPU pods: one node holds both when empty. Worker 1 has one pod's room now: it is held alone
    # (the other half frees), not worker 2, which is fuller.
    pods = [BoundPod("a", worker(1), {GPU: 4}), BoundPod("b", worker(2), {GPU: 6}), *busy(3, 4, 5, 6, 7, 8)]
    hold = reserve(Snapshot.build(article_nodes(), pods), gang(2, 2, NETWORK_BLOCK, requirements=HALF))
    assert hold is not None and hold.nodes == (worker(1),) and (hold.need, hold.fits_now) == (2, 1)


def test_nothing_to_hold() -> None:
    nodes = article_nodes()
    assert reserve(Snapshot.build(nodes, []), gang(2, 2, NETWORK_BLOCK)) is None  # fits now
    assert reserve(Snapshot.build(nodes, busy(1)), gang(5, 5, NETWORK_BLOCK)) is None  # never fits a block
    assert reserve(Snapshot.build(nodes, busy(1)), gang(1, 2, NETWORK_BLOCK)) is None  # too few pods


def test_running_pods_pin_the_domain_and_held_nodes_stay_full() -> None:
    s = Snapshot.build(article_nodes(), [*busy(2, 3, 4, 6, 7, 8), BoundPod("g-run", worker(5), {GPU: 8})])
    group = gang(2, 3, NETWORK_BLOCK, bound=[worker(5)])  # one pod runs on nb-b: only nb-b
    hold = reserve(s, group)
    assert hold is not None and hold.domain == "nb-b" and hold.need == 2
    assert set(hold.nodes) <= {worker(6), worker(7), worker(8)}  # not worker 5: the gang's own pod stays
    held = s.holding(hold.nodes)
    # Held nodes take nothing even after a pod there is removed or another one assumed elsewhere.
    assert held.without(["busy-6", "busy-7", "busy-8"]).free(hold.nodes[0])[GPU] < 0
    assert s.holding([]) is s


def test_an_auto_gang_holds_room_at_the_level_it_is_decided_at() -> None:
    block, rack = "example.com/block", "example.com/rack"
    nodes = [
        NodeInfo(f"{b}-{r}-{i}", {block: b, rack: r, HOST: f"{b}-{r}-{i}"}, {GPU: 8, "pods": 110})
        for b in ("b1", "b2")
        for r in ("r1", "r2")
        for i in range(3)
    ]
    # b2 has two free nodes, b1 one: 5 full-node pods can never fit a 3-node rack, so one block is held.
    free = {"b1-r1-0", "b2-r1-0", "b2-r2-2"}
    s = Snapshot.build(
        nodes, [BoundPod(f"x-{n.name}", n.name, {GPU: 8}) for n in nodes if n.name not in free]
    )
    pods = tuple(PodRequest(f"g-{i}", PodRequirements(requests=((GPU, 8),))) for i in range(5))
    group = GroupRequest("g", pods, 5, rack, levels=(block, rack, HOST), mode="auto")
    hold = reserve(s, group)
    assert hold is not None and hold.domain == "b2" and hold.level == block
    assert hold.fits_now == 2 and len(hold.nodes) == 5
    # The fewest racks: one whole rack of 3, then 2 nodes of the other, those with room now first.
    assert {"b2-r1-0", "b2-r2-2"} <= set(hold.nodes)
    assert len({n.rsplit("-", 1)[0] for n in hold.nodes}) == 2


# --- properties -----------------------------------------------------------------------------------

KEY, HOST = "example.com/block", "kubernetes.io/hostname"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    group: GroupRequest


@st.composite
def cases(draw: st.DrawFn) -> Case:
    nodes = []
    for i in range(draw(st.integers(1, 7))):
        labels = {HOST: f"n{i}"}
        if draw(st.integers(0, 7)):
            labels[KEY] = draw(st.sampled_from(["d0", "d1", "d2"]))
        alloc = {GPU: draw(st.integers(0, 4)), "pods": draw(st.integers(1, 4))}
        nodes.append(NodeInfo(f"n{i}", labels, alloc, unschedulable=not draw(st.integers(0, 9))))
    pods = [
        BoundPod(f"run-{n.name}-{k}", n.name, {GPU: draw(st.integers(1, 2))})
        for n in nodes
        for k in range(draw(st.integers(0, 2)))
    ]
    count = draw(st.integers(1, 6))
    req = PodRequirements(requests=((GPU, draw(st.integers(1, 2))),))
    pending = tuple(PodRequest(f"p{i}", req) for i in range(count))
    key = draw(st.sampled_from([KEY, KEY, None]))
    return Case(nodes, pods, GroupRequest("g", pending, draw(st.integers(1, count)), key))


def reference(case: Case) -> Hold | None:
    """The rule, written plainly: per domain that can hold the gang empty, its nodes by (most pods when
    empty, most room now, name) until they hold it, the last one swapped for the one of least capacity
    (then most room now, then name) that still holds what is left; the domain missing the fewest pods on
    them now, then the fewest nodes, then the name."""
    group = case.group
    need = group.min_count
    requests = dict(group.pending[0].requirements.requests)
    used = usage(case.nodes, case.pods)
    req = group.pending[0].requirements
    domains: dict[str | None, list[NodeInfo]] = {}
    for n in sorted(case.nodes, key=lambda n: n.name):
        if group.topology_key is None or group.topology_key in n.labels:
            domains.setdefault(
                None if group.topology_key is None else n.labels[group.topology_key], []
            ).append(n)
    best: Hold | None = None
    for name in sorted(domains, key=lambda d: d or ""):
        usable = [n for n in domains[name] if eligible_for(n, req)]
        ever = {n.name: node_capacity(n, {}, requests, len(group.pending)) for n in usable}
        now = {n.name: node_capacity(n, used[n.name], requests, len(group.pending)) for n in usable}
        usable = [n for n in usable if ever[n.name] > 0]
        if sum(ever.values()) < need:
            continue
        ranked = sorted(usable, key=lambda n: (-ever[n.name], -now[n.name], n.name))
        chosen, total = [], 0
        for n in ranked:
            if total >= need:
                break
            chosen.append(n)
            total += ever[n.name]
        left = need - (total - ever[chosen[-1].name])
        chosen[-1] = min(
            (n for n in ranked[len(chosen) - 1 :] if ever[n.name] >= left),
            key=lambda n: (ever[n.name], -now[n.name], n.name),
        )
        fits_now = min(need, sum(now[n.name] for n in chosen))
        hold = Hold(name, tuple(sorted(n.name for n in chosen)), need, fits_now)
        if best is None or (hold.missing, len(hold.nodes)) < (best.missing, len(best.nodes)):
            best = hold
    return best


@SETTINGS
@given(cases())
def test_reserve_follows_the_rule_and_keeps_its_guarantee(case: Case) -> None:
    snapshot = Snapshot.build(case.nodes, case.pods)
    hold = reserve(snapshot, case.group)
    if isinstance(decide(snapshot, case.group), Admit):
        event("fits now")
        assert hold is None
        return
    expected = reference(case)
    event("nothing to hold" if expected is None else f"{expected.missing} missing of {expected.need}")
    assert hold == expected
    if hold is None:
        return
    by_name = {n.name: n for n in case.nodes}
    requests = dict(case.group.pending[0].requirements.requests)
    # The fewest nodes of the domain that hold the gang when empty (brute force over subsets).
    members = [n for n in case.nodes if hold.domain is None or n.labels.get(KEY) == hold.domain]
    ever = [
        node_capacity(n, {}, requests, len(case.group.pending))
        if eligible_for(n, case.group.pending[0].requirements)
        else 0
        for n in members
    ]
    fewest = next(
        k
        for k in range(1, len(members) + 1)
        if any(sum(ever[i] for i in c) >= hold.need for c in itertools.combinations(range(len(members)), k))
    )
    assert len(hold.nodes) == fewest
    # The guarantee: once the pods on the held nodes are gone, the gang fits, and nothing else goes there.
    freed = Snapshot.build(case.nodes, [p for p in case.pods if p.node not in hold.nodes])
    assert isinstance(decide(freed, case.group), Admit)
    held = snapshot.holding(hold.nodes)
    other = decide(held, replace(case.group, name="other", min_count=1, topology_key=None))
    if isinstance(other, Admit):
        assert not {node for _, node in other.assignments} & set(hold.nodes)
    assert all(hold.domain is None or by_name[n].labels.get(KEY) == hold.domain for n in hold.nodes)
