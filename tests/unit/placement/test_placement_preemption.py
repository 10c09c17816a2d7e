"""Victim choice (placement/preemption.py): examples, then properties against a brute-force search."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_testkit import (
    GPU,
    GPU_POD,
    LOCAL_BLOCK,
    NETWORK_BLOCK,
    article_nodes,
    eligible_for,
    gang,
    worker,
)

from phalanx.placement import (
    DEFAULT_MAX_STEPS,
    Admit,
    BoundPod,
    Candidate,
    CompositeAdmit,
    CompositePreemption,
    CompositeRequest,
    DisruptionMode,
    GroupRequest,
    HostPort,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Preemption,
    Snapshot,
    VictimCost,
    VictimGroup,
    choose_composite_victims,
    choose_victims,
    decide,
    decide_composite,
    resolve_mode,
    victim_search,
)

LOW, HIGH = 100, 1000


@dataclass
class Cluster:
    """Nodes, the pods that hold capacity, and which of them are candidates."""

    nodes: list[NodeInfo]
    pods: list[BoundPod] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    groups: list[VictimGroup] = field(default_factory=list)

    def run(
        self,
        requests: dict[str, int],
        node: str,
        *,
        priority: int = LOW,
        started: float = 0.0,
        job: str | None = None,
        pod_id: str | None = None,
    ) -> str:
        pod_id = pod_id or f"{job or 'pod'}-{len(self.pods)}"
        self.pods.append(BoundPod(pod_id, node, requests))
        self.candidates.append(Candidate(pod_id, node, requests, priority, started, job))
        return pod_id

    def job(
        self,
        name: str,
        workers: Sequence[int],
        *,
        min_count: int,
        mode: DisruptionMode = "single",
        priority: int = LOW,
        started: float = 0.0,
        partial: bool = True,
    ) -> list[str]:
        self.groups.append(VictimGroup(name, min_count, mode, partial))
        return [
            self.run({GPU: 8}, worker(w), priority=priority, started=started, job=name, pod_id=f"{name}-{i}")
            for i, w in enumerate(workers)
        ]

    def snapshot(self) -> Snapshot:
        return Snapshot.build(self.nodes, self.pods)

    def preempt(
        self,
        group: GroupRequest,
        priority: int = HIGH,
        *,
        excluded_pods: frozenset[str] = frozenset(),
        excluded_groups: frozenset[str] = frozenset(),
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> Preemption | None:
        excluded = (excluded_pods, excluded_groups)
        result = choose_victims(
            self.snapshot(),
            group,
            priority,
            self.candidates,
            self.groups,
            excluded_pods=excluded_pods,
            excluded_groups=excluded_groups,
            max_steps=max_steps,
        )
        if result is not None:
            check_result(self.snapshot(), group, priority, self.candidates, self.groups, result, *excluded)
        return result


def check_result(
    snapshot: Snapshot,
    group: GroupRequest,
    priority: int,
    candidates: Sequence[Candidate],
    groups: Sequence[VictimGroup],
    result: Preemption,
    excluded_pods: frozenset[str] = frozenset(),
    excluded_groups: frozenset[str] = frozenset(),
) -> None:
    """The promises every answer keeps, whatever the search."""
    assert not isinstance(decide(snapshot, group), Admit), "never preempt when the group fits"
    victims = set(result.victims)
    assert result.victims == tuple(sorted(victims))
    by_id = {c.id: c for c in candidates}
    definitions = {g.key: g for g in groups}
    assert victims <= by_id.keys()
    assert not victims & excluded_pods
    for pod_id in victims:
        assert by_id[pod_id].priority < priority, "only strictly lower priority"
    members: dict[str, list[str]] = {}
    for c in candidates:
        if c.group is not None:
            members.setdefault(c.group, []).append(c.id)
    whole, partial = set(), set()
    for key, pods in members.items():
        taken = victims & set(pods)
        if not taken:
            continue
        assert key in definitions and key not in excluded_groups
        assert max(by_id[p].priority for p in pods) < priority, "a group is as important as its top pod"
        if taken == set(pods):
            whole.add(key)
        else:
            assert definitions[key].disruption == "single", "an `all` group is all of its pods or none"
            assert definitions[key].partial, "a group marked partial=False is all of its pods or none"
            assert len(pods) - len(taken) >= max(1, definitions[key].min_count), "no gang left below minCount"
            partial.add(key)
    assert result.whole_groups == tuple(sorted(whole))
    assert result.partial_groups == tuple(sorted(partial))
    assert result.admit == decide(snapshot.without(result.victims), group)
    assert result.domain == result.admit.domain
    assert replace(result.cost, spread=()) == cost_of(result.victims, by_id, members)
    # The spread is counted in the domain searched (decide may place the group in another one).
    # An auto group is searched at the level it is decided at (auto mode has its own tests).
    nodes, searched = list(snapshot.nodes), resolve_mode(snapshot, group)
    where = [by_id[v].node for v in result.victims]
    domains = {domain_path(n, searched.topology_key, searched.levels) for n in nodes} - {None}
    assert result.cost.spread in {spread_of(nodes, searched, where, d) for d in domains}


def domain_path(node: NodeInfo, key: str | None, levels: Sequence[str]) -> tuple[str, ...] | None:
    """The node's domain of `key`: the path of level values down to it with levels, else its value."""
    if key is None:
        return ()
    chain = tuple(levels[: list(levels).index(key) + 1]) if key in levels else (key,)
    if any(level not in node.labels for level in chain):
        return None
    return tuple(node.labels[level] for level in chain)


def spread_of(
    nodes: Sequence[NodeInfo], group: GroupRequest, victim_nodes: Sequence[str], domain: tuple[str, ...]
) -> tuple[int, ...]:
    """Per level below the key (with levels), then per node: how many hold a victim in `domain` on a node
    some pending pod of the group may use."""
    levels = tuple(group.levels) if group.topology_key is None or group.topology_key in group.levels else ()
    below = levels[levels.index(group.topology_key) + 1 :] if group.topology_key in levels else levels
    by_name = {n.name: n for n in nodes}
    useful = [
        by_name[name]
        for name in victim_nodes
        if name in by_name
        and domain_path(by_name[name], group.topology_key, levels) == domain
        and any(eligible_for(by_name[name], p.requirements) for p in group.pending)
    ]
    return (
        *(len({domain_path(n, level, levels) for n in useful}) for level in below),
        len({n.name for n in useful}),
    )


def cost_of(
    victims: Sequence[str],
    by_id: dict[str, Candidate],
    members: dict[str, list[str]],
    spread: tuple[int, ...] = (),
) -> VictimCost:
    """The cost by its definition; a pod of a group has the group's priority (its top pod's)."""

    def priority(pod_id: str) -> int:
        key = by_id[pod_id].group
        return by_id[pod_id].priority if key is None else max(by_id[p].priority for p in members[key])

    units = {by_id[v].group or f"pod:{v}" for v in victims}
    return VictimCost(
        priority=max(priority(v) for v in victims),
        groups=len(units),
        pods=len(victims),
        newest=-sum(round(by_id[v].started * 1_000_000) for v in victims),
        spread=spread,
    )


