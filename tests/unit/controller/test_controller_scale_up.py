"""Scaling a running gang up (issue 16 item 8), through `plan()`: train ran 2 pods in nb-a (n1, n2); its
parallelism went to 4 (minCount follows: 4) and the Job controller made 2 more pods, gated. With room in
nb-a the new pods join it there; with none they wait; the running pods are never requeued for it. A gang
that lost a pod of its decision is still requeued after the grace period (test_controller_node_failure).
With `phalanx.dev/on-scale-up: requeue` a scale-up that does not fit is requeued whole at once, to be placed
again whole at its new size; one that fits joins the domain the same."""

from __future__ import annotations

import datetime as dt
from typing import Any

from test_controller_plan import admitted_reason
from testkit import NOW, TOPOLOGY, cluster, filler, group_of, job_body, only, pod_body

from phalanx.api.status import Admission, Assignment, PodGroupStatus
from phalanx.controller.model.actions import PatchStatus, RecordAdmission, ReleasePod, SuspendJob
from phalanx.controller.plan import Plan, plan

REQUEUE = {**TOPOLOGY, "phalanx.dev/on-scale-up": "requeue"}


def scaled(others: list[dict[str, Any]], after: float, annotations: dict[str, str] = TOPOLOGY) -> Plan:
    job = job_body("train", 4, annotations=annotations)
    decision = Admission(
        domain="nb-a",
        assignments=[Assignment(pod="train-0", node="n1"), Assignment(pod="train-1", node="n2")],
        admitted_at=NOW - dt.timedelta(minutes=10),
        attempt=0,
    )
    group = group_of(job, PodGroupStatus(admission=decision, domain="nb-a"))
    pods = [
        pod_body("train", 0, gated=False, node="n1", released_to="n1", phase="Running", group=group.name),
        pod_body("train", 1, gated=False, node="n2", released_to="n2", phase="Running", group=group.name),
        pod_body("train", 2, group=group.name),
        pod_body("train", 3, group=group.name),
    ]
    first = plan(cluster([(job, group, pods)], others=others), NOW)
    patches = only(first.actions, PatchStatus)
    if not patches or after == 0:
        return first
    later = group_of(job, patches[0].status)
    return plan(cluster([(job, later, pods)], others=others), NOW + dt.timedelta(seconds=after))


def test_the_new_pods_join_the_running_gang_in_its_domain_when_they_fit() -> None:
    result = scaled([], 0)
    assert sorted((r.pod.name, r.node) for r in only(result.actions, ReleasePod)) == [
        ("train-2", "n3"),
        ("train-3", "n4"),
    ]
    assert not only(result.actions, SuspendJob)


def test_with_no_room_the_new_pods_wait_and_the_running_ones_are_never_requeued() -> None:
    busy = [filler("n3"), filler("n4")]
    now = scaled(busy, 0)
    (patch,) = only(now.actions, PatchStatus)
    _, reason, message = admitted_reason(patch.status)
    assert reason == "Unschedulable" and "nb-a: 0 of 2 pods fit" in message, message
    later = scaled(busy, 3600)  # long past the node-failure grace period
    assert not only(later.actions, SuspendJob) and not only(later.actions, ReleasePod)


