"""The Workload and PodGroup built for a Job: owned by it, named as upstream, valid against the CRDs."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api.builders import build_pod_group, build_workload
from phalanx.api.job_policy import JobPolicy, parse_job_policy
from phalanx.api.keys import (
    DISRUPTION_MODE_ANNOTATION,
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    MANAGED_BY_ANNOTATION,
    OWNER_ANNOTATION,
    POLICY_ANNOTATION,
    TOPOLOGY_KEY_ANNOTATION,
)
from phalanx.api.models import PodGroup, Workload

UID = "0b7a4c2e-1f7e-4b6e-9d0a-3c1e2f4a5b6c"
JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": UID,
        "annotations": {
            TOPOLOGY_KEY_ANNOTATION: "topology.kubernetes.io/zone",
            DISRUPTION_MODE_ANNOTATION: "all",
        },
    },
    "spec": {"parallelism": 4, "template": {"spec": {"priorityClassName": "high"}}},
}
JOB_OWNER = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "name": "train",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}
TEMPLATE_SPEC = {
    "schedulingPolicy": {"gang": {"minCount": 4}},
    "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
    "disruptionMode": {"all": {}},
    "priorityClassName": "high",
    "priority": 1000,
    "preemptionPolicy": "PreemptLowerPriority",
}


def test_workload_of_a_job() -> None:
    workload = build_workload(JOB, parse_job_policy(JOB), priority=1000)
    assert workload == {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": "train-6695f68766",
            "namespace": "ml",
            "labels": {JOB_NAME_LABEL: "train", JOB_UID_LABEL: UID},
            "annotations": {MANAGED_BY_ANNOTATION: "phalanx", OWNER_ANNOTATION: "Job/train"},
            "ownerReferences": [JOB_OWNER],
        },
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
            "podGroupTemplates": [{"name": "train-pgt-0", **TEMPLATE_SPEC}],
        },
    }
    Workload.model_validate(workload)


def test_pod_group_of_a_job_before_and_after_the_workload_exists() -> None:
    policy = parse_job_policy(JOB)
    pod_group = build_pod_group(JOB, "train-6695f68766", policy, priority=1000)
    assert pod_group == {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "train-6695f68766-train-pgt-0-655cb76fc6",
            "namespace": "ml",
            "labels": {JOB_NAME_LABEL: "train", JOB_UID_LABEL: UID},
            "annotations": {MANAGED_BY_ANNOTATION: "phalanx", OWNER_ANNOTATION: "Job/train"},
            "ownerReferences": [JOB_OWNER],
        },
        "spec": {
            "workloadRef": {"workloadName": "train-6695f68766", "templateName": "train-pgt-0"},
            **TEMPLATE_SPEC,
        },
    }
    PodGroup.model_validate(pod_group)

    owned = build_pod_group(JOB, "train-6695f68766", policy, priority=1000, workload_uid="w-uid")
    assert owned["metadata"]["ownerReferences"] == [
        JOB_OWNER,
        {
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "Workload",
            "name": "train-6695f68766",
            "uid": "w-uid",
        },
    ]


def test_a_basic_job_without_priority() -> None:
    job = {**JOB, "metadata": {**JOB["metadata"], "annotations": {POLICY_ANNOTATION: "basic"}}, "spec": {}}
    policy = parse_job_policy(job)
    template = build_workload(job, policy, priority=None)["spec"]["podGroupTemplates"][0]
    assert template == {
        "name": "train-pgt-0",
        "schedulingPolicy": {"basic": {}},
        "disruptionMode": {"single": {}},
        "preemptionPolicy": "PreemptLowerPriority",
    }
    spec = build_pod_group(job, "w", policy, None, preemption_policy="Never")["spec"]
    assert spec["schedulingPolicy"] == {"basic": {}}
    assert spec["preemptionPolicy"] == "Never"


def test_the_builders_do_not_change_the_job() -> None:
    before = repr(JOB)
    build_workload(JOB, parse_job_policy(JOB), 1)
    build_pod_group(JOB, "w", parse_job_policy(JOB), 1, workload_uid="u")
    assert repr(JOB) == before


def test_a_job_not_read_from_the_api_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        build_workload({"metadata": {"name": "train"}}, JobPolicy(), None)