def high(count: int, key: str | None, min_count: int | None = None) -> GroupRequest:
    return gang(count, count if min_count is None else min_count, key, name="high")


# --- the article's case ---------------------------------------------------------------------------


def article(mode: DisruptionMode, min_count: int, started_b: float = 0.0) -> Cluster:
    """low-a on nb-a (workers 1-4) and low-b on nb-b (workers 5-8), one pod per node."""
    c = Cluster(article_nodes())
    c.job("low-a", [1, 2, 3, 4], min_count=min_count, mode=mode)
    c.job("low-b", [5, 6, 7, 8], min_count=min_count, mode=mode, started=started_b)
    return c


def test_single_victims_are_the_pods_of_one_low_job_in_one_local_block() -> None:
    result = article("single", 2).preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-a-0", "low-a-1")  # workers 1 and 2: lb-a1, the first domain
    assert result.partial_groups == ("low-a",)
    assert result.domain == "lb-a1"
    assert result.cost == VictimCost(LOW, 1, 2, 0, (2,))
    assert result.exact


def test_newer_victims_are_preferred() -> None:
    result = article("single", 2, started_b=50.0).preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-b-0", "low-b-1")  # low-b started later: less work lost
    assert result.domain == "lb-b1"


def test_single_gang_at_its_min_count_goes_whole_never_half() -> None:
    # Upstream preempted two pods of low-b and left two holding nodes, doing no work.
    result = article("single", 4).preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-a-0", "low-a-1", "low-a-2", "low-a-3")
    assert result.whole_groups == ("low-a",)
    assert result.partial_groups == ()
    assert result.cost == VictimCost(LOW, 1, 4, 0, (2,))


def test_all_mode_takes_the_whole_group() -> None:
    result = article("all", 2).preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.whole_groups == ("low-a",)
    assert len(result.victims) == 4


def test_network_block_needs_a_whole_job() -> None:
    result = article("single", 1, started_b=1.0).preempt(high(4, NETWORK_BLOCK))
    assert result is not None
    assert result.whole_groups == ("low-b",)
    assert result.domain == "nb-b"


# --- the rules one at a time ---------------------------------------------------------------------


def test_no_preemption_when_the_group_fits() -> None:
    c = Cluster(article_nodes())
    c.job("low-a", [1, 2, 3], min_count=1)
    assert c.preempt(high(2, LOCAL_BLOCK)) is None  # lb-b1 and lb-b2 are free


def test_free_capacity_is_used_before_victims() -> None:
    # kubernetes/kubernetes#142718: upstream can evict although free capacity would do.
    c = Cluster(article_nodes())
    c.job("low-a", [1, 2, 3, 4, 5, 6, 7], min_count=1)  # only worker 8 (lb-b2) is free
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-a-6",)  # worker 7: lb-b2 then has both nodes
    assert result.domain == "lb-b2"


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    c = Cluster(article_nodes())
    c.job("peer", [1, 2, 3, 4, 5, 6, 7, 8], min_count=1, priority=HIGH)
    assert c.preempt(high(2, LOCAL_BLOCK)) is None
    c = Cluster(article_nodes())
    c.job("peer", [1, 2, 3, 4, 5, 6, 7, 8], min_count=1, priority=HIGH + 1)
    assert c.preempt(high(2, LOCAL_BLOCK)) is None


def test_a_group_is_as_important_as_its_top_pod() -> None:
    c = article("single", 1)
    c.candidates = [
        Candidate(x.id, x.node, x.requests, HIGH if x.id == "low-a-3" else x.priority, x.started, x.group)
        for x in c.candidates
    ]
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert all(v.startswith("low-b") for v in result.victims)


def test_lower_priority_beats_fewer_groups() -> None:
    c = Cluster(article_nodes())
    c.job("mid", [1, 2], min_count=2, mode="all", priority=LOW + 50)  # lb-a1: one group
    for w in (3, 4, 5, 6, 7, 8):
        c.run({GPU: 8}, worker(w), pod_id=f"loose-{w}")  # unmanaged, priority LOW
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("loose-3", "loose-4")  # two groups, but priority LOW < LOW + 50
    assert result.cost == VictimCost(LOW, 2, 2, 0, (2,))


def test_fewer_groups_beat_fewer_pods() -> None:
    c = Cluster(article_nodes())
    c.job("big", [1, 2, 3, 4], min_count=4, mode="all")  # lb-a1 and lb-a2: one group of 4 pods
    for w in (5, 6, 7, 8):
        c.run({GPU: 8}, worker(w), pod_id=f"loose-{w}")
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.whole_groups == ("big",)
    assert result.cost == VictimCost(LOW, 1, 4, 0, (2,))


def test_fewer_pods_beat_newer_pods() -> None:
    c = Cluster(article_nodes())
    c.job("old", [1, 2], min_count=2, mode="all", started=0.0)
    c.job("new", [3, 4, 5, 6, 7, 8], min_count=6, mode="all", started=100.0)
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.whole_groups == ("old",)


def test_unmanaged_pods_go_one_by_one() -> None:
    c = Cluster(article_nodes())
    for w in range(1, 9):
        c.run({GPU: 8}, worker(w), pod_id=f"loose-{w}", started=float(w))
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("loose-7", "loose-8")  # the newest
    assert result.whole_groups == result.partial_groups == ()
    assert result.domain == "lb-b2"


def test_excluded_pods_and_groups() -> None:
    c = article("all", 4)
    first = c.preempt(high(2, LOCAL_BLOCK))
    assert first is not None and first.whole_groups == ("low-a",)
    # A PodDisruptionBudget forbids low-a-0: an `all` group with it cannot go at all.
    again = c.preempt(high(2, LOCAL_BLOCK), excluded_pods=frozenset({"low-a-0"}))
    assert again is not None and again.whole_groups == ("low-b",)
    assert c.preempt(high(2, LOCAL_BLOCK), excluded_groups=frozenset({"low-a", "low-b"})) is None
    single = article("single", 1)
    partial = single.preempt(high(2, LOCAL_BLOCK), excluded_pods=frozenset({"low-a-0"}))
    assert partial is not None and partial.victims == ("low-a-2", "low-a-3")  # lb-a2


def test_single_gang_already_below_min_count_goes_whole() -> None:
    c = Cluster(article_nodes())
    c.job("short", [1, 2, 3], min_count=4)  # 3 running, minCount 4 (one pod lost earlier)
    for w in (4, 5, 6, 7, 8):
        c.run({GPU: 8}, worker(w), pod_id=f"peer-{w}", priority=HIGH)
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert result.whole_groups == ("short",)
    assert result.victims == ("short-0", "short-1", "short-2")


