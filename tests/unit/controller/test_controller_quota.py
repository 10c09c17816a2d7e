"""ResourceQuotas (issue 16, item 1): a gang whose pods a quota refuses says so naming the quota, one that
can never fit it is refused at creation (or said at once), and two gangs deadlocked on one quota are broken
deterministically — `plan()` and the webhook as plain functions, through the real cache."""

from __future__ import annotations

import dataclasses
import datetime as dt
from fractions import Fraction
from typing import Any

import kopf
import pytest
from test_kueue import QUEUE, workload
from testkit import NOW, StaticContext, cluster, group_of, job_body, job_key, only, pod_body, with_status

from phalanx.api import conditions as c
from phalanx.api.conditions import Condition
from phalanx.api.status import PodGroupStatus
from phalanx.controller.model.actions import DeletePod, PostEvent, ReleasePod, ResumeJob, SuspendJob
from phalanx.controller.model.kueue import KUEUE_WORKLOAD
from phalanx.controller.model.quota import QUOTA_DEADLOCK, QuotaRecord, pod_quota_usage, shortfall
from phalanx.controller.plan import Plan, plan
from phalanx.controller.watch.webhooks import Webhooks

GPU = "nvidia.com/gpu"


def quota(hard: str = "32", used: str = "32", name: str = "gpus", **extra: Any) -> tuple[str, dict[str, Any]]:
    body = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"hard": {f"requests.{GPU}": hard}, **extra},
        "status": {"hard": {f"requests.{GPU}": hard}, "used": {f"requests.{GPU}": used}},
    }
    return ("ResourceQuota", body)


def gpu_job(name: str, count: int = 4, **kw: Any) -> dict[str, Any]:
    """A gang Job whose template asks for a whole 8-GPU node per pod (what the quota counts)."""
    body = job_body(name, count, **kw)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU: "8"}}
    return body


def admitted(result: Plan, group: str) -> Condition:
    patches = [a for a in result.actions if type(a).__name__ == "PatchStatus" and a.group.name == group]
    assert patches, f"no status written for {group}"
    cond = patches[-1].status.condition(c.ADMITTED)
    assert cond is not None
    return cond


def said(job: dict[str, Any], reason: str) -> Any:
    """The Job's PodGroup as a pass finds it once its condition said `reason`."""
    status = PodGroupStatus(
        conditions=[
            Condition(type=c.ADMITTED, status="False", reason=reason, message="", last_transition_time=NOW)
        ]
    )
    return with_status(group_of(job), status)


# ---------------------------------------------------------------------- counting as the quota plugin does
def test_a_pod_counts_as_the_quota_plugin_counts_it() -> None:
    spec = {
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "2"}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        ],
        "containers": [{"name": "w", "resources": {"limits": {GPU: "8", "cpu": "1", "memory": "1Gi"}}}],
        "overhead": {"cpu": "100m"},
    }
    usage = pod_quota_usage(spec)
    assert usage["pods"] == usage["count/pods"] == 1
    # containers 1 + sidecar 0.5 = 1.5 against the init peak 2 (+ the sidecar started before it: none)
    assert usage["requests.cpu"] == usage["cpu"] == Fraction(2) + Fraction(1, 10)
    assert usage[f"requests.{GPU}"] == 8 and usage["limits.memory"] == 2**30
    assert f"limits.{GPU}" in usage and "limits.cpu" in usage


def test_scopes_decide_which_pods_a_quota_counts() -> None:
    spec = {"priorityClassName": "high", "containers": [{"resources": {"limits": {GPU: "8"}}}]}
    _, body = quota(
        hard="8",
        used="0",
        scopeSelector={
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["low"]}]
        },
    )
    record = QuotaRecord.from_body(body)
    assert shortfall([record], spec, 4) is None  # another priority class's quota
    assert shortfall([record], {**spec, "priorityClassName": "low"}, 4) is not None
    best_effort = QuotaRecord.from_body(quota(hard="0", used="0", scopes=["BestEffort"])[1])
    assert shortfall([best_effort], spec, 1) is not None  # GPUs only: QoS BestEffort (cpu, memory count)
    guaranteed = {"containers": [{"resources": {"limits": {GPU: "8", "cpu": "1"}}}]}
    assert shortfall([best_effort], guaranteed, 1) is None


# ---------------------------------------------------------------------- one gang
def test_a_gang_whose_missing_pods_a_quota_refuses_names_the_quota() -> None:
    job = gpu_job("train")
    pods = [pod_body("train", i) for i in range(3)]
    result = plan(cluster([(job, group_of(job), pods)], objects=[quota(used="32")]), NOW)
    cond = admitted(result, group_of(job).name)
    assert (cond.status, cond.reason) == ("False", c.REASON_QUOTA_EXCEEDED)
    assert "0 scheduled, 3 waiting; the Job controller cannot create the other 1 pod(s)" in cond.message
    assert f"ResourceQuota ml/gpus (requests.{GPU}: 32 of 32 used; 1 more pod(s) would add 8)" in cond.message
    warnings = {(e.involved.kind, e.reason) for e in only(result.actions, PostEvent) if e.type == "Warning"}
    assert warnings == {("Job", c.REASON_QUOTA_EXCEEDED), ("PodGroup", c.REASON_QUOTA_EXCEEDED)}
    assert not only(result.actions, ReleasePod) and not only(result.actions, SuspendJob)


