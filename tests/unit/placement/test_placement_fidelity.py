"""The filters that depend on other pods and on volumes, case by case (issue 7: released means bindable)."""

from __future__ import annotations

from typing import Any

import pytest
from placement_testkit import GPU, NETWORK_BLOCK, article_nodes, worker

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
    PodTraits,
    Reject,
    Snapshot,
    admitted_usage,
    decide,
    pod_requirements,
    pod_traits,
)
from phalanx.placement.constraints import GroupConstraints

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
TRAIN = {"app": "train"}
APP_TRAIN = LabelSelector(requirements=(NodeSelectorRequirement("app", "In", ("train",)),))


def nodes() -> list[NodeInfo]:
    """The article's 8 nodes, with their hostname labels (nb-a: workers 1-4, nb-b: 5-8)."""
    return [NodeInfo(n.name, {**n.labels, HOST: n.name}, n.allocatable) for n in article_nodes()]


def spec(gpus: int = 4, **extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "w", "resources": {"limits": {GPU: str(gpus)}}}], **extra}


def gang(
    pod_spec: dict[str, Any],
    count: int = 4,
    key: str | None = NETWORK_BLOCK,
    labels: dict[str, str] | None = None,
    name: str = "train",
    min_count: int | None = None,
) -> GroupRequest:
    req = pod_requirements(pod_spec)
    pods = tuple(
        PodRequest(
            f"ns/{name}-{i}",
            req,
            pod_traits(
                {
                    "name": f"{name}-{i}",
                    "namespace": "ns",
                    "labels": {**(labels if labels is not None else TRAIN), "index": str(i)},
                },
                pod_spec,
            ),
        )
        for i in range(count)
    )
    return GroupRequest(name, pods, count if min_count is None else min_count, key)


def admitted(decision: object) -> Admit:
    assert isinstance(decision, Admit), decision
    return decision


def rejected(decision: object) -> Reject:
    assert isinstance(decision, Reject), decision
    return decision


def placed(decision: Admit) -> list[str]:
    return [node for _, node in decision.assignments]


ONE_PER_NODE = {
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": TRAIN}, "topologyKey": HOST}
            ]
        }
    }
}
HOST_PORT = {
    "containers": [
        {
            "name": "w",
            "resources": {"limits": {GPU: "4"}},
            "ports": [{"containerPort": 29500, "hostPort": 29500}],
        }
    ]
}
SPREAD = {
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": HOST,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": TRAIN},
        }
    ]
}


# --- the cases ---------------------------------------------------------------------------


def test_without_constraints_four_half_node_pods_pack_two_per_node() -> None:
    d = admitted(decide(Snapshot.build(nodes(), []), gang(spec())))
    assert sorted(placed(d)) == [worker(1), worker(1), worker(2), worker(2)]


@pytest.mark.parametrize(
    "pod_spec",
    [spec(**ONE_PER_NODE), HOST_PORT, spec(**SPREAD)],
    ids=["anti-affinity", "host-port", "spread"],
)
def test_one_per_node_constraints_put_the_gang_on_four_nodes_of_one_block(pod_spec: dict[str, Any]) -> None:
    d = admitted(decide(Snapshot.build(nodes(), []), gang(pod_spec)))
    assert d.domain == "nb-a"
    assert placed(d) == [worker(i) for i in (1, 2, 3, 4)]


def test_a_claim_bound_to_a_node_keeps_the_gang_there_or_makes_it_wait() -> None:
    claims = {
        "ns/data": ClaimInfo(
            node_terms=(
                (NodeSelectorTerm(match_expressions=(NodeSelectorRequirement(HOST, "In", (worker(3),)),)),),
            )
        )
    }
    volume = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
    s = Snapshot.build(nodes(), [], claims)
    d = admitted(decide(s, gang(spec(**volume), count=2)))
    assert placed(d) == [worker(3), worker(3)]
    r = rejected(decide(s, gang(spec(**volume), count=4)))
    assert "minCount (4) cannot be satisfied: 2 scheduled" in r.message
    assert "volumes" in r.message


# --- inter-pod affinity ------------------------------------------------------------------------