def test_pods_of_unknown_groups_and_not_in_the_snapshot_are_never_victims() -> None:
    c = article("single", 1)
    c.groups = [g for g in c.groups if g.key != "low-a"]
    c.candidates.append(Candidate("ghost", worker(1), {GPU: 8}, 0, 0.0))
    result = c.preempt(high(2, LOCAL_BLOCK))
    assert result is not None
    assert all(v.startswith("low-b") for v in result.victims)


def test_no_victims_can_help() -> None:
    c = article("single", 1)
    assert c.preempt(high(3, LOCAL_BLOCK)) is None  # local blocks have 2 nodes
    assert c.preempt(high(2, "no/such-key")) is None
    too_few = gang(1, 2, LOCAL_BLOCK, name="high")
    assert c.preempt(too_few) is None


def test_pinned_domain_of_running_pods() -> None:
    c = article("single", 1, started_b=5.0)
    group = gang(1, 2, LOCAL_BLOCK, bound=[worker(1)], name="high")  # one pod already on lb-a1
    c.pods.append(BoundPod("high-running", worker(1), {}))
    result = c.preempt(group)
    assert result is not None
    assert result.domain == "lb-a1"
    assert result.victims == ("low-a-0",)  # lb-a1 although low-b is newer; then the smaller id


def test_mixed_group_goes_through_decide() -> None:
    c = article("single", 1, started_b=5.0)
    pods = (
        PodRequest("leader", PodRequirements(requests=((GPU, 4),))),
        PodRequest("worker", PodRequirements(requests=((GPU, 8),))),
    )
    result = c.preempt(GroupRequest("high", pods, 2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-b-0", "low-b-1")
    assert result.exact


def test_filters_the_model_does_not_know_are_decided_by_decide() -> None:
    # A pod no one may preempt holds host port 8080 on worker 1 (lb-a1), which the group needs:
    # the per-node model would free lb-a1; decide() refuses it, so the search runs again with it.
    c = article("single", 2)
    c.pods.append(BoundPod("port-holder", worker(1), {}, host_ports=(HostPort(8080),)))
    needs_port = PodRequirements(requests=((GPU, 8),), host_ports=(HostPort(8080),))
    pods = tuple(PodRequest(f"high-{i}", needs_port) for i in range(2))
    result = c.preempt(GroupRequest("high", pods, 2, LOCAL_BLOCK))
    assert result is not None
    assert result.victims == ("low-a-2", "low-a-3")  # lb-a2
    assert result.domain == "lb-a2"
    assert result.exact


def test_a_victim_the_model_cannot_see_is_found_by_decide() -> None:
    # Every node has room, but the only free ports 8080 are held by a low-priority pod on worker 1 and by
    # pods no one may preempt elsewhere: the per-node model says the group fits without victims (it does
    # not know ports), decide refuses; the search with decide as the check finds the port holder.
    c = Cluster(article_nodes())
    c.pods.append(BoundPod("low-port", worker(1), {}, host_ports=(HostPort(8080),)))
    c.candidates.append(Candidate("low-port", worker(1), {}, LOW, 0.0))
    for w in range(2, 9):
        c.pods.append(BoundPod(f"peer-port-{w}", worker(w), {}, host_ports=(HostPort(8080),)))
    needs_port = PodRequirements(requests=((GPU, 8),), host_ports=(HostPort(8080),))
    result = c.preempt(GroupRequest("high", (PodRequest("high-0", needs_port),), 1, LOCAL_BLOCK))
    assert result is not None and result.victims == ("low-port",) and result.domain == "lb-a1"


def test_a_domain_the_model_has_fitting_as_is_is_searched_with_decide() -> None:
    # A pod no one may preempt holds host port 8080 on the free node a1: the per-node model (it does not
    # know ports) has the group fitting in block a with no victim, so it offers no set there; its set in
    # block b ("old"), which decide admits, is not the cheapest: "new" in block a started later.
    c = Cluster([NodeInfo(n, {LOCAL_BLOCK: n[0]}, {GPU: 8, "pods": 4}) for n in ("a1", "a2", "b1")])
    c.pods.append(BoundPod("port-holder", "a1", {}, host_ports=(HostPort(8080),)))
    c.run({GPU: 8}, "a2", started=5.0, pod_id="new")
    c.run({GPU: 8}, "b1", started=0.0, pod_id="old")
    needs_port = PodRequirements(requests=((GPU, 8),), host_ports=(HostPort(8080),))
    result = c.preempt(GroupRequest("high", (PodRequest("high-0", needs_port),), 1, LOCAL_BLOCK))
    assert result is not None and result.exact
    assert result.victims == ("new",) and result.domain == "a"
    assert result.cost == VictimCost(LOW, 1, 1, -5_000_000, (1,))


def test_without_steps_the_greedy_set_is_returned() -> None:
    c = article("single", 2, started_b=5.0)
    exact = c.preempt(high(2, LOCAL_BLOCK))
    greedy = c.preempt(high(2, LOCAL_BLOCK), max_steps=0)
    assert exact is not None and greedy is not None
    assert exact.exact and not greedy.exact
    assert greedy.victims == exact.victims  # the greedy is right on this one


def test_very_many_victims_fall_back_to_the_greedy_set() -> None:
    # More victim units than the branch and bound recurses into: the greedy set, said to be so.
    nodes = [NodeInfo(f"n{i:03d}", {}, {GPU: 8, "pods": 4}) for i in range(300)]
    c = Cluster(nodes)
    for i, node in enumerate(nodes):
        c.run({GPU: 8}, node.name, pod_id=f"loose-{i:03d}", started=float(i))
    result = c.preempt(high(280, None))
    assert result is not None
    assert not result.exact
    assert result.victims == tuple(f"loose-{i:03d}" for i in range(20, 300))  # the newest


# --- topology-aware victims ----------------------------------------------------------------------

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


def racks(blocks: int = 2, racks_per_block: int = 2, nodes_per_rack: int = 2) -> list[NodeInfo]:
    """Rack names repeat in every block (r1 in b1 and in b2): with levels they are different domains."""
    return [
        NodeInfo(f"{b}-{r}-{i}", {BLOCK: b, RACK: r, HOST: f"{b}-{r}-{i}"}, {GPU: 8, "pods": 110})
        for b in (f"b{k}" for k in range(1, blocks + 1))
        for r in (f"r{k}" for k in range(1, racks_per_block + 1))
        for i in range(nodes_per_rack)
    ]


def rack_gang(count: int, key: str = RACK) -> GroupRequest:
    return replace(high(count, key), levels=LEVELS)


def test_a_rack_required_gang_preempts_inside_a_fully_packed_rack_of_paths() -> None:
    # Every node runs a low pod; b1/r1 is the only rack whose pods are all preemptible. Without paths
    # "r1" would be one domain of four nodes over two blocks (b2/r1 runs pods of the preemptor's priority).
    c = Cluster(racks())
    for node in c.nodes:
        protected = node.name.startswith("b2-r1") or node.name.startswith("b1-r2")
        c.run({GPU: 8}, node.name, priority=HIGH if protected else LOW, pod_id=f"low-{node.name}")
    result = c.preempt(rack_gang(2))
    assert result is not None and result.domain == "b1/r1"
    assert result.victims == ("low-b1-r1-0", "low-b1-r1-1")
    assert result.admit.domain == "b1/r1" and result.exact


def test_victims_that_complete_one_rack_beat_scattered_ones_of_equal_cost() -> None:
    # Block b1: two racks of two nodes, each node running two unmanaged 4-GPU pods. The block gang needs
    # two full nodes: four victims whatever they are, all started in the same second (equal cost). Those
    # of one rack free a whole rack; those of one node in each rack leave a hole in both.
    c = Cluster(racks(blocks=1))
    for node in c.nodes:
        for k in range(2):
            c.run({GPU: 4}, node.name, started=7.0, pod_id=f"{node.name}-p{k}")
    result = c.preempt(rack_gang(2, BLOCK))
    assert result is not None
    assert {v.rsplit("-p", 1)[0] for v in result.victims} == {"b1-r1-0", "b1-r1-1"}
    assert result.cost.spread == (1, 2, 2)  # one rack, two hosts, two nodes
    assert result.cost.pods == 4
    assert {node for _, node in result.admit.assignments} == {"b1-r1-0", "b1-r1-1"}


def test_an_auto_gang_preempts_at_the_level_it_is_decided_at() -> None:
    # 3 full-node pods can never fit a 2-node rack: auto takes one block, the fewest racks, and preempts so.
    c = Cluster(racks())
    for node in c.nodes:
        c.run(
            {GPU: 8}, node.name, started=5.0 if node.name.startswith("b2") else 0.0, pod_id=f"low-{node.name}"
        )
    group = replace(rack_gang(3), mode="auto")
    result = c.preempt(group)
    assert result is not None and result.domain == "b2"  # b2's pods started later: less run time lost
    assert result.admit.level == BLOCK and result.admit.mode_note.startswith("auto: 3 pods can never fit")
    assert len(result.victims) == 3 and result.cost.spread == (2, 3, 3)


def test_without_levels_victims_on_fewer_nodes_beat_scattered_ones() -> None:
    # Two 4-GPU victims on one node, or one on each of two nodes, free room for two 4-GPU pods alike; all
    # four started in the same second. "c" and "d" sort first by id, but would leave holes in two nodes.
    nodes = [NodeInfo(f"n{i}", {"zone": "z"}, {GPU: 8, "pods": 110}) for i in range(3)]
    c = Cluster(nodes)
    c.run({GPU: 4}, "n0", started=3.0, pod_id="e")
    c.run({GPU: 4}, "n0", started=3.0, pod_id="f")
    c.run({GPU: 4}, "n1", started=3.0, pod_id="c")
    c.run({GPU: 4}, "n1", priority=HIGH, pod_id="keep-1")
    c.run({GPU: 4}, "n2", started=3.0, pod_id="d")
    c.run({GPU: 4}, "n2", priority=HIGH, pod_id="keep-2")
    half = PodRequirements(requests=((GPU, 4),))
    result = c.preempt(gang(2, 2, "zone", requirements=half, name="high"))
    assert result is not None
    assert result.victims == ("e", "f") and result.cost.spread == (1,)
    assert {node for _, node in result.admit.assignments} == {"n0"}


# --- victims' failure budget: groups that may not lose pods one by one ---------------------------


@dataclass(frozen=True)
class BudgetCase:
    name: str
    partial: bool
    min_count: int
    wanted: int  # pods of the preemptor (8 GPUs each), no topology key
    victims: tuple[str, ...]
    whole: tuple[str, ...]
    partial_groups: tuple[str, ...]
    cost: VictimCost


BUDGET_CASES = [
    # A `single` gang of 4 (minCount 2) that may lose pods: 2 of its pods go, it keeps running.
    BudgetCase(
        "may lose pods", True, 2, 2, ("job-2", "job-3"), (), ("job",), VictimCost(LOW, 1, 2, -5_000_000, (2,))
    ),
    # The same gang whose Job would fail on any lost pod (backoffLimit 0): all 4 go, priced as 4 pods.
    BudgetCase(
        "may not",
        False,
        2,
        2,
        ("job-0", "job-1", "job-2", "job-3"),
        ("job",),
        (),
        VictimCost(LOW, 1, 4, -6_000_000, (4,)),
    ),
    # One pod would do; partial=False still takes the whole group.
    BudgetCase(
        "one pod needed",
        False,
        1,
        1,
        ("job-0", "job-1", "job-2", "job-3"),
        ("job",),
        (),
        VictimCost(LOW, 1, 4, -6_000_000, (4,)),
    ),
    # At its minCount a gang goes whole anyway: partial changes nothing.
    BudgetCase(
        "at min count",
        True,
        4,
        1,
        ("job-0", "job-1", "job-2", "job-3"),
        ("job",),
        (),
        VictimCost(LOW, 1, 4, -6_000_000, (4,)),
    ),
]


@pytest.mark.parametrize("case", BUDGET_CASES, ids=lambda c: c.name)
def test_a_group_that_may_not_lose_pods_goes_whole_and_is_priced_whole(case: BudgetCase) -> None:
    # workers 1-4 run the gang (started 0, 0, 2, 3 s: the newest pods are the cheapest single victims),
    # workers 5-8 run pods of the preemptor's priority (never victims).
    c = Cluster(article_nodes())
    c.groups.append(VictimGroup("job", case.min_count, "single", case.partial))
    for i, started in enumerate([0.0, 1.0, 2.0, 3.0]):
        c.run({GPU: 8}, worker(i + 1), started=started, job="job", pod_id=f"job-{i}")
    for w in (5, 6, 7, 8):
        c.run({GPU: 8}, worker(w), priority=HIGH, pod_id=f"peer-{w}")
    result = c.preempt(high(case.wanted, None))
    assert result is not None
    assert (result.victims, result.whole_groups, result.partial_groups) == (
        case.victims,
        case.whole,
        case.partial_groups,
    )
    assert result.cost == case.cost


def test_a_cheaper_group_that_may_lose_pods_beats_one_that_may_not() -> None:
    # Both gangs are `single` minCount 2 of 4 pods; "strict" (partial=False) started later, so pod by pod
    # it would be the cheaper victim; priced whole (4 pods) it loses to 2 pods of "loose".
    c = Cluster(article_nodes())
    c.job("loose", [1, 2, 3, 4], min_count=2, started=0.0)
    c.job("strict", [5, 6, 7, 8], min_count=2, started=100.0, partial=False)
    result = c.preempt(high(2, None))
    assert result is not None
    assert result.partial_groups == ("loose",) and result.whole_groups == ()
    assert result.cost.pods == 2
    # Asked for 4 pods, the strict gang whole (1 group, 4 pods, newer) beats 2 + 2 of two groups.
    result = c.preempt(high(4, None))
    assert result is not None
    assert result.whole_groups == ("strict",) and result.cost == VictimCost(LOW, 1, 4, -400_000_000, (4,))


# --- properties against a brute-force search -----------------------------------------------------

KEY = "example.com/block"
PARENT = "example.com/parent"
PRIORITY = 50
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Scenario:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    candidates: list[Candidate]
    groups: list[VictimGroup]
    group: GroupRequest
    excluded_pods: frozenset[str]
    excluded_groups: frozenset[str]


@st.composite
def scenarios(draw: st.DrawFn, dense: bool = False) -> Scenario:
    """Small clusters, mostly full. `dense`: 8-GPU nodes full of 4-GPU pods, so that a pod of the
    group needs two victims on one node (their gains do not add up) and groups share nodes."""
    domains = [f"d{i}" for i in range(draw(st.integers(1, 3)))]
    nodes = []
    for i in range(draw(st.integers(2, 5 if dense else 6))):
        labels = {KEY: draw(st.sampled_from(domains))} if draw(st.integers(0, 11)) else {}
        if draw(st.integers(0, 7)):
            labels[PARENT] = draw(st.sampled_from(["p0", "p1"]))  # KEY values repeat under two parents
        if dense:
            nodes.append(NodeInfo(f"n{i}", labels, {GPU: 8, "pods": 4}))
            continue
        alloc = {GPU: draw(st.sampled_from([0, 4, 8, 8, 8])), "pods": draw(st.integers(1, 4))}
        nodes.append(NodeInfo(f"n{i}", labels, alloc, unschedulable=not draw(st.integers(0, 11))))
    pods: list[BoundPod] = []
    candidates: list[Candidate] = []
    priorities = st.sampled_from([10, 10, 20, 20, 30, 30, PRIORITY, PRIORITY + 10])
    groups = [
        VictimGroup(
            f"g{g}",
            draw(st.integers(1, 3)),
            draw(st.sampled_from(["single", "all"])),
            partial=draw(st.sampled_from([True, True, False])),
        )
        for g in range(draw(st.integers(0, 4)))
    ]
    group_priority = {g.key: draw(priorities) for g in groups}
    owners = [g.key for g in groups] * 2 + ["loose", "loose", "other"]
    budget = 10 if dense else 8  # candidate pods, so that the brute force stays small
    # Nodes are mostly full (pods fit where they run: the engine never overcommits).
    for node in nodes:
        gpus, slots = node.allocatable[GPU], node.allocatable["pods"]
        while slots and gpus >= 4 and draw(st.integers(0, 9)):
            size = draw(st.sampled_from([4, 8] if gpus >= 8 and not dense else [4]))
            owner = draw(st.sampled_from(owners)) if budget else "other"
            pod_id = f"{owner}-{len(pods)}"
            pods.append(BoundPod(pod_id, node.name, {GPU: size}))
            gpus, slots = gpus - size, slots - 1
            if owner == "other":
                continue  # not a candidate: never a victim
            budget -= 1
            started = float(draw(st.integers(0, 2)))  # few values: ties happen
            if owner == "loose":
                candidates.append(Candidate(pod_id, node.name, {GPU: size}, draw(priorities), started))
            else:
                # Now and then one pod of a group is more important than the others.
                bump = 15 if draw(st.integers(0, 5)) == 0 else 0
                prio = group_priority[owner] + bump
                candidates.append(Candidate(pod_id, node.name, {GPU: size}, prio, started, owner))

    count = draw(st.integers(1, 3))

    def kind() -> PodRequirements:
        return PodRequirements(requests=((GPU, draw(st.sampled_from([8] if dense else [4, 4, 8]))),))

    kinds = [kind(), kind()] if draw(st.integers(0, 4)) == 0 else [kind()]
    pending = tuple(PodRequest(f"p{i}", kinds[draw(st.integers(0, len(kinds) - 1))]) for i in range(count))
    bound: tuple[str, ...] = ()
    # With the levels (PARENT, KEY) domains are paths: p0/d0 != p1/d0; the key may be the parent level.
    levels: tuple[str, ...] = draw(st.sampled_from([(), (), (PARENT, KEY)]))
    key = draw(st.sampled_from([KEY, KEY, None, PARENT] if levels else [KEY, KEY, None]))
    if nodes and draw(st.integers(0, 5)) == 0:
        labelled = [n.name for n in nodes if domain_path(n, key, levels)]
        if labelled:
            node = draw(st.sampled_from(labelled))
            pods.append(BoundPod("p-running", node, {}))
            bound = (node,)
    group = GroupRequest(
        "high",
        pending,
        draw(st.integers(1, count + len(bound))),
        key,
        bound,
        levels,
    )
    ids = [c.id for c in candidates]
    excluded_pods = frozenset(draw(st.lists(st.sampled_from(ids), max_size=1))) if ids else frozenset()
    keys = [g.key for g in groups]
    excluded_groups = frozenset(draw(st.lists(st.sampled_from(keys), max_size=1))) if keys else frozenset()
    if draw(st.booleans()):
        excluded_pods, excluded_groups = frozenset(), frozenset()
    return Scenario(nodes, pods, candidates, groups, group, excluded_pods, excluded_groups)


@dataclass(frozen=True)
class Answer:
    cost: VictimCost
    domain_rank: int
    victims: tuple[str, ...]


def brute_force(sc: Scenario, tree: CompositeRequest | None = None) -> Answer | None:
    """Every allowed victim set against every domain, with decide() as the only capacity check (or
    decide_composite() for `tree`, whose pods and root key are those of `sc.group`)."""
    snapshot = Snapshot.build(sc.nodes, sc.pods)
    group = sc.group

    def admits(s: Snapshot) -> bool:
        if tree is not None:
            return isinstance(decide_composite(s, tree), CompositeAdmit)
        return isinstance(decide(s, group), Admit)

    if admits(snapshot):
        return None
    by_id = {c.id: c for c in sc.candidates}
    definitions = {g.key: g for g in sc.groups}
    members: dict[str, list[str]] = {}
    for c in sc.candidates:
        if c.group is not None:
            members.setdefault(c.group, []).append(c.id)
    options: list[list[tuple[str, ...]]] = []  # per unit: the victim sets it allows, () included
    for key, pod_ids in members.items():
        top = max(by_id[p].priority for p in pod_ids)
        if key not in definitions or key in sc.excluded_groups or top >= PRIORITY:
            continue
        takeable = [p for p in pod_ids if p not in sc.excluded_pods]
        allowed: list[tuple[str, ...]] = [()]
        if len(takeable) == len(pod_ids):
            allowed.append(tuple(pod_ids))
        if definitions[key].disruption == "single" and definitions[key].partial:
            limit = len(pod_ids) - definitions[key].min_count
            for size in range(1, min(limit, len(takeable)) + 1):
                allowed.extend(itertools.combinations(takeable, size))
        options.append(allowed)
    for c in sc.candidates:
        if c.group is None and c.priority < PRIORITY and c.id not in sc.excluded_pods:
            options.append([(), (c.id,)])

    key, levels = group.topology_key, group.levels
    node_domain = {n.name: domain_path(n, key, levels) for n in sc.nodes}
    names = sorted({d for d in node_domain.values() if d is not None})
    domains = [node_domain[group.bound_nodes[0]]] if group.bound_nodes else list(names)
    fits: dict[tuple[tuple[str, ...] | None, frozenset[str]], bool] = {}

    def fits_in(domain: tuple[str, ...] | None, victims: Sequence[str]) -> bool:
        # Only victims inside the domain: every other domain stays as full as it was (no fit).
        inside = frozenset(v for v in victims if node_domain[by_id[v].node] == domain)
        if (domain, inside) not in fits:
            fits[domain, inside] = admits(snapshot.without(inside))
        return fits[domain, inside]

    best: tuple[object, ...] | None = None
    answer = None
    for choice in itertools.product(*options):
        victims = tuple(sorted(v for part in choice for v in part))
        if not victims:
            continue
        where = [by_id[v].node for v in victims]
        for domain in domains:
            if domain is not None and fits_in(domain, victims):
                cost = cost_of(victims, by_id, members, spread_of(sc.nodes, group, where, domain))
                rank = names.index(domain)
                candidate = (cost, rank, victims)
                if best is None or candidate < best:
                    best, answer = candidate, Answer(cost, rank, victims)
    return answer


def run(sc: Scenario, **kwargs: int) -> Preemption | None:
    return choose_victims(
        Snapshot.build(sc.nodes, sc.pods),
        sc.group,
        PRIORITY,
        sc.candidates,
        sc.groups,
        excluded_pods=sc.excluded_pods,
        excluded_groups=sc.excluded_groups,
        **kwargs,
    )


def check(sc: Scenario, result: Preemption | None) -> None:
    if result is not None:
        snapshot = Snapshot.build(sc.nodes, sc.pods)
        check_result(
            snapshot,
            sc.group,
            PRIORITY,
            sc.candidates,
            sc.groups,
            result,
            sc.excluded_pods,
            sc.excluded_groups,
        )


@SETTINGS
@given(scenarios(), st.integers(0, 2**32))
def test_victims_are_the_cheapest_set_brute_force_finds(sc: Scenario, seed: int) -> None:
    against_brute_force(sc, seed)


def test_pods_of_two_shapes_the_model_overcounts_are_still_searched_through_the_check() -> None:
    """Found by hypothesis: a 4-GPU and an 8-GPU pod, one free 8-GPU node. The per-node model counts that
    node once per shape ("fits as is"); decide() says no. The search must still run (with decide as the
    check), not stop at the greedy's first set: both victims cost the same, the first by name wins."""

    def node(name: str, gpus: int, pods: int, block: bool = True) -> NodeInfo:
        labels = {"example.com/block": "d0"} if block else {}
        return NodeInfo(name, labels, {GPU: gpus, "pods": pods}, unschedulable=not block)

    def pod(name: str, gpus: int) -> PodRequest:
        return PodRequest(name, PodRequirements(((GPU, gpus),)))

    sc = Scenario(
        [
            node("n0", 4, 2),
            node("n1", 8, 1),
            node("n2", 8, 1),
            *(node(f"n{i}", 0, 1, False) for i in (3, 4, 5)),
        ],
        [
            BoundPod("loose-0", "n0", {GPU: 4}),
            BoundPod("loose-1", "n2", {GPU: 4}),
            BoundPod("p-running", "n0", {}),
        ],
        [Candidate(f"loose-{i}", node, {GPU: 4}, 10, 0.0, None) for i, node in ((0, "n0"), (1, "n2"))],
        [],
        GroupRequest("high", (pod("p0", 4), pod("p1", 8)), 3, "example.com/block", ("n0",)),
        frozenset(),
        frozenset(),
    )
    result = run(sc)
    expected = brute_force(sc)
    assert expected is not None and expected.victims == ("loose-0",)
    assert result is not None and result.exact
    assert (result.cost, result.victims) == (expected.cost, expected.victims)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(dense=True), st.integers(0, 2**32))
def test_victims_are_the_cheapest_also_when_gains_do_not_add_up(sc: Scenario, seed: int) -> None:
    against_brute_force(sc, seed)


def against_brute_force(sc: Scenario, seed: int) -> None:
    result = run(sc)
    check(sc, result)
    expected = brute_force(sc)
    if expected is None:
        fits = isinstance(decide(Snapshot.build(sc.nodes, sc.pods), sc.group), Admit)
        event("fits without preemption" if fits else "no victims help")
        assert result is None
        return
    event(f"{expected.cost.groups} groups, {expected.cost.pods} pods")
    assert result is not None, f"brute force preempts {expected.victims}"
    assert result.exact
    assert (result.cost, result.victims) == (expected.cost, expected.victims)

    # Deterministic: the same answer whatever the order of nodes, pods and candidates.
    rng = random.Random(seed)
    shuffled = Scenario(
        rng.sample(sc.nodes, len(sc.nodes)),
        rng.sample(sc.pods, len(sc.pods)),
        rng.sample(sc.candidates, len(sc.candidates)),
        rng.sample(sc.groups, len(sc.groups)),
        sc.group,
        sc.excluded_pods,
        sc.excluded_groups,
    )
    assert run(shuffled) == result


@SETTINGS
@given(scenarios())
def test_greedy_alone_keeps_every_promise(sc: Scenario) -> None:
    """With no search steps the greedy answer is returned: valid, maybe not the cheapest."""
    result = run(sc, max_steps=0)
    check(sc, result)
    full = run(sc)
    assert full is not None or result is None
    if result is not None and full is not None:
        assert not result.exact
        assert full.cost <= result.cost
        event("greedy is the cheapest" if result.victims == full.victims else "greedy is dearer")
    elif full is not None:
        event("greedy finds nothing")


@pytest.mark.parametrize("steps", [1, 5, 50])
def test_a_search_cut_short_still_keeps_every_promise(steps: int) -> None:
    c = Cluster(article_nodes())
    for w in range(1, 9):
        c.run({GPU: 4}, worker(w), pod_id=f"a-{w}", started=float(w))
        c.run({GPU: 4}, worker(w), pod_id=f"b-{w}", started=float(w * w))
    result = c.preempt(high(4, NETWORK_BLOCK), max_steps=steps)  # checks every promise
    assert result is not None
    assert result.cost.pods == 8  # both pods on each of four nodes of one network block
    assert steps > 1 or not result.exact  # one step cannot prove anything
    full = c.preempt(high(4, NETWORK_BLOCK))
    assert full is not None and full.exact
    assert full.cost <= result.cost
    assert full.victims == ("a-5", "a-6", "a-7", "a-8", "b-5", "b-6", "b-7", "b-8")  # nb-b: newer


# --- trees preempt ------------------------------------------------------------------------------------


def as_tree(sc: Scenario, split: int, leaf_key: str | None, min_children: int) -> CompositeRequest:
    """The preemptor's pods as a tree of two leaves (the first `split` pods, the rest), inside one domain of
    its key; each leaf in one domain of `leaf_key`, its min count all its pods."""
    g = sc.group
    parts = [g.pending[:split], g.pending[split:]]
    kids = tuple(
        GroupRequest(f"leaf{i}", part, len(part), leaf_key, levels=g.levels)
        for i, part in enumerate(parts)
        if part
    )
    return CompositeRequest("high", kids, min(min_children, len(kids)), g.topology_key, g.levels)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    scenarios(), st.integers(0, 3), st.integers(1, 2), st.booleans(), st.sampled_from([PARENT, PARENT, None])
)
def test_tree_victims_are_the_cheapest_set_brute_force_finds(
    sc: Scenario, split: int, min_children: int, fine: bool, root_key: str | None
) -> None:
    sc, tree = tree_case(sc, split, min_children, fine, root_key)
    snapshot = Snapshot.build(sc.nodes, sc.pods)
    result = run_tree(sc, tree)
    expected = brute_force(sc, tree)
    if expected is None:
        event("fits" if isinstance(decide_composite(snapshot, tree), CompositeAdmit) else "no victims help")
        assert result is None
        return
    event(f"{expected.cost.groups} groups, {expected.cost.pods} pods")
    assert result is not None, f"brute force preempts {expected.victims}"
    assert result.exact
    assert (result.cost, result.victims) == (expected.cost, expected.victims)
    assert result.admit == decide_composite(snapshot.without(result.victims), tree)
    assert result.domain == result.admit.domain("high")


