"""The node soak's checks for the failures after which a node still takes pods (soak_nodes.py): a shrunk
node (GPUs gone unhealthy) and a relabelled one. Each row is a small world and what the check must say: a
check that cannot fail would let the soak pass for nothing."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from test_soak_gangs import GROUP, JS, LB, NB, NS, jobset, meta, objects, pod, seed_nodes
from tests.integration.gangs import Objects, read_gangs
from tests.integration.invariants import World
from tests.integration.soak_nodes import (
    BIND_SLACK,
    Failure,
    Relabels,
    bound_across,
    excused,
    orphans,
    shrunk_room,
)

T = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC).timestamp()  # when the node failed


def bound_at(name: str, labels: dict[str, str], node: str, at: float, gpus: int = 8) -> dict[str, Any]:
    """A pod bound to `node` at time `at` (its PodScheduled condition)."""
    body = pod(name, labels, node=node, gated=False, gpus=gpus)
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp}]
    return body


def shrunk_world(gpus_left: int, pods: list[dict[str, Any]]) -> World:
    nodes = seed_nodes()
    nodes["n0"].allocatable["nvidia.com/gpu"] = gpus_left
    return World(nodes, pods, {})


# (case, GPUs n0 has left after its shrink at T, its pods as (GPUs, bound at), problems)
SHRINKS = [
    ("the pods there before stay, beyond what is left", 2, [(8, T - 60)], 0),
    ("a pod bound since in the room left", 6, [(4, T + 60)], 0),
    ("a pod bound since beside the earlier ones, in the room left", 6, [(2, T - 60), (4, T + 60)], 0),
    ("a pod bound since on GPUs the node lost", 2, [(4, T + 60)], 1),
    ("a pod bound since on a node the earlier ones overcommit", 2, [(8, T - 60), (1, T + 60)], 1),
    ("a pod bound within the slack of the shrink counts as before", 2, [(8, T + BIND_SLACK / 2)], 0),
]


@pytest.mark.parametrize(("case", "left", "placed", "problems"), SHRINKS, ids=[r[0] for r in SHRINKS])
def test_a_shrunk_node_takes_no_pod_beyond_the_room_it_has_left(
    case: str, left: int, placed: list[tuple[int, float]], problems: int
) -> None:
    pods = [bound_at(f"p{i}", {}, "n0", at, gpus) for i, (gpus, at) in enumerate(placed)]
    found = shrunk_room(shrunk_world(left, pods), "n0", Failure("shrink", T))
    assert len(found) == problems, found


def relabelled(nodes_moved: dict[str, tuple[str, str]]) -> tuple[dict[str, Any], Relabels]:
    """The seed nodes with `nodes_moved` (node -> (network block, local block)) moved at T; the relabels."""
    nodes = seed_nodes()
    relabels: Relabels = {}
    for name, (nb, lb) in nodes_moved.items():
        before = dict(nodes[name].labels)
        nodes[name].labels.update({NB: nb, LB: lb})
        relabels[name] = [(0.0, before), (T, {NB: nb, LB: lb})]
    return nodes, relabels


# (case, n0 moved to, the gang's pods as (node, bound at), problems): a JobSet of one child Job of 2 pods,
# keyed on the network block; n0, n1 in nb-a, n4 in nb-b at first.
RELABELS = [
    (
        "bound together before the move: later labels do not matter",
        ("nb-b", "lb-2"),
        [("n0", -60), ("n1", -50)],
        0,
    ),
    (
        "the second bound beside the first's node as labelled now",
        ("nb-b", "lb-2"),
        [("n0", -60), ("n4", 60)],
        0,
    ),
    ("the second bound where the first's node no longer is", ("nb-b", "lb-2"), [("n0", -60), ("n1", 60)], 1),
    (
        "the second bound within the slack of the move: not judged",
        ("nb-b", "lb-2"),
        [("n0", -60), ("n1", 3)],
        0,
    ),
    (
        "moved within its network block: the gang's key is not split",
        ("nb-a", "lb-1"),
        [("n0", -60), ("n1", 60)],
        0,
    ),
    (
        "both bound across blocks after the move, on nodes never moved",
        ("nb-b", "lb-2"),
        [("n1", 60), ("n4", 70)],
        1,
    ),
]


@pytest.mark.parametrize(("case", "to", "placed", "problems"), RELABELS, ids=[r[0] for r in RELABELS])
def test_a_gang_on_a_relabelled_node_is_judged_by_the_labels_when_its_pods_were_bound(
    case: str, to: tuple[str, str], placed: list[tuple[str, float]], problems: int
) -> None:
    nodes, relabels = relabelled({"n0": to})
    body = jobset("h", ("w", 1, 2, 2), **{"phalanx.dev/topology-key": NB})
    pods = [
        bound_at(f"h-w-0-{k}", {JS: "h", "job-name": "h-w-0"}, node, T + at)
        for k, (node, at) in enumerate(placed)
    ]
    gangs = read_gangs(Objects(pods, objects(pods, JobSet=[body]).owners, [], {}), NS)
    made = {name: dict(labels) for name, (_, labels) in ((n, h[0]) for n, h in relabels.items())}
    found = bound_across(World(nodes, pods, gangs), gangs["h"], relabels, made)
    assert len(found) == problems, found
    if not problems:  # a gang on a moved node is left to bound_across by the poll's safety check
        assert World(nodes, pods, gangs).safety(relabelled=set(relabels)) == []


def test_a_slice_is_judged_by_its_own_key_at_each_binding() -> None:
    """A JobSet keyed on its network block with a slice per child Job on its local block: n0 moved to the
    other local block of nb-a; the child Job's second pod bound on n1 after it — its slice split as labelled
    then, though the gang's network block is one."""
    nodes, relabels = relabelled({"n0": ("nb-a", "lb-1")})
    body = jobset(
        "h", ("w", 1, 2, 2), **{"phalanx.dev/topology-key": NB, "phalanx.dev/slice-topology-key": LB}
    )
    pods = [
        bound_at("h-w-0-0", {JS: "h", "job-name": "h-w-0"}, "n0", T - 60),
        bound_at("h-w-0-1", {JS: "h", "job-name": "h-w-0"}, "n1", T + 60),
    ]
    gangs = read_gangs(Objects(pods, objects(pods, JobSet=[body]).owners, [], {}), NS)
    (found,) = bound_across(World(nodes, pods, gangs), gangs["h"], relabels, {})
    assert "h-w-0" in found and LB in found


