"""Typed records of the API objects Phalanx reads, parsed once at the cache boundary.

Past this module nothing walks a dict of an API object: the loop, `plan()` and the applier read
these records. A record holds only what scheduling needs. `resource_version` is kept as the
opaque string the API gave and is left out of comparisons (`compare=False`), so a record equals
its predecessor unless something that can change a decision changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import cluster_objects
from phalanx.api import keys as names
from phalanx.api.cluster_objects import HOSTNAME_KEY, TERMINAL_PHASES, placement_spec
from phalanx.api.compositepodgroup import CompositePodGroup, CompositePodGroupSpec
from phalanx.api.group import API_VERSION, COMPOSITE_POD_GROUP_KIND, POD_GROUP_KIND, WORKLOAD_KIND
from phalanx.api.job_layout import (
    COMPLETION_INDEX_LABEL,
    TopologyModeKind,
    group_topology_mode,
)
from phalanx.api.podgroup import PodGroupSpec
from phalanx.api.scheduling import SchedulingConstraints
from phalanx.api.status import CompositePodGroupStatus, PodGroupStatus
from phalanx.controller.model.refs import ObjectRef
from phalanx.placement import (
    NO_TRAITS,
    BoundPod,
    PodRequirements,
    PodTraits,
    pod_requests,
    pod_requirements,
    pod_traits,
)
from phalanx.placement.interning import Interner, MappingInterner, text

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
INDEX_FAILURES_ANNOTATION = "batch.kubernetes.io/job-index-failure-count"
JOB_API_VERSION = "batch/v1"


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp of the API, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def meta_of(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


# One object per distinct pod spec requirements (pods of a template share it): the engine groups pods by
# requirements, and a dictionary finds the same object without comparing every field.
_interned: Interner[PodRequirements] = Interner()
# Pods of a template request the same: one read-only mapping for all of them.
_shared_requests: MappingInterner[int] = MappingInterner()


@dataclass(frozen=True, slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node_name: str
    terminal: bool  # Succeeded or Failed: holds no capacity
    deleting: bool
    gated: bool  # carries Phalanx's scheduling gate
    other_gates: tuple[str, ...]  # scheduling gates of other controllers
    job_uid: str  # controller Job (from the Job controller's label), "" if none
    node_selector_host: str  # the node Phalanx pinned it to, "" if none
    requests: Mapping[str, int]
    requirements: PodRequirements
    priority: int
    pod_group: str  # label set by Phalanx
    never_preempts: bool = False  # spec.preemptionPolicy Never (from its PriorityClass)
    created: dt.datetime | None = None  # stands for its start when choosing the most recent victims
    traits: PodTraits = NO_TRAITS  # namespace, labels, mounted claims: what other pods' filters see
    # kube-scheduler's PodScheduled=False message while the pod is not bound ("" otherwise): a pod Phalanx
    # released that the scheduler cannot bind says why here.
    unschedulable: str = ""
    completion_index: int | None = None  # an Indexed Job's pod: its rank (it picks the pod's slice)
    # The Job controller's count of its index's failures (backoffLimitPerIndex): its failure budget.
    index_failures: int = 0
    scheduler_name: str = ""  # spec.schedulerName when it is not kube-scheduler's default-scheduler
    succeeded: bool = False  # phase Succeeded: it ran its part (counts toward its gang; a finished stage)
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        # Interned: the cache's indexes and the engine's usage hold it, one string for all of them.
        return text(f"{self.namespace}/{self.name}")

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("v1", "Pod", self.namespace, self.name, self.uid)

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    def label(self, key: str) -> str:
        """The value of one of its labels ("" if it has none)."""
        return next((v for k, v in self.traits.labels if k == key), "")

    @property
    def released(self) -> bool:
        """Ungated by Phalanx, pinned to a node, not yet bound: capacity Phalanx has promised."""
        return cluster_objects.released(
            node_name=self.node_name,
            gated=self.gated,
            pinned_node=self.node_selector_host,
            pod_group=self.pod_group,
        )

    @property
    def joins_group(self) -> str:
        """The value of its `phalanx.dev/pod-group` label if no Job made it: a pod made by hand (or by another
        controller) joins the PodGroup of that name in its namespace ("" otherwise). A Job's pods carry
        the label too, written by Phalanx; they belong to their Job's group whatever it says."""
        return "" if self.job_uid else self.pod_group

    @property
    def usage_node(self) -> str:
        """The node whose capacity this pod takes now ("" if none)."""
        return cluster_objects.usage_node(
            terminal=self.terminal,
            node_name=self.node_name,
            gated=self.gated,
            pinned_node=self.node_selector_host,
            pod_group=self.pod_group,
        )

    def bound_pod(self) -> BoundPod | None:
        """The pod as the placement engine counts it, if it holds capacity."""
        node = self.usage_node
        if not node:
            return None
        return BoundPod(
            id=self.key,
            node=node,
            requests=self.requests,
            traits=self.traits,
            anti_affinity=self.requirements.pod_anti_affinity,
            host_ports=self.requirements.host_ports,
            assigned=self.bound,
            terminating=self.deleting,
            # While kube-scheduler has not bound it, pods placed meanwhile could break these.
            affinity=() if self.bound else self.requirements.pod_affinity,
            spread=() if self.bound else self.requirements.spread,
        )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodRecord:
        meta = meta_of(body)
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        gates = tuple(str(g.get("name")) for g in spec.get("schedulingGates") or [])
        labels = meta.get("labels") or {}
        requests = pod_requests(spec)
        # Interned where many records repeat a value (namespace, node, Job, group): one string for all.
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=text(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            node_name=text(spec.get("nodeName") or ""),
            terminal=status.get("phase") in TERMINAL_PHASES,
            deleting=bool(meta.get("deletionTimestamp")),
            gated=names.ADMISSION_GATE in gates,
            other_gates=tuple(g for g in gates if g != names.ADMISSION_GATE),
            job_uid=text(labels.get(CONTROLLER_UID_LABEL, "") or labels.get(LEGACY_CONTROLLER_UID_LABEL, "")),
            node_selector_host=text((spec.get("nodeSelector") or {}).get(HOSTNAME_KEY, "")),
            requests=_shared_requests(requests.items()),
            requirements=_interned(pod_requirements(placement_spec(spec), requests)),
            priority=int(spec.get("priority") or 0),
            pod_group=text(labels.get(names.POD_GROUP_LABEL, "")),
            never_preempts=spec.get("preemptionPolicy") == "Never",
            created=parse_time(meta.get("creationTimestamp")),
            traits=pod_traits(meta, spec),
            unschedulable=_unschedulable(spec, status),
            completion_index=_index(labels.get(COMPLETION_INDEX_LABEL)),
            index_failures=_index((meta.get("annotations") or {}).get(INDEX_FAILURES_ANNOTATION)) or 0,
            scheduler_name=_scheduler_name(spec.get("schedulerName")),
            succeeded=status.get("phase") == "Succeeded",
            resource_version=str(meta.get("resourceVersion") or ""),
        )


