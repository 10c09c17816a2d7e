"""Kueue decides who may run, Phalanx decides where (docs/kueue.md), through `plan()` on the testkit's
cluster: held until Kueue admits, dropped at once when Kueue evicts, requeued through Kueue or by deleting
pods when that costs nothing (never by a suspend of ours), victims only outside Kueue or in the same
ClusterQueue, Kueue's evictions not raced, a gang Kueue admitted that can never fit said so, Kueue's flavor
selectors honoured, Kueue's TAS warned of."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import kopf
import pytest
from testkit import (
    LB,
    NB,
    NOW,
    TOPOLOGY,
    StaticContext,
    cluster,
    filler,
    group_of,
    job_body,
    jobset_body,
    jobset_pod,
    lws_body,
    lws_pod,
    node_body,
    only,
    pod_body,
    with_status,
)

from phalanx.api import conditions as c
from phalanx.api.admission_checks import TAS_ANNOTATIONS
from phalanx.api.status import Admission, Assignment, PodGroupStatus, Reservation
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.base import Owner
from phalanx.controller.kinds.jobset import JobSetKind, JobSetRecord
from phalanx.controller.kinds.kueue import KUEUE_GATES, TAS_EVENT_REASON, kueue_owner, kueue_view
from phalanx.controller.kinds.lws import LwsKind
from phalanx.controller.model.actions import (
    ActivateKueueWorkload,
    DeactivateKueueWorkload,
    DeletePod,
    EvictPod,
    PatchMinCount,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    ResumeJob,
    SuspendJob,
)
from phalanx.controller.model.kueue import (
    KUEUE_CLUSTER_QUEUE,
    KUEUE_FLAVOR,
    KUEUE_LOCAL_QUEUE,
    KUEUE_WORKLOAD,
    KueueWorkloadRecord,
)
from phalanx.controller.plan import Plan, PlanInput, plan
from phalanx.controller.watch.webhooks import Webhooks

QUEUE = {"kueue.x-k8s.io/queue-name": "lq"}


def queued_job(name: str = "train", count: int = 4, **kwargs: Any) -> dict[str, Any]:
    """A Phalanx-managed Job that Kueue queues (its queue-name label), one network block per gang."""
    annotations = {**TOPOLOGY, **kwargs.pop("annotations", {})}
    job = job_body(name, count, annotations=annotations, **kwargs)
    job["metadata"]["labels"].update(QUEUE)
    return job


def workload(
    owner: str,
    *,
    kind: str = "Job",
    uid: str | None = None,
    admitted: bool = True,
    evicted: str = "",
    active: bool = True,
    cluster_queue: str = "cq",
    topology: bool = False,
    index: str = "",
    count: int = 4,
) -> dict[str, Any]:
    """Kueue's Workload for an owner, as Kueue v0.17 writes it (v1beta2)."""
    conditions = []
    if admitted or evicted:
        conditions += [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "reserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"},
        ]
    else:
        conditions.append(
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient quota",
            }
        )
    if evicted:
        conditions.append(
            {"type": "Evicted", "status": "True", "reason": evicted, "message": f"by {evicted}"}
        )
    status: dict[str, Any] = {"conditions": conditions}
    if admitted or evicted:
        assignment: dict[str, Any] = {"name": "main", "flavors": {"nvidia.com/gpu": "gpu"}, "count": count}
        if topology:
            assignment["topologyAssignment"] = {"levels": ["kubernetes.io/hostname"], "slices": []}
        status["admission"] = {"clusterQueue": cluster_queue, "podSetAssignments": [assignment]}
    annotations = {"kueue.x-k8s.io/component-workload-index": index} if index else {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"{kind.lower()}-{owner}-{index or 'x'}",
            "namespace": "ml",
            "uid": f"wl-{owner}-{index}",
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": kind,
                    "name": owner,
                    "uid": uid or f"uid-{owner}",
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": "lq", "active": active, "podSets": [{"name": "main", "count": count}]},
        "status": status,
    }


def kueue_state(
    jobs: list[tuple[dict[str, Any], Any, list[dict[str, Any]]]],
    workloads: list[dict[str, Any]],
    **kwargs: Any,
) -> PlanInput:
    return cluster(jobs, owners=[(KUEUE_WORKLOAD, w) for w in workloads], **kwargs)


def status_of_group(result: Plan, prefix: str) -> PodGroupStatus:
    return next(a.status for a in only(result.actions, PatchStatus) if a.group.name.startswith(prefix))


def admitted_condition(status: PodGroupStatus) -> tuple[str, str]:
    cond = status.condition(c.ADMITTED)
    assert cond is not None
    return cond.reason, cond.message


def running(job: str, group: str, nodes: list[str], priority: int = 0) -> list[dict[str, Any]]:
    return [
        pod_body(job, i, gated=False, node=n, phase="Running", group=group, priority=priority)
        for i, n in enumerate(nodes)
    ]


# ---------------------------------------------------------------------- held until admitted
def test_a_queued_job_is_held_by_kueue_and_nothing_is_reserved_for_it() -> None:
    job = queued_job(suspend=True)  # Kueue's webhook suspends it at creation
    result = plan(kueue_state([(job, group_of(job), [])], [workload("train", admitted=False)]), NOW)
    assert not only(result.actions, ReleasePod) and not only(result.actions, RecordAdmission)
    status = status_of_group(result, "train")
    reason, message = admitted_condition(status)
    assert reason == c.REASON_HELD_BY_KUEUE
    assert "waiting in Kueue's LocalQueue lq" in message and "insufficient quota" in message
    assert status.admission is None and status.reservation is None


def test_a_job_kueue_admitted_is_placed_whole_in_one_block_by_best_fit() -> None:
    """nb-b has one busy node, nb-a none: a gang of three takes nb-b's three free nodes (best fit)."""
    job = queued_job(count=3)
    pods = [pod_body("train", i) for i in range(3)]
    state = kueue_state([(job, group_of(job), pods)], [workload("train", count=3)], busy=[8])
    releases = only(plan(state, NOW).actions, ReleasePod)
    assert sorted(r.node for r in releases) == ["n5", "n6", "n7"]


