"""The workload-kind interface: what the one scheduling state machine needs from any owner of pods.

Every kind of workload (a batch/v1 Job, plain or sliced; hand-made PodGroup and CompositePodGroup trees;
later JobSet, LeaderWorkerSet) is the same gang state machine over a different owner. A kind turns what
the cache holds into *units* (`Unit`): one thing placed all or nothing — a tree of groups (a single
PodGroup is a tree of one leaf), the pods that belong to each leaf in rank order, the owner as the state
machine sees it (`Owner`: identity, whether it is held, how to requeue it whole, when it is finished), and
the actions that must come first (its Workload and groups made, notes said once, a requeued owner
resumed). The state machine (plan/) never asks which kind a unit is.

Adding a kind is one module implementing `OwnerKind` and one row in `kinds.KINDS` (Kueue's
`jobframework.GenericJob` plays the same part there).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol, runtime_checkable

from phalanx.api.lws import LeaderSet
from phalanx.controller.model.actions import Action, DeactivateKueueWorkload, RequeueCause, SuspendJob
from phalanx.controller.model.kueue import KueueWorkloadRecord, TopologyFlavors
from phalanx.controller.model.quota import PodsRefused, QuotaRecord
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
    WorkloadRecord,
)
from phalanx.controller.model.refs import ObjectRef
from phalanx.placement import (
    PodRequirements,
    PodTraits,
    TopologyMode,
    pod_requests,
    pod_requirements,
    pod_traits,
)

# How an owner is taken back whole: suspended and resumed by Phalanx; its pods deleted (its controller makes
# them again); or, Kueue managing it, through Kueue (its Kueue Workload deactivated, then activated again).
RequeueHow = Literal["suspend", "delete-pods", "kueue"]
FOREGROUND_DELETION = (
    "foregroundDeletion"  # the garbage collector's finalizer of a deletion in the foreground
)


def dependents_first(meta: Mapping[str, Any]) -> bool:
    """Being deleted in the foreground: the garbage collector deletes its dependents (its pods among them)
    before it (kinds/common.split_while_deleting leaves those to it)."""
    return bool(meta.get("deletionTimestamp")) and FOREGROUND_DELETION in (meta.get("finalizers") or [])


@dataclass(frozen=True)
class Resource:
    """An API resource: what is watched, listed and relisted (watch/watched.py)."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class Owner:
    """The owner of a unit's pods, as the state machine sees it (None for hand-made groups)."""

    kind: str  # "Job": what messages call it
    ref: ObjectRef  # events go here too; requeue acts on it
    created: dt.datetime | None
    suspended: bool = False  # nothing is placed and nothing is held while it is
    finished: bool = False
    finished_how: str = ""  # "succeeded", "failed (<reason>: <message>)"
    requeued: str = ""  # why Phalanx requeued it ("" when it did not)
    gated_template: bool = True  # its pods are born behind Phalanx's gate (False: labelled too late)
    preemption_never: bool = False  # its own setting says it never preempts
    disruption_all: bool = False  # a broken gang is requeued at once, without the grace period
    priority_class: str | None = None  # the PriorityClass its pods name
    remaining: int | None = None  # pods still to run (a Job with more completions than parallelism)
    requeue: RequeueHow = "suspend"  # how it is taken back whole (RequeueHow)
    # Deleting its pods costs its Jobs no failure: a podFailurePolicy rule of each ignores DisruptionTarget
    # (kinds/failure_policy.py). A Kueue-managed owner is then requeued by deleting its pods (kinds/kueue.py).
    requeue_free: bool = False
    kueue_workload: ObjectRef | None = None  # Kueue-managed: its Kueue Workload (requeue "kueue" acts on it)
    pods_from: str = "the Job to create the other pods"  # what a gang short of pods waits for
    held_by: str = ""  # why another system holds it while it is suspended (Kueue: kinds/kueue.py)
    kueue_queue: str | None = None  # Kueue-managed: its ClusterQueue ("" none yet); None: not managed
    # How many of its running pods it may lose to evictions without failing (None: any number); a
    # `single` victim beyond it is requeued whole (kinds/job_budget.py).
    failure_budget: int | None = None
    # A ResourceQuota refuses the pods its gang still lacks (None: nothing known stops their creation).
    pods_refused: PodsRefused | None = None
    # Scaled up and the new pods do not fit beside the running ones: requeue the gang whole (a Job's
    # phalanx.dev/on-scale-up: requeue) instead of letting the new pods wait.
    requeue_on_scale_up: bool = False

    def take_back(self, why: str, cause: RequeueCause) -> SuspendJob | DeactivateKueueWorkload:
        """The one write that requeues it whole when its pods are not deleted for it (`requeue` is not
        "delete-pods"): suspended (Phalanx resumes it once its pods are gone), or, Kueue managing it, its
        Kueue Workload deactivated (Kueue stops it and releases its quota; then Phalanx activates it again:
        kinds/kueue.py)."""
        if self.requeue == "kueue" and self.kueue_workload is not None:
            return DeactivateKueueWorkload(self.kueue_workload, why, cause)
        return SuspendJob(self.ref, why, cause)


