"""Recorded decisions finished after the cluster changed under them, as properties: a staged unit whose
later pods come after the change (an LWS group with LeaderReady, one PodGroup; a JobSet InOrder of a driver
and workers, a tree), and a Job's gang released in part before a restart.

The decision places the leader and holds its workers' slots; then one node changes — tainted NoSchedule,
shrunk (GPUs gone unhealthy), relabelled into the other network block, or deleted — and some others fill
up or free; then the workers come. Whatever changed, the pass must not raise, and it must do what an
independent count says: if the leader's network block (as its node is labelled now) has room for all the
workers on nodes that take them, they are released there, all at once, each on a node that has room for
it and takes it; if it has none, none is released and the leader is not restarted unless the block has no
room (the group's disruption mode is all: an LWS group that cannot be made whole is requeued).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter, defaultdict
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from testkit import (
    LB,
    NB,
    NODES,
    NOW,
    child_job,
    cluster,
    group_of,
    job_body,
    jobset_body,
    jobset_pod,
    lws_body,
    lws_pod,
    made_groups,
    node_body,
    pod_body,
    written,
)

from phalanx.api.naming import pod_group_label_value
from phalanx.controller.model.actions import DeletePod, RecordAdmission, ReleasePod, SuspendJob
from phalanx.controller.plan import plan

GPUS_PER_NODE = 8
CHANGES = ("tainted", "shrunk", "moved", "moved-local", "deleted", "none")


# What both properties draw: the gang (pods, GPUs per pod), the cluster before the decision, the change.
SIZE = st.integers(2, 4)
GPUS = st.sampled_from((2, 4, 8))
BUSY_BEFORE = st.dictionaries(st.sampled_from(NODES), st.sampled_from((2, 4, 6, 8)), max_size=6)
CHANGE = st.sampled_from(CHANGES)
CHANGED = st.integers(0, 7)  # which node changes
SHRUNK_TO = st.sampled_from((0, 2, 4))  # GPUs a shrunk node has left
BUSY_AFTER = st.dictionaries(st.sampled_from(NODES), st.sampled_from((2, 4, 8)), max_size=3)


def someone_else(node: str, gpus: int, index: int) -> dict[str, Any]:
    """A running pod of another tool's taking `gpus` GPUs of `node`."""
    body = pod_body("other", index, node=node, gated=False, phase="Running", gpus=gpus)
    body["metadata"].update(name=f"other-{node}-{index}", labels={})
    return body


def nodes_after(change: str, node: str, shrunk_to: int) -> list[dict[str, Any]]:
    out = []
    for name in NODES:
        body = node_body(name)
        if name == node:
            if change == "deleted":
                continue
            if change == "tainted":
                body["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
            elif change == "shrunk":
                body["status"]["allocatable"]["nvidia.com/gpu"] = str(shrunk_to)
            elif change == "moved":
                labels = body["metadata"]["labels"]
                labels[NB] = "nb-b" if labels[NB] == "nb-a" else "nb-a"
            elif change == "moved-local":  # into the other local block of its network block
                labels = body["metadata"]["labels"]
                labels[LB] = labels[LB][:-1] + ("2" if labels[LB].endswith("1") else "1")
        out.append(body)
    return out


def room_for_workers(
    nodes: list[dict[str, Any]], used: dict[str, int], block: str, workers: int, gpus: int
) -> bool:
    """The reference: whether `workers` pods of `gpus` GPUs fit on the untainted, ready nodes of `block`."""
    fits = 0
    for body in nodes:
        if body["metadata"]["labels"][NB] != block or not takes_pods(body):
            continue
        free = int(body["status"]["allocatable"]["nvidia.com/gpu"]) - used[body["metadata"]["name"]]
        fits += max(0, free) // gpus
    return fits >= workers


def takes_pods(node: dict[str, Any]) -> bool:
    """Untainted and Ready."""
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    return ready and not node["spec"].get("taints")


def staged(kind: str, size: int, gpus: int) -> tuple[tuple[str, dict[str, Any]], Any, Any]:
    """(kind, owner); its first pod, and each of its size - 1 later pods by number: gated, or (given a node
    and its PodGroup) released and bound there."""
    key = {"phalanx.dev/topology-key": NB}
    if kind == "LeaderWorkerSet":
        lws = lws_body(leader_ready=True, size=size, gpus=gpus, annotations=key)

        def lws_member(worker: int, node: str = "", group: str = "") -> dict[str, Any]:
            if not node:
                return lws_pod("serve", 0, worker, gpus=gpus)
            return lws_pod(
                "serve", 0, worker, gpus=gpus, gated=False, released_to=node, node=node, pod_group=group
            )

        return (kind, lws), lambda *a: lws_member(0, *a), lambda i, *a: lws_member(i + 1, *a)
    if kind == "JobSet sliced":  # each child Job in one local block as well
        key = {**key, "phalanx.dev/slice-topology-key": LB}
    js = jobset_body(
        replicated=(("driver", 1, 1), ("workers", 1, size - 1)), in_order=True, gpus=gpus, annotations=key
    )

    def js_member(rjob: str, index: int, node: str = "", group: str = "") -> dict[str, Any]:
        at = 0 if rjob == "driver" else 1
        if not node:
            return jobset_pod("train", rjob, 0, index, global_index=at, gpus=gpus)
        body = jobset_pod(
            "train", rjob, 0, index, global_index=at, gpus=gpus, gated=False, released_to=node, node=node
        )
        body["metadata"]["labels"]["phalanx.dev/pod-group"] = pod_group_label_value(group)
        return body

    return ("JobSet", js), lambda *a: js_member("driver", 0, *a), lambda i, *a: js_member("workers", i, *a)


def gpus_of(pod: dict[str, Any]) -> int:
    return int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])