def test_a_gang_that_lost_a_replacement_pod_is_still_requeued() -> None:
    """n3 failed once: its pod's replacement went to n4 (recorded alone); now n2 failed too and nb-a has
    no room: the pods placed (train-0, train-3) are not the decision's (train-3): requeued after the
    grace period, as before."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    decision = Admission(
        domain="nb-a",
        assignments=[Assignment(pod="train-3", node="n4")],
        admitted_at=NOW - dt.timedelta(minutes=10),
        attempt=1,
    )
    group = group_of(job, PodGroupStatus(admission=decision, domain="nb-a"))
    pods = [
        pod_body("train", 0, gated=False, node="n1", released_to="n1", phase="Running", group=group.name),
        pod_body("train", 3, gated=False, node="n4", released_to="n4", phase="Running", group=group.name),
        pod_body("train", 4, group=group.name),  # n2's pod's replacement, gated
    ]
    busy = [filler("n2"), filler("n3")]
    first = plan(cluster([(job, group, pods)], others=busy), NOW)
    later = group_of(job, only(first.actions, PatchStatus)[0].status)
    result = plan(cluster([(job, later, pods)], others=busy), NOW + dt.timedelta(seconds=3600))
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.why.startswith("below its minCount")


def test_with_on_scale_up_requeue_a_scale_up_that_fits_still_joins_the_domain() -> None:
    result = scaled([], 0, REQUEUE)
    assert sorted(r.node for r in only(result.actions, ReleasePod)) == ["n3", "n4"]
    assert not only(result.actions, SuspendJob)


def test_with_on_scale_up_requeue_a_scale_up_that_does_not_fit_is_requeued_whole_at_once() -> None:
    result = scaled([filler("n3"), filler("n4")], 0, REQUEUE)
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.cause == "scale-up"
    assert suspend.why == (
        "scaled up to 4 pods: the 2 new pod(s) do not fit beside its 2 running pod(s) in nb-a, and "
        "phalanx.dev/on-scale-up: requeue asks to place it again whole"
    )
    assert not only(result.actions, ReleasePod)  # nothing placed beside them: it goes whole
    (patch,) = only(result.actions, PatchStatus)
    assert admitted_reason(patch.status)[1] == "Requeued"


def test_with_on_scale_up_requeue_a_gang_that_lost_a_pod_keeps_its_grace_period() -> None:
    """Its decision placed 3 pods (train-9 is gone): short, not grown; the annotation changes nothing."""
    job = job_body("train", 4, annotations=REQUEUE)
    decision = Admission(
        domain="nb-a",
        assignments=[Assignment(pod=f"train-{i}", node=f"n{n}") for i, n in ((0, 1), (1, 2), (9, 3))],
        admitted_at=NOW - dt.timedelta(minutes=10),
        attempt=0,
    )
    group = group_of(job, PodGroupStatus(admission=decision, domain="nb-a"))
    pods = [
        pod_body("train", 0, gated=False, node="n1", released_to="n1", phase="Running", group=group.name),
        pod_body("train", 1, gated=False, node="n2", released_to="n2", phase="Running", group=group.name),
        pod_body("train", 2, group=group.name),
        pod_body("train", 3, group=group.name),
    ]
    result = plan(cluster([(job, group, pods)], others=[filler("n3"), filler("n4")]), NOW)
    assert not only(result.actions, SuspendJob)


def test_a_scale_up_after_a_replacement_is_not_taken_for_a_loss() -> None:
    """train ran 3 pods (n1-n3); train-1 went with n2 and its replacement train-3 was placed on n4: the
    record names the three placed pods, not the replacement alone. Then parallelism went to 4 with no room
    left in nb-a: the new pod waits and the running ones are never requeued for it."""
    first_decision = Admission(
        domain="nb-a",
        assignments=[Assignment(pod=f"train-{i}", node=f"n{i + 1}") for i in range(3)],
        admitted_at=NOW - dt.timedelta(hours=1),
        attempt=0,
    )
    three = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(three, PodGroupStatus(admission=first_decision, domain="nb-a"))
    running = [
        pod_body("train", i, gated=False, node=n, released_to=n, phase="Running", group=group.name)
        for i, n in ((0, "n1"), (2, "n3"))
    ]
    replaced = plan(cluster([(three, group, [*running, pod_body("train", 3, group=group.name)])]), NOW)
    (record,) = only(replaced.actions, RecordAdmission)
    where = {a.pod: a.node for a in record.admission.assignments}
    assert sorted(where) == ["train-0", "train-2", "train-3"] and where["train-3"] in {"n2", "n4"}
    four = job_body("train", 4, annotations=TOPOLOGY)
    group = group_of(four, PodGroupStatus(admission=record.admission, domain="nb-a"))
    node = where["train-3"]
    moved = pod_body("train", 3, gated=False, node=node, released_to=node, phase="Running", group=group.name)
    scaled_up = [*running, moved, pod_body("train", 4, group=group.name)]
    busy = [filler("n4" if node == "n2" else "n2")]  # nb-a full
    first = plan(cluster([(four, group, scaled_up)], others=busy), NOW)
    later = group_of(four, only(first.actions, PatchStatus)[0].status)
    result = plan(cluster([(four, later, scaled_up)], others=busy), NOW + dt.timedelta(seconds=3600))
    assert not only(result.actions, SuspendJob) and not only(result.actions, ReleasePod)