def test_gated_pods_of_a_job_kueue_has_not_admitted_yet_are_not_placed() -> None:
    """The Job is unsuspended but Kueue's Workload (seen late, or re-queued) is not admitted: wait."""
    job = queued_job()
    pods = [pod_body("train", i) for i in range(4)]
    result = plan(kueue_state([(job, group_of(job), pods)], [workload("train", admitted=False)]), NOW)
    assert not only(result.actions, ReleasePod)
    assert admitted_condition(status_of_group(result, "train"))[0] == c.REASON_HELD_BY_KUEUE


def test_a_job_with_the_queue_label_but_no_workload_yet_is_held_while_suspended() -> None:
    job = queued_job(suspend=True)
    result = plan(kueue_state([(job, group_of(job), [])], []), NOW)
    reason, message = admitted_condition(status_of_group(result, "train"))
    assert reason == c.REASON_HELD_BY_KUEUE and "has not made its Workload yet" in message


# ---------------------------------------------------------------------- evicted: dropped at once
def _admitted_group(job: dict[str, Any], nodes: list[str]) -> Any:
    admission = Admission(
        domain="nb-a",
        assignments=[Assignment(pod=f"train-{i}", node=n) for i, n in enumerate(nodes)],
        admitted_at=NOW - dt.timedelta(minutes=1),
        attempt=0,
    )
    reservation = Reservation(
        domain="nb-a",
        nodes=nodes,
        victims=["ml/low-0"],
        reserved_at=NOW - dt.timedelta(seconds=5),
        expires_at=NOW + dt.timedelta(seconds=100),
    )
    return with_status(group_of(job), PodGroupStatus(admission=admission, reservation=reservation))


def test_when_kueue_evicts_the_reservation_and_the_recorded_decision_are_dropped_at_once() -> None:
    """Kueue's Workload says Evicted (preemption, PodsReadyTimeout, deactivation) before Kueue has suspended
    the Job: Phalanx releases nothing more and clears what it recorded and reserved, in this pass."""
    job = queued_job()
    group = _admitted_group(job, ["n1", "n2", "n3", "n4"])
    pods = [*running("train", group.name, ["n1", "n2"]), pod_body("train", 2), pod_body("train", 3)]
    for evicted in ("Preempted", "PodsReadyTimeout", "Deactivated"):
        state = kueue_state([(job, group, pods)], [workload("train", evicted=evicted)])
        result = plan(state, NOW)
        assert not only(result.actions, ReleasePod), evicted
        status = status_of_group(result, "train")
        assert status.admission is None and status.reservation is None
        reason, message = admitted_condition(status)
        assert reason == c.REASON_HELD_BY_KUEUE and "Kueue is evicting it" in message and evicted in message


def evicted_and_released(owner: str, requeued: str = "True") -> dict[str, Any]:
    """A Workload Kueue preempted, stopped and requeued, as Kueue v0.17 leaves it while it waits: quota
    released (QuotaReserved=False, no admission), Evicted and Preempted still True (Kueue sets them back only
    when it reserves quota again), Requeued `requeued`."""
    body = workload(owner, admitted=False)
    said = "Preempted to accommodate a workload due to prioritization in the ClusterQueue"
    body["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": said},
        {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "no reservation"},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": said},
        {"type": "Requeued", "status": requeued, "reason": "Preempted", "message": said},
    ]
    return body


def test_a_job_kueue_evicted_and_requeued_is_held_waiting_in_its_local_queue_not_said_to_be_evicted() -> None:
    """Once Kueue has stopped the preempted Job and released its quota, the Job is held as one waiting in
    its LocalQueue again (naming the eviction), not as being evicted, for as long as it waits there; while
    Kueue has not requeued it (Requeued=False), that is said."""
    job = queued_job(suspend=True)
    result = plan(kueue_state([(job, group_of(job), [])], [evicted_and_released("train")]), NOW)
    status = status_of_group(result, "train")
    reason, message = admitted_condition(status)
    assert reason == c.REASON_HELD_BY_KUEUE and "Kueue is evicting it" not in message, message
    assert "waiting in Kueue's LocalQueue lq since Kueue evicted it (Preempted)" in message, message
    assert "QuotaReserved=False Pending" in message
    assert status.admission is None and status.reservation is None
    result = plan(kueue_state([(job, group_of(job), [])], [evicted_and_released("train", "False")]), NOW)
    reason, message = admitted_condition(status_of_group(result, "train"))
    assert reason == c.REASON_HELD_BY_KUEUE
    assert "Kueue evicted it (Preempted) and has not requeued it yet" in message, message


def test_a_deactivated_workload_holds_its_job() -> None:
    job = queued_job()
    pods = [pod_body("train", i) for i in range(4)]
    state = kueue_state([(job, group_of(job), pods)], [workload("train", active=False)])
    result = plan(state, NOW)
    assert not only(result.actions, ReleasePod)
    assert "spec.active: false" in admitted_condition(status_of_group(result, "train"))[1]


# ---------------------------------------------------------------------- the gang size after admission
def test_partial_admission_lowers_min_count_only_once_kueue_admitted_the_job() -> None:
    """Kueue admitted 3 of 4 (job-min-parallelism 2) and set parallelism 3: minCount follows; while the
    Workload is not admitted, a parallelism change (Kueue's restore on eviction) is not followed."""
    job = queued_job(annotations={"kueue.x-k8s.io/job-min-parallelism": "2"})
    group = group_of(job)  # made at creation: minCount 4
    job["spec"]["parallelism"] = job["spec"]["completions"] = 3
    pods = [pod_body("train", i) for i in range(3)]
    admitted = plan(kueue_state([(job, group, pods)], [workload("train", count=3)]), NOW)
    (patch,) = only(admitted.actions, PatchMinCount)
    assert patch.min_count == 3
    assert len(only(admitted.actions, ReleasePod)) == 3

    held = plan(kueue_state([(job, group, [])], [workload("train", admitted=False)]), NOW)
    assert not only(held.actions, PatchMinCount)