def lws_group(deleting: bool, node: str = "n0") -> World:
    """An LWS group of 4 of which only its leader is left, bound to `node`, maybe being deleted (LWS's
    RecreateGroupOnPodRestart deleted it after its workers went, or Phalanx requeued the group)."""
    leader = pod("l-0", {"leaderworkerset.sigs.k8s.io/name": "l", GROUP: "0"}, node=node, gated=False)
    if deleting:
        leader["metadata"]["deletionTimestamp"] = "2026-12-07T12:00:00Z"
    body = {"metadata": meta("l"), "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4}}}
    pods = [leader]
    return World(
        seed_nodes(),
        pods,
        read_gangs(Objects(pods, objects(pods, LeaderWorkerSet=[body]).owners, [], {}), NS),
    )


# (case, the leader being deleted, how its node failed (None: it did not), reasons left)
EXCUSES = [
    ("its leader stuck being deleted on a NotReady node: waits for the heal", True, "notready", []),
    ("its leader stuck being deleted on a deleted node: waits for the garbage collector", True, "delete", []),
    ("its leader being deleted on a tainted node: the kubelet confirms, nothing stuck", True, "taint", 2),
    ("its leader running on a NotReady node, not deleted: a gang left in part", False, "notready", 1),
    ("its leader being deleted on a healthy node", True, None, 2),
]


@pytest.mark.parametrize(("case", "deleting", "how", "left"), EXCUSES, ids=[r[0] for r in EXCUSES])
def test_a_gang_whose_every_pod_is_stuck_on_a_failed_node_waits_for_the_heal(
    case: str, deleting: bool, how: str | None, left: list[str] | int
) -> None:
    world = lws_group(deleting)
    reasons = world.unsettled()
    assert any(r.startswith("l/0: 1 of 1 pods placed") for r in reasons), reasons
    failed = {} if how is None else {"n0": Failure(how, T)}
    kept = excused(world, reasons, failed)
    assert (kept if isinstance(left, list) else len(kept)) == left, kept


def lws_pod(
    name: str, worker: str, node: str, deleting: bool, finalizers: list[str] | None = None
) -> dict[str, Any]:
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "l",
        GROUP: "0",
        "leaderworkerset.sigs.k8s.io/worker-index": worker,
    }
    body = pod(name, labels, node=node, gated=False)
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-12-07T12:00:00Z"
    if finalizers:
        body["metadata"]["finalizers"] = finalizers
    return body


FOREGROUND = ["foregroundDeletion"]
# (case, the leader (being deleted?, its finalizers), its worker (node, being deleted?), how n1 failed, left)
ORPHANS = [
    (
        "a leader held by its dependents, one stuck on a NotReady node",
        (True, FOREGROUND),
        ("n1", True),
        "notready",
        [],
    ),
    ("a leader held by its dependents, none stuck", (True, FOREGROUND), ("n1", True), "taint", ["l-0@n0"]),
    (
        "a leader held, its worker on the NotReady node not being deleted",
        (True, FOREGROUND),
        ("n1", False),
        "notready",
        ["l-0@n0"],
    ),
    ("a leader being deleted in the background", (True, None), ("n1", True), "notready", ["l-0@n0"]),
    ("a leader not deleted", (False, None), ("n1", True), "notready", ["l-0@n0"]),
    (
        "a held leader's worker stuck on the deleted node too: it goes first",
        (True, FOREGROUND),
        ("n0", True),
        None,
        ["l-0-1@n0", "l-0@n0"],
    ),
]


@pytest.mark.parametrize(("case", "leader", "worker", "how", "left"), ORPHANS, ids=[r[0] for r in ORPHANS])
def test_a_pod_left_on_a_deleted_node_is_excused_only_while_its_dependents_are_stuck(
    case: str,
    leader: tuple[bool, list[str] | None],
    worker: tuple[str, bool],
    how: str | None,
    left: list[str],
) -> None:
    """n0 deleted: the group's leader on it is left only when the garbage collector waits for a worker
    stuck being deleted on a NotReady node before it (soak_nodes.orphans)."""
    pods = [lws_pod("l-0", "0", "n0", *leader), lws_pod("l-0-1", "1", worker[0], worker[1])]
    failed = {"n0": Failure("delete", T)} | ({"n1": Failure(how, T)} if how else {})
    assert orphans(pods, failed) == left, case