def test_existing_pods_anti_affinity_refuses_matching_pods() -> None:
    """A running pod that wants no app=train pod in its network block keeps the gang out of it."""
    loner = BoundPod(
        "other/loner",
        worker(1),
        {},
        traits=PodTraits("other", (("app", "db"),)),
        anti_affinity=(PodAffinityTerm(APP_TRAIN, NETWORK_BLOCK, all_namespaces=True, own_namespace=False),),
    )
    d = admitted(decide(Snapshot.build(nodes(), [loner]), gang(spec())))
    assert d.domain == "nb-b"
    # Not in its namespace and no namespaces listed: the term does not look at ns.
    own_only = BoundPod(
        "other/loner",
        worker(1),
        {},
        traits=loner.traits,
        anti_affinity=(PodAffinityTerm(APP_TRAIN, NETWORK_BLOCK),),
    )
    assert admitted(decide(Snapshot.build(nodes(), [own_only]), gang(spec()))).domain == "nb-a"


def test_anti_affinity_against_existing_pods_of_any_state() -> None:
    """Released (not yet bound) and terminating pods count against anti-affinity: they may be there."""
    for assigned, terminating in ((True, False), (False, False), (True, True)):
        pods = [
            BoundPod(
                f"ns/old-{i}",
                worker(i),
                {},
                traits=PodTraits("ns", (("app", "train"),)),
                assigned=assigned,
                terminating=terminating,
            )
            for i in (1, 2)
        ]
        d = admitted(decide(Snapshot.build(nodes(), pods), gang(spec(**ONE_PER_NODE), count=2, key=None)))
        assert placed(d) == [worker(3), worker(4)]


def test_namespace_selector_of_an_existing_pod_counts_as_matching() -> None:
    """Phalanx does not read namespace labels: an unknown namespaceSelector is assumed to match."""
    term = PodAffinityTerm(
        APP_TRAIN,
        HOST,
        own_namespace=False,
        namespace_selector=LabelSelector(requirements=(NodeSelectorRequirement("team", "In", ("x",)),)),
    )
    guard = BoundPod("other/guard", worker(1), {}, traits=PodTraits("other"), anti_affinity=(term,))
    d = admitted(decide(Snapshot.build(nodes(), [guard]), gang(spec(), count=2, key=None)))
    assert worker(1) not in placed(d)


AFFINITY_TO_DB_IN_BLOCK = {
    "affinity": {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": NETWORK_BLOCK}
            ]
        }
    }
}


def test_affinity_follows_a_bound_pod_but_not_one_that_is_only_released() -> None:
    db = BoundPod("ns/db", worker(6), {}, traits=PodTraits("ns", (("app", "db"),)))
    d = admitted(decide(Snapshot.build(nodes(), [db]), gang(spec(**AFFINITY_TO_DB_IN_BLOCK), key=None)))
    assert set(placed(d)) <= {worker(i) for i in (5, 6, 7, 8)}
    # Released by Phalanx, not bound yet: kube-scheduler may not see it when the gang binds.
    released = BoundPod("ns/db", worker(6), {}, traits=PodTraits("ns", (("app", "db"),)), assigned=False)
    r = rejected(decide(Snapshot.build(nodes(), [released]), gang(spec(**AFFINITY_TO_DB_IN_BLOCK), key=None)))
    assert "pod affinity" in r.message


def test_self_affinity_keeps_the_whole_gang_in_one_domain() -> None:
    """No matching pod anywhere: the first pod goes anywhere, the others join it (whichever is first)."""
    self_affine = {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": TRAIN},
                        "topologyKey": "oci.oraclecloud.com/rdma.local_block_id",
                    }
                ]
            }
        }
    }
    d = admitted(decide(Snapshot.build(nodes(), []), gang(spec(8, **self_affine), count=2, key=None)))
    labels = {n.name: n.labels for n in nodes()}
    assert len({labels[n]["oci.oraclecloud.com/rdma.local_block_id"] for n in placed(d)}) == 1
    # Three full-node pods cannot share a local block of two nodes.
    r = rejected(decide(Snapshot.build(nodes(), []), gang(spec(8, **self_affine), count=3, key=None)))
    assert "pod affinity" in r.message


def test_affinity_with_a_namespace_selector_is_refused_naming_the_field() -> None:
    pod_spec = spec(
        affinity={
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": TRAIN},
                        "topologyKey": HOST,
                        "namespaceSelector": {"matchLabels": {"team": "ml"}},
                    }
                ]
            }
        }
    )
    r = rejected(decide(Snapshot.build(nodes(), []), gang(pod_spec)))
    assert r.reason == "Unsupported"
    assert "podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector" in r.message


# --- host ports ------------------------------------------------------------------------------