def tree_case(
    sc: Scenario, split: int, min_children: int, fine: bool, root_key: str | None
) -> tuple[Scenario, CompositeRequest]:
    """The scenario's group as a tree (`as_tree`), and the scenario with the group brute force searches for
    it. The tree in one domain of PARENT (or anywhere), its leaves mostly each in one domain of KEY (paths
    p0/d0 != p1/d0), so the leaves' own domains bind and the per-node model alone would not do."""
    group = replace(sc.group, bound_nodes=(), min_count=len(sc.group.pending), topology_key=root_key)
    sc = replace(sc, group=replace(group, levels=(PARENT, KEY)))
    leaf_key = KEY if fine or root_key is None else None
    return sc, as_tree(sc, split, leaf_key, min_children)


def run_tree(sc: Scenario, tree: CompositeRequest) -> CompositePreemption | None:
    return choose_composite_victims(
        Snapshot.build(sc.nodes, sc.pods),
        tree,
        PRIORITY,
        sc.candidates,
        sc.groups,
        excluded_pods=sc.excluded_pods,
        excluded_groups=sc.excluded_groups,
    )


def test_tree_victims_in_a_domain_the_model_has_fitting_as_is_are_searched() -> None:
    """Found by hypothesis: a free node n2 in p1 has no KEY label, so the one leaf (in one domain of KEY)
    cannot use it, but the per-node model of the tree (the root's key alone) has the tree fitting in p1 with
    no victim. Trusted, the model offered no set in p1, and its set in p0 (g0-0), admitted, was returned as
    exact; p1's g0-1 started later (less run time lost) and is cheaper."""

    def node(name: str, labels: dict[str, str]) -> NodeInfo:
        return NodeInfo(name, labels, {GPU: 4, "pods": 1})

    sc = Scenario(
        [
            node("n0", {KEY: "d0", PARENT: "p0"}),
            node("n1", {KEY: "d0", PARENT: "p1"}),
            node("n2", {PARENT: "p1"}),
        ],
        [BoundPod("g0-0", "n0", {GPU: 4}), BoundPod("g0-1", "n1", {GPU: 4})],
        [
            Candidate("g0-0", "n0", {GPU: 4}, 25, 0.0, "g0"),
            Candidate("g0-1", "n1", {GPU: 4}, 25, 1.0, "g0"),
        ],
        [VictimGroup("g0", 1, "single", partial=True)],
        GroupRequest("high", (PodRequest("p0", PodRequirements(((GPU, 4),))),), 1, KEY),
        frozenset(),
        frozenset(),
    )
    sc, tree = tree_case(sc, split=0, min_children=1, fine=True, root_key=PARENT)
    result = run_tree(sc, tree)
    expected = brute_force(sc, tree)
    assert expected is not None and expected.victims == ("g0-1",)
    assert result is not None and result.exact
    assert (result.cost, result.victims) == (expected.cost, expected.victims)
    assert result.domain == "p1" and result.cost == VictimCost(25, 1, 1, -1_000_000, (1, 1))


