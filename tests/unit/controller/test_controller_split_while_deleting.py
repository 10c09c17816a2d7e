"""An owner whose deletion waits on a finalizer keeps its pods until the garbage collector takes them after
it; a gang of it that runs short meanwhile (a node died, or the deletion interrupted its releases) is taken
down at once, since nothing places an owner's pods while it is deleted (kinds/common.split_while_deleting).
One row per case, through `plan()`: train-3 is decided onto n1-n3 in nb-a."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from testkit import (
    NB,
    NOW,
    TOPOLOGY,
    cluster,
    group_of,
    job_body,
    lws_body,
    lws_pod,
    made_groups,
    only,
    owner_cluster,
    pod_body,
    running,
    status_of,
)

from phalanx.api.status import PodGroupStatus
from phalanx.controller.kinds.common import SPLIT_WHILE_DELETING
from phalanx.controller.model.actions import (
    CreatePodGroup,
    CreateWorkload,
    DeletePod,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    SuspendJob,
)
from phalanx.controller.plan import Plan, plan


def decided() -> PodGroupStatus:
    """train-3's recorded decision: its three gated pods placed in nb-a."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(job)
    pods = [pod_body("train", i, group=group.name) for i in range(3)]
    return status_of(plan(cluster([(job, group, pods)]), NOW))


def deleting(job: dict[str, Any], finalizer: str = "example.com/keep") -> dict[str, Any]:
    job["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    job["metadata"]["finalizers"] = [finalizer]
    return job


def case(*, being_deleted: bool | str, pods: str, count: int = 3) -> Plan:
    """`being_deleted`: True (held by another tool's finalizer), or the finalizer that holds it. `pods`: one
    letter per pod of the decision, in order — r running where decided, g still gated (its
    release never happened), x gone (its node died); a trailing + is a pod added by a scale-up, gated."""
    status = decided()
    nodes = {a.pod: a.node for a in status.admission.assignments} if status.admission else {}
    job = job_body("train", count, annotations=TOPOLOGY)
    if being_deleted:
        job = deleting(job, *([being_deleted] if isinstance(being_deleted, str) else []))
    group = group_of(job, status)
    bodies = []
    for i, letter in enumerate(pods):
        name = f"train-{i}"
        if letter == "r":
            bodies.append(running("train", i, nodes[name], group=group.name))
        elif letter in "g+":
            bodies.append(pod_body("train", i, group=group.name))
    return plan(cluster([(job, group, bodies)]), NOW + dt.timedelta(seconds=5))


ROWS = [
    # id, being deleted, pods, count, pods deleted, split event
    ("a node died: the two left are deleted", True, "rrx", 3, ["train-0", "train-1"], True),
    ("the deletion interrupted the releases", True, "rgg", 3, ["train-0"], True),
    ("whole: nothing", True, "rrr", 3, [], False),
    ("all gone: nothing left to delete", True, "xxx", 3, [], False),
    ("scaled up, its decision's pods all run: nothing", True, "rrr+", 4, [], False),
    ("not being deleted: the grace period, not a deletion", False, "rrx", 3, [], False),
    # The garbage collector deletes every pod of a Job deleted in the foreground before the Job: a pod
    # already gone is its work, not a split to tell of.
    ("a foreground deletion: the garbage collector's", "foregroundDeletion", "rrx", 3, [], False),
]


@pytest.mark.parametrize(
    ("being_deleted", "pods", "count", "deleted", "said"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_a_gang_of_an_owner_being_deleted(
    being_deleted: bool | str, pods: str, count: int, deleted: list[str], said: bool
) -> None:
    result = case(being_deleted=being_deleted, pods=pods, count=count)
    assert sorted(a.pod.name for a in only(result.actions, DeletePod)) == deleted
    events = [a for a in only(result.actions, PostEvent) if a.reason == SPLIT_WHILE_DELETING]
    assert len(events) == (1 if said else 0)
    if said:
        (event,) = events
        assert event.involved.kind == "Job" and event.involved.name == "train"
        assert "is being deleted and its gang runs short" in event.message
    if being_deleted:
        # Nothing else for an owner being deleted: no object made, no status, no release, no suspension.
        for kind in (CreateWorkload, CreatePodGroup, PatchStatus, RecordAdmission, ReleasePod, SuspendJob):
            assert not only(result.actions, kind), kind


def test_the_deletions_are_not_planned_again_once_the_pods_are_going() -> None:
    """Pods being deleted (the DeletePods landed) are no longer running: no second round."""
    first = case(being_deleted=True, pods="rrx")
    assert only(first.actions, DeletePod)
    status = decided()
    nodes = {a.pod: a.node for a in status.admission.assignments} if status.admission else {}
    job = deleting(job_body("train", 3, annotations=TOPOLOGY))
    group = group_of(job, status)
    going = []
    for i in range(2):
        body = running("train", i, nodes[f"train-{i}"], group=group.name)
        body["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:05Z"
        going.append(body)
    again = plan(cluster([(job, group, going)]), NOW + dt.timedelta(seconds=6))
    assert not again.actions


def test_the_decision_in_the_rows_is_on_n1_to_n3() -> None:
    """The rows' premise: the decision names the three pods, all in nb-a."""
    status = decided()
    assert status.admission is not None
    assert sorted(a.pod for a in status.admission.assignments) == ["train-0", "train-1", "train-2"]
    assert status.admission.domain == "nb-a"


@pytest.mark.parametrize("subgroup_size", [None, 2])
@pytest.mark.parametrize(("running", "deleted"), [(4, 0), (3, 3)])
def test_a_group_of_a_leaderworkerset_being_deleted(
    subgroup_size: int | None, running: int, deleted: int
) -> None:
    """A group's StatefulSet makes a lost pod again, gated, and nothing places it while its LWS is being
    deleted: the group's running pods are deleted (the leader among them), a whole group is left alone —
    with subgroups (a tree of slices) as without."""
    lws = lws_body(size=4, subgroup_size=subgroup_size, annotations={"phalanx.dev/topology-key": NB})
    gated = [lws_pod("serve", 0, w) for w in range(4)]
    first = plan(owner_cluster([("LeaderWorkerSet", lws)], gated), NOW)
    nodes = {a.pod.name: a.node for a in first.actions if isinstance(a, ReleasePod)}
    groups = made_groups(first)
    names = ["serve-0", "serve-0-1", "serve-0-2", "serve-0-3"]
    pods = [lws_pod("serve", 0, w, node=nodes[names[w]], gated=False) for w in range(running)]
    pods += [lws_pod("serve", 0, w) for w in range(running, 4)]  # made again by its StatefulSet, gated
    going = deleting(lws)
    result = plan(owner_cluster([("LeaderWorkerSet", going)], pods, groups=groups), NOW)
    assert sorted(a.pod.name for a in only(result.actions, DeletePod)) == names[:deleted]
    told = [a for a in only(result.actions, PostEvent) if a.reason == SPLIT_WHILE_DELETING]
    assert [(e.involved.kind, e.involved.name) for e in told] == (
        [("LeaderWorkerSet", "serve")] if deleted else []
    )
    for kind in (CreateWorkload, CreatePodGroup, PatchStatus, RecordAdmission, ReleasePod):
        assert not only(result.actions, kind), kind
