"""The soaks' own reading of gangs (tests/integration/gangs.py) and their fit check (invariants.py), on
objects shaped as the kinds' controllers make them: the checker must count a gang's pods from the kind's spec
and judge "it would fit" exactly, or a crash soak passes for the wrong reason or fails for none."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from tests.integration.gangs import Objects, read_gangs
from tests.integration.invariants import Node, World, packs

NB = "oci.oraclecloud.com/rdma.network_block_id"
LB = "oci.oraclecloud.com/rdma.local_block_id"
NS = "soak"


def pod(
    name: str, labels: dict[str, str], node: str = "", gpus: int = 8, gated: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": name, "labels": labels},
        "spec": {
            "nodeName": node or None,
            "schedulingGates": [{"name": "phalanx.dev/admission"}] if gated else [],
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def meta(name: str, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    labels = {"phalanx.dev/managed": "true"}
    return {"name": name, "namespace": NS, "labels": labels, "annotations": annotations or {}, **extra}


def jobset(name: str, *rjobs: tuple[str, int, int, int | None], **notes: str) -> dict[str, Any]:
    """`rjobs`: (name, replicas, parallelism, completions)."""
    entries = [
        {
            "name": n,
            "replicas": r,
            "template": {"spec": {"parallelism": p} | ({"completions": c} if c else {})},
        }
        for n, r, p, c in rjobs
    ]
    return {"metadata": meta(name, notes), "spec": {"replicatedJobs": entries}}


def in_order(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return body


def objects(pods: list[dict[str, Any]], **owners: list[dict[str, Any]]) -> Objects:
    kinds = {"Job": [], "JobSet": [], "TrainJob": [], "LeaderWorkerSet": []} | owners
    runtime = {"metadata": {"name": "torch"}, "spec": {"mlPolicy": {"numNodes": 3}}}
    return Objects(pods, kinds, [], {"torch": runtime})


JS = "jobset.sigs.k8s.io/jobset-name"
LWS = "leaderworkerset.sigs.k8s.io/name"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"

# (case, objects, {gang: (size, pods made before its decision, live pods, parts' sizes)}, problems)
READS = [
    (
        "a JobSet: replicas x min(parallelism, completions), parallelism 1 when unset",
        objects(
            [pod(f"t-{i}", {JS: "t"}) for i in range(3)],
            JobSet=[jobset("t", ("a", 2, 2, None), ("b", 1, 3, 1), ("c", 2, 1, 5))],
        ),
        {"t": (2 * 2 + 1 * 1 + 2 * 1, 7, 3, [])},
        [],
    ),
    (
        "a JobSet with a slice key: one part per child Job, its pods by job-name",
        objects(
            [pod("s-0", {JS: "s", "job-name": "s-w-0"}), pod("s-1", {JS: "s", "job-name": "s-w-1"})],
            JobSet=[jobset("s", ("w", 2, 2, 2), **{"phalanx.dev/slice-topology-key": LB})],
        ),
        {"s": (4, 4, 2, [2, 2])},
        [],
    ),
    (
        "an LWS: one gang per group index, of leaderWorkerTemplate.size pods each",
        objects(
            [pod(f"l-{g}-{w}", {LWS: "l", GROUP: str(g)}) for g, w in ((0, 0), (0, 1), (0, 2), (1, 0))],
            LeaderWorkerSet=[
                {"metadata": meta("l"), "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3}}}
            ],
        ),
        {"l/0": (3, 3, 3, []), "l/1": (3, 3, 1, [])},
        [],
    ),
    (
        "a TrainJob: its JobSet's count, which must be its numNodes (here its runtime's: 3); the JobSet is "
        "no gang of its own, and a child Job of a JobSet none either",
        objects(
            [pod(f"tj-{i}", {JS: "tj"}) for i in range(2)],
            TrainJob=[{"metadata": meta("tj"), "spec": {"runtimeRef": {"name": "torch"}}}],
            JobSet=[
                jobset("tj", ("node", 1, 2, 2))
                | {"metadata": meta("tj", ownerReferences=[{"kind": "TrainJob", "name": "tj"}])}
            ],
            Job=[
                {
                    "metadata": meta("tj-node-0", ownerReferences=[{"kind": "JobSet", "name": "tj"}]),
                    "spec": {"parallelism": 2},
                }
            ],
        ),
        {"tj": (2, 2, 2, [])},
        ["tj: its JobSet runs 2 pods at once, its numNodes is 3"],
    ),
    (
        "a JobSet started InOrder waits with its first replicated Job's pods only",
        objects(
            [pod("o-0", {JS: "o"})],
            JobSet=[in_order(jobset("o", ("driver", 1, 1, 1), ("workers", 1, 3, 3)))],
        ),
        {"o": (1 + 3, 1, 1, [])},
        [],
    ),
    (
        "an LWS started LeaderReady waits with its leader only; its subgroups are parts by worker index",
        objects(
            [pod("r-0", {LWS: "r", GROUP: "0", "leaderworkerset.sigs.k8s.io/worker-index": "0"})],
            LeaderWorkerSet=[
                {
                    "metadata": meta("r", {"phalanx.dev/slice-topology-key": LB}),
                    "spec": {
                        "replicas": 1,
                        "startupPolicy": "LeaderReady",
                        "leaderWorkerTemplate": {"size": 4, "subGroupPolicy": {"subGroupSize": 2}},
                    },
                }
            ],
        ),
        {"r/0": (4, 1, 1, [2, 2])},
        [],
    ),
]


@pytest.mark.parametrize(("case", "objs", "expected", "problems"), READS, ids=[r[0] for r in READS])
def test_gangs_are_counted_from_their_kinds_spec(
    case: str, objs: Objects, expected: dict[str, tuple[int, int, int, list[int]]], problems: list[str]
) -> None:
    gangs = read_gangs(objs, NS)
    found = {n: (g.size, g.made_first, len(g.live), [p.size for p in g.parts]) for n, g in gangs.items()}
    assert found == expected, case
    assert [p for g in gangs.values() for p in g.problems] == problems


def seed_nodes() -> dict[str, Node]:
    """The seed cluster: 8 nodes of 8 GPUs, network blocks a and b of 4, local blocks of 2."""
    nodes = {}
    for i in range(8):
        labels = {NB: "nb-a" if i < 4 else "nb-b", LB: f"lb-{i // 2}"}
        nodes[f"n{i}"] = Node(f"n{i}", labels, {"nvidia.com/gpu": 8, "pods": 110}, True)
    return nodes


def busy(*nodes: str) -> list[dict[str, Any]]:
    return [pod(f"filler-{n}", {}, node=n, gated=False) for n in nodes]


# (case, the gang's JobSet, busy nodes, fits)
FITS = [
    (
        "four 8-GPU pods in one network block, a free block",
        jobset("f", ("w", 2, 2, 2), **{"phalanx.dev/topology-key": NB}),
        ["n0"],
        True,
    ),
    (
        "... both blocks short of one node",
        jobset("f", ("w", 2, 2, 2), **{"phalanx.dev/topology-key": NB}),
        ["n0", "n4"],
        False,
    ),
    (
        "two child Jobs of 2, each in one local block of one network block: nb-b's two free blocks",
        jobset("f", ("w", 2, 2, 2), **{"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB}),
        ["n0", "n2"],
        True,
    ),
    (
        "... three nodes free in nb-a and in nb-b, but in no block two local blocks whole",
        jobset("f", ("w", 2, 2, 2), **{"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB}),
        ["n0", "n4"],
        False,
    ),
    (
        "child Jobs of 2 and 1 and 1 pack into two local blocks (two share one)",
        jobset(
            "f",
            ("a", 1, 2, 2),
            ("b", 2, 1, 1),
            **{"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB},
        ),
        ["n0", "n1", "n2", "n3"],
        True,
    ),
]


@pytest.mark.parametrize(("case", "body", "full", "fits"), FITS, ids=[r[0] for r in FITS])
def test_a_gang_fits_when_its_pods_and_parts_find_room_in_one_domain(
    case: str, body: dict[str, Any], full: list[str], fits: bool
) -> None:
    name = body["metadata"]["name"]
    children = [(e["name"], e["replicas"]) for e in body["spec"]["replicatedJobs"]]
    pods = [
        pod(f"{name}-{rj}-{i}-{k}", {JS: name, "job-name": f"{name}-{rj}-{i}"})
        for rj, replicas in children
        for i in range(replicas)
        for k in range(
            next(e for e in body["spec"]["replicatedJobs"] if e["name"] == rj)["template"]["spec"][
                "parallelism"
            ]
        )
    ]
    world_pods = pods + busy(*full)
    gangs = read_gangs(objects(world_pods, JobSet=[body]), NS)
    world = World(seed_nodes(), world_pods, gangs)
    assert world.fits(gangs[name]) is fits, case
    assert world.fits_empty(gangs[name])


def test_packing_puts_each_item_whole_in_one_bin() -> None:
    assert packs([2, 2], [2, 2]) and packs([2, 1, 1], [2, 2]) and packs([], [1])
    assert not packs([3], [2, 2]) and not packs([2, 2, 1], [2, 2]) and not packs([2, 2], [3, 1])


# ---------------------------------------------------------------------- the preemption soak's checks
def prioritized(pods: list[dict[str, Any]], priority: int) -> list[dict[str, Any]]:
    for p in pods:
        p["spec"]["priority"] = priority
    return pods


def high_world(low_on: list[str], high_on: list[str]) -> tuple[World, str]:
    """A high JobSet `h` of four 8-GPU pods in one network block, waiting; low pods (priority 10) on
    `low_on`, pods of its own priority (1000) on `high_on`."""
    body = jobset("h", ("w", 1, 4, 4), **{"phalanx.dev/topology-key": NB})
    pods = prioritized([pod(f"h-w-0-{k}", {JS: "h", "job-name": "h-w-0"}) for k in range(4)], 1000)
    others = prioritized(busy(*low_on), 10) + prioritized(
        [pod(f"peer-{n}", {}, node=n, gated=False) for n in high_on], 1000
    )
    world_pods = pods + others
    return World(seed_nodes(), world_pods, read_gangs(objects(world_pods, JobSet=[body]), NS)), "h"


def test_a_waiting_gang_that_fits_once_the_lower_priority_pods_are_gone_is_not_settled() -> None:
    """Both blocks full of low pods: it must preempt. A peer of its priority in each block: it waits."""
    world, name = high_world(["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"], [])
    gang = world.gangs[name]
    assert gang.priority == 1000 and gang.waiting and not world.fits(gang)
    assert world.fits_by_preempting(gang)
    assert world.unsettled(preemption=True) == ["h: waits although it fits once lower-priority pods are gone"]
    assert world.unsettled() == []  # the crash soaks, one priority: settled
    peers, name = high_world(["n1", "n2", "n3", "n5", "n6", "n7"], ["n0", "n4"])
    assert not peers.fits_by_preempting(peers.gangs[name]) and peers.unsettled(preemption=True) == []


def group(name: str, owner: str, status: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "uid": f"uid-{name}", "annotations": {"phalanx.dev/owner": owner}},
        "spec": {},
        "status": status,
    }


def test_a_reservation_is_left_behind_on_an_admitted_or_ownerless_group_or_long_lapsed() -> None:
    now = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    reservation = {"domain": "nb-a", "nodes": ["n0"], "expiresAt": "2026-12-07T12:01:00Z"}
    body = jobset("h", ("w", 1, 2, 2), **{"phalanx.dev/topology-key": NB})
    waiting = [pod(f"h-w-0-{k}", {JS: "h", "job-name": "h-w-0"}) for k in range(2)]
    running = [pod(f"h-w-0-{k}", {JS: "h", "job-name": "h-w-0"}, node=f"n{k}", gated=False) for k in range(2)]
    for pods, held, expected in [
        (waiting, reservation, []),
        (running, reservation, ["admitted gang h"]),
        (waiting, reservation | {"expiresAt": "2026-12-07T11:58:00Z"}, ["lapsed at 11:58:00"]),
        (waiting, reservation | {"expiresAt": "2026-12-07T11:59:30Z"}, []),  # within the minute
    ]:
        roots = [group("h-root", "JobSet/h", {"reservation": held})]
        objs = Objects(pods, objects(pods, JobSet=[body]).owners, roots, {})
        world = World(seed_nodes(), pods, read_gangs(objs, NS), roots=roots)
        found = world.reservations_left(now)
        assert len(found) == len(expected) and all(e in f for e, f in zip(expected, found, strict=True))
    orphan = [group("gone-root", "JobSet/gone", {"reservation": reservation})]
    world = World(seed_nodes(), [], {}, roots=orphan)
    (left,) = world.reservations_left(now)
    assert "no gang of a live owner holds" in left


def test_a_pod_bound_outside_the_recorded_domain_is_found() -> None:
    body = jobset("h", ("w", 1, 2, 2), **{"phalanx.dev/topology-key": NB})
    pods = [
        pod(f"h-w-0-{k}", {JS: "h", "job-name": "h-w-0"}, node=n, gated=False)
        for k, n in enumerate(["n0", "n1"])
    ]
    admission = {"domain": "nb-b", "assignments": []}
    roots = [group("h-root", "JobSet/h", {"admission": admission})]
    objs = Objects(pods, objects(pods, JobSet=[body]).owners, roots, {})
    world = World(seed_nodes(), pods, read_gangs(objs, NS), roots=roots)
    assert world.outside_decision() == ["h: pods bound in ['nb-a'], its group records nb-b"]
    roots[0]["status"]["admission"]["domain"] = "nb-a"
    assert World(seed_nodes(), pods, read_gangs(objs, NS), roots=roots).outside_decision() == []