# ---------------------------------------------------------------------- requeue: pods deleted, no suspend
IGNORE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
COUNT = {"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}
FAIL_ON_EXIT = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}
IGNORE_ON_EXIT = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}


def _broken(rules: list[dict[str, Any]] | None) -> Plan:
    """n3 failed under train (nb-a, n4 busy): the pass after the grace period."""
    job = queued_job(count=3)
    if rules is not None:
        job["spec"]["podFailurePolicy"] = {"rules": rules}
    group = group_of(job)
    pods = [*running("train", group.name, ["n1", "n2"]), pod_body("train", 3, group=group.name)]
    nodes = [node_body(n) for n in ("n1", "n2", "n4", "n5", "n6", "n7", "n8")]
    state = kueue_state(
        [(job, group, pods)], [workload("train", count=3)], nodes=nodes, others=[filler("n4")]
    )
    waited = with_status(group, status_of_group(plan(state, NOW), "train"))
    state = kueue_state(
        [(job, waited, pods)], [workload("train", count=3)], nodes=nodes, others=[filler("n4")]
    )
    return plan(state, NOW + dt.timedelta(seconds=31))


@pytest.mark.parametrize(
    ("rules", "through_kueue"),
    [
        (None, True),  # each deleted pod would be a failure of the Job
        ([IGNORE], False),  # docs/kueue.md's advice: deleting costs nothing
        ([COUNT], True),
        ([FAIL_ON_EXIT, IGNORE], True),  # the exit-code rule may match a disrupted pod first
        ([IGNORE_ON_EXIT, IGNORE], False),  # an Ignore on exit codes is passed over
    ],
)
def test_a_broken_kueue_gang_is_requeued_through_kueue_unless_deleting_its_pods_costs_nothing(
    rules: list[dict[str, Any]] | None, through_kueue: bool
) -> None:
    """A Kueue-managed Job is never suspended by Phalanx (Kueue would unsuspend it). When its
    podFailurePolicy ignores disrupted pods, its pods are deleted (the Job makes them again, gated; Kueue's
    admission stays); otherwise each would count as a failure, so its Kueue Workload is deactivated with
    the why (Kueue evicts it and suspends the Job, which counts none)."""
    later = _broken(rules)
    assert not only(later.actions, SuspendJob) and not only(later.actions, ResumeJob)
    deactivated = only(later.actions, DeactivateKueueWorkload)
    deleted = only(later.actions, DeletePod)
    if through_kueue:
        assert not deleted
        (d,) = deactivated
        assert (d.workload.kind, d.workload.name, d.workload.uid) == ("Workload", "job-train-x", "wl-train-")
        assert d.workload.api_version == "kueue.x-k8s.io/v1beta2"
        assert d.cause == "below-min-count" and "below its minCount" in d.why
        why = d.why
    else:
        assert not deactivated
        assert sorted(d.pod.name for d in deleted) == ["train-0", "train-1"]
        assert {d.cause for d in deleted} == {"below-min-count"}
        (why,) = {d.why for d in deleted}
    said = {(e.involved.kind, e.message) for e in only(later.actions, PostEvent) if e.reason == "Requeued"}
    assert ("Job", why) in said, said


def _deactivated(state: str) -> dict[str, Any]:
    """train's Kueue Workload after Phalanx deactivated it to requeue it: `state` is how far Kueue got."""
    w = workload("train", count=3, active=state == "activated by someone", evicted="InactiveWorkload")
    if state != "deactivated by someone":
        w["metadata"]["annotations"]["phalanx.dev/requeued"] = "below its minCount: 2 of its 3 pods were left"
    conditions = w["status"]["conditions"]
    if state == "not evicted yet":
        conditions.pop()  # no Evicted condition yet
    if state in ("stopped", "activated by someone", "deactivated by someone"):
        for cond in conditions:
            if cond["type"] in ("QuotaReserved", "Admitted"):
                cond.update(status="False", reason="Pending", message="evicted")
        del w["status"]["admission"]
    return w


@pytest.mark.parametrize(
    ("state", "activated"),
    [
        ("not evicted yet", False),
        ("evicting", False),  # Kueue is stopping the Job: its quota is still reserved
        ("stopped", True),  # Kueue released its quota once the Job ran no pod
        ("activated by someone", True),  # the note is cleared
        ("deactivated by someone", False),  # not ours: left alone
    ],
)
def test_a_workload_phalanx_deactivated_is_activated_again_once_kueue_released_its_quota(
    state: str, activated: bool
) -> None:
    """The second half of a requeue through Kueue: nothing runs or is requeued again meanwhile, the groups
    say why, and once Kueue has stopped the Job (its quota released) the Workload is activated again, its
    note cleared, and Kueue queues it again."""
    job = queued_job(count=3, suspend=state != "not evicted yet")
    group = group_of(job)
    pods = [] if state != "not evicted yet" else running("train", group.name, ["n1", "n2"])
    result = plan(kueue_state([(job, group, pods)], [_deactivated(state)]), NOW)
    activations = only(result.actions, ActivateKueueWorkload)
    assert [a.workload.key for a in activations] == (["ml/job-train-x"] if activated else [])
    assert not only(result.actions, DeactivateKueueWorkload) and not only(result.actions, DeletePod)
    assert not only(result.actions, ReleasePod) and not only(result.actions, ResumeJob)
    reason, message = admitted_condition(status_of_group(result, "train"))
    if state in ("not evicted yet", "evicting"):
        assert reason == c.REASON_REQUEUED, message
        assert message.startswith("requeued by Phalanx: below its minCount"), message
        assert "Phalanx deactivated its Workload job-train-x (spec.active: false)" in message, message
    elif state == "deactivated by someone":
        assert "Kueue deactivated its Workload job-train-x" in message, message


