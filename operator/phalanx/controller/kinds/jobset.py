"""JobSet (jobset.x-k8s.io/v1alpha2): a labelled JobSet is one unit, a tree placed all or nothing — a
CompositePodGroup over one PodGroup per child Job (minCount: the pods the child Job runs at once), made from
the JobSet's spec (api/jobset.py), not from the pods seen so far. Its pods are gated through the replicated
Jobs' pod templates at the JobSet's creation (the webhook); the JobSet controller copies them into its child
Jobs. It is requeued whole through `spec.suspend` (the JobSet controller suspends its Jobs, their pods go, no
failure is counted), and resumed once its pods are gone. Its child Jobs are its own: the Job kind leaves them
alone.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys as names
from phalanx.api.job_policy import JobPolicyError, managed_by_label
from phalanx.api.jobset import (
    API_VERSION,
    JOB_INDEX_LABEL,
    JOBSET_UID_LABEL,
    KIND,
    REPLICATED_JOB_LABEL,
    JobSetPolicy,
    admit_create,
    parse_jobset_policy,
    update_problems,
)
from phalanx.api.owned import Leaf as LeafShape
from phalanx.api.owned import Owner as OwnerIdentity
from phalanx.api.owned import build_tree
from phalanx.api.status import PodGroupStatus
from phalanx.api.trainjob import KIND as TRAINJOB
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import (
    ClusterView,
    Leaf,
    Owner,
    OwnerState,
    PodTemplate,
    Resource,
    Tree,
    Unit,
    dependents_first,
)
from phalanx.controller.kinds.common import (
    announce_once,
    kept_gang_size,
    let_go,
    owners_units,
    preemption_policy_of,
    priority_class_of,
    split_while_deleting,
    unit_priority,
)
from phalanx.controller.kinds.failure_policy import disruptions_ignored
from phalanx.controller.kinds.kueue import kueue_owner, kueue_setup, owner_view
from phalanx.controller.model.actions import (
    Action,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    PostEvent,
    ResumeJob,
)
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    PodGroupRecord,
    PodRecord,
    controller_of,
    meta_of,
    parse_time,
)
from phalanx.controller.model.refs import ObjectRef

RESOURCE = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")
TRAINJOB_KIND = TRAINJOB
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class JobSetRecord:
    uid: str
    namespace: str
    name: str
    managed: bool
    gated_template: bool  # every replicated Job's pod template carries Phalanx's gate
    policy: JobSetPolicy | None
    policy_error: str
    suspended: bool
    finished: bool
    finished_how: str
    requeued: str
    created: dt.datetime | None
    body: Mapping[str, Any] = field(compare=False, hash=False)  # a slim copy, for the builders
    resource_version: str = field(default="", compare=False)
    controller: tuple[str, str] = ("", "")  # (kind, uid) of its controller owner (a TrainJob)
    managed_problem: str = ""  # its managed label has a value the webhooks refuse (api managed_by_label)
    deleting: bool = False  # metadata.deletionTimestamp is set (kinds/base.OwnerRecord)
    dependents_first: bool = False  # deleted in the foreground (kinds/base.dependents_first)
    # Each replicated Job's podFailurePolicy ignores a disrupted pod (kinds/failure_policy.py).
    disruptions_ignored: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def unit_key(self) -> str:
        return unit_key(KIND, self.namespace, self.name)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, KIND, self.namespace, self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobSetRecord:
        meta, spec, status = meta_of(body), body.get("spec") or {}, body.get("status") or {}
        policy: JobSetPolicy | None
        try:
            policy, error = parse_jobset_policy(body), ""
        except JobPolicyError as e:
            policy, error = None, str(e)
        gated = bool(spec.get("replicatedJobs")) and all(
            names.ADMISSION_GATE in _gates(r) for r in spec.get("replicatedJobs") or []
        )
        slim = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "labels", "annotations")},
        }
        managed, managed_problem = managed_by_label(meta.get("labels") or {})
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            managed=managed,
            managed_problem=managed_problem,
            gated_template=gated,
            policy=policy,
            policy_error=error,
            suspended=bool(spec.get("suspend")),
            finished=bool(_finished_how(status)),
            finished_how=_finished_how(status),
            requeued=str((meta.get("annotations") or {}).get(names.REQUEUED_ANNOTATION) or ""),
            created=parse_time(meta.get("creationTimestamp")),
            body=slim,
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            dependents_first=dependents_first(meta),
            controller=controller_of(meta),
            disruptions_ignored=disruptions_ignored(
                mapping(mapping(mapping(r).get("template")).get("spec"))
                for r in spec.get("replicatedJobs") or []
            ),
        )


def _gates(replicated_job: Any) -> list[str]:
    template = ((replicated_job or {}).get("template") or {}).get("spec") or {}
    pod_spec = (template.get("template") or {}).get("spec") or {}
    return [str(g.get("name")) for g in pod_spec.get("schedulingGates") or [] if isinstance(g, Mapping)]


def _finished_how(status: Mapping[str, Any]) -> str:
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Completed":
            return "succeeded"
        if condition.get("type") == "Failed":
            why = ": ".join(str(x) for x in (condition.get("reason"), condition.get("message")) if x)
            return f"failed ({why})" if why else "failed"
    return ""


class JobSetKind:
    """JobSets labelled `phalanx.dev/managed=true` (implements kinds.base.OwnerKind)."""

    name = KIND
    resource = RESOURCE
    suspends = True  # requeued whole through spec.suspend (else: its pods deleted)
    owns_groups = True  # Phalanx's groups for it are owned by it (blockOwnerDeletion)
    read_by_other_kinds = False

    def parse(self, body: Mapping[str, Any]) -> JobSetRecord:
        return JobSetRecord.from_body(body)

    def worth_keeping(self, owner: JobSetRecord, has_objects: bool) -> bool:
        return owner.managed or has_objects or (owner.gated_template and not owner.finished)

    def index_key(self, owner: Any) -> str:
        return str(owner.uid)

    def pod_owner(self, pod: PodRecord) -> str:
        return pod.label(JOBSET_UID_LABEL)

    def admit_create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        gated = admit_create(body)
        return None if gated is None else {"replicatedJobs": gated}

    # Refused, not put back (api/jobset.update_problems): a JobSet's templates change only while it is
    # suspended, as a Job's.
    regates_on_update = False

    def regated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def update_problems(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        return update_problems(old, new)

    def units(self, view: ClusterView) -> Iterable[Unit]:
        return owners_units(self, view)

    def owner_units(self, state: OwnerState, view: ClusterView) -> Iterable[Unit]:
        jobset: JobSetRecord = state.owner
        trainjob = _trainjob_deleting(jobset, view)
        if trainjob is not None:
            # As an owner being deleted (common.owner_units_of): its JobSet and groups go with it.
            if jobset.managed and not trainjob.dependents_first:
                yield from split_while_deleting(TRAINJOB_KIND, trainjob.ref, (jobset_unit(state, view),))
            return
        if not jobset.managed:
            actions = let_go(state, KIND)
            if actions:
                yield Unit(jobset.unit_key, None, None, tuple(actions), created=jobset.created)
        else:
            yield jobset_unit(state, view)


def _trainjob_deleting(jobset: JobSetRecord, view: ClusterView) -> Any:
    """The TrainJob that made it (its record), when it is being deleted (else None): the garbage collector
    deletes the JobSet and its groups next, and the TrainJob's deletion is seen first — the JobSet's may be
    seen after its groups are gone."""
    if jobset.controller[0] != TRAINJOB_KIND:
        return None
    trainjob = view.owner_record(TRAINJOB_KIND, jobset.controller[1])
    return trainjob if trainjob is not None and trainjob.deleting else None


def owner_of(jobset: JobSetRecord, view: ClusterView) -> Owner:
    """The JobSet, or the TrainJob that made it: Trainer keeps the JobSet's suspend in step with its
    TrainJob's, so a TrainJob's JobSet is requeued (and said to be) through the TrainJob."""
    policy = jobset.policy
    kind, ref, requeued = KIND, jobset.ref, jobset.requeued
    suspended, finished, how = jobset.suspended, jobset.finished, jobset.finished_how
    if jobset.controller[0] == TRAINJOB_KIND:
        trainjob = view.owner_record(TRAINJOB_KIND, jobset.controller[1])
        if trainjob is not None:
            kind, ref, requeued = TRAINJOB_KIND, trainjob.ref, trainjob.requeued
            suspended = suspended or trainjob.suspended
            finished, how = finished or trainjob.finished, how or trainjob.finished_how
    return Owner(
        kind=kind,
        ref=ref,
        created=jobset.created,
        suspended=suspended,
        finished=finished,
        finished_how=how,
        requeued=requeued,
        gated_template=jobset.gated_template,
        preemption_never=policy is not None and policy.preemption_policy == "Never",
        disruption_all=True,  # one tree: a broken JobSet is placed again whole
        priority_class=policy.priority_class_name if policy is not None else None,
        pods_from=f"the {kind}'s Jobs to create the other pods",
        requeue_free=jobset.disruptions_ignored,
    )


def jobset_unit(state: OwnerState, view: ClusterView) -> Unit:
    jobset: JobSetRecord = state.owner
    # Kueue manages it (or its TrainJob): no suspend or resume of ours (kinds/kueue.py).
    kueue = owner_view(jobset, view, also=jobset.controller[1])
    owner = kueue_owner(owner_of(jobset, view), kueue)
    policy = jobset.policy
    if policy is None:
        notes = announce_once(view.announced, owner.ref, "policy", "InvalidPolicy", jobset.policy_error)
        return Unit(jobset.unit_key, owner, None, tuple(notes), created=jobset.created)
    chosen = priority_class_of(policy.priority_class_name, view.priority_classes)
    priority = chosen.value if chosen is not None else None
    preemption = preemption_policy_of(policy.preemption_policy, chosen)
    children = policy.child_jobs(jobset.name)
    shown = f"{owner.kind}/{owner.ref.name}"  # the TrainJob that made it, else the JobSet
    workload, composite, groups = build_tree(
        OwnerIdentity(API_VERSION, KIND, jobset.namespace, jobset.name, jobset.uid, shown),
        [LeafShape(f"{c.replicated_job}-{c.index}", c.at_once, c.replicated_job) for c in children],
        topology_key=policy.topology_key,
        leaf_topology_key=policy.slice_topology_key,
        priority_class_name=policy.priority_class_name,
        priority=priority,
        preemption_policy=preemption,
        topology_mode=policy.topology_mode,
    )
    setup: list[Action] = []
    made: list[str] = []
    if state.workload is None:
        setup.append(CreateWorkload(workload))
        made.append(f"Workload {workload.metadata['name']}")
    root = next((g for g in state.composites if not g.parent), None)
    if root is None:
        setup.append(CreateCompositePodGroup(composite))
        made.append(f"CompositePodGroup {composite.metadata['name']}")
        root = CompositePodGroupRecord.to_be_made(composite, jobset.uid, KIND)
    leaves = _leaves(state, policy, children, groups, str(workload.metadata["name"]), setup)
    leaves = _kept_sizes(leaves, groups, owner.ref, view.announced, setup)
    created = sum(1 for a in setup if isinstance(a, CreatePodGroup))
    if created:
        made.append(f"{created} PodGroup(s) (one per child Job)")
    if made:
        setup.append(PostEvent(owner.ref, "Normal", "PodGroupCreated", "created " + ", ".join(made)))
    if kueue is not None:
        setup.extend(kueue_setup(kueue, view.announced, jobset.ref))
    elif owner.requeued and (not owner.suspended or not any(not p.terminal for p in state.pods)):
        setup.append(ResumeJob(owner.ref))  # the JobSet, or its TrainJob
    return Unit(
        key=jobset.unit_key,
        owner=owner,
        tree=Tree(root, (root,), tuple(leaves)),
        setup=tuple(setup),
        priority=unit_priority(state.pods, priority),
        created=jobset.created,
        # Replicated Jobs made one after another (InOrder, dependsOn): decided whole with the first stage.
        staged=policy.in_order or any(r.depends_on for r in policy.replicated_jobs),
    )


def _leaves(
    state: OwnerState,
    policy: JobSetPolicy,
    children: list[Any],
    groups: list[Any],
    workload_name: str,
    setup: list[Action],
) -> list[Leaf]:
    """One leaf per child Job: its PodGroup (made where missing) and its pods in completion-index order."""
    jobset: JobSetRecord = state.owner
    existing = {g.name: g for g in state.pod_groups}
    by_child = _pods_by_child(state.pods, jobset.name)
    templates = {r.name: PodTemplate.of(r.pod_spec, jobset.namespace) for r in policy.replicated_jobs}
    leaves = []
    for child, group in zip(children, groups, strict=True):
        name = str(group.metadata["name"])
        record = existing.get(name)
        if record is None:
            setup.append(CreatePodGroup(group, workload_name))
            record = PodGroupRecord(
                uid="",
                namespace=jobset.namespace,
                name=name,
                owner_uid=jobset.uid,
                generation=1,
                spec=group.spec,
                status=PodGroupStatus(),
                owner_kind=KIND,
            )
        pods = tuple(sorted(by_child.get(child.name, ()), key=_rank))
        live = sum(1 for p in pods if not p.terminal and not p.deleting)
        leaves.append(
            Leaf(
                record,
                pods,
                ranks=tuple(_rank(p)[0] for p in pods),
                expected=child.at_once,
                template=templates[child.replicated_job],
                done=child.done(sum(1 for p in pods if p.succeeded), live),
                made=child.name in state.children,
            )
        )
    return leaves


def _kept_sizes(
    leaves: list[Leaf], groups: list[Any], owner: ObjectRef, announced: Mapping[str, str], setup: list[Action]
) -> list[Leaf]:
    """Each child Job's gang of the size the JobSet's spec gives, whatever its PodGroup was edited to."""
    out = []
    for leaf, group in zip(leaves, groups, strict=True):
        record, notes = kept_gang_size(leaf.group, group.spec, KIND, owner, announced)
        setup.extend(notes)
        out.append(leaf if record is leaf.group else dataclasses.replace(leaf, group=record))
    return out


def _pods_by_child(pods: Iterable[PodRecord], jobset: str) -> dict[str, list[PodRecord]]:
    out: dict[str, list[PodRecord]] = {}
    for pod in pods:
        rjob, index = pod.label(REPLICATED_JOB_LABEL), pod.label(JOB_INDEX_LABEL)
        if rjob and index:
            out.setdefault(f"{jobset}-{rjob}-{index}", []).append(pod)
    return out


def _rank(pod: PodRecord) -> tuple[int, str]:
    value = pod.label(COMPLETION_INDEX_LABEL)
    return (int(value) if value.isascii() and value.isdigit() else 1 << 31, pod.name)