def slot_number(slot: str) -> int:
    return int(slot.rsplit("-", 1)[1])


@dataclasses.dataclass(frozen=True)
class Decided:
    """A staged unit decided with its first pod (decided_with_its_first_pod)."""

    owner: Any
    first_pod: Any  # its first pod: gated, or (given a node and its PodGroup) bound there
    later_pod: Any  # its later pod by number, the same way
    before: list[dict[str, Any]]  # others' pods
    record: Any  # the unit's recorded decision: its PodGroup's, or its tree's root's
    groups: list[Any]
    later_group: str  # the PodGroup its later pods join
    leader_name: str
    leader_node: str
    slots: list[Any]  # the decision's slots, by number


def decided_with_its_first_pod(
    kind: str, size: int, gpus: int, busy_before: dict[str, int]
) -> Decided | None:
    """The staged unit (staged()), others' pods taking `busy_before`, decided with its first pod; None if
    it did not fit."""
    owner, first_pod, later_pod = staged(kind, size, gpus)
    before = [someone_else(n, g, 0) for n, g in busy_before.items()]
    first = plan(cluster(pods=[first_pod()], others=before, owners=[owner]), NOW)
    records = [a for a in first.actions if isinstance(a, RecordAdmission)]
    if not records:
        event("the unit did not fit at first")
        return None
    record, groups = records[0], made_groups(first)
    leader_name = first_pod()["metadata"]["name"]
    return Decided(
        owner,
        first_pod,
        later_pod,
        before,
        record,
        groups,
        record.group.name if kind == "LeaderWorkerSet" else groups[-1].name,
        leader_name,
        next(a.node for a in record.admission.assignments if a.pod == leader_name),
        sorted(
            (a for a in record.admission.assignments if "-slot-" in a.pod), key=lambda a: slot_number(a.pod)
        ),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(("LeaderWorkerSet", "JobSet", "JobSet sliced")),
    size=SIZE,
    gpus=GPUS,
    busy_before=BUSY_BEFORE,
    in_slots=st.integers(0, 2),
    change=CHANGE,
    changed=CHANGED,
    shrunk_to=SHRUNK_TO,
    busy_after=BUSY_AFTER,
    freed=st.lists(st.sampled_from(NODES), max_size=3),
)
def test_later_pods_come_after_a_change_and_go_whole_to_room_the_first_pods_block_has(
    kind: str,
    size: int,
    gpus: int,
    busy_before: dict[str, int],
    in_slots: int,
    change: str,
    changed: int,
    shrunk_to: int,
    busy_after: dict[str, int],
    freed: list[str],
) -> None:
    """`in_slots` of the later pods came before the change and went into their slots (never all of them):
    whatever is decided again, the unit's record still names every pod that runs."""
    d = decided_with_its_first_pod(kind, size, gpus, busy_before)
    if d is None:
        return
    owner, first_pod, later_pod, before, record, groups, later_group, leader_name, leader_node, slots = vars(
        d
    ).values()  # its fields, in order
    running = {leader_name: leader_node}
    pods = [first_pod(leader_node, record.group.name)]
    for i in range(size - 1):
        if i < min(in_slots, size - 2):
            pod = later_pod(i, slots[i].node, later_group)
            running[pod["metadata"]["name"]] = slots[i].node
        else:
            pod = later_pod(i)
        pods.append(pod)
    waiting = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in running]
    node = NODES[changed]
    if change == "deleted" and node in running.values():
        change = (
            "none"  # a running pod's node deleted: it goes with it, another flow (the unit is made again)
        )
    event(f"{kind} {change}")
    nodes = nodes_after(change, node, shrunk_to)
    present = {b["metadata"]["name"] for b in nodes}
    others = [p for p in before if p["spec"]["nodeName"] not in freed]
    others += [
        someone_else(n, g, 1) for n, g in busy_after.items() if n not in running.values() and n in present
    ]
    used: dict[str, int] = defaultdict(int)
    for p in others:
        used[p["spec"]["nodeName"]] += gpus_of(p)
    for n in running.values():
        used[n] += gpus
    state = cluster(groups=groups, pods=pods, others=others, owners=[owner], nodes=nodes)
    result = plan(state, NOW)  # must not raise, whatever the change

    released = {a.pod.name: a.node for a in result.actions if isinstance(a, ReleasePod)}
    requeued = any(isinstance(a, DeletePod | SuspendJob) for a in result.actions)
    labels = {b["metadata"]["name"]: b for b in nodes}
    blocks = {labels[n]["metadata"]["labels"][NB] for n in running.values()}
    sliced = kind == "JobSet sliced"
    in_slot = [n for pod, n in running.items() if pod != leader_name]
    local = {labels[n]["metadata"]["labels"][LB] for n in in_slot}  # the workers' local block, if any runs
    candidates = sorted({b["metadata"]["labels"][LB] for b in nodes}) if not local else sorted(local)
    room = len(blocks) == 1 and (
        any(
            room_for_workers(
                [b for b in nodes if b["metadata"]["labels"][LB] == lb],
                used,
                next(iter(blocks)),
                len(waiting),
                gpus,
            )
            for lb in candidates
        )
        if sliced
        else room_for_workers(nodes, used, next(iter(blocks)), len(waiting), gpus)
    )
    if released:
        event("released")
        assert set(released) == set(waiting), "released in part"
        if sliced:
            lbs = {labels[n]["metadata"]["labels"][LB] for n in [*released.values(), *in_slot] if n in labels}
            assert len(lbs) == 1, f"the workers' child Job across local blocks: {lbs}"
        for pod, target in released.items():
            body = labels.get(target)
            assert body is not None, f"{pod} released onto a deleted node"
            assert not body["spec"].get("taints"), f"{pod} released onto a tainted node"
            assert {body["metadata"]["labels"][NB]} == blocks, (
                f"{pod} released outside the block of those that run"
            )
            used[target] += gpus
        for target in set(released.values()):
            allocatable = int(labels[target]["status"]["allocatable"]["nvidia.com/gpu"])
            assert used[target] <= allocatable, f"{target} over capacity: {used[target]} > {allocatable}"
        assert not requeued
    else:
        event("requeued" if requeued else "waits")
        assert not room, "the block of the pods that run has room for the later ones, none was released"
    for again in result.actions:
        if isinstance(again, RecordAdmission) and again.group.kind_key == record.group.kind_key:
            event("decided again")
            named = {a.pod for a in again.admission.assignments}
            assert set(running) | set(released) <= named, f"the record lost a pod: {sorted(named)}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=SIZE,
    gpus=GPUS,
    busy_before=BUSY_BEFORE,
    released_before=st.integers(1, 3),
    change=CHANGE,
    changed=CHANGED,
    shrunk_to=SHRUNK_TO,
    busy_after=BUSY_AFTER,
)
def test_a_gang_released_in_part_before_a_restart_is_finished_whole_in_one_block_or_not_at_all(
    size: int,
    gpus: int,
    busy_before: dict[str, int],
    released_before: int,
    change: str,
    changed: int,
    shrunk_to: int,
    busy_after: dict[str, int],
) -> None:
    """A Job's gang decided and released in part (the process died between its releases); then one node
    changed, others filled; the process restarts. Its gated pods go all at once to untainted nodes with
    room, in the one block of its bound pods as their nodes are labelled now; if that block has no room
    for them (or its bound pods are in two blocks now), none goes."""
    job = job_body("train", size, annotations={"phalanx.dev/topology-key": NB})
    before = [someone_else(n, g, 0) for n, g in busy_before.items()]
    pods = [pod_body("train", i, gpus=gpus) for i in range(size)]
    first = plan(cluster([(job, group_of(job), pods)], others=before), NOW)
    decided = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    if not decided:
        event("the gang did not fit at first")
        return
    group = written(first, [group_of(job)])[0]
    bound_count = min(released_before, size - 1)
    running = {f"train-{i}": decided[f"train-{i}"] for i in range(bound_count)}
    node = NODES[changed]
    if change == "deleted" and node in running.values():
        change = "none"  # a bound pod's node deleted: the pod goes with it, another flow (lost.py)
    event(change)
    nodes = nodes_after(change, node, shrunk_to)
    present = {b["metadata"]["name"] for b in nodes}
    others = before + [
        someone_else(n, g, 1) for n, g in busy_after.items() if n not in running.values() and n in present
    ]
    used: dict[str, int] = defaultdict(int)
    for p in others:
        used[p["spec"]["nodeName"]] += gpus_of(p)
    now_pods = []
    for i in range(size):
        name = f"train-{i}"
        if name in running:
            now_pods.append(
                pod_body("train", i, gpus=gpus, gated=False, node=running[name], released_to=running[name])
            )
            used[running[name]] += gpus
        else:
            now_pods.append(pod_body("train", i, gpus=gpus))
    result = plan(cluster([(job, group, now_pods)], others=others, nodes=nodes), NOW)  # must not raise

    released = {a.pod.name: a.node for a in result.actions if isinstance(a, ReleasePod)}
    labels = {b["metadata"]["name"]: b for b in nodes}
    blocks = {labels[n]["metadata"]["labels"][NB] for n in running.values()}
    waiting = size - bound_count
    room = len(blocks) == 1 and room_for_workers(nodes, used, next(iter(blocks)), waiting, gpus)
    if released:
        event("released")
        assert len(released) == waiting, "released in part"
        for pod, target in released.items():
            body = labels.get(target)
            assert body is not None, f"{pod} released onto a deleted node"
            assert not body["spec"].get("taints"), f"{pod} released onto a tainted node"
            assert {body["metadata"]["labels"][NB]} == blocks, f"{pod} released outside its gang's block"
            used[target] += gpus
        for target in set(released.values()):
            allocatable = int(labels[target]["status"]["allocatable"]["nvidia.com/gpu"])
            assert used[target] <= allocatable, f"{target} over capacity: {used[target]} > {allocatable}"
    else:
        event("waits")
        assert not room, "its block has room for the gated pods, none was released"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(("LeaderWorkerSet", "JobSet")),
    size=SIZE,
    gpus=st.sampled_from((4, 8)),
    busy_before=BUSY_BEFORE,
    came=st.integers(0, 3),
    faults=st.dictionaries(
        st.integers(0, 3), st.sampled_from(("deleted", "tainted", "notready", "pod")), min_size=1, max_size=3
    ),
    busy_after=BUSY_AFTER,
    child=st.booleans(),
)
def test_a_staged_unit_that_lost_pods_is_requeued_past_the_grace_only_when_they_no_longer_fit(
    kind: str,
    size: int,
    gpus: int,
    busy_before: dict[str, int],
    came: int,
    faults: dict[int, str],
    busy_after: dict[str, int],
    child: bool,
) -> None:
    """A staged unit decided with its first pod, `came` of its later pods released into their slots and
    running (its owner makes its later pods together: once one came, any other not there was lost);
    then some of its running pods go (their node deleted or tainted NoExecute — every pod of it on
    that node goes —, or the pod alone) and others fill free nodes. Within the grace nothing is requeued;
    past it the unit is requeued whole exactly when a pod of its decision was lost (its first pod, or a later
    one while another later pod still runs: the stage came), it went short (its first pod lost, or a later
    pod's slot on a node deleted or tainted, or whose room others' pods took: a slot on a node that still
    takes its pod holds its room, and the unit stays admitted until its pod comes back there) and its
    block, counted independently, has no room for the lost pods and those still to come on nodes that take
    them; a unit that lost nothing is never requeued, however full its block. For a JobSet, `child`: the
    workers' child Job is seen (cache/children.py): its stage came, also when none of its pods is left to
    say so."""
    d = decided_with_its_first_pod(kind, size, gpus, busy_before)
    if d is None:
        return
    owner, first_pod, later_pod, before, record, groups, later_group, leader_name, leader_node, slots = vars(
        d
    ).values()  # its fields, in order
    came = min(came, size - 1)
    running = [(first_pod(leader_node, record.group.name), leader_node)]
    running += [(later_pod(i, slots[i].node, later_group), slots[i].node) for i in range(came)]
    whole_pods = [p for p, _ in running]
    whole = plan(cluster(groups=groups, pods=whole_pods, others=before, owners=[owner]), NOW)
    assert not [a for a in whole.actions if isinstance(a, DeletePod | SuspendJob)], "requeued while whole"
    groups = written(whole, groups)

    # The faults: the running pod number i's node deleted or tainted (every pod of the unit there goes),
    # or NotReady (every pod of the unit there is stuck being deleted: it stays, no longer live), or pod i
    # alone gone (its node stays as it was).
    gone_nodes = {running[i][1]: how for i, how in faults.items() if i < len(running) and how != "pod"}
    lost = {
        p["metadata"]["name"]
        for i, (p, n) in enumerate(running)
        if n in gone_nodes or (faults.get(i) == "pod")
    }
    survivors = [(p, n) for p, n in running if p["metadata"]["name"] not in lost]
    if not survivors:
        event("all its pods went")
        return
    nodes = []
    for name in NODES:
        body = node_body(name)
        if gone_nodes.get(name) == "deleted":
            continue
        if gone_nodes.get(name) == "tainted":
            body["spec"]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
        if gone_nodes.get(name) == "notready":
            body["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        nodes.append(body)
    present = {b["metadata"]["name"] for b in nodes}
    taken = {n for _, n in running}  # nodes a pod of the unit ran on are not filled by others
    others = [p for p in before if p["spec"]["nodeName"] in present]
    others += [someone_else(n, g, 1) for n, g in busy_after.items() if n not in taken and n in present]
    stuck = [p for p, n in running if gone_nodes.get(n) == "notready"]
    for p in stuck:
        p["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    pods = [p for p, _ in survivors] + stuck
    went = NOW + dt.timedelta(seconds=60)
    child = child and kind == "JobSet"
    jobs = [("Job", child_job("train", "workers", 0))] if child else []
    short = plan(
        cluster(groups=groups, pods=pods, others=others, owners=[owner], nodes=nodes, objects=jobs), went
    )
    assert not [a for a in short.actions if isinstance(a, DeletePod | SuspendJob)], (
        "requeued within the grace"
    )
    groups = written(short, groups)
    after = went + dt.timedelta(seconds=31)
    result = plan(
        cluster(groups=groups, pods=pods, others=others, owners=[owner], nodes=nodes, objects=jobs), after
    )
    requeued = any(isinstance(a, DeletePod | SuspendJob) for a in result.actions)

    # The reference: what was lost, whether the unit can know it, whether it went short (its status left
    # Admitted), and the room in its block.
    later_lost = [p for p, _ in running[1:] if p["metadata"]["name"] in lost]
    later_left = [p for p, _ in survivors if p["metadata"]["name"] != leader_name]
    never_came = size - 1 - came  # lost too once a later pod is there: they are made together
    # A later pod stuck being deleted came, as its stage did: it is lost, not still to come.
    later_stuck = [p for p in stuck if p["metadata"]["name"] != leader_name]
    knows = leader_name in lost or (
        bool(later_left or child or later_stuck) and bool(later_lost or never_came)
    )
    # A later pod's slot still holds its room while its node is there and takes it (untainted): the unit
    # stays admitted, its pod to come goes back there; it went short when a pod it had, or a slot of one
    # to come, lost that.
    took = {b["metadata"]["name"] for b in nodes if takes_pods(b)}
    missing = [i for i in range(size - 1) if i >= came or running[i + 1][0]["metadata"]["name"] in lost]
    used: dict[str, int] = defaultdict(int)
    for p in others:
        used[p["spec"]["nodeName"]] += gpus_of(p)
    for p, n in running:
        if p["metadata"]["name"] not in lost or p in stuck:  # a pod being deleted still holds its node
            used[n] += gpus
    # ... nor while others' pods took the room held there (the node overcommitted, its slots counted).
    held_on = Counter(slots[i].node for i in missing if slots[i].node in present)
    over = {n for n, k in held_on.items() if used[n] + k * gpus > GPUS_PER_NODE}
    short = leader_name in lost or any(slots[i].node not in took or slots[i].node in over for i in missing)
    block = node_body(leader_node)["metadata"]["labels"][NB]
    needed = len(lost) + never_came
    room = room_for_workers(nodes, used, block, needed, gpus)
    if not lost and not knows:
        event("nothing lost")
        assert not requeued, "requeued although it lost nothing"
    elif not knows:
        event("a later stage lost whole: judged once its pods come again")
        assert not requeued, "requeued before its lost stage's pods came again"
    elif not short:
        event("lost, its slots hold their room: judged once its pods come again")
        assert not requeued, "requeued although the slots of its pods to come hold their room"
    else:
        event(f"lost: {'requeued' if requeued else 'waits'}")
        assert requeued == (not room), f"requeued {requeued}, room for {needed} pod(s) in {block}: {room}"