def test_the_answer_to_a_deactivation_is_not_undone_by_an_older_event_of_kueues() -> None:
    """Our write's answer goes into the cache at once, and a watch event older than it (Kueue's status
    write, still active and without our note) does not bring the Workload back: the next pass would
    requeue the gang a second time."""
    cache = ClusterCache()
    before = workload("train", count=3)
    before["metadata"]["resourceVersion"] = "10"
    cache.upsert(KUEUE_WORKLOAD, before)
    ours = workload("train", count=3, active=False)
    ours["metadata"]["annotations"]["phalanx.dev/requeued"] = "below its minCount"
    ours["metadata"]["resourceVersion"] = "12"
    cache.upsert(KUEUE_WORKLOAD, ours, own_write=True)
    older = workload("train", count=3, evicted="InactiveWorkload")
    older["metadata"]["resourceVersion"] = "11"
    cache.upsert(KUEUE_WORKLOAD, older)
    held = cache.kueue.items["ml/job-train-x"]
    assert (held.active, held.requeued) == (False, "below its minCount")
    kueues = workload("train", count=3, active=False, evicted="InactiveWorkload")
    kueues["metadata"]["annotations"]["phalanx.dev/requeued"] = "below its minCount"
    kueues["metadata"]["resourceVersion"] = "13"
    cache.upsert(KUEUE_WORKLOAD, kueues)  # Kueue's eviction, after our write: shown
    assert cache.kueue.items["ml/job-train-x"].is_true("Evicted")


@pytest.mark.parametrize(
    ("policies", "how"),
    [
        ((None, None), "kueue"),
        (([IGNORE], [COUNT]), "kueue"),  # one replicated Job would count its deleted pods
        (([IGNORE], [IGNORE_ON_EXIT, IGNORE]), "delete-pods"),
    ],
)
def test_a_kueue_jobset_is_requeued_by_deleting_pods_only_when_every_replicated_job_ignores_them(
    policies: tuple[list[dict[str, Any]] | None, ...], how: str
) -> None:
    """A JobSet (and a TrainJob, through its JobSet) is requeued through Kueue unless each of its
    replicated Jobs' podFailurePolicy ignores disrupted pods; a LeaderWorkerSet group, which has no
    suspend, by deleting its pods whatever."""
    body = jobset_body(replicated=(("workers", 2, 2), ("driver", 1, 1)))
    body["metadata"]["labels"].update(QUEUE)
    for replicated, rules in zip(body["spec"]["replicatedJobs"], policies, strict=True):
        if rules is not None:
            replicated["template"]["spec"]["podFailurePolicy"] = {"rules": rules}
    record = JobSetRecord.from_body(body)
    assert record.disruptions_ignored is (how == "delete-pods")
    view = kueue_view(
        body["metadata"]["labels"], [KueueWorkloadRecord.from_body(workload("train", kind="JobSet"))]
    )
    suspendable = Owner("JobSet", record.ref, None, requeue_free=record.disruptions_ignored)
    owner = kueue_owner(suspendable, view)
    assert owner.requeue == how
    assert owner.kueue_workload is not None and owner.kueue_workload.name == "jobset-train-x"
    lws_group = kueue_owner(dataclasses.replace(suspendable, requeue="delete-pods"), view)
    assert lws_group.requeue == "delete-pods"


@pytest.mark.parametrize("ignored", [False, True])
def test_a_released_pod_that_cannot_be_bound_requeues_a_kueue_gang_whole(ignored: bool) -> None:
    job = queued_job(count=2)
    if ignored:
        job["spec"]["podFailurePolicy"] = {"rules": [IGNORE]}
    group = group_of(job)
    stuck = pod_body("train", 0, gated=False, released_to="n1", group=group.name)
    stuck["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/8 nodes"}
    ]
    pods = [stuck, pod_body("train", 1, gated=False, node="n2", phase="Running", group=group.name)]
    result = plan(kueue_state([(job, group, pods)], [workload("train", count=2)]), NOW)
    causes = {d.cause for d in only(result.actions, DeletePod if ignored else DeactivateKueueWorkload)}
    assert causes == {"unbindable"}
    assert not only(result.actions, SuspendJob)


def test_no_resume_of_a_kueue_job_that_carries_an_old_requeue_note() -> None:
    job = queued_job(suspend=True)
    job["metadata"]["annotations"]["phalanx.dev/requeued"] = "below its minCount: ..."
    result = plan(kueue_state([(job, group_of(job), [])], [workload("train", admitted=False)]), NOW)
    assert not only(result.actions, ResumeJob)


# ---------------------------------------------------------------------- Phalanx's own preemption
def _low(name: str, first: int, queue: str | None) -> tuple[dict[str, Any], Any, list[dict[str, Any]], Any]:
    job = job_body(
        name, 4, annotations={"phalanx.dev/disruption-mode": "all"}, created="2026-11-30T10:00:00Z"
    )
    if queue is not None:
        job["metadata"]["labels"].update(QUEUE)
    group = group_of(job)
    pods = running(name, group.name, [f"n{first + i}" for i in range(4)], priority=10)
    wl = workload(name, cluster_queue=queue) if queue is not None else None
    return job, group, pods, wl


def _high(queue: str | None) -> tuple[dict[str, Any], Any, list[dict[str, Any]], Any]:
    job = job_body("high", 2, annotations={"phalanx.dev/topology-key": LB})
    if queue is not None:
        job["metadata"]["labels"].update(QUEUE)
    group = group_of(job)
    group = dataclasses.replace(group, spec=group.spec.model_copy(update={"priority": 1000}))
    pods = [pod_body("high", i, priority=1000, group=group.name) for i in range(2)]
    return job, group, pods, workload("high", cluster_queue=queue, count=2) if queue is not None else None