@dataclass(frozen=True)
class PodTemplate:
    """What a pod not made yet will ask for (a staged unit's later pods), from its owner's pod template."""

    requests: Mapping[str, int]
    requirements: PodRequirements
    traits: PodTraits

    @classmethod
    def of(cls, pod_spec: Mapping[str, Any], namespace: str) -> PodTemplate:
        requests = pod_requests(pod_spec)
        traits = pod_traits({"namespace": namespace}, pod_spec)
        return cls(requests, pod_requirements(pod_spec, requests), traits)


@dataclass(frozen=True)
class Leaf:
    """A PodGroup (existing, or planned in this pass) and the pods that belong to it, in rank order.

    For a staged unit: `ranks` (each pod's rank, as `pods`), the ranks the owner will make (`slots`,
    default 0 .. expected-1) and the `template` those not made yet will have. `done`: its pods ran to
    completion (a JobSet's child Job that succeeded, e.g. the stage a `dependsOn: Complete` waits for): it
    counts as placed for its parent's min count, and nothing is placed or held for it any more."""

    group: PodGroupRecord
    pods: tuple[PodRecord, ...]
    ranks: tuple[int, ...] = ()
    expected: int = 0
    template: PodTemplate | None = None
    slots: tuple[int, ...] = ()
    done: bool = False
    # Its stage came, whether or not a pod of it is there (every one lost with its nodes: plan/lost.py): a
    # JobSet's child Job exists, or an LWS group's workers of its present leader ended or are terminating.
    made: bool = False

    @property
    def ranked_slots(self) -> tuple[int, ...]:
        return self.slots or tuple(range(self.expected))

    @cached_property
    def rank_of(self) -> Mapping[str, int]:
        """Each pod's rank by its key (a staged unit's), built once: the plan reads it per pod."""
        return {p.key: r for p, r in zip(self.pods, self.ranks, strict=False)}

    @property
    def live(self) -> tuple[PodRecord, ...]:
        """Its pods neither finished nor being deleted."""
        return tuple(p for p in self.pods if not p.terminal and not p.deleting)

    @property
    def placed(self) -> tuple[PodRecord, ...]:
        """Its live pods that hold a node (bound, or released to one), by name."""
        return tuple(sorted((p for p in self.live if p.usage_node), key=lambda p: p.name))

    def gang_min(self, owner: Owner | None, single: bool) -> int | None:
        """The pods its gang needs now (None: not a gang). Members that completed count toward it and never
        run again: a one-leaf unit (`single`) near the end of its owner asks only for what is left (its
        completions still to make), any other leaf for its minCount less its succeeded pods."""
        min_count = self.group.gang_min_count
        if min_count is None:
            return None
        if single and owner is not None and owner.remaining is not None:
            return max(1, min(min_count, owner.remaining))
        succeeded = sum(1 for p in self.pods if p.succeeded and not p.deleting)
        return max(1, min_count - succeeded)


@dataclass(frozen=True)
class Tree:
    """What a unit places: one PodGroup (root None), or a CompositePodGroup over PodGroups."""

    root: CompositePodGroupRecord | None
    composites: tuple[CompositePodGroupRecord, ...]  # every composite of the tree, the root first
    leaves: tuple[Leaf, ...]
    mode: TopologyMode = "required"  # of a one-leaf tree (a tree's leaves are required)

    @property
    def holder(self) -> PodGroupRecord | CompositePodGroupRecord:
        """The group whose status records the whole unit's decision: the root, or the only PodGroup."""
        return self.root if self.root is not None else self.leaves[0].group

    def whole(
        self, leaf_whole: Callable[[Leaf], bool], composite: CompositePodGroupRecord | None = None
    ) -> bool:
        """Whether the tree under `composite` (default the root) meets its min counts, each leaf's given by
        `leaf_whole`: a composite needs minGroupCount (default 1) of its children whole."""
        if self.root is None:
            return leaf_whole(self.leaves[0])
        g = composite or self.root
        ok = sum(1 for leaf in self.leaves if leaf.group.parent == g.name and leaf_whole(leaf)) + sum(
            1 for child in self.composites if child.parent == g.name and self.whole(leaf_whole, child)
        )
        return ok >= (g.min_group_count or 1)


