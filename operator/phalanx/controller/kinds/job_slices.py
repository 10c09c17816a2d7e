"""A sliced Job (`phalanx.dev/slice-size`): its composite Workload, CompositePodGroup and one PodGroup per
slice are made by Phalanx, and the whole Job is one unit, a tree placed all or nothing.

Completion index i belongs to slice i // slice-size, so neighbouring ranks share the tightest domain;
inside a slice the pods go in rank order. A Job's slices and topology mode are fixed at its creation: they
are read from what Phalanx made (`kept_slices`), and an annotation changed afterwards is said, not applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from phalanx.api import keys
from phalanx.api.builders import build_sliced_objects
from phalanx.api.job_layout import REQUIRED, JobLayout
from phalanx.api.status import PodGroupStatus
from phalanx.controller.kinds.base import ClusterView, Leaf, OwnerState, Tree, Unit
from phalanx.controller.kinds.common import (
    announce_once,
    kept_gang_size,
    preemption_policy_of,
    priority_class_of,
    unit_priority,
)
from phalanx.controller.kinds.job_quota import held_for_quota, with_quota
from phalanx.controller.kinds.job_record import JobRecord, owner_of, resume_if_requeued, root_group
from phalanx.controller.kinds.kueue import kueue_owner, kueue_setup, owner_view
from phalanx.controller.kinds.lost_gate import lost_gate
from phalanx.controller.model.actions import (
    Action,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    PostEvent,
)
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, PodRecord


def is_sliced(state: OwnerState) -> bool:
    """Sliced at creation (or to be made so now). Slices added later to a Job that has its one PodGroup are
    not applied (job_record.immutable_changes), nor removed from one that has its slices."""
    job: JobRecord = state.owner
    root = _root(state)
    return job.policy is not None and (root is not None or (job.layout.sliced and root_group(state) is None))


def _root(state: OwnerState) -> CompositePodGroupRecord | None:
    return next((g for g in state.composites if not g.parent), None)


def _slices(state: OwnerState, root: CompositePodGroupRecord | None) -> tuple[PodGroupRecord, ...]:
    if root is None:
        return ()
    return tuple(g for g in state.pod_groups if g.parent == root.name)


def kept_slices(
    job: JobRecord, root: CompositePodGroupRecord | None, slices: tuple[PodGroupRecord, ...]
) -> tuple[JobRecord, str]:
    """The Job as its slices were made — slice size and key from its slices' PodGroups, the outer key from
    its CompositePodGroup — and what its annotations say differently now (changed around the webhook, e.g.
    with Phalanx down): said once, not applied."""
    if root is None or job.policy is None:
        return job, ""
    if not slices:
        if job.layout.sliced:
            return job, ""  # its slices' PodGroups are made (again) from the annotations
        # Nothing to read the slices from, and the annotations that made them are gone: the unit waits.
        return job, (
            f"{keys.SLICE_SIZE_ANNOTATION}, {keys.SLICE_TOPOLOGY_KEY_ANNOTATION}: removed, but the Job was "
            f"made sliced (CompositePodGroup {root.name}); its pods wait (recreate the Job to change its "
            "slices)"
        )
    first = min(slices, key=lambda g: g.name)
    layout = job.layout
    # The slice size as the records of the creation still say it, one of them edited around the webhook
    # changing nothing (a slice whose minCount was edited keeps the slice size: _leaves): the Job's
    # parallelism over its number of slices (the CompositePodGroup's minGroupCount, immutable by its CRD),
    # else the annotation if a slice agrees, else the first slice's minCount.
    count = root.min_group_count or len(slices)
    parallelism = job.policy.parallelism
    sizes = {g.gang_min_count for g in slices}
    if count and parallelism % count == 0 and parallelism // count in sizes | {layout.slice_size}:
        size: int | None = parallelism // count
    else:
        size = layout.slice_size if layout.slice_size in sizes else first.gang_min_count
    key = first.topology_key
    if size is None or key is None:
        return job, ""
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
        return job, ""
    kept = JobLayout(REQUIRED, size, key)
    why = "; ".join(changes) + " (a Job's slices are fixed at its creation; recreate the Job to change them)"
    return dataclasses.replace(job, layout=kept), why


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def sliced_unit(state: OwnerState, view: ClusterView) -> Unit:
    """The Job's tree of slices (made first where missing), its pods by completion index."""
    root = _root(state)
    slices = _slices(state, root)
    job, ignored = kept_slices(state.owner, root, slices)
    setup: list[Action] = []
    if ignored:
        setup = announce_once(view.announced, job.ref, "immutable", "ImmutableChangeIgnored", ignored)
    kueue = owner_view(job, view)  # Kueue manages it: no suspend or resume of ours (kinds/kueue.py)
    owner = kueue_owner(owner_of(job, None, sliced=True), kueue)
    if not job.layout.sliced:  # made sliced, annotations gone, slices not known: wait
        return Unit(job.unit_key, owner, None, tuple(setup), created=job.created)
    policy, layout = job.policy, job.layout
    assert policy is not None and layout.slice_size is not None
    chosen = priority_class_of(policy.priority_class_name, view.priority_classes)
    priority = chosen.value if chosen is not None else None
    preemption = preemption_policy_of(policy.preemption_policy, chosen)
    workload, composite, groups = build_sliced_objects(job.body, policy, layout, priority, preemption)
    workload_name = str(workload.metadata["name"])
    made: list[str] = []
    if state.workload is None:
        setup.append(CreateWorkload(workload))
        made.append(f"Workload {workload_name}")
    if root is None:
        setup.append(CreateCompositePodGroup(composite))
        made.append(f"CompositePodGroup {composite.metadata['name']}")
        root = CompositePodGroupRecord.to_be_made(composite, job.uid)
    leaves, created = _leaves(state, job, workload_name, groups, slices, layout.slice_size, setup, view)
    if created:
        made.append(f"{created} PodGroup(s) (slices of {layout.slice_size} pods)")
    if made:
        setup.append(PostEvent(job.ref, "Normal", "PodGroupCreated", "created " + ", ".join(made)))
    if job.gated_template:
        setup.extend(lost_gate(state, job.ref, "Job", view.announced))
    if kueue is not None:
        setup.extend(kueue_setup(kueue, view.announced, job.ref))
    elif not held_for_quota(job, view, sliced=True):
        setup.extend(resume_if_requeued(job, state.pods))
    return Unit(
        key=job.unit_key,
        owner=with_quota(owner, job, state.pods, view, sliced=True),
        tree=Tree(root, (root,), tuple(leaves)),
        setup=tuple(setup),
        priority=unit_priority(state.pods, root.spec.priority),
        created=job.created,
    )