def _preempt(*units: tuple[dict[str, Any], Any, list[dict[str, Any]], Any]) -> Plan:
    jobs = [(job, group, pods) for job, group, pods, _ in units]
    return plan(kueue_state(jobs, [wl for *_, wl in units if wl is not None]), NOW)


def test_phalanx_preempts_no_kueue_managed_victim_for_a_gang_kueue_does_not_manage() -> None:
    result = _preempt(_low("low-a", 1, "cq"), _low("low-b", 5, "cq"), _high(None))
    assert not only(result.actions, DeletePod) and not only(result.actions, SuspendJob)
    assert not only(result.actions, DeactivateKueueWorkload)
    assert not only(result.actions, EvictPod)


@pytest.mark.parametrize("ignored", [False, True])
def test_a_kueue_gang_preempts_only_victims_of_its_own_cluster_queue_whole(ignored: bool) -> None:
    """A Kueue-managed victim is never suspended by Phalanx: requeued through Kueue (its Workload
    deactivated), or, when its podFailurePolicy ignores disrupted pods, by deleting them."""
    low_b = _low("low-b", 5, "cq")
    if ignored:
        low_b[0]["spec"]["podFailurePolicy"] = {"rules": [IGNORE]}
    result = _preempt(_low("low-a", 1, "other-cq"), low_b, _high("cq"))
    deleted = only(result.actions, DeletePod)
    deactivated = only(result.actions, DeactivateKueueWorkload)
    if ignored:
        assert {d.pod.name.rsplit("-", 1)[0] for d in deleted} == {"low-b"} and len(deleted) == 4
        assert {d.cause for d in deleted} == {"preempted"} and not deactivated
    else:
        assert [(d.workload.name, d.cause) for d in deactivated] == [("job-low-b-x", "preempted")]
        assert not deleted
    assert not only(result.actions, SuspendJob)


def test_a_kueue_gang_may_take_a_victim_kueue_does_not_manage() -> None:
    result = _preempt(_low("low-a", 1, "other-cq"), _low("low-b", 5, None), _high("cq"))
    (suspend,) = only(result.actions, SuspendJob)
    assert suspend.job.name == "low-b"


def test_pods_of_a_kueue_job_phalanx_does_not_manage_are_no_victims_for_other_queues() -> None:
    """A Job only Kueue manages (no Phalanx label): its pods are Kueue's, by its Workload's owner."""
    others = [
        pod_body("kueue-only", i, gated=False, node=f"n{i + 1}", phase="Running", priority=10)
        for i in range(8)
    ]
    high = _high(None)
    state = kueue_state([high[:3]], [workload("kueue-only", cluster_queue="cq", count=8)], others=others)
    result = plan(state, NOW)
    assert not only(result.actions, EvictPod)
    same_queue = _high("cq")
    wls = [workload("kueue-only", cluster_queue="cq", count=8), same_queue[3]]
    result = plan(kueue_state([same_queue[:3]], wls, others=others), NOW)
    assert len(only(result.actions, EvictPod)) == 2  # one by one, as Phalanx takes pods it does not manage


def _kueue_only_trainjob_pods() -> list[dict[str, Any]]:
    """The running pods of TrainJob `llm` that only Kueue manages (no Phalanx label): made by its JobSet,
    which Trainer names after the TrainJob; Kueue's Workload is owned by the TrainJob, whose uid no pod
    carries."""
    return [
        jobset_pod("llm", "node", 0, i, node=f"n{i + 1}", gated=False, priority=10)
        | {"status": {"phase": "Running"}}
        for i in range(8)
    ]


@pytest.mark.parametrize(
    ("preemptor_queue", "evicted"),
    [
        (None, 0),  # a gang Kueue does not manage takes no pod Kueue manages
        ("other-cq", 0),  # nor one of another ClusterQueue
        ("cq", 2),  # one of the same ClusterQueue may (one by one: Phalanx does not manage them)
    ],
)
def test_pods_of_a_kueue_trainjob_phalanx_does_not_manage_are_kueues_by_the_trainjobs_workload(
    preemptor_queue: str | None, evicted: int
) -> None:
    high = _high(preemptor_queue)
    wls = [workload("llm", kind="TrainJob", uid="uid-tj-llm", cluster_queue="cq", count=8)]
    if high[3] is not None:
        wls.append(high[3])
    result = plan(kueue_state([high[:3]], wls, others=_kueue_only_trainjob_pods()), NOW)
    assert len(only(result.actions, EvictPod)) == evicted


def test_a_kueue_gang_waits_for_kueues_evictions_instead_of_preempting_more() -> None:
    """Kueue preempted low-b for high (its pods are terminating) and admitted high: Phalanx waits for them to
    go instead of preempting low-a as well."""
    low_a, low_b, high = _low("low-a", 1, "cq"), _low("low-b", 5, "cq"), _high("cq")
    for pod in low_b[2]:
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:59Z"
    result = _preempt(low_a, low_b, high)
    assert not only(result.actions, DeletePod) and not only(result.actions, EvictPod)
    reason, message = admitted_condition(status_of_group(result, "high"))
    assert reason == c.REASON_UNSCHEDULABLE and "terminating pod(s) to go" in message


# ---------------------------------------------------------------------- never fits
def test_a_gang_kueue_admitted_that_can_never_fit_any_block_is_said_so_at_once() -> None:
    job = queued_job("big", 5)  # 5 whole nodes in one network block of 4
    pods = [pod_body("big", i) for i in range(5)]
    first = plan(kueue_state([(job, group_of(job), pods)], [workload("big", count=5)]), NOW)
    status = status_of_group(first, "big")
    reason, message = admitted_condition(status)
    assert reason == c.REASON_UNSCHEDULABLE
    assert message.startswith("never fits: ") and "can never fit in this cluster" in message
    assert "Kueue admitted it into ClusterQueue cq by quota alone" in message
    warnings = [a for a in only(first.actions, PostEvent) if a.reason == c.REASON_UNSCHEDULABLE]
    assert warnings and all(a.message == message for a in warnings)
    # Other work comes and goes: the message stays, so no second event.
    said = with_status(group_of(job), status)
    later = plan(kueue_state([(job, said, pods)], [workload("big", count=5)], busy=[1, 5]), NOW)
    patched = [a.status for a in only(later.actions, PatchStatus) if a.group.name.startswith("big")]
    assert all(admitted_condition(p)[1] == message for p in patched)
    assert not [a for a in only(later.actions, PostEvent) if a.reason == c.REASON_UNSCHEDULABLE]