@dataclass(frozen=True)
class Unit:
    """One thing placed all or nothing, with what must be done before it is scheduled."""

    key: str  # model.keys.unit_key: what backs off and what the plan is grouped by
    owner: Owner | None  # None: hand-made groups, which nothing recreates
    tree: Tree | None  # None: nothing to schedule this pass (let go, or not made yet)
    setup: tuple[Action, ...] = ()  # objects made, notes said once, a requeued owner resumed
    priority: int = 0
    created: dt.datetime | None = None
    # Its owner makes its pods in stages (JobSet InOrder, LWS LeaderReady): the whole unit is decided when
    # the first stage's pods are there, the room of the later ones held until they come.
    staged: bool = False
    # Requeued by deleting pods: the pods whose deletion takes the whole unit with it (an LWS group's
    # leader); empty: every pod that holds a node.
    requeue_pods: tuple[str, ...] = ()

    def recorded_pods(self) -> list[tuple[PodRecord, str]]:
        """The live pods its recorded decision names, each with the node it names ([] with no record)."""
        tree = self.tree
        if tree is None or tree.holder.status.admission is None:
            return []
        nodes = {a.pod: a.node for a in tree.holder.status.admission.assignments}
        return [
            (p, nodes[p.name])
            for leaf in tree.leaves
            for p in leaf.pods
            if p.name in nodes and not p.terminal and not p.deleting
        ]

    @property
    def mid_release(self) -> bool:
        """Its recorded decision is released in part: a pod it names holds its node while another it names
        is still gated (the process died between the releases, or a release failed)."""
        pods = self.recorded_pods()
        return any(p.usage_node for p, _ in pods) and any(p.gated for p, _ in pods)

    @property
    def order(self) -> tuple[bool, int, dt.datetime, str]:
        """Units are scheduled by priority (highest first), then age (oldest first), then key; but a unit
        whose recorded decision is released in part comes before all: its room was given when it was
        decided, and a gang planned before it (an older one whose pods came meanwhile, one whose room is
        held after waiting long) would otherwise take the room of its gated pods and leave it running in
        part until its grace ran out and it was requeued (a crash soak saw that)."""
        created = self.created or dt.datetime.max.replace(tzinfo=dt.UTC)
        return (not self.mid_release, -self.priority, created, self.key)


