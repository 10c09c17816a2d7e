"""Value types of the placement engine.

All frozen: a decision is a pure function of its inputs, and the hashable ones
(`PodRequirements` and its parts) key the per-snapshot filter caches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

# Taint effects that keep pods off a node at scheduling time (PreferNoSchedule is only a score).
NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"

PODS: Final = "pods"
"""The pod-count resource: every pod uses exactly one, whatever its spec says."""

RejectReason: TypeAlias = Literal["Unschedulable", "NoDomain", "DomainConflict"]


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
class PodRequirements:
    """What a pod needs from a node; hashable so equal pods share cached filter results."""

    requests: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity_terms: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    def request_map(self) -> dict[str, int]:
        return dict(self.requests)


@dataclass(frozen=True, slots=True)
class PodRequest:
    id: str
    requirements: PodRequirements


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod holding capacity on a node (bound, terminating or assumed).

    `requests` excludes "pods"; the snapshot counts one pod per BoundPod.
    """

    id: str
    node: str
    requests: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class GroupRequest:
    name: str
    pending: tuple[PodRequest, ...]
    min_count: int
    topology_key: str | None
    bound_nodes: tuple[str, ...] = ()
    """One entry per pod of this group that already holds a node; they pin the domain."""


@dataclass(frozen=True, slots=True)
class Admit:
    domain: str | None
    assignments: tuple[tuple[str, str], ...]
    """(pod id, node name) in pending order; pods that got no node are absent."""


@dataclass(frozen=True, slots=True)
class Reject:
    message: str
    placements_total: int
    placements_feasible: int
    scheduled: int
    remaining: int
    reason: RejectReason


Decision: TypeAlias = Admit | Reject