def test_a_gang_that_only_waits_for_room_is_not_said_to_never_fit() -> None:
    job = queued_job("wait", 4)
    pods = [pod_body("wait", i) for i in range(4)]
    result = plan(kueue_state([(job, group_of(job), pods)], [workload("wait")], busy=[1, 5]), NOW)
    reason, message = admitted_condition(status_of_group(result, "wait"))
    assert reason == c.REASON_UNSCHEDULABLE and "never fits" not in message and "Kueue" not in message


def test_a_kueue_gang_left_short_by_a_lost_node_is_not_said_to_never_fit() -> None:
    """Running on n1, n2 and n4 when n4 is deleted: no placement holds its pods now (a bound node is gone,
    even with every node empty), but it is a broken gang to requeue whole (requeue.py), not one that can
    never fit: the early "never fits" is for a gang none of whose pods run."""
    job = queued_job(count=4)
    group = group_of(job)
    pods = [*running("train", group.name, ["n1", "n2", "n4"]), pod_body("train", 3, group=group.name)]
    nodes = [node_body(n) for n in ("n1", "n2", "n3", "n5", "n6", "n7", "n8")]
    result = plan(kueue_state([(job, group, pods)], [workload("train")], nodes=nodes), NOW)
    reason, message = admitted_condition(status_of_group(result, "train"))
    assert reason == c.REASON_UNSCHEDULABLE and "n4" in message
    assert "never fits" not in message and "Kueue admitted" not in message


def test_never_fits_is_kueues_sentence_only_for_a_gang_kueue_admitted() -> None:
    job = job_body("big", 5, annotations=TOPOLOGY)
    pods = [pod_body("big", i) for i in range(5)]
    result = plan(cluster([(job, group_of(job), pods)]), NOW)
    reason, message = admitted_condition(status_of_group(result, "big"))
    assert reason == c.REASON_UNSCHEDULABLE and "Kueue" not in message


# ---------------------------------------------------------------------- Kueue's flavor and its TAS
def test_a_flavors_node_selector_and_tolerations_written_at_admission_are_honoured() -> None:
    """Kueue wrote its flavor's nodeLabels (pool=b: n5-n8) and tolerations (n7, n8 tainted) into the pod
    template at admission: the gang of two goes to n7 and n8's block only if it tolerates them, and never
    outside pool b."""
    nodes = []
    for i in range(1, 9):
        body = node_body(f"n{i}")
        body["metadata"]["labels"]["example.com/pool"] = "a" if i <= 4 else "b"
        if i in (7, 8):
            body["spec"]["taints"] = [{"key": "example.com/reserved", "effect": "NoSchedule"}]
        nodes.append(body)
    job = queued_job(count=3, annotations={"phalanx.dev/topology-key": NB})

    def pods(tolerate: bool) -> list[dict[str, Any]]:
        out = []
        for i in range(3):
            pod = pod_body("train", i)
            pod["spec"]["nodeSelector"] = {"example.com/pool": "b"}
            if tolerate:
                pod["spec"]["tolerations"] = [{"key": "example.com/reserved", "operator": "Exists"}]
            out.append(pod)
        return out

    wl = [workload("train", count=3)]
    plain = plan(kueue_state([(job, group_of(job), pods(False))], wl, nodes=nodes), NOW)
    assert not only(plain.actions, ReleasePod)  # pool b has only n5, n6 untainted: 2 of 3
    tolerated = plan(kueue_state([(job, group_of(job), pods(True))], wl, nodes=nodes), NOW)
    assert {r.node for r in only(tolerated.actions, ReleasePod)} <= {"n5", "n6", "n7", "n8"}
    assert len(only(tolerated.actions, ReleasePod)) == 3


def test_kueues_topology_aware_scheduling_on_a_phalanx_job_is_warned_of_once() -> None:
    job = queued_job()
    pods = [pod_body("train", i) for i in range(4)]
    state = kueue_state([(job, group_of(job), pods)], [workload("train", topology=True)])
    first = plan(state, NOW)
    (warning,) = [a for a in only(first.actions, PostEvent) if a.reason == TAS_EVENT_REASON]
    assert "Topology-Aware Scheduling" in warning.message and "topologyName" in warning.message
    announced = {"uid-train/kueue-tas": warning.message}
    again = kueue_state([(job, group_of(job), pods)], [workload("train", topology=True)], announced=announced)
    assert not [a for a in only(plan(again, NOW).actions, PostEvent) if a.reason == TAS_EVENT_REASON]