def test_host_ports_in_use_on_a_node_keep_the_pods_off_it() -> None:
    used = [
        BoundPod(f"other/p{i}", worker(i), {}, host_ports=(HostPort(29500, "TCP", "10.0.0.1"),))
        for i in (1, 2, 3)
    ]
    d = admitted(decide(Snapshot.build(nodes(), used), gang(HOST_PORT, count=2, key=None)))
    assert placed(d) == [worker(4), worker(5)]
    # Another protocol or port does not conflict.
    udp = [BoundPod(f"other/p{i}", worker(i), {}, host_ports=(HostPort(29500, "UDP"),)) for i in (1, 2)]
    assert placed(admitted(decide(Snapshot.build(nodes(), udp), gang(HOST_PORT, count=2, key=None)))) == [
        worker(1),
        worker(2),
    ]


# --- topology spread -----------------------------------------------------------------------------


def test_spread_counts_existing_matching_pods_of_the_namespace() -> None:
    """Two app=train pods on worker1 and worker2: with maxSkew 1 over 8 nodes, new ones go elsewhere."""
    old = [
        BoundPod(f"ns/old-{i}", worker(i), {}, traits=PodTraits("ns", (("app", "train"),))) for i in (1, 2)
    ]
    d = admitted(decide(Snapshot.build(nodes(), old), gang(spec(**SPREAD), count=2)))
    assert placed(d) == [worker(3), worker(4)]
    # Pods of another namespace do not count.
    foreign = [
        BoundPod(f"x/old-{i}", worker(i), {}, traits=PodTraits("x", (("app", "train"),))) for i in (1, 2)
    ]
    assert placed(admitted(decide(Snapshot.build(nodes(), foreign), gang(spec(**SPREAD), count=2)))) == [
        worker(1),
        worker(2),
    ]


def test_spread_lets_a_second_round_fill_once_every_node_has_one() -> None:
    d = admitted(decide(Snapshot.build(nodes(), []), gang(spec(**SPREAD), count=12, key=None)))
    counts = {n: placed(d).count(n) for n in set(placed(d))}
    assert sorted(counts.values()) == [1, 1, 1, 1, 2, 2, 2, 2]


def test_spread_with_min_domains_caps_pods_per_node_even_when_pinned() -> None:
    """minDomains 3 on hostname: kube-scheduler, seeing only the pinned node, takes the global minimum as 0,
    so at most maxSkew matching pods may end on a node."""
    min_domains = spec(
        2,
        topologySpreadConstraints=[
            {
                "maxSkew": 1,
                "topologyKey": HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": TRAIN},
                "minDomains": 3,
            }
        ],
    )
    d = admitted(decide(Snapshot.build(nodes(), []), gang(min_domains, count=4, key=None)))
    assert len(set(placed(d))) == 4


def test_schedule_anyway_is_only_a_score() -> None:
    anyway = spec(
        topologySpreadConstraints=[
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}}
        ]
    )
    assert not pod_requirements(anyway).spread
    d = admitted(decide(Snapshot.build(nodes(), []), gang(anyway)))
    assert sorted(placed(d)) == [worker(1), worker(1), worker(2), worker(2)]


# --- volumes -------------------------------------------------------------------------------------

VOLUME = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        ({}, 'persistentvolumeclaim "data" not found'),
        (
            {"ns/data": ClaimInfo(waiting="pod has unbound immediate PersistentVolumeClaims")},
            "unbound immediate",
        ),
    ],
)
def test_a_gang_waits_while_its_claims_cannot_be_used(claims: dict[str, ClaimInfo], expected: str) -> None:
    r = rejected(decide(Snapshot.build(nodes(), [], claims), gang(spec(**VOLUME))))
    assert r.reason == "Unschedulable"
    assert expected in r.message


def test_an_unsupported_claim_is_reported_naming_it() -> None:
    claims = {
        "ns/data": ClaimInfo(unsupported='persistentvolumeclaim "data": static binding is not modelled')
    }
    r = rejected(decide(Snapshot.build(nodes(), [], claims), gang(spec(**VOLUME))))
    assert r.reason == "Unsupported"
    assert "static binding" in r.message


def test_zonal_volume_and_selected_node() -> None:
    zoned = [
        NodeInfo(n.name, {**n.labels, ZONE: "z1" if i < 4 else "z2"}, n.allocatable)
        for i, n in enumerate(nodes())
    ]
    claims = {"ns/data": ClaimInfo(zones=((ZONE, ("z2",)),))}
    d = admitted(decide(Snapshot.build(zoned, [], claims), gang(spec(**VOLUME), count=2, key=None)))
    assert set(placed(d)) <= {worker(i) for i in (5, 6, 7, 8)}
    picked = {"ns/data": ClaimInfo(selected_node=worker(7))}
    d = admitted(decide(Snapshot.build(nodes(), [], picked), gang(spec(**VOLUME), count=2, key=None)))
    assert placed(d) == [worker(7), worker(7)]