def _index(value: Any) -> int | None:
    text = str(value or "")
    return int(text) if text.isascii() and text.isdigit() else None


def _scheduler_name(value: Any) -> str:
    name = str(value or "")
    return "" if name == "default-scheduler" else name


def _unschedulable(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    if spec.get("nodeName"):
        return ""
    for condition in status.get("conditions") or []:
        # "Unschedulable": the scheduler tried and refused. Not "SchedulingGated", which a pod keeps from
        # its gated days until the scheduler looks at it again.
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return ""


def controller_of(meta: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, uid) of an object's controller owner reference (("", "") if none): the owner a PodGroup,
    CompositePodGroup or Workload of ours was made for (a Job, later any kind Phalanx admits)."""
    for owner in meta.get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("kind", "")), str(owner.get("uid", ""))
    return "", ""


def _topology_key(constraints: SchedulingConstraints | None) -> str | None:
    """The key of a group's (single) topology constraint, None without one."""
    if constraints is None or not constraints.topology:
        return None
    return constraints.topology[0].key


@dataclass(frozen=True, slots=True)
class PodGroupRecord:
    """A PodGroup as last seen, its spec and status parsed into the API models."""

    uid: str
    namespace: str
    name: str
    owner_uid: str  # the controlling owner (a Job), "" for a hand-made group
    generation: int
    spec: PodGroupSpec
    status: PodGroupStatus
    resource_version: str = field(default="", compare=False)
    # A Job's topology mode as it was when Phalanx made the group (its phalanx.dev/topology-mode annotation)
    topology_mode: TopologyModeKind = "required"
    created: dt.datetime | None = None  # a hand-made group's age orders its unit
    owner_kind: str = ""  # the kind of its controlling owner ("" for none)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, POD_GROUP_KIND, self.namespace, self.name, self.uid)

    @property
    def gang_min_count(self) -> int | None:
        gang = self.spec.scheduling_policy.gang
        return None if gang is None else gang.min_count

    @property
    def topology_key(self) -> str | None:
        return _topology_key(self.spec.scheduling_constraints)

    @property
    def parent(self) -> str:
        """The CompositePodGroup it belongs to ("" for a root group)."""
        return self.spec.parent_composite_pod_group_name or ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodGroupRecord:
        """Raises pydantic.ValidationError for an object our CRD schema should have refused."""
        meta = meta_of(body)
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            owner_kind=controller_of(meta)[0],
            owner_uid=controller_of(meta)[1],
            generation=int(meta.get("generation") or 1),
            spec=PodGroupSpec.model_validate(body.get("spec") or {}),
            status=PodGroupStatus.model_validate(body.get("status") or {}),
            resource_version=str(meta.get("resourceVersion") or ""),
            topology_mode=group_topology_mode(meta),
            created=parse_time(meta.get("creationTimestamp")),
        )


