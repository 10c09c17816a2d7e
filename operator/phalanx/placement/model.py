"""Value types of the placement engine.

All frozen: a decision is a pure function of its inputs, and the hashable ones
(`PodRequirements` and its parts) key the per-snapshot filter caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple, TypeAlias

# Taint effects that keep pods off a node at scheduling time (PreferNoSchedule is only a score).
NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"

PODS: Final = "pods"
"""The pod-count resource: every pod uses exactly one, whatever its spec says."""

RejectReason: TypeAlias = Literal["Unschedulable", "NoDomain", "DomainConflict", "Unsupported"]

TopologyMode: TypeAlias = Literal["required", "preferred", "auto"]
"""required: one domain of the key or wait; preferred: one domain of the key if any fits, else one domain of
each wider level in turn (fewest domains of the key inside it), else anywhere; auto: required at the
narrowest of those levels where the gang can ever fit one domain (the cluster's nodes empty), so it waits
there (auto.py)."""

DEFAULT_BIND_ALL_IP: Final = "0.0.0.0"
HONOR: Final = "Honor"
IGNORE: Final = "Ignore"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    """Same matching as core/v1 Toleration.ToleratesTaint (operators Equal and Exists)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: requirements ANDed (matchLabels become `In [value]`).

    `nothing` is the nil selector, which matches no pod; no requirements match every pod.
    Operators are In, NotIn, Exists, DoesNotExist (the API validates them).
    """

    requirements: tuple[NodeSelectorRequirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """labels.Selector.Empty(): a selector with no requirements (it matches everything)."""
        return not self.nothing and not self.requirements


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (anti-)affinity term as the scheduler processes it (framework.AffinityTerm).

    Namespaces the term covers: `namespaces`, plus the owner's own namespace when both
    namespaces and namespaceSelector are absent (`own_namespace`), plus every namespace when the
    namespaceSelector is `{}` (`all_namespaces`), plus the namespaces a non-empty
    `namespace_selector` picks (Phalanx does not read namespace labels: see selectors.py).
    """

    selector: LabelSelector
    topology_key: str
    namespaces: tuple[str, ...] = ()
    own_namespace: bool = True
    all_namespaces: bool = False
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with a hostPort, sanitised like HostPortInfo (empty ip 0.0.0.0, protocol TCP)."""

    port: int
    protocol: str = "TCP"
    ip: str = DEFAULT_BIND_ALL_IP


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topologySpreadConstraint with whenUnsatisfiable: DoNotSchedule (ScheduleAnyway only scores)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    match_label_keys: tuple[str, ...] = ()
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


@dataclass(frozen=True, slots=True)
class PodRequirements:
    """What a pod needs from a node; hashable so equal pods share cached filter results.

    Everything here comes from the pod spec alone (pods of one template share it); what differs
    per pod (labels, namespace, claim names) is in `PodTraits`.
    """

    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    """Required podAffinity terms."""
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    """Required podAntiAffinity terms."""
    host_ports: tuple[HostPort, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    required_features: tuple[str, ...] = ()
    """Node features (status.declaredFeatures) the pod needs, as NodeDeclaredFeatures infers them."""
    unsupported: tuple[str, ...] = ()
    """Fields the scheduler filters on that Phalanx does not model; such pods are never released."""
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        # Cached: requirements key the per-decision grouping and the snapshot's filter caches.
        if not self._hash:
            object.__setattr__(self, "_hash", hash(_fields_of(self)) or 1)
        return self._hash

    def request_map(self) -> dict[str, int]:
        return dict(self.requests)

    @property
    def interpod(self) -> bool:
        """Whether the pod carries a filter that depends on other pods (not only on its node)."""
        return bool(self.pod_affinity or self.pod_anti_affinity or self.host_ports or self.spread)


def _fields_of(req: PodRequirements) -> tuple[object, ...]:
    return (
        req.requests,
        req.node_selector,
        req.affinity_terms,
        req.tolerations,
        req.pod_affinity,
        req.pod_anti_affinity,
        req.host_ports,
        req.spread,
        req.required_features,
        req.unsupported,
    )


@dataclass(frozen=True, slots=True)
class CSIVolume:
    """One volume as NodeVolumeLimits counts it against its node's CSI attach limit."""

    driver: str
    id: str
    """The unique name ("<driver>/<volumeHandle>"; one per claim for an unbound claim): a volume used by
    several pods on a node counts once."""
    migrated: bool = False
    """An in-tree volume counted as its CSI driver's (CSI migration): only on nodes with a CSINode."""


@dataclass(frozen=True, slots=True)
class PodTraits:
    """What other pods' filters see of a pod, and its volumes: differs from pod to pod of a template."""

    namespace: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    """Sorted (key, value) pairs."""
    claims: tuple[str, ...] = ()
    """PersistentVolumeClaims it mounts (ephemeral volumes as <pod>-<volume>), in its namespace."""
    inline_csi: tuple[CSIVolume, ...] = ()
    """Inline in-tree volumes NodeVolumeLimits counts as migrated CSI volumes (azureDisk, cinder, ...)."""

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


NO_TRAITS: Final = PodTraits()


@dataclass(frozen=True, slots=True)
class PodRequest:
    id: str
    requirements: PodRequirements
    traits: PodTraits = NO_TRAITS


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """What kube-scheduler's volume filters make of one PersistentVolumeClaim, resolved by the controller.

    `waiting` (the scheduler refuses every node) or `unsupported` (Phalanx does not model it) stop
    the pods that mount it; otherwise the claim restricts nodes by `node_terms` (each entry is one
    set of ORed terms, entries ANDed: PV node affinity, StorageClass allowedTopologies),
    `zones` (VolumeZone: PV zone/region labels -> allowed values) and `selected_node`.
    """

    waiting: str = ""
    unsupported: str = ""
    node_terms: tuple[tuple[NodeSelectorTerm, ...], ...] = ()
    zones: tuple[tuple[str, tuple[str, ...]], ...] = ()
    selected_node: str = ""
    read_write_once_pod: bool = False
    capacity_terms: tuple[NodeSelectorTerm, ...] | None = None
    """VolumeBinding's storage capacity check (CSIStorageCapacity): the nodes (ORed terms) some capacity
    object with room for the claim selects; None: not checked (bound, no size, driver without capacity)."""
    csi: CSIVolume | None = None
    """How NodeVolumeLimits counts the claim (for pods already on a node too); None: it does not."""


@dataclass(frozen=True, slots=True)
class CSINodeInfo:
    """A node's CSINode (NodeVolumeLimits): its drivers, their attach limits, and its VolumeAttachments."""

    drivers: frozenset[str] = frozenset()
    limits: tuple[tuple[str, int], ...] = ()
    """(driver, spec.drivers[].allocatable.count); a driver without a count is unlimited."""
    attached: tuple[tuple[str, str], ...] = ()
    """(volume id, driver) of CSI volumes VolumeAttachments attach to the node."""


@dataclass(frozen=True, slots=True)
class CSIView:
    """What NodeVolumeLimits reads besides pods and claims: CSINodes by node name, and the CSI drivers
    whose CSIDriver says preventPodSchedulingIfMissing (a node whose CSINode lacks them refuses their
    volumes). A node without a CSINode has no limits."""

    nodes: Mapping[str, CSINodeInfo] = field(default_factory=dict)
    strict_drivers: frozenset[str] = frozenset()


NO_CSI: Final = CSIView()


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    declared_features: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod holding capacity on a node (bound, terminating or assumed).

    `requests` excludes "pods"; the snapshot counts one pod per BoundPod.
    """

    id: str
    node: str
    requests: Mapping[str, int]
    traits: PodTraits = NO_TRAITS
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    """Its required podAntiAffinity terms (they can refuse incoming pods)."""
    host_ports: tuple[HostPort, ...] = ()
    assigned: bool = True
    """Bound to its node (False: released by Phalanx, kube-scheduler has not bound it yet)."""
    terminating: bool = False
    affinity: tuple[PodAffinityTerm, ...] = ()
    """Its required podAffinity terms: they matter while it is not bound (see `unsettled`)."""
    spread: tuple[SpreadConstraint, ...] = ()
    """Its DoNotSchedule spread constraints: they matter while it is not bound (see `unsettled`)."""

    @property
    def unsettled(self) -> bool:
        """Released but not bound, with filters other pods placed meanwhile could make fail: required
        affinity, or spread constraints kube-scheduler still checks on a pinned pod (minDomains > 1 or
        nodeAffinityPolicy Ignore)."""
        return not self.assigned and (
            bool(self.affinity)
            or any(c.min_domains > 1 or c.node_affinity_policy != HONOR for c in self.spread)
        )

    @property
    def special(self) -> bool:
        """Whether it can refuse other pods by itself (anti-affinity, host ports) or is unsettled."""
        return bool(self.anti_affinity or self.host_ports) or self.unsettled


class AssumedPod(NamedTuple):
    """A pod admitted earlier in the same pass (what `admitted_usage` gives `Snapshot.assume`): it takes
    capacity on `node`, and later decisions' filters see it as a released, not yet bound pod."""

    node: str
    requests: Mapping[str, int]
    pod: PodRequest

    def bound_pod(self) -> BoundPod:
        req = self.pod.requirements
        return BoundPod(
            id=self.pod.id,
            node=self.node,
            requests=self.requests,
            traits=self.pod.traits,
            anti_affinity=req.pod_anti_affinity,
            host_ports=req.host_ports,
            assigned=False,
            affinity=req.pod_affinity,
            spread=req.spread,
        )

    @property
    def special(self) -> bool:
        """`BoundPod.special` of `bound_pod()`, without building it."""
        req = self.pod.requirements
        return bool(req.pod_anti_affinity or req.host_ports or req.pod_affinity) or any(
            c.min_domains > 1 or c.node_affinity_policy != HONOR for c in req.spread
        )


@dataclass(frozen=True, slots=True)
class GroupRequest:
    name: str
    pending: tuple[PodRequest, ...]
    min_count: int
    topology_key: str | None
    bound_nodes: tuple[str, ...] = ()
    """One entry per pod of this group that already holds a node; they pin the domain."""
    levels: tuple[str, ...] = ()
    """The topology levels (node labels, coarse -> fine) of the Topology listing `topology_key`; empty: none
    known, `topology_key` alone decides (see levels.py: domains become paths, BestFit inside the domain)."""
    mode: TopologyMode = "required"
    preferred_domain: str | None = None
    """A domain to try first (the one the group had before its pods were made anew: a JobSet's
    failurePolicy restart, a LeaderWorkerSet group recreated): chosen when the group fits there, else the
    usual rule (step 4 of `decide`). A name no domain has is ignored."""


@dataclass(frozen=True, slots=True)
class Admit:
    domain: str | None
    assignments: tuple[tuple[str, str], ...]
    """(pod id, node name) in pending order; pods that got no node are absent."""
    level: str | None = None
    """Set only when a `preferred` or `auto` group was placed at a wider level than its key: that level's
    label (`domain` is then its path), or "" for anywhere (`domain` None)."""
    mode_note: str = ""
    """`auto` mode only: which level applied and why, one sentence for the condition ("auto: 32 pods can
    never fit one domain of example.com/rack (at most 18 do), so one domain of example.com/block with the
    fewest domains of example.com/rack")."""


@dataclass(frozen=True, slots=True)
class Reject:
    message: str
    placements_total: int
    placements_feasible: int
    scheduled: int
    remaining: int
    reason: RejectReason
    level: str | None = None
    """`auto` mode only, as `Admit.level`: the wider level the group waits for, "" for anywhere."""
    mode_note: str = ""
    """`auto` mode only, as `Admit.mode_note`."""


Decision: TypeAlias = Admit | Reject