def test_read_write_once_pod_claims_are_used_by_one_pod_only() -> None:
    claims = {"ns/data": ClaimInfo(read_write_once_pod=True)}
    r = rejected(decide(Snapshot.build(nodes(), [], claims), gang(spec(**VOLUME), count=2, key=None)))
    assert "ReadWriteOncePod" in r.message
    d = admitted(
        decide(Snapshot.build(nodes(), [], claims), gang(spec(**VOLUME), count=2, key=None, min_count=1))
    )
    assert len(d.assignments) == 1
    user = BoundPod("ns/user", worker(8), {}, traits=PodTraits("ns", claims=("data",)))
    r = rejected(decide(Snapshot.build(nodes(), [user], claims), gang(spec(**VOLUME), count=1, key=None)))
    assert "already in-use" in r.message


def test_ephemeral_volumes_are_claims_named_after_the_pod() -> None:
    pod_spec = spec(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    traits = pod_traits({"name": "train-0", "namespace": "ns"}, pod_spec)
    assert traits.claims == ("train-0-scratch",)
    r = rejected(decide(Snapshot.build(nodes(), []), gang(pod_spec, count=1)))
    assert 'persistentvolumeclaim "train-0-scratch" not found' in r.message


# --- the rest ------------------------------------------------------------------------------------


def test_node_declared_features_are_a_static_filter() -> None:
    featured = [
        NodeInfo(
            n.name,
            n.labels,
            n.allocatable,
            declared_features=frozenset({"RestartAllContainersOnContainerExits"}),
        )
        if n.name == worker(8)
        else n
        for n in nodes()
    ]
    pod_spec = {
        "containers": [
            {
                "name": "w",
                "resources": {"limits": {GPU: "8"}},
                "restartPolicyRules": [
                    {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}
                ],
            }
        ]
    }
    d = admitted(decide(Snapshot.build(featured, []), gang(pod_spec, count=1, key=None)))
    assert placed(d) == [worker(8)]


def test_resource_claims_are_refused_naming_the_field() -> None:
    r = rejected(decide(Snapshot.build(nodes(), []), gang(spec(resourceClaims=[{"name": "gpu"}]))))
    assert r.reason == "Unsupported"
    assert "spec.resourceClaims" in r.message


def test_groups_admitted_in_one_pass_see_each_other() -> None:
    s = Snapshot.build(nodes(), [])
    first = gang(spec(**ONE_PER_NODE), count=4, name="a")
    d1 = admitted(decide(s, first))
    s2 = s.assume(admitted_usage(first, d1))
    second = gang(spec(**ONE_PER_NODE), count=4, name="b")
    d2 = admitted(decide(s2, second))
    assert d1.domain == "nb-a" and d2.domain == "nb-b"
    s3 = s2.assume(admitted_usage(second, d2))
    assert rejected(decide(s3, gang(spec(**ONE_PER_NODE), count=1, name="c")))


def test_a_released_pod_whose_affinity_others_could_break_makes_matching_groups_wait() -> None:
    affine = BoundPod(
        "ns/first",
        worker(1),
        {},
        traits=PodTraits("ns", (("app", "train"),)),
        assigned=False,
        affinity=(PodAffinityTerm(APP_TRAIN, HOST),),
    )
    r = rejected(decide(Snapshot.build(nodes(), [affine]), gang(spec(), count=1, key=None)))
    assert "waiting for pod ns/first to be bound first" in r.message
    # Once bound it no longer matters.
    bound = BoundPod("ns/first", worker(1), {}, traits=affine.traits, affinity=affine.affinity)
    assert admitted(decide(Snapshot.build(nodes(), [bound]), gang(spec(), count=1, key=None)))


def test_plain_groups_stay_on_the_fast_path() -> None:
    s = Snapshot.build(
        nodes(), [BoundPod("ns/x", worker(1), {GPU: 1}, traits=PodTraits("ns", (("app", "x"),)))]
    )
    group = gang(spec())
    assert GroupConstraints.of(s, group.pending, [group.pending[0].requirements]) is None
    guard = BoundPod(
        "ns/g", worker(2), {}, anti_affinity=(PodAffinityTerm(APP_TRAIN, HOST),), traits=PodTraits("ns")
    )
    s = Snapshot.build(nodes(), [guard])
    assert GroupConstraints.of(s, group.pending, [group.pending[0].requirements]) is not None
    other = gang(spec(), labels={"app": "other"})
    assert GroupConstraints.of(s, other.pending, [other.pending[0].requirements]) is None
