"""Only pods a known scheduler binds (issue 16, item 3), and Phalanx keys where Phalanx reads them (item
6): a gang whose pods name another schedulerName is refused at creation (unless `--scheduler-names`
lists it), released pods no scheduler binds within the bound are rolled back, and `phalanx.dev/` keys on
a Job's pod template are refused pointing at the Job's metadata."""

from __future__ import annotations

import datetime as dt
from typing import Any

import kopf
import pytest
from testkit import (
    NOW,
    StaticContext,
    cluster,
    group_of,
    job_body,
    jobset_body,
    lws_body,
    only,
    pod_body,
    with_status,
)

from phalanx.api.status import Admission, Assignment
from phalanx.controller.kinds.jobset import JobSetKind
from phalanx.controller.kinds.lws import LwsKind
from phalanx.controller.model.actions import SuspendJob
from phalanx.controller.plan import plan
from phalanx.controller.watch.webhooks import Webhooks


def hooks(*names: str) -> Webhooks:
    return Webhooks(StaticContext(scheduler_names=("default-scheduler", *names)))


def job(annotations: dict[str, str] | None = None, **pod_spec: Any) -> kopf.Body:
    body = job_body(annotations=annotations)
    body["spec"]["template"]["spec"].pop("schedulingGates", None)
    body["spec"]["template"]["spec"].update(pod_spec)
    return kopf.Body(body)


def refusal(call: Any) -> str:
    with pytest.raises(kopf.AdmissionError) as refused:
        call()
    return str(refused.value)


# ---------------------------------------------------------------------- schedulerName
def test_a_gang_whose_pods_name_another_scheduler_is_refused_naming_the_field() -> None:
    message = refusal(lambda: hooks().gate_job(body=job(schedulerName="volcano"), patch=kopf.Patch()))
    assert message.startswith(
        "spec.template.spec.schedulerName: 'volcano' is not a scheduler Phalanx releases gangs to"
    )
    assert "phalanx.dev/policy: basic" in message and "--scheduler-names=default-scheduler,volcano" in message


def test_kube_schedulers_own_name_a_listed_scheduler_and_basic_jobs_pass() -> None:
    for body in (
        job(schedulerName="default-scheduler"),
        job(),
        job({"phalanx.dev/policy": "basic"}, schedulerName="volcano"),
    ):
        hooks().gate_job(body=body, patch=kopf.Patch())
    patch = kopf.Patch()
    hooks("volcano").gate_job(body=job(schedulerName="volcano"), patch=patch)
    assert patch.spec["template"]["spec"]["schedulingGates"] == [{"name": "phalanx.dev/admission"}]


def test_a_jobsets_and_a_hand_made_pods_scheduler_are_checked_too() -> None:
    body = jobset_body(gated=False)
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    message = refusal(lambda: hooks().gate_owner(JobSetKind())(body=kopf.Body(body), patch=kopf.Patch()))
    assert message.startswith("spec.replicatedJobs[0].template.spec.template.spec.schedulerName: 'volcano'")
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "labels": {"phalanx.dev/pod-group": "g"}},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "i"}]},
    }
    assert refusal(lambda: hooks().gate_pod(body=kopf.Body(pod), patch=kopf.Patch())).startswith(
        "spec.schedulerName: 'volcano'"
    )


@pytest.mark.parametrize("gated", [False, True], ids=["gate-added", "gate-already-there"])
@pytest.mark.parametrize(
    ("kind", "field", "value", "message"),
    [
        (
            "JobSet",
            "schedulerName",
            "volcano",
            "spec.replicatedJobs[0].template.spec.template.spec.schedulerName",
        ),
        (
            "JobSet",
            "resourceClaims",
            [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            "spec.replicatedJobs[0].template.spec.template.spec.resourceClaims",
        ),
        (
            "LeaderWorkerSet",
            "schedulerName",
            "volcano",
            "spec.leaderWorkerTemplate.workerTemplate.spec.schedulerName",
        ),
    ],
)
def test_an_owners_pods_are_checked_whether_or_not_its_templates_carry_the_gate_already(
    kind: str, field: str, value: Any, message: str, gated: bool
) -> None:
    """YAML re-applied from `kubectl get -o yaml` carries Phalanx's gate already: nothing to patch, but its
    pods are held all the same, so what would hold them for ever is refused as for a new one."""
    if kind == "JobSet":
        body, owner_kind = jobset_body(gated=gated), JobSetKind()
        pod_spec = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    else:
        body, owner_kind = lws_body(gated=gated), LwsKind()
        pod_spec = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    pod_spec[field] = value
    assert refusal(
        lambda: hooks().gate_owner(owner_kind)(body=kopf.Body(body), patch=kopf.Patch())
    ).startswith(f"{message}: ")


def released_gang(scheduler: str = "", *, decided_ago: float) -> Any:
    job = job_body("train", 2)
    pods = [pod_body("train", i, gated=False, released_to=f"n{i + 1}", group="train") for i in range(2)]
    for pod in pods:
        if scheduler:
            pod["spec"]["schedulerName"] = scheduler
    admission = Admission(
        domain=None,
        assignments=[Assignment(pod=f"train-{i}", node=f"n{i + 1}") for i in range(2)],
        admitted_at=NOW - dt.timedelta(seconds=decided_ago),
        attempt=0,
    )
    group = group_of(job)
    group = with_status(group, group.status.model_copy(update={"admission": admission}))
    return plan(cluster([(job, group, pods)]), NOW)


def test_released_pods_no_scheduler_binds_in_time_are_rolled_back_whole() -> None:
    early = released_gang("volcano", decided_ago=30)
    assert not only(early.actions, SuspendJob)  # bound soon, normally
    assert early.next_due == NOW + dt.timedelta(seconds=90)  # else a pass at the timeout's end
    assert "train" not in early.settled
    (suspend,) = only(released_gang("volcano", decided_ago=121).actions, SuspendJob)
    assert suspend.cause == "unbindable"
    assert suspend.why == (
        "released but not bound: 2 released pod(s) were not bound within 120 s of the decision "
        "(train-0 on n1, to be bound by schedulerName 'volcano')"
    )
    (late,) = only(released_gang(decided_ago=500).actions, SuspendJob)
    assert late.why.endswith("to be bound by kube-scheduler)")


# ---------------------------------------------------------------------- Phalanx keys on the pod template
def test_phalanx_annotations_on_the_pod_template_are_refused_pointing_at_the_jobs_metadata() -> None:
    body = job()
    body["spec"]["template"]["metadata"] = {
        "annotations": {
            "phalanx.dev/topology-key": "example.com/rack",
            "example.com/note": "r",  # not Phalanx's: not flagged
        },
        "labels": {"phalanx.dev/min-count": "2"},
    }
    message = refusal(lambda: hooks().gate_job(body=body, patch=kopf.Patch()))
    assert message == (
        "spec.template.metadata.annotations[phalanx.dev/topology-key]: Phalanx reads its keys from the Job's "
        "own metadata, not from its pod template, where it would be ignored; move it to metadata.annotations "
        "of the Job; spec.template.metadata.labels[phalanx.dev/min-count]: Phalanx reads its keys from the "
        "Job's own metadata, not from its pod template, where it would be ignored; move it to "
        "metadata.labels of the Job"
    )
