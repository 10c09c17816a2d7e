"""Property tests: every placement the engine makes is one kube-scheduler binds, in any order.

Small random clusters with pods that carry anti-affinity and host ports, groups with required pod
(anti-)affinity, host ports, DoNotSchedule spread constraints and volumes (CSI attach limits with
VolumeAttachments and strict drivers, storage capacity). For every Admit, the released pods (pinned
to their nodes) must pass an independent model of kube-scheduler's filters (scheduler_reference.py)
whatever order they are bound in, both with every pod of the snapshot on its node and with only the
bound, not terminating ones (released pods of other groups may not be bound yet, terminating ones may
be gone); and, unpinned, they must be placeable in some order (the spread constraints are honoured as
the user meant them, not only as the pin lets them pass).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from scheduler_reference import (
    HOSTNAME,
    bindable_in_every_order,
    bindable_in_some_order,
    existing,
    incoming,
)

from phalanx.placement import (
    Admit,
    BoundPod,
    ClaimInfo,
    GroupRequest,
    HostPort,
    LabelSelector,
    NodeInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodRequest,
    PodRequirements,
    PodTraits,
    Reject,
    Snapshot,
    SpreadConstraint,
    decide,
)
from phalanx.placement.model import CSINodeInfo, CSIView, CSIVolume

DRIVER = "csi.example.com"
KEY = "example.com/block"
ZONE = "topology.kubernetes.io/zone"
NS = "ns"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Scenario:
    nodes: list[NodeInfo]
    pods: list[BoundPod]
    group: GroupRequest
    claims: dict[str, ClaimInfo]
    csi: CSIView


def _selector(draw: st.DrawFn) -> LabelSelector:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return LabelSelector(requirements=(NodeSelectorRequirement("app", "Exists"),))
    if kind == 1:
        return LabelSelector(requirements=(NodeSelectorRequirement("app", "NotIn", ("c",)),))
    return LabelSelector(requirements=(NodeSelectorRequirement("app", "In", (draw(st.sampled_from("ab")),)),))


def _term(draw: st.DrawFn) -> PodAffinityTerm:
    namespaces = draw(st.sampled_from([(), (), ("other",), (NS, "other")]))
    return PodAffinityTerm(
        selector=_selector(draw),
        topology_key=draw(st.sampled_from([HOSTNAME, HOSTNAME, ZONE, KEY])),
        namespaces=namespaces,
        own_namespace=not namespaces,
        all_namespaces=draw(st.integers(0, 9)) == 0,
    )


def _port(draw: st.DrawFn) -> HostPort:
    return HostPort(
        port=draw(st.sampled_from([80, 81])),
        ip=draw(st.sampled_from(["0.0.0.0", "0.0.0.0", "10.0.0.1", "10.0.0.2"])),
    )


def _spread(draw: st.DrawFn) -> SpreadConstraint:
    return SpreadConstraint(
        max_skew=draw(st.integers(1, 2)),
        topology_key=draw(st.sampled_from([HOSTNAME, ZONE, KEY])),
        selector=_selector(draw) if draw(st.integers(0, 9)) else LabelSelector(),
        match_label_keys=("idx",) if not draw(st.integers(0, 5)) else (),
        min_domains=draw(st.sampled_from([1, 1, 2, 3])),
        node_affinity_policy=draw(st.sampled_from(["Honor", "Honor", "Ignore"])),
        node_taints_policy=draw(st.sampled_from(["Ignore", "Ignore", "Honor"])),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    nodes = []
    for i in range(draw(st.integers(2, 6))):
        name = f"n{i}"
        # Phalanx pins a released pod with nodeSelector kubernetes.io/hostname=<node name>: that label is
        # a precondition of any release (kubelet sets it; see docs/design.md).
        labels = {HOSTNAME: name}
        if draw(st.integers(0, 5)):
            labels[ZONE] = draw(st.sampled_from(["za", "zb", "zc"]))
        if draw(st.integers(0, 5)):
            labels[KEY] = draw(st.sampled_from(["b0", "b1"]))
        if not draw(st.integers(0, 4)):
            labels["disk"] = "ssd"
        nodes.append(
            NodeInfo(
                name=name,
                labels=labels,
                allocatable={"cpu": draw(st.integers(0, 8)), "pods": draw(st.integers(1, 5))},
                unschedulable=not draw(st.integers(0, 12)),
            )
        )
    pods = []
    for n in nodes:
        for j in range(draw(st.integers(0, 2))):
            pods.append(
                BoundPod(
                    id=f"{NS}/e-{n.name}-{j}",
                    node=n.name,
                    requests={"cpu": draw(st.integers(0, 3))},
                    traits=PodTraits(
                        namespace=draw(st.sampled_from([NS, NS, "other"])),
                        labels=(("app", draw(st.sampled_from("abc"))),),
                        claims=draw(st.sampled_from([(), (), (), ("data",), ("vol-a",), ("vol-b",)])),
                    ),
                    anti_affinity=(_term(draw),) if not draw(st.integers(0, 4)) else (),
                    host_ports=(_port(draw),) if not draw(st.integers(0, 4)) else (),
                    assigned=bool(draw(st.integers(0, 4))),
                    terminating=not draw(st.integers(0, 6)),
                )
            )

    def volume(handle: str) -> CSIVolume:
        return CSIVolume(DRIVER, f"{DRIVER}/{handle}", migrated=not draw(st.integers(0, 5)))

    csi_nodes = {}
    for n in nodes:
        if draw(st.integers(0, 3)):
            limit = draw(st.sampled_from([None, 0, 1, 1, 2, 3]))
            attached = draw(st.sampled_from([(), (), ("h-a",), ("h-old",)]))
            csi_nodes[n.name] = CSINodeInfo(
                drivers=frozenset({DRIVER}) if draw(st.integers(0, 4)) else frozenset(),
                limits=((DRIVER, limit),) if limit is not None else (),
                attached=tuple((f"{DRIVER}/{h}", DRIVER) for h in attached),
            )
    csi = CSIView(csi_nodes, frozenset({DRIVER}) if not draw(st.integers(0, 4)) else frozenset())
    zone_a = NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(ZONE, "In", ("za",)),))
    claims = {
        f"{NS}/data": ClaimInfo(
            read_write_once_pod=bool(draw(st.integers(0, 1))),
            csi=volume("h-data") if draw(st.integers(0, 1)) else None,
        ),
        f"{NS}/vol-a": ClaimInfo(csi=volume("h-a")),
        f"{NS}/vol-b": ClaimInfo(csi=volume("h-b")),
        f"{NS}/also-a": ClaimInfo(csi=volume("h-a")),
        f"{NS}/cap": ClaimInfo(
            capacity_terms=draw(st.sampled_from([None, (), (zone_a,)])), csi=volume("claim:ns/cap")
        ),
        f"{NS}/pinned": ClaimInfo(
            node_terms=(
                (
                    NodeSelectorTerm(
                        match_expressions=(NodeSelectorRequirement(HOSTNAME, "In", (nodes[0].name, "n3")),)
                    ),
                ),
            )
        ),
        f"{NS}/zonal": ClaimInfo(zones=((ZONE, ("za", "zb")),)),
        f"{NS}/ssd": ClaimInfo(
            node_terms=((NodeSelectorTerm(match_expressions=(NodeSelectorRequirement("disk", "Exists"),)),),)
        ),
    }

    def requirements() -> PodRequirements:
        return PodRequirements(
            requests=(("cpu", draw(st.integers(0, 3))),),
            node_selector=(("disk", "ssd"),) if not draw(st.integers(0, 9)) else (),
            pod_anti_affinity=tuple(_term(draw) for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2])))),
            pod_affinity=(_term(draw),) if not draw(st.integers(0, 3)) else (),
            host_ports=(_port(draw),) if not draw(st.integers(0, 3)) else (),
            spread=tuple(_spread(draw) for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2])))),
        )

    kinds = [requirements() for _ in range(draw(st.integers(1, 2)))]
    count = draw(st.integers(1, 4))
    pending = tuple(
        PodRequest(
            f"{NS}/p{i}",
            kinds[draw(st.integers(0, len(kinds) - 1))],
            PodTraits(
                namespace=NS,
                labels=(("app", draw(st.sampled_from("ab"))), ("idx", str(i % 2))),
                claims=tuple(
                    draw(
                        st.lists(
                            st.sampled_from(
                                [
                                    "data",
                                    "pinned",
                                    "zonal",
                                    "ssd",
                                    "vol-a",
                                    "vol-b",
                                    "also-a",
                                    "cap",
                                    f"own-{i}",
                                ]
                            ),
                            max_size=2,
                            unique=True,
                        )
                    )
                ),
            ),
        )
        for i in range(count)
    )
    group = GroupRequest(
        name="g",
        pending=pending,
        min_count=draw(st.integers(1, count)),
        topology_key=draw(st.sampled_from([KEY, None, None])),
    )
    for i in range(count):  # each pod's own new volume (an ephemeral claim)
        claims[f"{NS}/own-{i}"] = ClaimInfo(csi=volume(f"claim:ns/own-{i}"))
    return Scenario(nodes, pods, group, claims, csi)


@SETTINGS
@given(scenarios(), st.integers(0, 2**32))
def test_every_admitted_placement_is_bindable_in_any_order(sc: Scenario, seed: int) -> None:
    snapshot = Snapshot.build(sc.nodes, sc.pods, sc.claims, sc.csi)
    decision = decide(snapshot, sc.group)
    event(type(decision).__name__ if isinstance(decision, Admit) else decision.reason)
    if isinstance(decision, Reject):
        return
    assert len(decision.assignments) >= max(1, sc.group.min_count)
    by_id = {p.id: p for p in sc.group.pending}
    if sc.group.topology_key is not None:
        labels = {n.name: n.labels for n in sc.nodes}
        domains = {labels[node].get(sc.group.topology_key) for _, node in decision.assignments}
        assert domains == {decision.domain}
    released = [incoming(by_id[pod], node) for pod, node in decision.assignments]
    everything = [existing(p) for p in sc.pods]
    settled = [existing(p) for p in sc.pods if p.assigned and not p.terminating]
    for world in (everything, settled):
        failing = bindable_in_every_order(sc.nodes, world, released, sc.claims, sc.csi)
        assert failing is None, f"kube-scheduler refuses a released pod when binding in the order {failing}"
    unpinned = [incoming(by_id[pod], node, pinned=False) for pod, node in decision.assignments]
    assert bindable_in_some_order(sc.nodes, everything, unpinned, sc.claims, sc.csi), (
        "not a placement the user meant"
    )

    # Deterministic: the same snapshot in another order gives the same decision.
    rng = random.Random(seed)
    nodes, pods = list(sc.nodes), list(sc.pods)
    rng.shuffle(nodes)
    rng.shuffle(pods)
    assert decide(Snapshot.build(nodes, pods, sc.claims, sc.csi), sc.group) == decision


@SETTINGS
@given(scenarios())
def test_assumed_groups_are_seen_by_the_next_decision(sc: Scenario) -> None:
    """After one group is admitted and assumed, a copy of it placed next must respect it too."""
    snapshot = Snapshot.build(sc.nodes, sc.pods, sc.claims, sc.csi)
    first = decide(snapshot, sc.group)
    if not isinstance(first, Admit):
        return
    from phalanx.placement import admitted_usage

    after = snapshot.assume(admitted_usage(sc.group, first))
    twin = GroupRequest(
        name="twin",
        pending=tuple(
            PodRequest(p.id.replace("/p", "/q"), p.requirements, p.traits) for p in sc.group.pending
        ),
        min_count=sc.group.min_count,
        topology_key=sc.group.topology_key,
    )
    second = decide(after, twin)
    if not isinstance(second, Admit):
        return
    by_id = {p.id: p for p in (*sc.group.pending, *twin.pending)}
    first_pods = [incoming(by_id[pod], node) for pod, node in first.assignments]
    released = [incoming(by_id[pod], node) for pod, node in second.assignments]
    world = [existing(p) for p in sc.pods] + first_pods
    failing = bindable_in_every_order(sc.nodes, world, released, sc.claims, sc.csi)
    assert failing is None, f"the second group breaks on the first one's pods in the order {failing}"
    # The first group's pods, bound in any order after the second's, are not refused either.
    failing = bindable_in_every_order(
        sc.nodes, [existing(p) for p in sc.pods] + released, first_pods, sc.claims, sc.csi
    )
    assert failing is None, f"the first group breaks on the second one's pods in the order {failing}"


@SETTINGS
@given(scenarios())
def test_the_domain_search_stops_only_when_no_domain_can_do_better(sc: Scenario) -> None:
    """The engine's branch and bound picks what packing every domain would: most pods, best fit, name."""
    from phalanx.placement import engine
    from phalanx.placement.packing import DecisionContext

    snapshot = Snapshot.build(sc.nodes, sc.pods, sc.claims, sc.csi)
    decision = decide(snapshot, sc.group)
    if isinstance(decision, Reject) and decision.reason != "Unschedulable":
        return
    ctx = DecisionContext(snapshot, sc.group.pending)
    cons = engine.GroupConstraints.of(snapshot, sc.group.pending, [s.requirements for s in ctx.signatures])
    if not isinstance(cons, engine.GroupConstraints):
        return
    pl = engine._placements(snapshot, sc.group)
    assert not isinstance(pl, Reject)
    sig_of = [ctx.signatures[0]] * len(sc.group.pending)
    for sig in ctx.signatures:
        for position in sig.positions:
            sig_of[position] = sig
    order = sorted(range(len(sc.group.pending)), key=lambda i: (-ctx.size(sig_of[i]), i))
    domain_free = pl.row_sums(ctx.score_free)
    outcomes = [
        engine._pack_constrained(ctx, cons, pl, d, order, sig_of, domain_free) for d in range(len(pl.names))
    ]
    need = max(1, sc.group.min_count) - len(sc.group.bound_nodes)
    feasible = [
        (-o.placed, ctx.scorer.exact(o.leftover), d) for d, o in enumerate(outcomes) if o.placed >= need
    ]
    if not feasible:
        assert isinstance(decision, Reject)
        return
    _, _, d = min(feasible)
    assert isinstance(decision, Admit)
    assert decision.domain == pl.names[d]
    assert len(decision.assignments) == outcomes[d].placed
