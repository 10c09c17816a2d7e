"""The Workload and PodGroup Phalanx creates for a Job, as dicts ready to POST.

Pure functions: the controller owns the API calls. The objects go through the models on the way
out, so a builder can never produce something the CRDs would reject.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.api.compositepodgroup import CompositePodGroup, CompositePodGroupSpec
from phalanx.api.group import API_VERSION, WORKLOAD_KIND
from phalanx.api.job_layout import NO_LAYOUT, REQUIRED, JobLayout
from phalanx.api.job_policy import MODE_ALL, JobPolicy
from phalanx.api.keys import (
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    MANAGED_BY_ANNOTATION,
    MANAGED_BY_VALUE,
    OWNER_ANNOTATION,
    TOPOLOGY_MODE_ANNOTATION,
)
from phalanx.api.naming import pod_group_name, pod_group_template_name, workload_name
from phalanx.api.podgroup import PodGroup, PodGroupSpec
from phalanx.api.scheduling import (
    PREEMPT_LOWER_PRIORITY,
    CompositeGangSchedulingPolicy,
    CompositeSchedulingPolicy,
    ControllerRef,
    DisruptionMode,
    PreemptionPolicy,
    SchedulingConstraints,
    SchedulingPolicy,
    TopologyConstraint,
    WorkloadRef,
)
from phalanx.api.workload import CompositePodGroupTemplate, PodGroupTemplate, Workload, WorkloadSpec

JOB_API_VERSION = "batch/v1"
JOB_API_GROUP = "batch"
JOB_KIND = "Job"


def scheduling_policy(policy: JobPolicy) -> SchedulingPolicy:
    """The PodGroup schedulingPolicy a JobPolicy stands for."""
    if policy.min_count is None:
        return SchedulingPolicy.of_basic()
    return SchedulingPolicy.of_gang(policy.min_count)


def scheduling_constraints(policy: JobPolicy) -> SchedulingConstraints | None:
    """The PodGroup schedulingConstraints a JobPolicy stands for, if any."""
    if policy.topology_key is None:
        return None
    return SchedulingConstraints(topology=[TopologyConstraint(key=policy.topology_key)])


def disruption_mode(policy: JobPolicy) -> DisruptionMode:
    """The PodGroup disruptionMode a JobPolicy stands for."""
    return DisruptionMode.of_all() if policy.disruption_mode == MODE_ALL else DisruptionMode.of_single()


def build_workload(
    job: Mapping[str, Any],
    policy: JobPolicy,
    priority: int | None,
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY,
) -> dict[str, Any]:
    """The Workload of a Job: one PodGroupTemplate, owned and garbage-collected with the Job."""
    name, uid = _job_identity(job)
    template = _template(name, policy, priority, preemption_policy)
    workload = Workload(
        metadata=_metadata(job, workload_name(name, uid)),
        spec=WorkloadSpec(
            controller_ref=ControllerRef(api_group=JOB_API_GROUP, kind=JOB_KIND, name=name),
            pod_group_templates=[template],
        ),
    )
    return workload.to_api()


def build_pod_group(
    job: Mapping[str, Any],
    workload_name: str,
    policy: JobPolicy,
    priority: int | None,
    workload_uid: str | None = None,
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY,
    layout: JobLayout = NO_LAYOUT,
) -> dict[str, Any]:
    """The PodGroup of a Job, made from its Workload's template.

    It is controlled by the Job. Given the Workload's uid (known only once the Workload exists)
    it is also owned by the Workload, as upstream; that reference does not block deletion.
    `layout`: the Job's, as parse_job_layout read it (its topology mode is kept on the PodGroup).
    """
    name, _ = _job_identity(job)
    template = _template(name, policy, priority, preemption_policy)
    metadata = _metadata(job, pod_group_name(workload_name, template.name))
    if layout.topology_mode != REQUIRED:
        # Kept where the plan reads it: a mode changed on the Job afterwards is not applied (plan.py). The
        # parsed mode, not the annotation's text: "preferred " is preferred, and must not read as required.
        metadata["annotations"][TOPOLOGY_MODE_ANNOTATION] = layout.topology_mode
    if workload_uid is not None:
        metadata["ownerReferences"].append(
            {"apiVersion": API_VERSION, "kind": WORKLOAD_KIND, "name": workload_name, "uid": workload_uid}
        )
    # As upstream's Job controller: the PodGroup's spec is its Workload template's, plus the reference back.
    pod_group = PodGroup(
        metadata=metadata,
        spec=PodGroupSpec(
            workload_ref=WorkloadRef(workload_name=workload_name, template_name=template.name),
            scheduling_policy=template.scheduling_policy,
            scheduling_constraints=template.scheduling_constraints,
            disruption_mode=template.disruption_mode,
            priority_class_name=template.priority_class_name,
            priority=template.priority,
            preemption_policy=template.preemption_policy,
        ),
    )
    return pod_group.to_api()


def _template(
    job_name: str, policy: JobPolicy, priority: int | None, preemption_policy: PreemptionPolicy
) -> PodGroupTemplate:
    return PodGroupTemplate(
        name=pod_group_template_name(job_name),
        scheduling_policy=scheduling_policy(policy),
        scheduling_constraints=scheduling_constraints(policy),
        disruption_mode=disruption_mode(policy),
        priority_class_name=policy.priority_class_name,
        priority=priority,
        preemption_policy=preemption_policy,
    )


def _job_identity(job: Mapping[str, Any]) -> tuple[str, str]:
    metadata = job.get("metadata") or {}
    name, uid = metadata.get("name"), metadata.get("uid")
    if not name or not uid:
        raise ValueError("the Job needs metadata.name and metadata.uid (build from a Job read from the API)")
    return str(name), str(uid)


def _metadata(job: Mapping[str, Any], name: str) -> dict[str, Any]:
    job_name, job_uid = _job_identity(job)
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {JOB_NAME_LABEL: job_name, JOB_UID_LABEL: job_uid},
        "annotations": {MANAGED_BY_ANNOTATION: MANAGED_BY_VALUE, OWNER_ANNOTATION: f"{JOB_KIND}/{job_name}"},
        "ownerReferences": [
            {
                "apiVersion": JOB_API_VERSION,
                "kind": JOB_KIND,
                "name": job_name,
                "uid": job_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    namespace = (job.get("metadata") or {}).get("namespace")
    if namespace:
        metadata["namespace"] = namespace
    return metadata


# ---------------------------------------------------------------------- slices
SLICE_TEMPLATE = "slice"


def slice_names(job: Mapping[str, Any], workload: str, count: int) -> tuple[str, list[str]]:
    """The CompositePodGroup of a sliced Job and its slices' PodGroups (`<composite>-<i>`, rank order)."""
    name, _ = _job_identity(job)
    composite = pod_group_name(workload, pod_group_template_name(name))
    return composite, [f"{composite}-{i}" for i in range(count)]


