"""batch/v1 Job: the first workload kind. A labelled Job's pods are one gang (one PodGroup), or, with
`phalanx.dev/slice-size`, one tree of slices (a CompositePodGroup over one PodGroup per slice: see
job_slices.py). Phalanx makes the Job's Workload and groups, keeps the gang size in step with the Job,
requeues it whole by suspending and resuming it, and lets it go when the managed label is removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api.builders import build_pod_group, build_workload
from phalanx.api.podgroup import PodGroup
from phalanx.api.scheduling import SchedulingPolicy
from phalanx.api.status import PodGroupStatus
from phalanx.api.workload import Workload
from phalanx.controller.kinds.base import ClusterView, Leaf, OwnerState, Tree, Unit
from phalanx.controller.kinds.common import (
    announce_once,
    let_go,
    owners_units,
    preemption_policy_of,
    priority_class_of,
    unit_priority,
)
from phalanx.controller.kinds.job_budget import with_budget
from phalanx.controller.kinds.job_quota import held_for_quota, with_quota
from phalanx.controller.kinds.job_record import (
    KIND,
    RESOURCE,
    JobRecord,
    immutable_changes,
    owner_of,
    resume_if_requeued,
    root_group,
)
from phalanx.controller.kinds.job_slices import is_sliced, sliced_unit
from phalanx.controller.kinds.kueue import kueue_owner, kueue_setup, owner_view
from phalanx.controller.kinds.lost_gate import lost_gate
from phalanx.controller.model.actions import Action, CreatePodGroup, CreateWorkload, PatchMinCount, PostEvent
from phalanx.controller.model.records import PodGroupRecord, PodRecord

# Owner kinds whose Jobs are theirs: their pods belong to that owner's unit (kinds/jobset.py).
CONTROLLED_BY_OTHER_KINDS = frozenset({"JobSet"})


class JobKind:
    """batch/v1 Jobs labelled `phalanx.dev/managed=true` (implements kinds.base.OwnerKind)."""

    name = KIND
    resource = RESOURCE
    suspends = True  # requeued whole through spec.suspend (else: its pods deleted)
    owns_groups = True  # Phalanx's groups for it are owned by it (blockOwnerDeletion)
    read_by_other_kinds = False

    def parse(self, body: Mapping[str, Any]) -> JobRecord:
        return JobRecord.from_body(body)

    def worth_keeping(self, owner: JobRecord, has_objects: bool) -> bool:
        """Managed Jobs; and unmanaged ones Phalanx still has to let go of: objects of ours to delete, or a
        template carrying our gate (label removed, or YAML copied from a gang Job) whose pods we ungate. A
        Job another owner kind of ours controls (a JobSet's child Job) is that owner's, never ours."""
        if owner.controlled_by in CONTROLLED_BY_OTHER_KINDS:
            return False
        if owner.managed or has_objects:
            return True
        return owner.gated_template and not owner.finished

    def index_key(self, owner: Any) -> str:
        return str(owner.uid)

    def pod_owner(self, pod: PodRecord) -> str:
        return pod.job_uid

    def units(self, view: ClusterView) -> Iterable[Unit]:
        return owners_units(self, view)

    def owner_units(self, state: OwnerState, view: ClusterView) -> Iterable[Unit]:
        job: JobRecord = state.owner
        if not job.managed:
            actions = let_go(state, KIND)
            if actions:
                yield Unit(job.unit_key, None, None, tuple(actions), created=job.created)
        elif is_sliced(state):
            yield sliced_unit(state, view)
        else:
            yield plain_unit(state, view)


def plain_unit(state: OwnerState, view: ClusterView) -> Unit:
    """A Job whose pods are one gang (or one basic group): its PodGroup, made first if missing."""
    job: JobRecord = state.owner
    setup: list[Action] = []
    group = root_group(state)
    if job.policy is None:
        # Only reachable if the webhook was bypassed; said once per change, where the user looks.
        setup.extend(announce_once(view.announced, job.ref, "policy", "InvalidPolicy", job.policy_error))
    elif group is not None:
        ignored = immutable_changes(job.policy, group, job.layout)
        if ignored:
            setup.extend(
                announce_once(view.announced, job.ref, "immutable", "ImmutableChangeIgnored", ignored)
            )
    kueue = owner_view(job, view)  # Kueue manages it: no suspend or resume of ours (kinds/kueue.py)
    group, made = _ensure_objects(state, group, view, follow=kueue is None or not kueue.holds)
    setup.extend(made)
    if job.gated_template and job.policy is not None and job.policy.is_gang:
        setup.extend(lost_gate(state, job.ref, KIND, view.announced))
    if kueue is not None:
        setup.extend(kueue_setup(kueue, view.announced, job.ref))
    elif not held_for_quota(job, view):
        setup.extend(resume_if_requeued(job, state.pods))
    tree = None
    if group is not None:
        pods = tuple(sorted(state.pods, key=lambda p: p.name))
        tree = Tree(None, (), (Leaf(group, pods),), mode=group.topology_mode)
    default = group.spec.priority if group is not None else None
    return Unit(
        key=job.unit_key,
        owner=kueue_owner(
            with_quota(
                with_budget(owner_of(job, group, pods=state.pods), job, state.pods), job, state.pods, view
            ),
            kueue,
        ),
        tree=tree,
        setup=tuple(setup),
        priority=unit_priority(state.pods, default),
        created=job.created,
    )


def _ensure_objects(
    state: OwnerState, group: PodGroupRecord | None, view: ClusterView, follow: bool = True
) -> tuple[PodGroupRecord | None, list[Action]]:
    """The group to schedule (planned if it does not exist yet) and the actions that make it so; `follow`:
    the gang size follows the Job (not while Kueue holds it: its admission may still change it)."""
    job: JobRecord = state.owner
    policy = job.policy
    actions: list[Action] = []
    if group is not None:
        current = group.gang_min_count
        wanted = policy.min_count if policy is not None else None
        if follow and wanted is not None and current is not None and current != wanted:
            # Like upstream, only the gang size follows the Job (min-count annotation or parallelism).
            actions.append(PatchMinCount(group.ref, wanted))
            actions.append(
                PostEvent(job.ref, "Normal", "MinCountChanged", f"gang minCount {current} -> {wanted}")
            )
            # Schedule this pass with the size being written, as the patched object will say.
            spec = group.spec.model_copy(update={"scheduling_policy": SchedulingPolicy.of_gang(wanted)})
            # Its version changes with that write: no precondition on a decision in the same pass.
            group = dataclasses.replace(
                group, spec=spec, generation=group.generation + 1, resource_version=""
            )
        return group, actions
    if policy is None:
        return None, actions
    priority_class = priority_class_of(policy.priority_class_name, view.priority_classes)
    priority = priority_class.value if priority_class is not None else None
    preemption = preemption_policy_of(policy.preemption_policy, priority_class)
    workload_name = state.workload.name if state.workload is not None else None
    made = ""
    if workload_name is None:
        created = Workload.model_validate(build_workload(job.body, policy, priority, preemption))
        workload_name = str(created.metadata["name"])
        actions.append(CreateWorkload(created))
        made = f"Workload {workload_name} and "
    pod_group = PodGroup.model_validate(
        build_pod_group(
            job.body, workload_name, policy, priority, preemption_policy=preemption, layout=job.layout
        )
    )
    actions.append(CreatePodGroup(pod_group, workload_name))
    name = str(pod_group.metadata["name"])
    actions.append(PostEvent(job.ref, "Normal", "PodGroupCreated", f"created {made}PodGroup {name}"))
    planned = PodGroupRecord(
        uid="",  # known once created; the applier fills it in where an event needs it
        namespace=job.namespace,
        name=name,
        owner_uid=job.uid,
        generation=1,
        spec=pod_group.spec,
        status=PodGroupStatus(),
        topology_mode=job.layout.topology_mode,
        created=None,
    )
    return planned, actions
