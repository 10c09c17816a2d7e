"""What a scheduling pass decided to do, as typed values (produced by `plan()`, run by the applier).

Actions are grouped per *unit* (model/keys.py): the applier runs each unit's actions in order and in
isolation, so one unit's failure never blocks another's. Evict, suspend
and resume are further actions of the same kind (preemption and requeue add them).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from phalanx.api.compositepodgroup import CompositePodGroup
from phalanx.api.podgroup import PodGroup
from phalanx.api.status import Admission, GroupStatus
from phalanx.api.topology import TopologyStatus
from phalanx.api.workload import Workload
from phalanx.controller.model.refs import ObjectRef

EventType = Literal["Normal", "Warning"]
RequeueCause = Literal["preempted", "below-min-count", "unbindable", "released-in-part", "quota", "scale-up"]


@dataclass(frozen=True)
class CreateWorkload:
    workload: Workload


@dataclass(frozen=True)
class CreatePodGroup:
    """Create the PodGroup; its owner reference to the Workload gets the Workload's uid at apply time."""

    pod_group: PodGroup
    workload: str  # name of the Workload in the same namespace


@dataclass(frozen=True)
class CreateCompositePodGroup:
    """Create a CompositePodGroup (the root of a Job's slices, planned with its PodGroups)."""

    group: CompositePodGroup


@dataclass(frozen=True)
class PatchMinCount:
    pod_group: ObjectRef
    min_count: int


@dataclass(frozen=True)
class RecordAdmission:
    """Write the decision on the PodGroup before any of its pods is released (the restart path reads it).

    For a tree of groups, first on the root CompositePodGroup (the whole tree's pods, one atomic write),
    then on each PodGroup (its own pods)."""

    group: ObjectRef  # a PodGroup, or a CompositePodGroup
    admission: Admission
    # The PodGroup version the decision was planned on: the write fails (409) if the group changed since,
    # so a replica whose view lags (a new leader) never records a second decision over a newer one.
    resource_version: str = ""
    # The whole status the pass ends with (conditions, counters, this admission), written in the same
    # request: one status write per admission instead of two (None: the admission alone).
    status: GroupStatus | None = None


@dataclass(frozen=True)
class ReleasePod:
    """Pin the pod to its node (nodeSelector) and remove Phalanx's gate, in one request."""

    pod: ObjectRef
    node: str
    pod_group: str
    # Pin it by the node's name in a required node affinity too (the pod has none of its own to keep): kube-
    # scheduler's NodeAffinity PreFilter then hands the filters that one node, as for a DaemonSet's pods,
    # instead of every node of the cluster, most of which the nodeSelector refuses one by one (at 5,000
    # nodes kube-scheduler spent 12 ms of CPU per pinned pod, 1.7 ms with the name). A gated pod's required
    # node affinity may only be added to term by term once it has one, so a pod with its own keeps it as is.
    by_name: bool = True
    # The node's labels of the topology keys its gang was placed by, as the decision saw them, pinned too
    # (nodeSelector): a node relabelled into another domain between the release and the binding (a topology
    # label corrected) no longer matches, so kube-scheduler binds nothing there and says the pod is
    # unschedulable, and the gang is rolled back whole (plan/requeue.py stranded) instead of running across
    # two domains. Kueue's TAS pins its domain's labels the same way.
    domain: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class UngatePod:
    """Remove Phalanx's gate without choosing a node (a basic group's pods are never held)."""

    pod: ObjectRef


@dataclass(frozen=True)
class LabelPod:
    """Link a pod to its PodGroup (label), also while it waits."""

    pod: ObjectRef
    pod_group: str


@dataclass(frozen=True)
class EvictPod:
    """Evict one pod through the Eviction API with a DisruptionTarget condition saying why."""

    pod: ObjectRef
    reason: str
    message: str


@dataclass(frozen=True)
class SuspendJob:
    """Requeue a Job whole: suspend it (its pods go, no failure is counted), noting why on the Job."""

    job: ObjectRef
    why: str
    cause: RequeueCause


@dataclass(frozen=True)
class DeletePod:
    """Requeue a unit whose owner has no suspend (a LeaderWorkerSet group): delete its pods, which the
    owner recreates, born gated."""

    pod: ObjectRef
    why: str
    cause: RequeueCause
    # Its deletion takes the rest of the unit (an LWS leader: its workers' StatefulSet is the leader's), so
    # it is deleted in the foreground, as LWS's own group restart does: it stays, being deleted, until they
    # are gone, and its owner makes it again only then. Gone at once, it is made again while the old
    # workers end, and LWS takes such a worker for a failure of the new group and deletes its leader too
    # (RecreateGroupOnPodRestart): the group would be made twice.
    foreground: bool = False