def test_a_tree_victim_set_is_checked_in_the_domain_it_was_found_for() -> None:
    """Found by hypothesis: the `all` group g2 runs on n1 and n5 in p0 and on n3 in p1; only n5 has a KEY
    label, so the leaf fits in p0 alone. The per-node model (the root's key alone) has the tree fitting in p1
    with g2 gone, its spread there one node; the whole snapshot without g2 admits the tree (in p0), so that
    set was returned at p1's spread. The same set, found in p0, costs two KEY domains and two nodes."""

    def node(name: str, labels: dict[str, str]) -> NodeInfo:
        return NodeInfo(name, labels, {GPU: 4, "pods": 1})

    placed = [("g2-0", "n1"), ("g2-1", "n3"), ("g2-2", "n5")]
    sc = Scenario(
        [node("n1", {PARENT: "p0"}), node("n3", {PARENT: "p1"}), node("n5", {KEY: "d0", PARENT: "p0"})],
        [BoundPod(pod_id, n, {GPU: 4}) for pod_id, n in placed],
        [Candidate(pod_id, n, {GPU: 4}, 25, 0.0, "g2") for pod_id, n in placed],
        [VictimGroup("g2", 1, "all")],
        GroupRequest("high", (PodRequest("p0", PodRequirements(((GPU, 4),))),), 1, KEY),
        frozenset(),
        frozenset(),
    )
    sc, tree = tree_case(sc, split=0, min_children=1, fine=True, root_key=PARENT)
    result = run_tree(sc, tree)
    expected = brute_force(sc, tree)
    assert expected is not None and expected.victims == ("g2-0", "g2-1", "g2-2")
    assert result is not None and result.exact
    assert (result.cost, result.victims) == (expected.cost, expected.victims)
    assert result.domain == "p0" and result.cost == VictimCost(25, 1, 3, 0, (2, 2))


