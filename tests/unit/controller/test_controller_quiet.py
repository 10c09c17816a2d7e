"""Issue 16 item 10, quiet when nothing is wrong: a requeue says so once on each object (one Warning on the
group that holds the decision, the same on its owner), not once more for the condition it changes and again
when the owner is suspended (through `plan()`); a write of a group its deleted Job's garbage collection took
meanwhile is no failure (the applier, with the stand-in Kube of test_controller_apply.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from typing import Any

import pytest
from test_controller_apply import RecordingKube, applier
from test_controller_node_failure import at
from testkit import NOW, TOPOLOGY, filler, group_of, job_body, only, pod_body, status_of

from phalanx.api import conditions as c
from phalanx.api import keys as names
from phalanx.api.status import PodGroupStatus
from phalanx.controller import metrics
from phalanx.controller.apply.kube import retrying
from phalanx.controller.model.actions import PatchStatus, PostEvent, SuspendJob, UnitPlan
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.process import logs
from phalanx.kubeclient import ApiException

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


# ---------------------------------------------------------------------- a deleted Job
def _gone_kube() -> RecordingKube:
    """The apiserver's answer once the garbage collector took the Job's PodGroup: 404 on its status."""
    error = ApiException(status=404, reason="Not Found")
    error.body = json.dumps({"kind": "Status", "reason": "NotFound", "message": 'podgroups "pg" not found'})
    return RecordingKube({"gone": error})


def test_a_write_of_a_group_deleted_meanwhile_is_no_failure() -> None:
    """The Job was deleted (or its TTL ran out) between the pass and the write: no warning event, no
    FailedSync, no failure metric, no backoff, and the cache forgets the group."""
    clock = [0.0]
    kube = _gone_kube()
    apply, cache, events = applier(kube, clock)
    group = ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", "gone", "pg", "u")
    cache.upsert(
        "PodGroup",
        {
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "gone", "uid": "u", "resourceVersion": "1"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
        },
    )
    assert cache.pod_groups.get("gone/pg") is not None
    job = ObjectRef("batch/v1", "Job", "gone", "train", "j")
    finished = PodGroupStatus()
    before = metrics.APPLY_FAILURES.labels("PatchStatus")._value.get()
    (result,) = asyncio.run(apply.apply([UnitPlan("gone/train", (PatchStatus(group, finished),), job, 0)]))
    assert result.ok
    assert not [e for e in events.posted if e[1] == "Warning"]
    assert metrics.APPLY_FAILURES.labels("PatchStatus")._value.get() == before
    assert apply.backoff.waiting() == frozenset()
    assert cache.pod_groups.get("gone/pg") is None


def test_a_404_is_not_counted_as_an_api_error() -> None:
    async def gone() -> None:
        raise ApiException(status=404, reason="Not Found")

    async def refused() -> None:
        raise ApiException(status=403, reason="Forbidden")

    def count(code: str) -> float:
        return float(metrics.API_ERRORS.labels("patch", code)._value.get())

    before = (count("404"), count("403"))
    for call in (gone, refused):
        with pytest.raises(ApiException):
            asyncio.run(retrying(call, verb="patch"))
    assert (count("404"), count("403")) == (before[0], before[1] + 1)


# ---------------------------------------------------------------------- webhook denials
def test_a_webhook_denial_is_logged_at_info_and_a_real_failure_stays_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kopf's words for an AdmissionError (kopf/_core/actions/execution.py), through the filter
    `phalanx run` puts on Kopf's object logger."""
    logger = logging.getLogger("kopf.objects")
    denials = logs.DenialsAtInfo()
    logger.addFilter(denials)
    try:
        with caplog.at_level(logging.DEBUG, logger="kopf.objects"):
            logger.error("Webhook 'gate-job' failed permanently: spec.template.metadata.annotations: no")
            logger.error("Handler 'watch-jobs' failed permanently: boom")
    finally:
        logger.removeFilter(denials)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "kopf.objects"]
    assert said == [
        ("INFO", "Webhook 'gate-job' denied: spec.template.metadata.annotations: no"),
        ("ERROR", "Handler 'watch-jobs' failed permanently: boom"),
    ]