class OwnerRecord(Protocol):
    """A typed record of an owner object, parsed once at the cache boundary."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def ref(self) -> ObjectRef: ...
    @property
    def suspended(self) -> bool: ...
    @property
    def requeued(self) -> str:
        """Why Phalanx requeued it ("" when it did not): written with the suspension."""
        ...

    @property
    def deleting(self) -> bool:
        """Its deletion waits (a foreground deletion for its dependents, or a finalizer): nothing is made
        again or placed for it (kinds/common.py owner_units_of)."""
        ...

    @property
    def dependents_first(self) -> bool:
        """Its deletion is in the foreground (`dependents_first`): its pods go before it."""
        ...

    @property
    def created(self) -> dt.datetime | None: ...
    @property
    def managed_problem(self) -> str:
        """Its managed label has a value the webhooks refuse ("": none; api/job_policy managed_by_label)."""
        ...


@dataclass(frozen=True)
class OwnerState:
    """One owner with what Phalanx made for it and its pods, as the cache holds them now."""

    owner: Any  # the kind's own record type (OwnerRecord)
    workload: WorkloadRecord | None
    pod_groups: tuple[PodGroupRecord, ...]  # made for it (its controller owner reference)
    composites: tuple[CompositePodGroupRecord, ...]
    pods: tuple[PodRecord, ...]
    # The names of the live objects of our owner kinds it controls (a JobSet's child Jobs: cache/children.py).
    children: frozenset[str] = frozenset()


class ClusterView(Protocol):
    """What a kind reads of the cluster to make its units (the cache implements it)."""

    @property
    def priority_classes(self) -> Mapping[str, PriorityClassRecord]: ...
    @property
    def announced(self) -> Mapping[str, str]: ...
    def owner_states(self, kind: str) -> Iterable[OwnerState]: ...
    def owner_record(self, kind: str, uid: str) -> Any:
        """The record of the owner of `kind` with that uid, or None (an owner's own owner: a TrainJob)."""
        ...

    def unowned_groups(self) -> tuple[Iterable[CompositePodGroupRecord], Iterable[PodGroupRecord]]: ...
    def kueue_workloads(self, *owner_keys: str) -> tuple[KueueWorkloadRecord, ...]:
        """The Kueue Workloads owned by any of these owners (uids, or `<namespace>/<name>`)."""
        ...

    def kueue_topology_flavors(self, namespace: str, local_queue: str) -> TopologyFlavors | None:
        """The ResourceFlavors with a topologyName behind that LocalQueue (None: none, or not seen)."""
        ...

    def pods_joining(self, namespace: str, label_value: str) -> Iterable[PodRecord]: ...
    def resource_quotas(self, namespace: str) -> tuple[QuotaRecord, ...]:
        """The ResourceQuotas of a namespace (gated pods count against them)."""
        ...

    def lws_leader_set(self, namespace: str, name: str) -> LeaderSet | None:
        """LWS `namespace/name`'s leader StatefulSet (the groups it wants), or None if not seen."""
        ...


class WorkloadKind(Protocol):
    """A kind of workload: how its units are made from the cluster's state."""

    @property
    def name(self) -> str: ...
    def units(self, view: ClusterView) -> Iterable[Unit]: ...


@runtime_checkable
class OwnerKind(WorkloadKind, Protocol):
    """A kind whose owners are API objects of their own (Jobs, JobSets, ...), kept in the cache."""

    @property
    def resource(self) -> Resource: ...
    @property
    def suspends(self) -> bool:
        """Its owners are requeued whole through `spec.suspend` (else by deleting their pods)."""
        ...

    @property
    def owns_groups(self) -> bool:
        """Phalanx's groups for an owner of this kind are owned by it (blockOwnerDeletion)."""
        ...

    @property
    def read_by_other_kinds(self) -> bool:
        """Other kinds' units read its owners' records (`ClusterView.owner_record`: a TrainJob's JobSet), so
        a change of one makes every unit again."""
        ...

    def owner_units(self, state: OwnerState, view: ClusterView) -> Iterable[Unit]:
        """The units of one owner (its `units(view)` is these for every owner the view holds). A pure
        function of `state` and of what the view says beside it (priority classes, quotas, notes said,
        Kueue's objects, other kinds' owners): the loop rebuilds an owner's units only when one of those
        changed (loop/units.py)."""
        ...

    def parse(self, body: Mapping[str, Any]) -> OwnerRecord: ...
    def worth_keeping(self, owner: Any, has_objects: bool) -> bool:
        """Whether the cache keeps it: managed, or Phalanx still has to let go of it."""
        ...

    def pod_owner(self, pod: PodRecord) -> str:
        """The index key of the owner of this kind that `pod` belongs to ("" if none): see `index_key`."""
        ...

    def index_key(self, owner: Any) -> str:
        """What `pod_owner` returns for this owner's pods (its uid, or `<namespace>/<name>` for a kind
        whose pods name their owner only)."""
        ...


@runtime_checkable
class AdmittingKind(OwnerKind, Protocol):
    """An owner kind whose objects Phalanx gates at creation through its own webhook (watch/registry.py)."""

    def admit_create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """The spec patch that holds its pods behind Phalanx's gate (None: nothing to add); raises
        JobPolicyError naming every field at fault."""
        ...

    def update_problems(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
        """What an edit of a managed object may not change (each naming its field)."""
        ...

    @property
    def regates_on_update(self) -> bool:
        """Its pod templates may change at any time (a LeaderWorkerSet's rolling update): a mutating UPDATE
        webhook puts Phalanx's gate back into them (`regated`). Else an edit taking the gate away is
        refused (`update_problems`), or the kind has no template of its own (a TrainJob)."""
        ...

    def regated(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
        """The spec patch that puts Phalanx's gate back into the templates of an edited managed object that
        had it (None: nothing to put back)."""
        ...