def test_a_sliced_job_preempts_plain_jobs_for_its_slices() -> None:
    # Two slices of 2 full-node pods, each in one local block, both in one network block; every node runs a
    # lower-priority plain gang of 2 pods per local block. The cheapest: the two gangs of one network block.
    c = Cluster(article_nodes())
    for k, workers in enumerate(([1, 2], [3, 4], [5, 6], [7, 8])):
        c.job(f"low-{k}", workers, min_count=2, mode="all", started=float(k))
    slices = tuple(
        GroupRequest(f"s{i}", tuple(PodRequest(f"s{i}-{j}", GPU_POD) for j in range(2)), 2, LOCAL_BLOCK)
        for i in range(2)
    )
    tree = CompositeRequest("job", slices, 2, NETWORK_BLOCK)
    result = choose_composite_victims(c.snapshot(), tree, HIGH, c.candidates, c.groups)
    assert isinstance(result, CompositePreemption)
    assert result.domain == "nb-b"  # low-2 and low-3 started later: less run time lost
    assert result.whole_groups == ("low-2", "low-3")
    assert result.cost == VictimCost(LOW, 2, 4, -10_000_000, (4,))  # started 2 s and 3 s, two pods each
    assert {a.domain for _, a in result.admit.admits} == {"lb-b1", "lb-b2"}
    assert result.exact
    # Fits as it is after a gang is gone: no preemption.
    c.pods = [p for p in c.pods if not p.id.startswith("low-3")]
    c.candidates = [x for x in c.candidates if not x.id.startswith("low-3")]
    lone = CompositeRequest("job", slices[:1], 1, NETWORK_BLOCK)
    assert choose_composite_victims(c.snapshot(), lone, HIGH, c.candidates, c.groups) is None


