"""Issue 16 item 10, quiet when nothing is wrong, through `plan()`: a requeue says so once on each object
(one Warning on the group that holds the decision, the same on its owner), not once more for the condition
it changes and again when the owner is suspended."""

from __future__ import annotations

import datetime as dt
from typing import Any

from test_controller_node_failure import at
from testkit import NOW, TOPOLOGY, filler, group_of, job_body, only, pod_body, status_of

from phalanx.api import conditions as c
from phalanx.api import keys as names
from phalanx.controller.model.actions import PatchStatus, PostEvent, SuspendJob

ALL = {**TOPOLOGY, "phalanx.dev/disruption-mode": "all"}


def running(group: str, *nodes: str) -> list[dict[str, Any]]:
    """Pods Phalanx released (pinned) and kube-scheduler bound."""
    return [
        pod_body("train", i, gated=False, node=n, released_to=n, phase="Running", group=group)
        for i, n in enumerate(nodes)
    ]


def reason(status: object) -> str:
    condition = status.condition(c.ADMITTED)  # type: ignore[attr-defined]
    assert condition is not None
    return str(condition.reason)


def test_a_requeue_posts_one_event_per_object_and_the_suspended_pass_none() -> None:
    job = job_body("train", 3, annotations=ALL)
    group = group_of(job)
    pods = [*running(group.name, "n1", "n2"), pod_body("train", 3, group=group.name)]
    result = at(NOW, job, group, pods, {"n3": None}, [filler("n4")])
    (suspend,) = only(result.actions, SuspendJob)
    said = sorted((e.involved.kind, e.type, e.reason) for e in only(result.actions, PostEvent))
    assert said == [("Job", "Warning", "Requeued"), ("PodGroup", "Warning", "Requeued")]
    requeued = status_of(result)
    assert reason(requeued) == c.REASON_REQUEUED

    # The Job controller suspended it: the condition's message changes (it resumes once its pods are
    # gone), and no event says the requeue again.
    suspended = job_body(
        "train", 3, annotations={**ALL, names.REQUEUED_ANNOTATION: suspend.why}, suspend=True
    )
    later = at(NOW + dt.timedelta(seconds=5), suspended, group_of(suspended, requeued), pods, {"n3": None})
    patches = only(later.actions, PatchStatus)
    assert patches and reason(patches[0].status) == c.REASON_REQUEUED
    assert not only(later.actions, PostEvent)
