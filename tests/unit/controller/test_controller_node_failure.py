"""The kinds of node failure of issue 10 item 1 beyond the article's NoExecute taint, through `plan()`:
a deleted node, a NotReady node, `disruptionMode: all`, and a cordon (not a failure). train-3 runs in nb-a on
n1-n3; n4 is nb-a's last node."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from test_controller_plan import admitted_reason
from testkit import (
    NODES,
    NOW,
    TOPOLOGY,
    cluster,
    filler,
    group_of,
    job_body,
    node_body,
    only,
    pod_body,
    status_of,
)

from phalanx.api import conditions as c
from phalanx.api.status import Admission, Assignment, PodGroupStatus
from phalanx.controller.model.actions import EvictPod, ReleasePod, SuspendJob
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.plan import Plan, plan


def running(group: str, *nodes: str) -> list[dict[str, Any]]:
    """Pods Phalanx released (pinned to their node) and kube-scheduler bound there."""
    return [
        pod_body("train", i, gated=False, node=n, released_to=n, phase="Running", group=group)
        for i, n in enumerate(nodes)
    ]


def at(
    now: dt.datetime,
    job: dict[str, Any],
    group: PodGroupRecord,
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any] | None],
    others: list[dict[str, Any]] | None = None,
) -> Plan:
    """plan() with some nodes changed (a body) or gone (None)."""
    bodies = [b for n in NODES if (b := nodes.get(n, node_body(n))) is not None]
    return plan(cluster([(job, group, pods)], others=others or [], nodes=bodies), now)


def test_a_deleted_node_with_a_free_node_left_in_the_block_gets_its_pod_replaced_there() -> None:
    job = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(job)
    pods = [*running(group.name, "n1", "n2"), pod_body("train", 3, group=group.name)]  # n3's pod went
    result = at(NOW, job, group, pods, {"n3": None})
    (release,) = only(result.actions, ReleasePod)
    assert release.node == "n4"
    assert not only(result.actions, SuspendJob)


def test_a_deleted_node_with_no_room_left_in_the_block_requeues_the_job_after_the_grace_period() -> None:
    job = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(job)
    pods = [*running(group.name, "n1", "n2"), pod_body("train", 3, group=group.name)]
    first = at(NOW, job, group, pods, {"n3": None}, [filler("n4")])
    assert not only(first.actions, SuspendJob) and not only(first.actions, ReleasePod)
    waited = group_of(job, status_of(first))
    later = at(NOW + dt.timedelta(seconds=31), job, waited, pods, {"n3": None}, [filler("n4")])
    (suspend,) = only(later.actions, SuspendJob)
    assert "2 of its 3 pods were left in nb-a" in suspend.why


def test_a_not_ready_node_gets_no_replacement_pod() -> None:
    """The node lifecycle controller taints a NotReady node and evicts its pods: the replacement goes to n4
    (n3 would win the tie by name)."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(job)
    sick = node_body("n3")
    sick["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    sick["spec"]["taints"] = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
    ]
    pods = [*running(group.name, "n1", "n2"), pod_body("train", 3, group=group.name)]
    (release,) = only(at(NOW, job, group, pods, {"n3": sick}).actions, ReleasePod)
    assert release.node == "n4"


def test_disruption_mode_all_is_requeued_at_once_without_waiting_for_the_grace_period() -> None:
    job = job_body("train", 3, annotations={**TOPOLOGY, "phalanx.dev/disruption-mode": "all"})
    group = group_of(job)
    pods = [*running(group.name, "n1", "n2"), pod_body("train", 3, group=group.name)]
    result = at(NOW, job, group, pods, {"n3": None}, [filler("n4")])
    (suspend,) = only(result.actions, SuspendJob)
    assert "after 0 s" in suspend.why
    assert admitted_reason(status_of(result))[1] == c.REASON_REQUEUED


def test_a_cordoned_node_is_not_a_failure() -> None:
    job = job_body("train", 3, annotations=TOPOLOGY)
    group = group_of(job)
    cordoned = node_body("n3")
    cordoned["spec"]["unschedulable"] = True
    pods = running(group.name, "n1", "n2", "n3")
    later = at(NOW + dt.timedelta(hours=1), job, group, pods, {"n3": cordoned})
    assert not only(later.actions, SuspendJob)
    assert not only(later.actions, EvictPod)
    assert not only(later.actions, ReleasePod)