def test_with_room_in_the_quota_the_gang_only_waits_for_its_pods() -> None:
    job = gpu_job("train")
    pods = [pod_body("train", i) for i in range(3)]
    result = plan(cluster([(job, group_of(job), pods)], objects=[quota(hard="64", used="24")]), NOW)
    assert admitted(result, group_of(job).name).reason == c.REASON_WAITING_FOR_PODS


def test_a_gang_larger_than_the_quota_says_at_once_it_can_never_be_created() -> None:
    job = gpu_job("train")
    result = plan(cluster([(job, group_of(job), [])], objects=[quota(hard="24", used="0")]), NOW)
    cond = admitted(result, group_of(job).name)
    assert cond.reason == c.REASON_QUOTA_EXCEEDED
    assert "its gang of 4 pods can never be created whole in namespace ml" in cond.message
    assert (
        f"ResourceQuota ml/gpus allows requests.{GPU} 24 in all, and the 4 pods ask 32 together"
        in cond.message
    )


# ---------------------------------------------------------------------- two gangs deadlocked on one quota
def deadlock(first: dict[str, Any], second: dict[str, Any], reason: str = c.REASON_QUOTA_EXCEEDED) -> Plan:
    """3 pods of `first` and 1 of `second` made, the 32-GPU quota used up by them."""
    jobs = [
        (first, said(first, reason), [pod_body(first["metadata"]["name"], i) for i in range(3)]),
        (second, said(second, reason), [pod_body(second["metadata"]["name"], 0)]),
    ]
    return plan(cluster(jobs, objects=[quota()]), NOW)


def test_the_younger_of_two_deadlocked_gangs_is_requeued_so_its_gated_pods_release_the_quota() -> None:
    older = gpu_job("a", created="2026-11-30T10:00:00Z")
    younger = gpu_job("b", created="2026-11-30T11:00:00Z")
    result = deadlock(older, younger)
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.job.name == "b" and suspend.cause == "quota"
    assert suspend.why.startswith(
        f"{QUOTA_DEADLOCK}: ResourceQuota ml/gpus has no room for the pods that Job/a"
    )
    assert admitted(result, group_of(older).name).reason == c.REASON_QUOTA_EXCEEDED
    # The same whichever gang holds more pods: the order decides, not the count.
    swapped = deadlock(younger, older)
    assert [s.job.name for s in only(swapped.actions, SuspendJob)] == ["b"]


def test_the_lower_priority_gang_is_requeued_even_when_older() -> None:
    older = gpu_job("a", created="2026-11-30T10:00:00Z")
    younger = gpu_job("b", created="2026-11-30T11:00:00Z")
    jobs = [
        (older, said(older, c.REASON_QUOTA_EXCEEDED), [pod_body("a", i) for i in range(3)]),
        (younger, said(younger, c.REASON_QUOTA_EXCEEDED), [pod_body("b", 0, priority=100)]),
    ]
    result = plan(cluster(jobs, objects=[quota()]), NOW)
    assert [s.job.name for s in only(result.actions, SuspendJob)] == ["a"]


def test_a_deadlock_is_broken_only_once_it_was_seen_in_an_earlier_pass() -> None:
    first = deadlock(gpu_job("a"), gpu_job("b", created="2026-11-30T11:30:00Z"), c.REASON_WAITING_FOR_PODS)
    assert not only(first.actions, SuspendJob)


def test_a_gang_waiting_next_to_a_running_one_is_not_a_deadlock() -> None:
    running, waiting = gpu_job("a"), gpu_job("b", created="2026-11-30T11:30:00Z")
    jobs = [
        (
            running,
            said(running, c.REASON_ADMITTED),
            [pod_body("a", i, node=f"n{i + 1}", gated=False) for i in range(3)],
        ),
        (waiting, said(waiting, c.REASON_QUOTA_EXCEEDED), [pod_body("b", 0)]),
    ]
    result = plan(cluster(jobs, objects=[quota()]), NOW)
    assert not only(result.actions, SuspendJob)
    assert admitted(result, group_of(waiting).name).reason == c.REASON_QUOTA_EXCEEDED


def test_a_gang_requeued_for_a_quota_resumes_only_once_the_quota_has_room_for_all_of_it() -> None:
    job = gpu_job("b", suspend=True)
    job["metadata"]["annotations"]["phalanx.dev/requeued"] = f"{QUOTA_DEADLOCK}: ResourceQuota ml/gpus ..."
    full = plan(cluster([(job, group_of(job), [])], objects=[quota(used="32")]), NOW)
    assert not only(full.actions, ResumeJob)
    status = admitted(full, group_of(job).name)
    assert status.reason == c.REASON_REQUEUED and "resumes once its pods are gone" not in status.message
    room = plan(cluster([(job, group_of(job), [])], objects=[quota(used="0")]), NOW)
    assert [r.job.name for r in only(room.actions, ResumeJob)] == ["b"]


