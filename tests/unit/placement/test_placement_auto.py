"""`auto` topology mode (placement/auto.py): examples, then properties against required and preferred with an
independent reference of "can ever fit one domain" that works from NodeInfo directly."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_testkit import GPU, node_capacity

from phalanx.placement import (
    Admit,
    BoundPod,
    Decision,
    GroupRequest,
    NodeInfo,
    PodRequest,
    PodRequirements,
    Reject,
    Snapshot,
    TopologyMode,
    auto_choice,
    decide,
    diagnose,
    resolve_mode,
)

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
FULL = PodRequirements(requests=((GPU, 8),))


def nvl_cluster(racks_per_block: int = 2, nodes_per_rack: int = 18) -> list[NodeInfo]:
    """NVL72-like: blocks of racks of 18 nodes with 8 GPUs (4 per pod: 2 pods a node)."""
    return [
        NodeInfo(
            f"{b}-{r}-n{i:02d}",
            {BLOCK: b, RACK: r, HOST: f"{b}-{r}-n{i:02d}"},
            {GPU: 8, "pods": 110},
        )
        for b in ("b1", "b2")
        for r in (f"r{k}" for k in range(1, racks_per_block + 1))
        for i in range(nodes_per_rack)
    ]


def job(count: int, mode: TopologyMode = "auto", levels: tuple[str, ...] = LEVELS) -> GroupRequest:
    pods = tuple(PodRequest(f"j-{i}", FULL) for i in range(count))
    return GroupRequest("j", pods, count, RACK, levels=levels, mode=mode)


def test_a_gang_that_fits_a_rack_when_free_waits_for_one() -> None:
    nodes = nvl_cluster()
    # Every rack has 17 nodes busy: 4 pods fit no rack now, but one rack when free.
    pods = [BoundPod(f"busy-{n.name}", n.name, {GPU: 8}) for n in nodes if not n.name.endswith("n00")]
    snapshot = Snapshot.build(nodes, pods)
    decision = decide(snapshot, job(4))
    assert isinstance(decision, Reject) and decision.reason == "Unschedulable"
    assert decision.level is None
    assert (
        decision.mode_note
        == "auto: 4 pods fit one domain of example.com/rack when its nodes are free, so one is required"
    )
    assert decision == replace(decide(snapshot, job(4, "required")), mode_note=decision.mode_note)
    # preferred spreads it at once: a block has two free nodes, so over four racks of two blocks.
    spread = decide(snapshot, job(4, "preferred"))
    assert isinstance(spread, Admit) and spread.level == ""
    assert len({node.split("-n")[0] for _, node in spread.assignments}) == 4


def test_a_gang_that_can_never_fit_a_rack_takes_the_fewest_racks_of_one_block() -> None:
    snapshot = Snapshot.build(nvl_cluster(), [])
    decision = decide(snapshot, job(32))
    assert isinstance(decision, Admit)
    assert decision.level == BLOCK and decision.domain == "b1"
    racks = {node.split("-n")[0] for _, node in decision.assignments}
    assert racks == {"b1-r1", "b1-r2"}  # two racks, the fewest that hold 32 nodes
    assert decision.mode_note == (
        "auto: 32 pods can never fit one domain of example.com/rack (at most 18 do), "
        "so one domain of example.com/block with the fewest domains of example.com/rack"
    )
    # required would wait for ever; preferred decides the same here (no rack holds it now either).
    assert isinstance(decide(snapshot, job(32, "required")), Reject)
    assert replace(decision, mode_note="") == decide(snapshot, job(32, "preferred"))


def test_too_big_for_a_block_takes_the_fewest_blocks() -> None:
    snapshot = Snapshot.build(nvl_cluster(), [])
    decision = decide(snapshot, job(40))
    assert isinstance(decision, Admit) and decision.level == "" and decision.domain is None
    assert {node.split("-")[0] for _, node in decision.assignments} == {"b1", "b2"}
    assert decision.mode_note == (
        "auto: 40 pods can never fit one domain of example.com/rack (at most 18 do) nor one domain of "
        "example.com/block (at most 36 do), so anywhere, with the fewest domains of example.com/block"
    )
    never = decide(snapshot, job(80))
    assert isinstance(never, Reject) and never.level == ""
    assert "nor the cluster (at most 72 do)" in never.mode_note


def test_without_levels_the_fewest_domains_of_the_key() -> None:
    snapshot = Snapshot.build(nvl_cluster(), [])
    decision = decide(snapshot, job(20, levels=()))
    # Racks r1 and r2 exist in both blocks; without levels "r1" is one domain of 36 nodes: it fits.
    assert isinstance(decision, Admit) and decision.level is None and decision.domain == "r1"
    decision = decide(snapshot, job(40, levels=()))
    assert isinstance(decision, Admit) and decision.level == ""
    assert decision.mode_note.endswith("so anywhere, with the fewest domains of example.com/rack")
    assert {node.split("-n")[0][3:] for _, node in decision.assignments} == {"r1", "r2"}


def test_cordoned_nodes_and_running_pods() -> None:
    nodes = nvl_cluster(racks_per_block=1, nodes_per_rack=4)
    # A node cordoned does not count: 4 pods can no longer ever fit a 4-node rack with one cordoned.
    nodes = [replace(n, unschedulable=n.name == "b1-r1-n00") for n in nodes]
    snapshot = Snapshot.build(nodes, [])
    choice = auto_choice(snapshot, job(4))
    assert choice.key == RACK  # b2's rack still has 4 schedulable nodes
    assert resolve_mode(snapshot, job(4)) == replace(job(4), mode="required")
    # Pods of the gang that already run in two racks: no rack can hold it, one block can't either.
    running = replace(job(2), min_count=4, bound_nodes=("b1-r1-n01", "b2-r1-n01"))
    snapshot = Snapshot.build(
        nodes, [BoundPod(f"r{i}", n, {GPU: 8}) for i, n in enumerate(running.bound_nodes)]
    )
    choice = auto_choice(snapshot, running)
    assert choice.key is None and "its running pods span several" in choice.note
    decision = decide(snapshot, running)
    assert isinstance(decision, Admit) and decision.level == ""


def test_diagnosis_and_refusals_follow_the_level_applied() -> None:
    snapshot = Snapshot.build(nvl_cluster(), [])
    assert diagnose(snapshot, job(80)).summary().startswith("72 of 80 pods fit")
    too_few = replace(job(2), min_count=3)
    decision = decide(snapshot, too_few)
    assert isinstance(decision, Reject) and decision.level is None
    assert decision.mode_note == "auto: one domain of example.com/rack applies (required)"


# --- properties -----------------------------------------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Case:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    group: GroupRequest


@st.composite
def cases(draw: st.DrawFn) -> Case:
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        labels = {
            HOST: f"n{i}",
            BLOCK: draw(st.sampled_from(["b0", "b1"])),
            RACK: draw(st.sampled_from(["r0", "r1", "r2"])),
        }
        if not draw(st.integers(0, 7)):
            del labels[RACK]
        alloc = {GPU: draw(st.integers(0, 4)), "pods": draw(st.integers(1, 4))}
        nodes.append(NodeInfo(f"n{i}", labels, alloc, unschedulable=not draw(st.integers(0, 7))))
    pods = [
        BoundPod(f"busy-{n.name}", n.name, {GPU: draw(st.integers(1, 3))})
        for n in nodes
        if not draw(st.integers(0, 2))
    ]
    count = draw(st.integers(1, 7))
    req = PodRequirements(requests=((GPU, draw(st.integers(1, 2))),))
    pending = tuple(PodRequest(f"p{i}", req) for i in range(count))
    key = draw(st.sampled_from([BLOCK, RACK]))
    levels = draw(st.sampled_from([LEVELS, LEVELS, ()]))
    group = GroupRequest("g", pending, draw(st.integers(1, count)), key, levels=levels, mode="auto")
    return Case(nodes, pods, group)


def domain_of(node: NodeInfo, key: str | None, levels: tuple[str, ...]) -> tuple[str, ...] | None:
    """The node's domain at `key`: its path of level values (just the key's value without levels)."""
    if key is None:
        return ()
    wanted = levels[: levels.index(key) + 1] if levels else (key,)
    if any(level not in node.labels for level in wanted):
        return None
    return tuple(node.labels[level] for level in wanted)


def ever_fits(case: Case, key: str | None, levels: tuple[str, ...]) -> bool:
    """Some domain of `key` holds minCount pods of the gang with every node empty (schedulable nodes)."""
    requests = dict(case.group.pending[0].requirements.requests)
    room: dict[tuple[str, ...], int] = {}
    for node in case.nodes:
        where = domain_of(node, key, levels)
        if where is None or node.unschedulable:
            continue
        room[where] = room.get(where, 0) + node_capacity(node, {}, requests, len(case.group.pending))
    return any(r >= case.group.min_count for r in room.values())


def rungs(group: GroupRequest) -> list[tuple[str | None, tuple[str, ...]]]:
    """Narrowest first: the key, each wider level, all nodes (without levels: the key, then all nodes)."""
    key = group.topology_key
    assert key is not None
    if not group.levels:
        return [(key, ()), (None, (key,))]
    depth = group.levels.index(key)
    return [*((group.levels[d], group.levels) for d in range(depth, -1, -1)), (None, group.levels)]


def required_at(group: GroupRequest, key: str | None, levels: tuple[str, ...]) -> GroupRequest:
    return replace(group, topology_key=key, levels=levels, mode="required")


def plain(decision: Decision) -> Decision:
    return replace(decision, mode_note="", level=None)


@SETTINGS
@given(cases())
def test_auto_is_required_at_the_narrowest_level_that_can_ever_hold_the_gang(case: Case) -> None:
    snapshot = Snapshot.build(case.nodes, case.pods)
    decision = decide(snapshot, case.group)
    ladder = rungs(case.group)
    expected = next((r for r in ladder if ever_fits(case, *r)), ladder[-1])
    key, levels = expected
    event(f"{'key' if key == case.group.topology_key else (key or 'anywhere')}: {type(decision).__name__}")
    assert plain(decision) == plain(decide(snapshot, required_at(case.group, key, levels)))
    assert decision.level == (None if key == case.group.topology_key else (key or ""))
    assert ("can never fit" in decision.mode_note) == (key != case.group.topology_key)
    # The choice depends on the nodes only: the same with every pod gone.
    assert auto_choice(Snapshot.build(case.nodes, []), case.group) == auto_choice(snapshot, case.group)


@SETTINGS
@given(cases())
def test_auto_against_preferred(case: Case) -> None:
    """Feasible now implies feasible ever: if auto admits, preferred admits the same way; if auto waits,
    preferred either waits too or spreads wider than auto allows."""
    snapshot = Snapshot.build(case.nodes, case.pods)
    auto = decide(snapshot, case.group)
    preferred = decide(snapshot, replace(case.group, mode="preferred"))
    ladder = [k for k, _ in rungs(case.group)]
    if isinstance(auto, Admit):
        event("both admit, alike")
        assert replace(auto, mode_note="") == preferred
        return
    assert isinstance(auto, Reject)
    if isinstance(preferred, Admit):
        event("preferred spreads, auto waits")
        auto_rung = ladder.index(None if auto.level == "" else (auto.level or case.group.topology_key))
        preferred_rung = ladder.index(
            None if preferred.level == "" else (preferred.level or case.group.topology_key)
        )
        assert preferred_rung > auto_rung
    else:
        event("both wait")
