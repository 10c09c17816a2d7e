"""A batch/v1 Job as Phalanx reads it (parsed once at the cache boundary), and what every Job unit, plain
or sliced, derives from it: the Owner the state machine sees, resuming after a requeue, and annotation
changes made after creation that are said but not applied."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys as names
from phalanx.api.job_layout import NO_LAYOUT, JobLayout, parse_job_layout
from phalanx.api.job_policy import (
    SCALE_UP_REQUEUE,
    JobPolicy,
    JobPolicyError,
    managed_by_label,
    parse_job_policy,
)
from phalanx.api.scheduling import PREEMPT_NEVER
from phalanx.bodies import mapping
from phalanx.controller.kinds.base import Owner, OwnerState, Resource, dependents_first
from phalanx.controller.kinds.failure_policy import disruptions_ignored
from phalanx.controller.model.actions import (
    Action,
    ResumeJob,
)
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.records import PodGroupRecord, PodRecord, controller_of, meta_of, parse_time
from phalanx.controller.model.refs import ObjectRef

JOB_API_VERSION = "batch/v1"
KIND = "Job"
RESOURCE = Resource("batch", "v1", "jobs")


@dataclass(frozen=True, slots=True)
class JobRecord:
    uid: str
    namespace: str
    name: str
    managed: bool  # carries phalanx.dev/managed=true now (False: released from Phalanx)
    gated_template: bool  # its pod template carries Phalanx's gate (set by the webhook at creation)
    policy: JobPolicy | None  # None when the annotations are invalid (see policy_error)
    policy_error: str  # why the policy is invalid, "" when it is valid
    suspended: bool
    finished: bool
    created: dt.datetime | None
    finished_how: str  # "" while it runs; "succeeded", or "failed (<reason>: <message>)"
    requeued: str  # why Phalanx suspended it to requeue it ("" when it did not)
    remaining: int | None  # completions still to make (None: the Job has no completion count)
    layout: JobLayout  # topology mode and slices (api/job_layout.py)
    # The builders of our objects need the Job's labels, annotations and template: a slim copy.
    body: Mapping[str, Any] = field(compare=False, hash=False)
    body_digest: tuple[Any, ...] = ()  # what of `body` the builders read, for comparison
    resource_version: str = field(default="", compare=False)
    controlled_by: str = ""  # the kind of its controller owner (a JobSet's child Job: "JobSet")
    failed: int = 0  # status.failed: what its backoffLimit has already spent (job_budget.py)
    succeeded: int = 0  # status.succeeded (the Job controller counts a pod's completion a moment later)
    managed_problem: str = ""  # its managed label has a value the webhooks refuse (api managed_by_label)
    deleting: bool = False  # metadata.deletionTimestamp is set (kinds/base.OwnerRecord)
    dependents_first: bool = False  # deleted in the foreground (kinds/base.dependents_first)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def unit_key(self) -> str:
        return unit_key(KIND, self.namespace, self.name)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(JOB_API_VERSION, KIND, self.namespace, self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobRecord:
        meta = meta_of(body)
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        slim = {
            "apiVersion": JOB_API_VERSION,
            "kind": KIND,
            "metadata": {
                k: meta.get(k)
                for k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")
            },
            "spec": {k: v for k, v in spec.items() if k != "selector"},
        }
        policy: JobPolicy | None
        layout = NO_LAYOUT
        try:
            policy, error = parse_job_policy(slim, running=True), ""
            layout = parse_job_layout(slim, policy)
        except JobPolicyError as e:
            policy, error = None, str(e)
        template_spec = (spec.get("template") or {}).get("spec") or {}
        gates = [g.get("name") for g in template_spec.get("schedulingGates") or []]
        finished_how = _finished_how(status)
        managed, managed_problem = managed_by_label(meta.get("labels") or {})
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            managed=managed,
            managed_problem=managed_problem,
            gated_template=names.ADMISSION_GATE in gates,
            policy=policy,
            policy_error=error,
            suspended=bool(spec.get("suspend")),
            finished=bool(finished_how),
            created=parse_time(meta.get("creationTimestamp")),
            finished_how=finished_how,
            requeued=str((meta.get("annotations") or {}).get(names.REQUEUED_ANNOTATION) or ""),
            remaining=_remaining(spec, status),
            layout=layout,
            controlled_by=controller_of(meta)[0],
            failed=int(status.get("failed") or 0),
            succeeded=int(status.get("succeeded") or 0),
            body=slim,
            body_digest=(
                tuple(sorted((meta.get("labels") or {}).items())),
                tuple(sorted((meta.get("annotations") or {}).items())),
                template_spec.get("priorityClassName"),
            ),
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            dependents_first=dependents_first(meta),
        )


def _finished_how(status: Mapping[str, Any]) -> str:
    """ "" while the Job runs; "succeeded", or "failed (<reason>: <message>)"."""
    final = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ),
        None,
    )
    if final is None:
        return ""
    if final.get("type") == "Complete":
        return "succeeded"
    why = ": ".join(str(x) for x in (final.get("reason"), final.get("message")) if x)
    return f"failed ({why})" if why else "failed"


def _remaining(spec: Mapping[str, Any], status: Mapping[str, Any]) -> int | None:
    completions = spec.get("completions")
    if not isinstance(completions, int):
        return None
    succeeded = int(status.get("succeeded") or 0)
    return max(0, completions - succeeded)


def remaining_now(job: JobRecord, pods: tuple[PodRecord, ...]) -> int | None:
    """Completions still to make, counting the pods seen Succeeded that the Job's status does not count yet
    (the Job controller counts a completion after it sees the pod end): a pass between the two would ask
    the gang for the member that just completed and call it short of pods."""
    if job.remaining is None:
        return None
    done = [p for p in pods if p.succeeded]
    indexed = {p.completion_index for p in done if p.completion_index is not None}
    seen = len(indexed) + sum(1 for p in done if p.completion_index is None)
    return max(0, job.remaining - max(0, seen - job.succeeded))


def owner_of(
    job: JobRecord, group: PodGroupRecord | None, *, sliced: bool = False, pods: tuple[PodRecord, ...] = ()
) -> Owner:
    """The Job as the state machine sees it (`pods`: its pods, for the completions they show)."""
    policy = job.policy
    never = policy is not None and policy.preemption_policy == PREEMPT_NEVER
    if group is not None and group.spec.preemption_policy == PREEMPT_NEVER:
        never = True  # as the PodGroup was made (from the Job's annotation or its PriorityClass)
    if sliced:
        disruption_all = policy is not None and policy.disruption_mode == "all"
    else:
        disruption_all = group is not None and group.spec.disruption_mode.all is not None
    return Owner(
        kind=KIND,
        ref=job.ref,
        created=job.created,
        suspended=job.suspended,
        finished=job.finished,
        finished_how=job.finished_how,
        requeued=job.requeued,
        gated_template=job.gated_template,
        preemption_never=never,
        disruption_all=disruption_all,
        priority_class=policy.priority_class_name if policy is not None else None,
        # Near the end of a Job with more completions than parallelism, fewer pods than minCount are left
        # to run; asking for minCount then would hold the last ones forever (plain gangs; slices: issue 16).
        remaining=None if sliced else remaining_now(job, pods),
        requeue_on_scale_up=policy is not None and policy.on_scale_up == SCALE_UP_REQUEUE,
        requeue_free=disruptions_ignored([mapping(job.body.get("spec"))]),
    )


def resume_if_requeued(job: JobRecord, pods: tuple[PodRecord, ...]) -> list[Action]:
    """Requeued by us and its pods are gone (or someone resumed it already): resume it, clear the note."""
    if job.requeued and (not job.suspended or not any(not p.terminal for p in pods)):
        return [ResumeJob(job.ref)]
    return []


def root_group(state: OwnerState) -> PodGroupRecord | None:
    """A plain Job's one PodGroup (a sliced Job's PodGroups have a parent)."""
    return next((g for g in state.pod_groups if not g.parent), None)


def immutable_changes(policy: JobPolicy, group: PodGroupRecord, layout: JobLayout = NO_LAYOUT) -> str:
    """Annotations changed after creation (around the webhook, e.g. with Phalanx down): said, not applied."""
    current_policy = "gang" if group.gang_min_count is not None else "basic"
    current_mode = "all" if group.spec.disruption_mode.all is not None else "single"
    changes = [
        f"{annotation}: {after!r} differs from {before!r}, which the PodGroup keeps"
        for annotation, before, after in (
            (names.POLICY_ANNOTATION, current_policy, policy.policy),
            (names.TOPOLOGY_KEY_ANNOTATION, group.topology_key, policy.topology_key),
            (names.DISRUPTION_MODE_ANNOTATION, current_mode, policy.disruption_mode),
            (
                names.PREEMPTION_POLICY_ANNOTATION,
                group.spec.preemption_policy,
                policy.preemption_policy or group.spec.preemption_policy,
            ),
            # A Job made without slices stays one PodGroup; its topology mode stays the one it was made with.
            (names.TOPOLOGY_MODE_ANNOTATION, group.topology_mode, layout.topology_mode),
            (
                names.SLICE_SIZE_ANNOTATION,
                None,
                None if layout.slice_size is None else str(layout.slice_size),
            ),
            (names.SLICE_TOPOLOGY_KEY_ANNOTATION, None, layout.slice_topology_key),
        )
        if before != after
    ]
    if not changes:
        return ""
    return (
        "; ".join(changes)
        + " (only min-count may change after creation; recreate the Job to change the rest)"
    )