def queue_setup(topology: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """LocalQueue ml/lq feeding ClusterQueue cq of the flavors gpu and gpu-tas (in two resource groups);
    `topology`: each flavor's topologyName, if it has one."""
    flavors = [
        {
            "metadata": {"name": name, "uid": f"rf-{name}"},
            "spec": {
                "nodeLabels": {"pool": name},
                **({"topologyName": topology[name]} if name in topology else {}),
            },
        }
        for name in ("gpu", "gpu-tas")
    ]
    groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": n}]} for n in ("gpu", "gpu-tas")]
    return [
        (
            KUEUE_LOCAL_QUEUE,
            {"metadata": {"name": "lq", "namespace": "ml", "uid": "lq"}, "spec": {"clusterQueue": "cq"}},
        ),
        (KUEUE_CLUSTER_QUEUE, {"metadata": {"name": "cq", "uid": "cq"}, "spec": {"resourceGroups": groups}}),
        *((KUEUE_FLAVOR, f) for f in flavors),
    ]


def tas_warnings(result: Plan) -> list[PostEvent]:
    return [a for a in only(result.actions, PostEvent) if a.reason == TAS_EVENT_REASON]


def test_a_job_queued_behind_a_flavor_with_a_topology_name_is_warned_of_before_kueue_admits_it() -> None:
    job = queued_job(suspend=True)
    owners = [(KUEUE_WORKLOAD, workload("train", admitted=False)), *queue_setup({"gpu-tas": "rack-topology"})]
    state = cluster([(job, group_of(job), [])], owners=owners)
    result = plan(state, NOW)
    (warning,) = tas_warnings(result)
    assert warning.type == "Warning" and warning.involved.name == "train"
    assert "Topology-Aware Scheduling would also place this Job" in warning.message
    assert "LocalQueue ml/lq feeds ClusterQueue cq" in warning.message
    assert "gpu-tas (topologyName rack-topology)" in warning.message and "gpu (" not in warning.message
    assert "without topologyName" in warning.message
    assert admitted_condition(status_of_group(result, "train"))[0] == c.REASON_HELD_BY_KUEUE  # still held
    announced = {"uid-train/kueue-tas": warning.message}
    again = cluster([(job, group_of(job), [])], owners=owners, announced=announced)
    assert not tas_warnings(plan(again, NOW))  # once


def test_no_topology_warning_without_a_topology_name_behind_the_queue_or_for_a_queue_not_seen() -> None:
    job = queued_job(suspend=True)
    wl = (KUEUE_WORKLOAD, workload("train", admitted=False))
    plain = cluster([(job, group_of(job), [])], owners=[wl, *queue_setup({})])
    assert not tas_warnings(plan(plain, NOW))
    unseen = [o for o in queue_setup({"gpu-tas": "t"}) if o[0] != KUEUE_LOCAL_QUEUE]
    assert not tas_warnings(plan(cluster([(job, group_of(job), [])], owners=[wl, *unseen]), NOW))
    # Admitted with a flavor Kueue did not place by topology: nothing to warn of.
    running = queued_job()
    pods = [pod_body("train", i) for i in range(4)]
    admitted = cluster(
        [(running, group_of(running), pods)],
        owners=[(KUEUE_WORKLOAD, workload("train")), *queue_setup({"gpu-tas": "t"})],
    )
    assert not tas_warnings(plan(admitted, NOW))


def test_the_cache_follows_kueues_queue_setup_and_drops_it_on_delete() -> None:
    cache = ClusterCache()
    for kind, body in queue_setup({"gpu-tas": "t", "gpu": "u"}):
        cache.upsert(kind, body)
    found = cache.kueue_topology_flavors("ml", "lq")
    assert (
        found is not None
        and found.cluster_queue == "cq"
        and found.flavors == (("gpu", "u"), ("gpu-tas", "t"))
    )
    assert cache.kueue_topology_flavors("other", "lq") is None
    assert cache.records(KUEUE_FLAVOR) == {("gpu", "rf-gpu"), ("gpu-tas", "rf-gpu-tas")}
    generation = cache.generation
    _, cq = queue_setup({})[1]
    cache.upsert(KUEUE_CLUSTER_QUEUE, {**cq, "metadata": {**cq["metadata"], "resourceVersion": "7"}})
    assert cache.generation == generation  # only a new resourceVersion: no pass
    for kind, body in queue_setup({}):
        if kind == KUEUE_FLAVOR:
            cache.upsert(kind, body)  # the topologyNames taken out
    assert cache.kueue_topology_flavors("ml", "lq") is None and cache.generation > generation
    cache.upsert(KUEUE_FLAVOR, queue_setup({"gpu": "u"})[2][1])
    assert cache.kueue_topology_flavors("ml", "lq") is not None
    cache.delete(KUEUE_LOCAL_QUEUE, queue_setup({})[0][1])
    assert cache.kueue_topology_flavors("ml", "lq") is None and cache.records(KUEUE_LOCAL_QUEUE) == set()


# ---------------------------------------------------------------------- LeaderWorkerSets: a Workload a group
def test_each_leaderworkerset_group_is_held_until_its_own_workload_is_admitted() -> None:
    lws = lws_body("serve", replicas=2, size=2)
    lws["metadata"]["labels"].update(QUEUE)
    pods = [lws_pod("serve", g, w) for g in (0, 1) for w in (0, 1)]
    wls = [
        workload("serve", kind="LeaderWorkerSet", uid="uid-lws-serve", index="0", count=2),
        workload("serve", kind="LeaderWorkerSet", uid="uid-lws-serve", index="1", admitted=False, count=2),
    ]
    state = cluster(owners=[("LeaderWorkerSet", lws), *((KUEUE_WORKLOAD, w) for w in wls)], pods=pods)
    result = plan(state, NOW)
    released = {r.pod.name for r in only(result.actions, ReleasePod)}
    assert released == {"serve-0", "serve-0-1"}


def test_a_pod_still_behind_kueues_gate_is_not_released_though_its_workload_is_admitted() -> None:
    """Kueue's Workload of group 0 is admitted but Kueue has not yet taken its gate off one pod: Phalanx
    releases a pod only when its own gate is the last one, so the gang waits, naming Kueue's gate."""
    lws = lws_body("serve", replicas=1, size=2)
    lws["metadata"]["labels"].update(QUEUE)
    pods = [lws_pod("serve", 0, w) for w in (0, 1)]
    pods[1]["spec"]["schedulingGates"].append({"name": KUEUE_GATES[0]})
    wl = workload("serve", kind="LeaderWorkerSet", uid="uid-lws-serve", index="0", count=2)
    owners = [("LeaderWorkerSet", lws), (KUEUE_WORKLOAD, wl)]
    result = plan(cluster(owners=owners, pods=pods), NOW)
    assert not only(result.actions, ReleasePod)
    reason, message = admitted_condition(status_of_group(result, "serve"))
    assert reason == c.REASON_WAITING_FOR_GATES and KUEUE_GATES[0] in message
    pods[1]["spec"]["schedulingGates"] = [
        g for g in pods[1]["spec"]["schedulingGates"] if g["name"] != KUEUE_GATES[0]
    ]
    assert len(only(plan(cluster(owners=owners, pods=pods), NOW).actions, ReleasePod)) == 2


def test_each_leaderworkerset_groups_topology_warning_is_said_once_and_does_not_take_turns() -> None:
    """Each group is its own Workload (its own name in the warning): one warning a group, and the next pass,
    with what the first remembered, says nothing again (one key for the set would flip between them)."""
    lws = lws_body("serve", replicas=2, size=2)
    lws["metadata"]["labels"].update(QUEUE)
    pods = [lws_pod("serve", g, w) for g in (0, 1) for w in (0, 1)]
    wls = [
        workload("serve", kind="LeaderWorkerSet", uid="uid-lws-serve", index=i, count=2, topology=True)
        for i in ("0", "1")
    ]
    owners = [("LeaderWorkerSet", lws), *((KUEUE_WORKLOAD, w) for w in wls)]
    first = plan(cluster(owners=owners, pods=pods), NOW)
    warnings = tas_warnings(first)
    assert sorted(w.message.split("its Workload ")[1].split()[0] for w in warnings) == [
        "leaderworkerset-serve-0",
        "leaderworkerset-serve-1",
    ]
    announced = {a.key: a.message for a in only(first.actions, RememberAnnounced)}
    assert not tas_warnings(plan(cluster(owners=owners, pods=pods, announced=announced), NOW))


# ---------------------------------------------------------------------- the cache
def test_the_cache_indexes_kueue_workloads_by_owner_and_drops_them_on_delete() -> None:
    cache = ClusterCache()
    body = workload("train", cluster_queue="cq")
    cache.upsert(KUEUE_WORKLOAD, body)
    (record,) = cache.kueue_workloads("uid-train")
    assert isinstance(record, KueueWorkloadRecord)
    assert record.admitted and record.cluster_queue == "cq" and record.admitted_counts == (4,)
    assert cache.records(KUEUE_WORKLOAD) == {("ml/job-train-x", "wl-train-")}
    generation = cache.generation
    cache.upsert(KUEUE_WORKLOAD, {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}})
    assert cache.generation == generation  # only a new resourceVersion: no pass
    cache.delete(KUEUE_WORKLOAD, body)
    assert cache.kueue_workloads("uid-train") == ()


