"""The kinds of node failure of issue 10 item 1 beyond the article's NoExecute taint, through `plan()`:
a deleted node, a NotReady node, `disruptionMode: all`, and a cordon (not a failure). train-3 runs in nb-a on
n1-n3; n4 is nb-a's last node."""

from __future__ import annotations

import datetime as dt
from typing import Any

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
from phalanx.controller.model.actions import EvictPod, ReleasePod, SuspendJob
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.plan import Plan, plan


def running(group: str, *nodes: str) -> list[dict[str, Any]]:
    return [
        pod_body("train", i, gated=False, node=n, phase="Running", group=group) for i, n in enumerate(nodes)
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
    waiting = status_of(came)
    assert admitted_reason(waiting)[:2] == (c.FALSE, c.REASON_UNSCHEDULABLE)
    cond = waiting.condition(c.ADMITTED)
    assert cond is not None and cond.last_transition_time == NOW - dt.timedelta(seconds=10)
    later = at(
        NOW + dt.timedelta(seconds=21), job, group_of(job, waiting), replaced, {"n3": None}, [filler("n4")]
    )
    (suspend,) = only(later.actions, SuspendJob)
    assert "(after 31 s)" in suspend.why