# ---------------------------------------------------------------------- at creation
def test_a_gang_that_can_never_fit_its_namespaces_quota_is_refused_at_creation() -> None:
    context = StaticContext(cache_primed=True)
    context.cache.upsert(*quota(hard="24", used="0"))
    hooks = Webhooks(context)
    body = gpu_job("train")
    body["spec"]["template"]["spec"].pop("schedulingGates")
    with pytest.raises(kopf.AdmissionError) as refused:
        hooks.gate_job(body=kopf.Body(body), patch=kopf.Patch())
    assert str(refused.value).startswith(
        "spec.template.spec: the gang of 4 pods can never be created whole: "
    )
    assert f"ResourceQuota ml/gpus allows requests.{GPU} 24 in all" in str(refused.value)
    smaller = gpu_job("train", annotations={"phalanx.dev/min-count": "3"})
    hooks.gate_job(body=kopf.Body(smaller), patch=kopf.Patch())  # 3 x 8 = 24 fits


def test_the_gang_to_requeue_is_chosen_among_all_also_when_it_is_backing_off() -> None:
    """a, b and c deadlock on one quota; c comes last, so c gives its quota back. While c backs off (its
    last write failed) nothing is suspended in its place: b, ranked before it, keeps its turn."""
    gangs = [("a", 2, "09:00"), ("b", 1, "10:00"), ("c", 1, "11:00")]
    jobs = []
    for name, pods, at in gangs:
        body = gpu_job(name, created=f"2026-11-30T{at}:00Z")
        jobs.append((body, said(body, c.REASON_QUOTA_EXCEEDED), [pod_body(name, i) for i in range(pods)]))
    state = cluster(jobs, objects=[quota(used="32")])
    assert [s.job.name for s in only(plan(state, NOW).actions, SuspendJob)] == ["c"]
    waiting = dataclasses.replace(state, backing_off=frozenset({job_key("c")}))
    assert not only(plan(waiting, NOW).actions, SuspendJob)


def test_kueue_gangs_deadlocked_on_a_quota_are_not_requeued_by_deleting_gated_pods() -> None:
    """Two Kueue-managed Jobs hold a quota with gated pods only. Kueue owns their suspend; deleting their
    gated pods would give nothing back (the Job controller makes them again at once). So neither is said
    requeued: both say QuotaExceeded, pass after pass, and Phalanx deletes nothing."""
    jobs = []
    for name, pods, at in (("a", 3, "10:00"), ("b", 1, "11:00")):
        body = gpu_job(name, created=f"2026-11-30T{at}:00Z")
        body["metadata"]["labels"].update(QUEUE)
        jobs.append((body, said(body, c.REASON_QUOTA_EXCEEDED), [pod_body(name, i) for i in range(pods)]))
    kueue = [(KUEUE_WORKLOAD, workload("a")), (KUEUE_WORKLOAD, workload("b"))]
    result = plan(cluster(jobs, objects=[quota()], owners=kueue), NOW)
    assert not only(result.actions, SuspendJob) and not only(result.actions, DeletePod)
    for body, _, _ in jobs:
        assert admitted(result, group_of(body).name).reason == c.REASON_QUOTA_EXCEEDED


@pytest.mark.parametrize(("after", "requeued"), [(5, False), (60, True)])
def test_a_running_gang_whose_replacement_a_quota_refuses_is_requeued_after_the_grace(
    after: float, requeued: bool
) -> None:
    """a ran 4 pods; one went with its node, and b's gated pod took the quota back, so a's Job controller
    cannot make the replacement: no pod of a waits. After the grace a is requeued whole (its quota goes
    back) instead of holding 3 nodes short for ever."""
    a = gpu_job("a", created="2026-11-30T10:00:00Z")
    b = gpu_job("b", created="2026-11-30T11:00:00Z")
    group = said(a, c.REASON_WAITING_FOR_PODS)
    running = [
        pod_body("a", i, gated=False, node=f"n{i + 1}", phase="Running", group=group.name) for i in range(3)
    ]
    jobs = [(a, group, running), (b, said(b, c.REASON_QUOTA_EXCEEDED), [pod_body("b", 0)])]
    result = plan(cluster(jobs, objects=[quota()]), NOW + dt.timedelta(seconds=after))
    suspended = [(s.job.name, s.cause) for s in only(result.actions, SuspendJob)]
    assert suspended == ([("a", "below-min-count")] if requeued else [])
    if requeued:
        (suspend,) = only(result.actions, SuspendJob)
        assert "a ResourceQuota refuses the Job controller the missing pods" in suspend.why