@dataclass(frozen=True)
class ResumeJob:
    """Resume a Job Phalanx requeued, once its pods are gone; its new pods are born gated."""

    job: ObjectRef


@dataclass(frozen=True)
class DeactivateKueueWorkload:
    """Requeue a Kueue-managed owner whole through Kueue: set its Kueue Workload's `spec.active` to false,
    noting why on it (phalanx.dev/requeued). Kueue evicts it and suspends the owner, which deletes its pods
    without counting them as failures (pods Phalanx deletes count, unless its Jobs' podFailurePolicy ignores
    them), and releases its quota. Never a suspension of Phalanx's own: Kueue would undo it."""

    workload: ObjectRef  # the Kueue Workload
    why: str
    cause: RequeueCause


@dataclass(frozen=True)
class ActivateKueueWorkload:
    """Activate again a Kueue Workload Phalanx deactivated, once Kueue has stopped its owner and released its
    quota (its note cleared): Kueue queues it again, and once it is admitted the owner's new pods wait for a
    whole placement."""

    workload: ObjectRef


@dataclass(frozen=True)
class PatchStatus:
    group: ObjectRef  # a PodGroup, or a CompositePodGroup
    status: GroupStatus


@dataclass(frozen=True)
class PatchTopologyStatus:
    """Write a Topology's status (node count, Active): planned only when it differs from the present one."""

    topology: ObjectRef
    status: TopologyStatus


@dataclass(frozen=True)
class PostEvent:
    involved: ObjectRef
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class RememberAnnounced:
    """Note in the cache that a problem was announced (one event per change, not one per pass)."""

    key: str  # the Job's uid, and what was announced (e.g. "<uid>/policy")
    message: str


@dataclass(frozen=True)
class DeleteObject:
    """Delete one of our objects (a Workload or PodGroup of a Job released from Phalanx)."""

    target: ObjectRef


Action = (
    CreateWorkload
    | CreatePodGroup
    | CreateCompositePodGroup
    | PatchMinCount
    | RecordAdmission
    | ReleasePod
    | UngatePod
    | LabelPod
    | PatchStatus
    | PatchTopologyStatus
    | PostEvent
    | RememberAnnounced
    | DeleteObject
    | EvictPod
    | SuspendJob
    | DeletePod
    | ResumeJob
    | DeactivateKueueWorkload
    | ActivateKueueWorkload
)

# Actions of these kinds that follow each other in a group's list are independent of each other:
# the applier runs such a run of them concurrently (a gang's releases go out together).
CONCURRENT = (
    ReleasePod,
    UngatePod,
    LabelPod,
    PostEvent,
    EvictPod,
    SuspendJob,
    DeletePod,
    DeactivateKueueWorkload,
)

# Actions that neither place, free nor hold room, nor record anything a decision reads: a unit's objects
# being created, its gang size, events, and a status that holds no room (a group's first "waiting for
# pods", a message). A plan of only these is applied while the next passes run (loop/scheduler.py): a
# burst's hundreds of creates do not hold back the decisions of the gangs whose groups already exist, and
# no later decision depends on a write still in flight. A status with a reservation is not setup: later
# units must see the room held (preemption, bounded waiting) before they are planned.
SETUP_ONLY = (
    CreateWorkload,
    CreatePodGroup,
    CreateCompositePodGroup,
    PatchMinCount,
    PostEvent,
    RememberAnnounced,
)


@dataclass(frozen=True)
class UnitPlan:
    """One unit's actions for this pass, in order."""

    key: str  # the unit's key (model/keys.py): what backs off when an action fails
    actions: tuple[Action, ...]
    owner: ObjectRef | None = None  # told with a Warning event when an action fails
    admitted_pods: int = 0  # pods this plan releases (for metrics)
    admission_latency: float | None = None  # seconds from the owner's creation to its first admission
    preempted_pods: int = 0  # pods this plan preempts (for metrics)
    admitted: str | None = None  # "Gang" or "Basic" when this plan admits the unit (plan/admitted.py)
    waiting_since: dt.datetime | None = None  # then: when its wait began (its creation or last requeue)


def places_nothing(plan: UnitPlan) -> bool:
    """Whether the plan is only setup (SETUP_ONLY, and status writes holding no room): safe to apply
    beside later passes."""
    return all(
        isinstance(action, SETUP_ONLY)
        or (isinstance(action, PatchStatus) and action.status.reservation is None)
        for action in plan.actions
    )


def status_write(action: object) -> tuple[ObjectRef, GroupStatus] | None:
    """The group status an action writes, if it writes one: a status patch, or the whole status a
    decision's record carries (one write per admission)."""
    if isinstance(action, PatchStatus):
        return action.group, action.status
    if isinstance(action, RecordAdmission) and action.status is not None:
        return action.group, action.status
    return None
