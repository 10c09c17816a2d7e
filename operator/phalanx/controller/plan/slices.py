"""A sliced Job (phalanx.dev/slice-size): its composite Workload, CompositePodGroup and one PodGroup per
slice are made by Phalanx, and the whole Job is placed as one tree (plan_composite.py). Pure, like plan.py.

Completion index i belongs to slice i // slice-size, so neighbouring ranks share the tightest domain;
inside a slice the pods go in rank order onto the nodes in the order placement fills them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from phalanx.api import keys
from phalanx.api.builders import build_sliced_objects
from phalanx.api.job_layout import REQUIRED, JobLayout
from phalanx.api.naming import pod_group_label_value
from phalanx.api.scheduling import PreemptionPolicy
from phalanx.api.status import CompositePodGroupStatus, PodGroupStatus
from phalanx.controller.model.actions import (
    Action,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    GroupPlan,
    LabelPod,
    PostEvent,
    ReleasePod,
    ResumeJob,
)
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord
from phalanx.controller.plan.trees import LeafState, TreeState, schedule_tree

if TYPE_CHECKING:
    from phalanx.controller.plan.jobs import JobState, _Pass


def kept_slices(state: JobState) -> tuple[JobState, str]:
    """The Job as its slices were made — slice size and key from its slices' PodGroups, the outer key from
    its CompositePodGroup — and what its annotations say differently now (changed around the webhook, e.g.
    with Phalanx down): said once, not applied."""
    job, root = state.job, state.composite
    if root is None or job.policy is None:
        return state, ""
    if not state.slices:
        if job.layout.sliced:
            return state, ""  # its slices' PodGroups are made (again) from the annotations
        # Nothing to read the slices from, and the annotations that made them are gone: plan() waits.
        return state, (
            f"{keys.SLICE_SIZE_ANNOTATION}, {keys.SLICE_TOPOLOGY_KEY_ANNOTATION}: removed, but the Job was "
            f"made sliced (CompositePodGroup {root.name}); its pods wait (recreate the Job to change its "
            "slices)"
        )
    first = min(state.slices, key=lambda g: g.name)
    size, key = first.gang_min_count, first.topology_key
    if size is None or key is None:
        return state, ""
    layout = job.layout
    each = "PodGroup of each slice"
    changes = [
        f"{annotation}: {after!r} differs from {before!r}, which the {holder} keeps"
        for annotation, before, after, holder in (
            (keys.TOPOLOGY_KEY_ANNOTATION, root.topology_key, job.policy.topology_key, "CompositePodGroup"),
            (keys.SLICE_SIZE_ANNOTATION, str(size), _text(layout.slice_size), each),
            (keys.SLICE_TOPOLOGY_KEY_ANNOTATION, key, layout.slice_topology_key, each),
            (keys.TOPOLOGY_MODE_ANNOTATION, REQUIRED, layout.topology_mode, "CompositePodGroup"),
        )
        if before != after
    ]
    if not changes:
        return state, ""
    kept = JobLayout(REQUIRED, size, key)
    why = "; ".join(changes) + " (a Job's slices are fixed at its creation; recreate the Job to change them)"
    return dataclasses.replace(state, job=dataclasses.replace(job, layout=kept)), why


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def schedule_sliced_job(
    state: JobState,
    priority: int | None,
    preemption: PreemptionPolicy,
    ctx: _Pass,
    notes: Sequence[Action] = (),
) -> GroupPlan | None:
    """`notes`: actions said before the Job's own (an ignored annotation change)."""
    job, policy, layout = state.job, state.job.policy, state.job.layout
    assert policy is not None and layout.slice_size is not None
    workload, composite, groups = build_sliced_objects(job.body, policy, layout, priority, preemption)
    workload_name = str(workload.metadata["name"])
    actions: list[Action] = list(notes)
    made: list[str] = []
    if state.workload_name is None:
        actions.append(CreateWorkload(workload))
        made.append(f"Workload {workload_name}")
    root = state.composite
    if root is None:
        actions.append(CreateCompositePodGroup(composite))
        made.append(f"CompositePodGroup {composite.metadata['name']}")
        root = CompositePodGroupRecord(
            uid="",  # known once created; the applier fills it in where an event needs it
            namespace=job.namespace,
            name=str(composite.metadata["name"]),
            job_uid=job.uid,
            generation=1,
            spec=composite.spec,
            status=CompositePodGroupStatus(),
        )
    existing = {g.name: g for g in state.slices}
    leaves = []
    created = 0
    for i, group in enumerate(groups):
        name = str(group.metadata["name"])
        record = existing.get(name)
        if record is None:
            actions.append(CreatePodGroup(group, workload_name))
            created += 1
            record = PodGroupRecord(
                uid="",
                namespace=job.namespace,
                name=name,
                job_uid=job.uid,
                generation=1,
                spec=group.spec,
                status=PodGroupStatus(),
            )
        pods = tuple(
            p
            for p in state.pods
            if p.completion_index is not None and p.completion_index // layout.slice_size == i
        )
        # Every pod carries its slice's PodGroup name, also while it waits (a release sets it too).
        actions.extend(
            LabelPod(p.ref, name) for p in pods if p.gated and p.pod_group != pod_group_label_value(name)
        )
        leaves.append(LeafState(record, pods))
    if created:
        made.append(f"{created} PodGroup(s) (slices of {layout.slice_size} pods)")
    if made:
        actions.append(PostEvent(job.ref, "Normal", "PodGroupCreated", "created " + ", ".join(made)))
    if job.requeued and (not job.suspended or not any(not p.terminal for p in state.pods)):
        # Requeued whole by us (plan_composite) and its pods are gone: resume it; its new pods come gated.
        actions.append(ResumeJob(job.ref))
    tree = schedule_tree(TreeState(root, (root,), tuple(leaves), job=job), ctx)
    if tree is not None:
        # The pod labels go with the release where there is one (ReleasePod sets the label itself).
        released = {a.pod.key for a in tree.actions if isinstance(a, ReleasePod)}
        actions = [a for a in actions if not (isinstance(a, LabelPod) and a.pod.key in released)]
        actions.extend(tree.actions)
    if not actions:
        return None
    admitted = tree.admitted_pods if tree is not None else 0
    return GroupPlan(job.key, tuple(actions), job.ref, admitted)