def _slice_templates(
    job_name: str,
    policy: JobPolicy,
    layout: JobLayout,
    priority: int | None,
    preemption_policy: PreemptionPolicy,
) -> tuple[CompositePodGroupTemplate, PodGroupTemplate]:
    assert layout.slice_size is not None and layout.slice_topology_key is not None
    leaf = PodGroupTemplate(
        name=SLICE_TEMPLATE,
        scheduling_policy=SchedulingPolicy.of_gang(layout.slice_size),
        scheduling_constraints=SchedulingConstraints(
            topology=[TopologyConstraint(key=layout.slice_topology_key)]
        ),
        disruption_mode=disruption_mode(policy),
        priority_class_name=policy.priority_class_name,
        priority=priority,
        preemption_policy=preemption_policy,
    )
    root = CompositePodGroupTemplate(
        name=pod_group_template_name(job_name),
        scheduling_policy=CompositeSchedulingPolicy(
            gang=CompositeGangSchedulingPolicy(min_group_count=layout.slices(policy.parallelism))
        ),
        scheduling_constraints=scheduling_constraints(policy),
        disruption_mode=disruption_mode(policy),
        priority_class_name=policy.priority_class_name,
        priority=priority,
        preemption_policy=preemption_policy,
        pod_group_templates=[leaf],
    )
    return root, leaf


def build_sliced_objects(
    job: Mapping[str, Any],
    policy: JobPolicy,
    layout: JobLayout,
    priority: int | None,
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY,
) -> tuple[Workload, CompositePodGroup, list[PodGroup]]:
    """A sliced Job's composite Workload, its CompositePodGroup and one PodGroup per slice (all owned by
    the Job), as a controller such as JobSet would make them for upstream."""
    name, uid = _job_identity(job)
    root, leaf = _slice_templates(name, policy, layout, priority, preemption_policy)
    wl_name = workload_name(name, uid)
    workload = Workload(
        metadata=_metadata(job, wl_name),
        spec=WorkloadSpec(
            controller_ref=ControllerRef(api_group=JOB_API_GROUP, kind=JOB_KIND, name=name),
            composite_pod_group_templates=[root],
        ),
    )
    composite_name, slice_group_names = slice_names(job, wl_name, layout.slices(policy.parallelism))
    composite = CompositePodGroup(
        metadata=_metadata(job, composite_name),
        spec=CompositePodGroupSpec(
            workload_ref=WorkloadRef(workload_name=wl_name, template_name=root.name),
            scheduling_policy=root.scheduling_policy,
            scheduling_constraints=root.scheduling_constraints,
            disruption_mode=root.disruption_mode or DisruptionMode.of_single(),
            priority_class_name=root.priority_class_name,
            priority=root.priority,
            preemption_policy=root.preemption_policy or PREEMPT_LOWER_PRIORITY,
        ),
    )
    groups = [
        PodGroup(
            metadata=_metadata(job, group_name),
            spec=PodGroupSpec(
                parent_composite_pod_group_name=composite_name,
                workload_ref=WorkloadRef(workload_name=wl_name, template_name=leaf.name),
                scheduling_policy=leaf.scheduling_policy,
                scheduling_constraints=leaf.scheduling_constraints,
                disruption_mode=leaf.disruption_mode or DisruptionMode.of_single(),
                priority_class_name=leaf.priority_class_name,
                priority=leaf.priority,
                preemption_policy=leaf.preemption_policy or PREEMPT_LOWER_PRIORITY,
            ),
        )
        for group_name in slice_group_names
    ]
    return workload, composite, groups