def _leaves(
    state: OwnerState,
    job: JobRecord,
    workload_name: str,
    groups: Sequence[Any],
    slices: Sequence[PodGroupRecord],
    size: int,
    setup: list[Action],
    view: ClusterView,
) -> tuple[list[Leaf], int]:
    """One leaf per slice, its pods by completion index (`size` per slice); the PodGroups still missing
    are created (their actions go to `setup`); returns the leaves and how many were created. A slice's
    gang size is the slice size whatever its PodGroup was edited to around validate-podgroup (said once:
    common.kept_gang_size)."""
    existing = {g.name: g for g in slices}
    leaves = []
    created = 0
    for i, group in enumerate(groups):
        name = str(group.metadata["name"])
        record = existing.get(name)
        if record is None:
            setup.append(CreatePodGroup(group, workload_name))
            created += 1
            record = PodGroupRecord(
                uid="",
                namespace=job.namespace,
                name=name,
                owner_uid=job.uid,
                generation=1,
                spec=group.spec,
                status=PodGroupStatus(),
            )
        else:
            record, notes = kept_gang_size(record, group.spec, "Job", job.ref, view.announced)
            setup.extend(notes)
        pods = tuple(
            sorted(
                (p for p in state.pods if p.completion_index is not None and p.completion_index // size == i),
                key=_rank,
            )
        )
        leaves.append(Leaf(record, pods))
    return leaves, created


def _rank(pod: PodRecord) -> tuple[int, str]:
    return (pod.completion_index if pod.completion_index is not None else 1 << 31, pod.name)