# ---------------------------------------------------------------------- the webhooks: at creation
HOOKS = Webhooks(StaticContext())


def _refused(hook: Any, body: dict[str, Any]) -> str:
    with pytest.raises(kopf.AdmissionError) as error:
        hook(body=kopf.Body(body), patch=kopf.Patch())
    return str(error.value)


@pytest.mark.parametrize("annotation", TAS_ANNOTATIONS)
def test_kueue_tas_annotations_on_a_phalanx_jobs_template_are_refused_naming_both_and_the_field(
    annotation: str,
) -> None:
    job = queued_job()
    job["spec"]["template"]["metadata"] = {"annotations": {annotation: NB}}
    message = _refused(HOOKS.gate_job, job)
    assert f"spec.template.metadata.annotations[{annotation}]" in message
    assert "Kueue's Topology-Aware Scheduling and Phalanx" in message and "phalanx.dev/managed" in message


def test_kueue_tas_annotations_on_a_jobset_or_leaderworkerset_are_refused_naming_the_template() -> None:
    jobset = jobset_body()
    pod_template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod_template["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": NB}}
    message = _refused(HOOKS.gate_owner(JobSetKind()), jobset)
    assert "spec.replicatedJobs[0].template.spec.template.metadata.annotations[" in message
    lws = lws_body()
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-slice-size": "2"}
    }
    message = _refused(HOOKS.gate_owner(LwsKind()), lws)
    assert (
        "spec.leaderWorkerTemplate.workerTemplate.metadata.annotations[kueue.x-k8s.io/podset-slice-size]"
        in message
    )


def test_a_job_without_kueue_tas_annotations_is_gated_as_before() -> None:
    patch = kopf.Patch()
    job = queued_job()
    job["spec"]["template"]["metadata"] = {"annotations": {"example.com/other": "x"}}
    HOOKS.gate_job(body=kopf.Body(job), patch=patch)
    assert patch["spec"]["template"]["spec"]["schedulingGates"]


def test_partial_admission_below_a_fixed_min_count_or_on_a_sliced_job_is_refused() -> None:
    for min_count in ("3", " 3", "0" * 5000 + "3"):  # read as the policy reads it
        fixed = queued_job(
            annotations={"phalanx.dev/min-count": min_count, "kueue.x-k8s.io/job-min-parallelism": "2"}
        )
        assert "fewer than the gang's phalanx.dev/min-count 3" in _refused(HOOKS.gate_job, fixed)
    sliced = queued_job(
        count=4,
        annotations={
            "phalanx.dev/slice-size": "2",
            "phalanx.dev/slice-topology-key": LB,
            "kueue.x-k8s.io/job-min-parallelism": "2",
        },
    )
    sliced["spec"]["completionMode"] = "Indexed"
    assert "sliced Job" in _refused(HOOKS.gate_job, sliced)
    for fine in (
        {"kueue.x-k8s.io/job-min-parallelism": "2"},  # minCount follows what Kueue admits
        {"phalanx.dev/min-count": "2", "kueue.x-k8s.io/job-min-parallelism": "2"},
    ):
        HOOKS.gate_job(body=kopf.Body(queued_job(annotations=fine)), patch=kopf.Patch())
