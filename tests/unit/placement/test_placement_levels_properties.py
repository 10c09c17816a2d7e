"""Property tests of levels (path domains, BestFit descent) and preferred mode against a reference that works
from NodeInfo/BoundPod directly: which domains can hold the gang, the fewest racks, the fewest nodes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_testkit import fits, usage

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
)

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    group: GroupRequest


@st.composite
def cases(draw: st.DrawFn, mode: str = "required") -> Case:
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        labels = {
            HOST: f"n{i}",
            BLOCK: draw(st.sampled_from(["b0", "b1"])),
            RACK: draw(st.sampled_from(["r0", "r1"])),
        }
        if not draw(st.integers(0, 7)):
            del labels[RACK]
        nodes.append(
            NodeInfo(f"n{i}", labels, {GPU: draw(st.integers(0, 4)), "pods": draw(st.integers(1, 4))})
        )
    pods = [
        BoundPod(f"busy-{n.name}", n.name, {GPU: draw(st.integers(1, 2))})
        for n in nodes
        if not draw(st.integers(0, 3))
    ]
    count = draw(st.integers(1, 6))
    req = PodRequirements(requests=((GPU, draw(st.integers(1, 2))),))
    pending = tuple(PodRequest(f"p{i}", req) for i in range(count))
    key = draw(st.sampled_from([BLOCK, RACK]))
    group = GroupRequest("g", pending, draw(st.integers(1, count)), key, levels=LEVELS, mode=mode)  # type: ignore[arg-type]
    return Case(nodes, pods, group)


def path(node: NodeInfo, key: str | None) -> tuple[str, ...] | None:
    if key is None:
        return ()
    out = []
    for level in LEVELS[: LEVELS.index(key) + 1]:
        if level not in node.labels:
            return None
        out.append(node.labels[level])
    return tuple(out)


def capacity(case: Case) -> dict[str, int]:
    """Pods of the gang each node holds alone."""
    used = usage(case.nodes, case.pods)
    requests = dict(case.group.pending[0].requirements.requests)
    out = {}
    for node in case.nodes:
        k = 0
        while k < len(case.group.pending) and fits(node, used[node.name], requests, k + 1):
            k += 1
        out[node.name] = k
    return out


def domains(case: Case, key: str | None) -> dict[tuple[str, ...], int]:
    cap = capacity(case)
    out: Counter[tuple[str, ...]] = Counter()
    for node in case.nodes:
        p = path(node, key)
        if p is not None:
            out[p] += cap[node.name]
    return dict(out)


def fewest(capacities: list[int], pods: int) -> int:
    """The fewest of these (domains or nodes) that hold `pods`."""
    total = 0
    for k, c in enumerate(sorted(capacities, reverse=True), start=1):
        total += c
        if total >= pods:
            return k
    raise AssertionError("does not fit")


def check_descent(case: Case, admit: Admit, key: str | None) -> None:
    """Capacity respected; one domain of `key`; inside it, level by level within each chosen parent domain,
    the fewest domains of the level that hold the pods placed there, and at the end the fewest nodes."""
    by_name = {n.name: n for n in case.nodes}
    cap = capacity(case)
    per_node = Counter(node for _, node in admit.assignments)
    assert all(per_node[n] <= cap[n] for n in per_node), "over capacity"
    chosen = {path(by_name[n], key) for n in per_node}
    assert len(chosen) == 1 and None not in chosen
    (domain,) = chosen
    start = 0 if key is None else LEVELS.index(key) + 1
    check_inside([n for n in case.nodes if path(n, key) == domain], start, cap, per_node)


def check_inside(members: list[NodeInfo], level: int, cap: dict[str, int], per_node: Counter[str]) -> None:
    placed = sum(per_node[n.name] for n in members)
    if level >= len(LEVELS) - 1:  # hosts: the nodes themselves
        used_nodes = sum(1 for n in members if per_node[n.name])
        assert used_nodes == fewest([cap[n.name] for n in members], placed), "not the fewest nodes"
        return
    # Nodes without this level's label form one group of the parent (as in the engine).
    groups: dict[str | None, list[NodeInfo]] = {}
    for n in members:
        groups.setdefault(n.labels.get(LEVELS[level]), []).append(n)
    used = [g for g in groups.values() if any(per_node[n.name] for n in g)]
    capacities = [sum(cap[n.name] for n in g) for g in groups.values()]
    assert len(used) == fewest(capacities, placed), f"not the fewest {LEVELS[level]}"
    for g in used:
        check_inside(g, level + 1, cap, per_node)


@SETTINGS
@given(cases())
def test_required_with_levels_agrees_with_the_reference(case: Case) -> None:
    decision = decide(Snapshot.build(case.nodes, case.pods), case.group)
    feasible = {d: c for d, c in domains(case, case.group.topology_key).items() if c >= case.group.min_count}
    assert isinstance(decision, Admit) == bool(feasible)
    if isinstance(decision, Admit):
        event("admit")
        best = max(min(c, len(case.group.pending)) for c in feasible.values())
        assert len(decision.assignments) == best  # every pod that fits, in a domain where most fit
        assert decision.domain is not None and tuple(decision.domain.split("/")) in feasible
        check_descent(case, decision, case.group.topology_key)
    else:
        event("reject")
        assert isinstance(decision, Reject)


@SETTINGS
@given(cases(mode="preferred"))
def test_preferred_takes_the_narrowest_level_that_holds_the_gang(case: Case) -> None:
    decision = decide(Snapshot.build(case.nodes, case.pods), case.group)
    key = case.group.topology_key
    assert key is not None
    tried: list[str | None] = [*reversed(LEVELS[: LEVELS.index(key) + 1]), None]
    narrowest = next(
        (k for k in tried if any(c >= case.group.min_count for c in domains(case, k).values())), "none"
    )
    if narrowest == "none":
        assert isinstance(decision, Reject)
        event("reject")
        return
    assert isinstance(decision, Admit)
    event(f"admit at {'anywhere' if narrowest is None else narrowest.split('/')[-1]}")
    assert decision.level == (None if narrowest == key else (narrowest or ""))
    check_descent(case, decision, narrowest)