def test_the_grace_counts_from_when_the_gang_went_short_not_from_when_its_replacement_came() -> None:
    """The Job controller makes a lost pod again only after a backoff (10 s, then 20 s, ... for the same
    Job). The pass that sees the gang short writes Admitted False (WaitingForPods), and the grace counts
    from then: the replacement that comes after the grace and does not fit has the Job requeued in that same
    pass (a node-failure soak saw it a resync later, the gang running in part meanwhile)."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    name = group_of(job).name
    whole = running(name, "n1", "n2", "n3")
    before = at(NOW - dt.timedelta(seconds=40), job, group_of(job), whole, {})
    assert admitted_reason(status_of(before))[:2] == (c.TRUE, c.REASON_ADMITTED)
    short = whole[:2]  # n3 went with its pod; the Job controller backs off before making it again
    lost = at(NOW - dt.timedelta(seconds=35), job, group_of(job, status_of(before)), short, {"n3": None})
    assert admitted_reason(status_of(lost))[:2] == (c.FALSE, c.REASON_WAITING_FOR_PODS)
    assert not only(lost.actions, SuspendJob)
    replaced = [*short, pod_body("train", 3, group=name)]
    came = at(NOW, job, group_of(job, status_of(lost)), replaced, {"n3": None}, [filler("n4")])
    (suspend,) = only(came.actions, SuspendJob)
    assert "2 of its 3 pods were left in nb-a" in suspend.why and "(after 35 s)" in suspend.why


def test_a_replacement_that_comes_within_the_grace_and_does_not_fit_waits_out_the_rest_of_it() -> None:
    """The same, the replacement 10 s after the loss: no requeue yet (grace 30 s), and the wait keeps
    counting from the loss."""
    job = job_body("train", 3, annotations=TOPOLOGY)
    name = group_of(job).name
    whole = running(name, "n1", "n2", "n3")
    before = at(NOW - dt.timedelta(seconds=40), job, group_of(job), whole, {})
    lost = at(NOW - dt.timedelta(seconds=10), job, group_of(job, status_of(before)), whole[:2], {"n3": None})
    replaced = [*whole[:2], pod_body("train", 3, group=name)]
    came = at(NOW, job, group_of(job, status_of(lost)), replaced, {"n3": None}, [filler("n4")])
    assert not only(came.actions, SuspendJob)
    assert came.next_due == NOW + dt.timedelta(seconds=20)  # the loop runs a pass when the grace ends
    assert before.next_due is None  # a whole running gang: no time of its changes an answer
    waiting = status_of(came)
    assert admitted_reason(waiting)[:2] == (c.FALSE, c.REASON_UNSCHEDULABLE)
    cond = waiting.condition(c.ADMITTED)
    assert cond is not None and cond.last_transition_time == NOW - dt.timedelta(seconds=10)
    later = at(
        NOW + dt.timedelta(seconds=21), job, group_of(job, waiting), replaced, {"n3": None}, [filler("n4")]
    )
    (suspend,) = only(later.actions, SuspendJob)
    assert "(after 31 s)" in suspend.why


# ------------------------------------------------------------------ lost pods not made again yet (lost.py)
def recorded(status: PodGroupStatus, pods: list[dict[str, Any]], when: dt.datetime) -> PodGroupStatus:
    """`status` with the decision that put `pods` where they run (as Phalanx recorded it)."""
    assignments = [Assignment(pod=p["metadata"]["name"], node=p["spec"]["nodeName"]) for p in pods]
    admission = Admission(domain="nb-a", assignments=assignments, admitted_at=when, attempt=0)
    return status.model_copy(update={"admission": admission})


@pytest.mark.parametrize(
    ("case", "gone_for", "n4_busy", "parallelism", "requeued"),
    [
        # The Job controller backs off (20 s, 40 s, ... after repeated failures): nothing of train waits.
        ("past the grace, no room for the pod to come: requeued now", 31, True, 3, True),
        ("within the grace: waits for the pod", 10, True, 3, False),
        ("past the grace, room for it on n4: waits for the pod", 31, False, 3, False),
        # Scaled up from 3 to 4 (nothing lost, the new pod not made yet): never requeued for it.
        ("scaled up, no pod lost, no room: not a loss", 600, True, 4, False),
    ],
)
def test_a_gang_short_of_pods_its_controller_has_not_made_again(
    case: str, gone_for: int, n4_busy: bool, parallelism: int, requeued: bool
) -> None:
    job = job_body("train", 3, annotations=TOPOLOGY)
    name = group_of(job).name
    whole = running(name, "n1", "n2", "n3")
    before = at(NOW - dt.timedelta(seconds=gone_for + 5), job, group_of(job), whole, {})
    assert admitted_reason(status_of(before))[:2] == (c.TRUE, c.REASON_ADMITTED)
    decided = recorded(status_of(before), whole, NOW - dt.timedelta(seconds=gone_for + 60))
    fillers = [filler("n4")] if n4_busy else []
    if parallelism == 3:
        pods, nodes = whole[:2], {"n3": None}  # n3 went with its pod
    else:
        job["spec"]["parallelism"] = job["spec"]["completions"] = parallelism
        pods, nodes = whole, {}
    went = NOW - dt.timedelta(seconds=gone_for)
    short = at(went, job, group_of(job, decided), pods, nodes, fillers)
    assert admitted_reason(status_of(short))[:2] == (c.FALSE, c.REASON_WAITING_FOR_PODS), case
    assert not only(short.actions, SuspendJob), case
    now = at(NOW, job, group_of(job, status_of(short)), pods, nodes, fillers)
    suspends = only(now.actions, SuspendJob)
    assert bool(suspends) == requeued, case
    if (
        gone_for < 30
    ):  # the grace (30 s): the pods to come are tried when the grace ends: a pass is asked for then
        assert now.next_due == went + dt.timedelta(seconds=30), case
    if requeued:
        assert (
            f"(after {gone_for} s)" in suspends[0].why
            and "2 of its 3 pods were left in nb-a" in suspends[0].why
        )
        assert admitted_reason(status_of(now))[1] == c.REASON_REQUEUED