@dataclass(frozen=True, slots=True)
class CompositePodGroupRecord:
    """A CompositePodGroup as last seen: a node of a tree of groups placed all or nothing."""

    uid: str
    namespace: str
    name: str
    owner_uid: str  # the controlling owner (a sliced Job), "" for a hand-made group
    generation: int
    spec: CompositePodGroupSpec
    status: CompositePodGroupStatus
    resource_version: str = field(default="", compare=False)
    created: dt.datetime | None = None  # a hand-made tree's age orders its unit
    owner_kind: str = ""  # the kind of its controlling owner ("" for none)
    # A root's `phalanx.dev/topology-mode` (its owner's at creation): `preferred` lets the whole tree go to a
    # wider level when no domain of its key holds it (placement/composite.py); anything else is required.
    topology_mode: TopologyModeKind = "required"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, COMPOSITE_POD_GROUP_KIND, self.namespace, self.name, self.uid)

    @property
    def parent(self) -> str:
        return self.spec.parent_composite_pod_group_name or ""

    @property
    def min_group_count(self) -> int | None:
        """Child groups that must be placed together; None for basic (each child on its own)."""
        gang = self.spec.scheduling_policy.gang
        return None if gang is None else gang.min_group_count

    @property
    def topology_key(self) -> str | None:
        return _topology_key(self.spec.scheduling_constraints)

    @classmethod
    def to_be_made(
        cls, composite: CompositePodGroup, owner_uid: str, owner_kind: str = ""
    ) -> CompositePodGroupRecord:
        """The record of a CompositePodGroup this pass creates (its uid known once created: the applier
        fills it in where an event needs it), as the watch will show it."""
        meta = composite.metadata
        return cls(
            uid="",
            namespace=str(meta["namespace"]),
            name=str(meta["name"]),
            owner_uid=owner_uid,
            generation=1,
            spec=composite.spec,
            status=CompositePodGroupStatus(),
            owner_kind=owner_kind,
            topology_mode="preferred" if group_topology_mode(meta) == "preferred" else "required",
        )

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CompositePodGroupRecord:
        """Raises pydantic.ValidationError for an object our CRD schema should have refused."""
        meta = meta_of(body)
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            owner_kind=controller_of(meta)[0],
            owner_uid=controller_of(meta)[1],
            generation=int(meta.get("generation") or 1),
            spec=CompositePodGroupSpec.model_validate(body.get("spec") or {}),
            status=CompositePodGroupStatus.model_validate(body.get("status") or {}),
            resource_version=str(meta.get("resourceVersion") or ""),
            created=parse_time(meta.get("creationTimestamp")),
            topology_mode="preferred" if group_topology_mode(meta) == "preferred" else "required",
        )


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """A Workload: scheduling needs only its identity (its template is copied into the PodGroup)."""

    uid: str
    namespace: str
    name: str
    owner_uid: str
    resource_version: str = field(default="", compare=False)
    owner_kind: str = ""  # the kind of its controlling owner ("" for none)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, WORKLOAD_KIND, self.namespace, self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkloadRecord:
        meta = meta_of(body)
        return cls(
            uid=str(meta.get("uid", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            owner_kind=controller_of(meta)[0],
            owner_uid=controller_of(meta)[1],
            resource_version=str(meta.get("resourceVersion") or ""),
        )


@dataclass(frozen=True, slots=True)
class PriorityClassRecord:
    name: str
    value: int
    global_default: bool
    preemption_policy: str
    resource_version: str = field(default="", compare=False)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PriorityClassRecord:
        meta = meta_of(body)
        return cls(
            name=str(meta.get("name", "")),
            value=int(body.get("value") or 0),
            global_default=bool(body.get("globalDefault")),
            preemption_policy=str(body.get("preemptionPolicy") or "PreemptLowerPriority"),
            resource_version=str(meta.get("resourceVersion") or ""),
        )
