"""LiveSnapshot against Snapshot.build: after any sequence of node and pod changes, the live
snapshot answers every engine query like a snapshot built from scratch, and snapshots handed
out earlier never change."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phalanx.placement import (
    BoundPod,
    ClaimInfo,
    GroupRequest,
    HostPort,
    LabelSelector,
    LiveSnapshot,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    PodTraits,
    Snapshot,
    SpreadConstraint,
    Taint,
    Toleration,
    decide,
)

BLOCK, ZONE, HOST = "example.com/block", "example.com/zone", "kubernetes.io/hostname"
GPU, FPGA = "nvidia.com/gpu", "example.com/fpga"
HUGE = 2**70  # far above the per-node cap: exercises clipping and saturation
NODE_NAMES = [f"node-{i}" for i in range(10)]
POD_IDS = [f"ns/pod-{i}" for i in range(12)]
DEDICATED = Taint("dedicated", "x", "NoSchedule")
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies ---------------------------------------------------------------------------------


def amounts(high: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, high), st.just(HUGE)) if high else st.just(0)


@st.composite
def node_infos(draw: st.DrawFn, name: str | None = None) -> NodeInfo:
    name = name or draw(st.sampled_from(NODE_NAMES))
    resources = draw(st.lists(st.sampled_from(["cpu", GPU, FPGA]), unique=True, max_size=3))
    allocatable = {r: draw(st.one_of(st.integers(0, 8), st.just(HUGE))) for r in resources}
    if draw(st.integers(0, 5)):
        allocatable["pods"] = draw(st.integers(0, 6))
    labels = {HOST: name}
    if draw(st.integers(0, 5)):
        labels[BLOCK] = draw(st.sampled_from(["b0", "b1", "b2", "b3"]))
    if draw(st.booleans()):
        labels[ZONE] = draw(st.sampled_from(["1", "2", "10", "z"]))
    return NodeInfo(
        name=name,
        labels=labels,
        allocatable=allocatable,
        taints=draw(st.sampled_from([(), (DEDICATED,), (Taint("soft", "", "PreferNoSchedule"),)])),
        unschedulable=not draw(st.integers(0, 6)),
        ready=bool(draw(st.integers(0, 6))),
    )


APP_A = LabelSelector(requirements=(NodeSelectorRequirement("app", "In", ("a",)),))
ANTI_HOST = PodAffinityTerm(APP_A, HOST)
ANTI_BLOCK = PodAffinityTerm(APP_A, BLOCK)
SPREAD_IGNORE = SpreadConstraint(1, HOST, APP_A, node_affinity_policy="Ignore")


@st.composite
def bound_pods(draw: st.DrawFn) -> BoundPod:
    resources = draw(st.lists(st.sampled_from(["cpu", GPU, FPGA, "example.com/none", "pods"]), max_size=3))
    return BoundPod(
        id=draw(st.sampled_from(POD_IDS)),
        node=draw(st.sampled_from([*NODE_NAMES, "ghost"])),
        requests={r: draw(st.one_of(st.integers(0, 5), st.just(HUGE))) for r in resources},
        traits=PodTraits(
            "ns", (("app", draw(st.sampled_from("ab"))),), ("data",) if draw(st.booleans()) else ()
        ),
        anti_affinity=draw(st.sampled_from([(), (), (ANTI_HOST,), (ANTI_BLOCK,)])),
        host_ports=draw(st.sampled_from([(), (), (HostPort(80),)])),
        assigned=draw(st.booleans()),
        terminating=not draw(st.integers(0, 5)),
        affinity=draw(st.sampled_from([(), (ANTI_BLOCK,)])),
        spread=draw(st.sampled_from([(), (SPREAD_IGNORE,)])),
    )


Op = tuple[str, object]


def ops() -> st.SearchStrategy[Op]:
    return st.one_of(
        st.tuples(st.just("upsert_node"), node_infos()),
        st.tuples(st.just("remove_node"), st.sampled_from(NODE_NAMES)),
        st.tuples(st.just("upsert_pod"), bound_pods()),
        st.tuples(st.just("upsert_pod"), bound_pods()),
        st.tuples(st.just("remove_pod"), st.sampled_from(POD_IDS)),
        st.tuples(
            st.just("set_claim"),
            st.tuples(
                st.sampled_from(["ns/data", "ns/other"]),
                st.sampled_from(
                    [None, ClaimInfo(), ClaimInfo(read_write_once_pod=True), ClaimInfo(waiting="x")]
                ),
            ),
        ),
        st.tuples(st.just("check"), st.none()),
    )


REQUIREMENTS = [
    PodRequirements(requests=((GPU, 2),)),
    PodRequirements(requests=(("cpu", 3), (GPU, 1)), tolerations=(Toleration("dedicated", "Exists"),)),
    PodRequirements(requests=((FPGA, 1),), node_selector=((ZONE, "1"),)),
    PodRequirements(
        requests=(("cpu", 1),),
        affinity_terms=(
            NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(ZONE, "Gt", ("1",)),)),
            NodeSelectorTerm(match_fields=(NodeSelectorRequirement("metadata.name", "In", ("node-3",)),)),
        ),
    ),
    PodRequirements(requests=(), node_selector=((BLOCK, "b1"),)),
    PodRequirements(requests=(("cpu", 1),), pod_anti_affinity=(ANTI_HOST,), host_ports=(HostPort(80),)),
    PodRequirements(
        requests=((GPU, 1),), spread=(SpreadConstraint(1, ZONE, APP_A),), pod_affinity=(ANTI_BLOCK,)
    ),
]


@st.composite
def groups(draw: st.DrawFn) -> GroupRequest:
    kinds = draw(st.lists(st.sampled_from(REQUIREMENTS), min_size=1, max_size=2))
    count = draw(st.integers(1, 4))
    claims = draw(st.sampled_from([(), ("data",)]))
    pending = tuple(
        PodRequest(f"ns/g-{i}", kinds[i % len(kinds)], PodTraits("ns", (("app", "a"),), claims))
        for i in range(count)
    )
    return GroupRequest(
        name="g",
        pending=pending,
        min_count=draw(st.integers(1, count)),
        topology_key=draw(st.sampled_from([BLOCK, ZONE, HOST, None])),
        bound_nodes=tuple(draw(st.lists(st.sampled_from(NODE_NAMES), max_size=1))),
    )


# --- comparison ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    """Everything the engine can read from a snapshot, as plain values."""

    names: tuple[str, ...]
    nodes: tuple[NodeInfo, ...]
    resources: tuple[str, ...]
    allocatable: list[list[int]]
    used: list[list[int]]
    totals: tuple[int, ...]
    max_amount: int
    bound_pod_ids: frozenset[str]
    free: dict[str, dict[str, int]]
    domains: dict[str, tuple[object, ...]]
    eligible: list[list[bool]]
    special: tuple[object, ...]
    pods: list[tuple[object, ...]]
    claims: dict[str, ClaimInfo]


def observe(s: Snapshot) -> Observed:
    special = s.special_index()
    domains: dict[str, tuple[object, ...]] = {}
    for key in (BLOCK, ZONE, HOST, "absent"):
        g = s.domain_groups(key)
        domains[key] = (g.names, g.codes.tolist(), g.order.tolist(), g.starts.tolist(), g.ends.tolist())
        assert s.domains(key) == g.names
    return Observed(
        names=s.node_names,
        nodes=s.nodes,
        resources=s.resources,
        allocatable=s.allocatable_by_resource.tolist(),
        used=s.used_by_resource.tolist(),
        totals=s.totals,
        max_amount=s.max_amount,
        bound_pod_ids=s.bound_pod_ids,
        free={name: s.free(name) for name in s.node_names},
        domains=domains,
        eligible=[s.eligible(req).tolist() for req in REQUIREMENTS],
        special=(
            special.anti,
            {node: sorted(ports, key=repr) for node, ports in special.ports.items()},
            special.unsettled,
        ),
        pods=sorted(
            (p.node, p.namespace, sorted(p.labels.items()), p.assigned, p.terminating, p.claims)
            for p in s.pod_index().pods()
        ),
        claims=dict(s.claims),
    )


def assert_equivalent(live: Snapshot, built: Snapshot, probes: list[GroupRequest]) -> None:
    assert observe(live) == observe(built)
    for group in probes:
        assert decide(live, group) == decide(built, group)
    some = sorted(built.bound_pod_ids)[::2]
    assert live.without(some).used_by_resource.tolist() == built.without(some).used_by_resource.tolist()
    assert [live.node_index(n) for n in NODE_NAMES] == [built.node_index(n) for n in NODE_NAMES]


class Model:
    """The state the LiveSnapshot should stand for, kept the obvious way."""

    def __init__(self, nodes: list[NodeInfo], pods: list[BoundPod]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.pods = {p.id: p for p in pods}
        self.claims: dict[str, ClaimInfo] = {}

    def apply(self, live: LiveSnapshot, op: Op) -> None:
        kind, arg = op
        if kind == "upsert_node":
            assert isinstance(arg, NodeInfo)
            self.nodes[arg.name] = arg
            live.upsert_node(arg)
        elif kind == "remove_node":
            assert isinstance(arg, str)
            self.nodes.pop(arg, None)
            live.remove_node(arg)
        elif kind == "upsert_pod":
            assert isinstance(arg, BoundPod)
            self.pods[arg.id] = arg
            live.upsert_pod(arg)
        elif kind == "remove_pod":
            assert isinstance(arg, str)
            self.pods.pop(arg, None)
            live.remove_pod(arg)
        elif kind == "set_claim":
            assert isinstance(arg, tuple)
            key, info = arg
            if info is None:
                self.claims.pop(key, None)
            else:
                self.claims[key] = info
            live.set_claim(key, info)

    def build(self) -> Snapshot:
        return Snapshot.build(self.nodes.values(), self.pods.values(), self.claims)


# --- properties ---------------------------------------------------------------------------------


@st.composite
def initial_nodes(draw: st.DrawFn) -> list[NodeInfo]:
    names = draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=6))
    return [draw(node_infos(name)) for name in names]


@SETTINGS
@given(
    initial_nodes(),
    st.lists(bound_pods(), max_size=8),
    st.lists(ops(), max_size=40),
    st.lists(groups(), min_size=1, max_size=3),
)
def test_any_change_sequence_matches_a_fresh_build(
    nodes: list[NodeInfo], pods: list[BoundPod], changes: list[Op], probes: list[GroupRequest]
) -> None:
    model = Model(nodes, pods)
    live = LiveSnapshot(nodes, pods)
    handed_out: list[tuple[Snapshot, Snapshot]] = []
    for op in [*changes, ("check", None)]:
        model.apply(live, op)
        if op[0] != "check":
            continue
        snapshot, built = live.snapshot(), model.build()
        assert live.snapshot() is snapshot, "no change since: the same object"
        # Queries fill the table's caches, which the next node change then carries over.
        assert_equivalent(snapshot, built, probes)
        handed_out.append((snapshot, built))
    for snapshot, built in handed_out:
        assert_equivalent(snapshot, built, probes)


@SETTINGS
@given(initial_nodes(), st.lists(bound_pods(), max_size=8), st.lists(ops(), max_size=12), groups())
def test_snapshots_handed_out_never_change(
    nodes: list[NodeInfo], pods: list[BoundPod], changes: list[Op], probe: GroupRequest
) -> None:
    live = LiveSnapshot(nodes, pods)
    first = live.snapshot()
    before = (observe(first), decide(first, probe))
    model = Model(nodes, pods)
    for op in changes:
        model.apply(live, op)
    assert_equivalent(live.snapshot(), model.build(), [probe])
    assert (observe(first), decide(first, probe)) == before


# --- examples -----------------------------------------------------------------------------------


def gpu_node(name: str, block: str = "b0", gpus: int = 8) -> NodeInfo:
    return NodeInfo(name, {BLOCK: block, HOST: name}, {GPU: gpus, "cpu": 64, "pods": 10})


def test_pods_on_absent_nodes_count_once_their_node_is_there() -> None:
    live = LiveSnapshot([gpu_node("a")], [BoundPod("p", "b", {GPU: 8})])
    assert live.snapshot().bound_pod_ids == frozenset()
    live.upsert_node(gpu_node("b"))
    assert live.snapshot().free("b")[GPU] == 0
    assert live.snapshot().bound_pod_ids == frozenset({"p"})
    live.remove_node("b")
    assert live.snapshot().bound_pod_ids == frozenset()
    live.upsert_node(gpu_node("b", gpus=4))  # back: the pod that never went away counts again
    assert live.snapshot().free("b")[GPU] == -4


def test_a_pod_moving_or_changing_replaces_its_usage() -> None:
    live = LiveSnapshot([gpu_node("a"), gpu_node("b")], [BoundPod("p", "a", {GPU: 2})])
    live.upsert_pod(BoundPod("p", "b", {GPU: 3}))
    s = live.snapshot()
    assert (s.free("a")[GPU], s.free("b")[GPU]) == (8, 5)
    live.upsert_pod(BoundPod("p", "b", {GPU: 1, "cpu": 4}))
    live.remove_pod("unknown")
    t = live.snapshot()
    assert (t.free("b")[GPU], t.free("b")["cpu"], t.free("b")["pods"]) == (7, 60, 9)
    live.remove_pod("p")
    assert live.snapshot().used("b") == {"cpu": 0, GPU: 0, "pods": 0}
    assert (s.free("b")[GPU], t.free("b")[GPU]) == (5, 7)


def test_unchanged_parts_are_shared_not_rebuilt() -> None:
    live = LiveSnapshot([gpu_node("a", "b0"), gpu_node("b", "b1")], [])
    s = live.snapshot()
    blocks, hosts = s.domain_groups(BLOCK), s.domain_groups(HOST)
    live.upsert_pod(BoundPod("p", "a", {GPU: 1}))
    live.upsert_pod(BoundPod("p", "a", {GPU: 1}))  # same again: nothing to do
    t = live.snapshot()
    assert t is not s
    assert t.domain_groups(BLOCK) is blocks, "pod changes keep the node table"
    assert t.allocatable_by_resource is s.allocatable_by_resource
    live.upsert_node(gpu_node("a", "b2"))
    u = live.snapshot()
    assert u.domain_groups(HOST) is hosts, "a label that did not change keeps its column"
    assert u.domain_groups(BLOCK).names == ("b1", "b2")
    assert u.used_by_resource is t.used_by_resource, "node changes in place keep usage"
    live.upsert_node(gpu_node("a", "b2"))
    live.remove_node("zzz")
    assert live.snapshot() is u
    live.upsert_node(gpu_node("a", "b3"))
    live.upsert_node(gpu_node("a", "b2"))  # and back before the next pass
    assert live.snapshot() is u


def test_huge_amounts_match_build_when_the_node_count_changes_the_cap() -> None:
    nodes = [NodeInfo(f"n{i}", {}, {"memory": HUGE, "pods": 10}) for i in range(3)]
    pods = [BoundPod(f"p{i}", "n0", {"memory": HUGE}) for i in range(5)]
    live = LiveSnapshot(nodes, pods)
    model = Model(nodes, pods)
    for op in [
        ("upsert_node", NodeInfo("n3", {}, {"memory": 1, "pods": 10})),
        ("upsert_pod", BoundPod("p9", "n3", {"memory": HUGE})),
        ("remove_node", "n1"),
        ("remove_pod", "p0"),
        ("upsert_node", NodeInfo("n1", {}, {"memory": 2**40, "pods": 10})),
    ]:
        model.apply(live, op)
        assert observe(live.snapshot()) == observe(model.build())


def test_many_nodes_at_once_and_back_to_none() -> None:
    names = [f"n{i:03d}" for i in range(200)]
    live = LiveSnapshot([], [BoundPod(f"p{i}", n, {GPU: 1}) for i, n in enumerate(names)])
    model = Model([], [BoundPod(f"p{i}", n, {GPU: 1}) for i, n in enumerate(names)])
    for i, name in enumerate(names):
        model.apply(live, ("upsert_node", gpu_node(name, f"b{i % 7}")))
    assert_equivalent(live.snapshot(), model.build(), [])
    for name in names[::3]:
        model.apply(live, ("remove_node", name))
    assert_equivalent(live.snapshot(), model.build(), [])
    for name in names:
        model.apply(live, ("remove_node", name))
    empty = live.snapshot()
    assert empty.node_names == ()
    assert np.array_equal(empty.used_by_resource, model.build().used_by_resource)


def test_usage_above_saturation_stays_exact_as_pods_come_and_go() -> None:
    # One node: the cap is 2^62 - 1, so three such pods sum far above what a cell can hold.
    nodes = [NodeInfo("n", {}, {"memory": HUGE, "pods": 10})]
    pods = [BoundPod(f"p{i}", "n", {"memory": HUGE}) for i in range(3)]
    live, model = LiveSnapshot(nodes, pods), Model(nodes, pods)
    for op in [
        ("remove_pod", "p0"),
        ("remove_pod", "p1"),
        ("upsert_pod", BoundPod("p1", "n", {"memory": 5})),
        ("upsert_pod", BoundPod("p4", "n", {"memory": HUGE})),
        ("upsert_node", NodeInfo("m", {}, {"memory": 1})),
        ("remove_pod", "p2"),
    ]:
        model.apply(live, op)
        assert observe(live.snapshot()) == observe(model.build())