# --- the combination bound (victim_search.DomainSearch._combinations) against the search without it ---


_T = TypeVar("_T")
MODES: tuple[DisruptionMode | None, ...] = ("all", "single", None)


def without_combinations(fn: Callable[[], _T]) -> _T:
    """`fn` with the combination table never built: the branch and bound as it was before the bound."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(victim_search, "MAX_TABLE", 0)
        return fn()


def same_victims(fast: Preemption | None, reference: Preemption | None) -> None:
    """The bound only prunes sets that cannot beat the best one: an exact search chooses the same set."""
    assert (fast is None) == (reference is None)
    if fast is None or reference is None:
        return
    if reference.exact:
        assert fast.exact
        assert (fast.domain, fast.victims, fast.cost) == (reference.domain, reference.victims, reference.cost)
    else:
        assert fast.cost <= reference.cost  # the budget cut the reference short; fewer steps wasted here
        event("reference cut short")


@SETTINGS
@given(scenarios())
def test_the_combination_bound_never_changes_the_victims(sc: Scenario) -> None:
    same_victims(run(sc), without_combinations(lambda: run(sc)))


@st.composite
def gang_clusters(draw: st.DrawFn) -> tuple[Snapshot, GroupRequest, list[Candidate], list[VictimGroup]]:
    """Blocks of racks of full nodes, as in bench/preemption_bench.py at a small scale: gangs of 1 to 4
    pods (all, single with a min count, partial or not, unmanaged pods), priorities and start times with
    ties, nodes no one may preempt; the preemptor asks for full nodes in one rack, one block or anywhere."""
    blocks, racks, per_rack = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(2, 8))
    nodes = [
        NodeInfo(f"n{b}-{r}-{i}", {"block": f"b{b}", "rack": f"b{b}-r{r}"}, {GPU: 8, "pods": 4})
        for b in range(blocks)
        for r in range(racks)
        for i in range(per_rack)
    ]
    pods: list[BoundPod] = []
    candidates: list[Candidate] = []
    groups: list[VictimGroup] = []
    i = 0
    while i < len(nodes):
        size = draw(st.integers(1, 4))
        members = nodes[i : i + size]
        i += size
        priority = draw(st.sampled_from([10, 20, 30, PRIORITY + 10]))
        mode = draw(st.sampled_from(MODES))
        key = f"g{len(groups)}-{i}" if mode is not None else None
        if key is not None:
            partial = draw(st.booleans())
            groups.append(VictimGroup(key, draw(st.integers(1, len(members))), mode, partial=partial))
        started = draw(st.integers(0, 30))
        for m, node in enumerate(members):
            pod_id = f"p-{node.name}-{m}"
            pods.append(BoundPod(pod_id, node.name, {GPU: 8}))
            start = float(started + draw(st.integers(0, 3)))
            candidates.append(Candidate(pod_id, node.name, {GPU: 8}, priority, start, key))
    count = draw(st.integers(1, max(1, min(len(nodes) - 1, 16))))
    key = draw(st.sampled_from(["rack", "block", None]))
    pending = tuple(PodRequest(f"high-{n}", PodRequirements(requests=((GPU, 8),))) for n in range(count))
    return Snapshot.build(nodes, pods), GroupRequest("high", pending, count, key), candidates, groups


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_clusters())
def test_the_combination_bound_never_changes_the_victims_of_gangs(
    cluster: tuple[Snapshot, GroupRequest, list[Candidate], list[VictimGroup]],
) -> None:
    snapshot, group, candidates, groups = cluster

    def search() -> Preemption | None:
        return choose_victims(snapshot, group, PRIORITY, candidates, groups)

    fast = search()
    same_victims(fast, without_combinations(search))
    if fast is not None:
        check_result(snapshot, group, PRIORITY, candidates, groups, fast, frozenset(), frozenset())


def unit_options(du: victim_search.DomainUnit) -> list[tuple[int, int]]:
    """(pods, start total) of every way one unit can be among the victims: whole, or its k newest pods."""
    options = [(len(du.unit.ids), du.unit.start_total)] if du.whole else []
    if du.partial:
        starts = sorted((dp.start for dp in du.pods), reverse=True)
        options.extend((k, sum(starts[:k])) for k in range(1, min(du.unit.limit, len(starts)) + 1))
    return options


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gang_clusters())
def test_the_combination_table_is_the_newest_choice_brute_force_finds(
    cluster: tuple[Snapshot, GroupRequest, list[Candidate], list[VictimGroup]],
) -> None:
    """Every entry of the table over the last units of a domain (as many as brute force enumerates)."""
    snapshot, group, candidates, groups = cluster
    built = victim_search.DomainSearch._combinations
    tables: list[victim_search.DomainSearch] = []

    def record(search: victim_search.DomainSearch) -> None:
        built(search)
        if search.combos is not None:
            tables.append(search)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(victim_search.DomainSearch, "_combinations", record)
        choose_victims(snapshot, group, PRIORITY, candidates, groups)
    for search in tables:
        u = len(search.units)
        for j in range(max(0, u - 5), u + 1):
            expected: dict[tuple[int, int], int] = {}
            per_unit = [[(0, 0, 0)] + [(1, q, s) for q, s in unit_options(du)] for du in search.units[j:]]
            for choice in itertools.product(*per_unit):
                k, p, s = (sum(x[i] for x in choice) for i in range(3))
                expected[k, p] = max(expected.get((k, p), s), s)
            assert search.combos is not None
            table = search.combos[j].tolist()
            for k, row in enumerate(table):
                for p, value in enumerate(row):
                    assert value == expected.get((k, p), victim_search.NO_COMBINATION), (j, k, p)
        event(f"{len(tables)} tables")
