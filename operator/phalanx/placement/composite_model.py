"""Value types of composite pod groups (upstream CompositePodGroup): the request, the decision, the verdicts.

A tree of gangs: leaves are `GroupRequest`s (PodGroups), inner nodes `CompositeRequest`s; `decide_composite`
(composite.py) places it all or nothing. Kept apart so the victim search's types and the controller can name
them without the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from .model import Admit, AssumedPod, GroupRequest, RejectReason, TopologyMode

__all__ = [
    "COMPOSITE_PREFIX",
    "MAX_DEPTH",
    "CompositeAdmit",
    "CompositeDecision",
    "CompositeReject",
    "CompositeRejectReason",
    "CompositeRequest",
    "GroupVerdict",
    "Tree",
    "composite_usage",
    "leaves",
]

MAX_DEPTH: Final = 4
"""Levels of groups in a tree, root and leaves included (upstream: a deeper hierarchy is Invalid)."""

CompositeRejectReason: TypeAlias = RejectReason | Literal["Invalid"]

COMPOSITE_PREFIX: Final = "composite group is unschedulable"


@dataclass(frozen=True, slots=True)
class CompositeRequest:
    """A CompositePodGroup: `min_count` of its children must be placed, all inside one domain of its key.

    `levels` (read on the root only; the Topology whose levels list the keys) make every key of the tree
    a path domain; a leaf's own `levels` must be empty or the same.
    """

    name: str
    children: tuple[GroupRequest | CompositeRequest, ...]
    min_count: int
    topology_key: str | None = None
    levels: tuple[str, ...] = ()
    preferred_domain: str | None = None
    """A domain of its key to try first (as `GroupRequest.preferred_domain`): the tree goes there when it
    fits there whole, else wherever the usual order finds room."""
    mode: TopologyMode = "required"
    """The root's only (`decide_composite`): `preferred` places the whole tree in one domain of a wider
    level, or anywhere, when no domain of its key can hold it (its leaves keep their own keys)."""


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    """Why one group of the tree waits (for its PodGroup's or CompositePodGroup's condition)."""

    name: str
    message: str


@dataclass(frozen=True, slots=True)
class CompositeAdmit:
    domains: tuple[tuple[str, str | None], ...]
    """(group name, domain) of every group placed, composites and leaves, in tree order (None: no key)."""
    admits: tuple[tuple[str, Admit], ...]
    """(leaf name, its Admit) of every leaf placed, in tree order; leaves left out (above the composites'
    min counts, when they do not fit) are absent."""
    level: str | None = None
    """A `preferred` root placed wider than its key: the level used ("" for all nodes); None otherwise."""

    def admit(self, name: str) -> Admit | None:
        return next((a for n, a in self.admits if n == name), None)

    def domain(self, name: str) -> str | None:
        return next((d for n, d in self.domains if n == name), None)


@dataclass(frozen=True, slots=True)
class CompositeReject:
    message: str
    """For the root: what it needs, and per group that does not fit, why."""
    reason: CompositeRejectReason
    groups: tuple[GroupVerdict, ...]
    """One per group below the root, in tree order."""

    def why(self, name: str) -> str:
        return next((g.message for g in self.groups if g.name == name), self.message)


CompositeDecision: TypeAlias = CompositeAdmit | CompositeReject

Tree: TypeAlias = GroupRequest | CompositeRequest


def leaves(root: Tree) -> list[GroupRequest]:
    """The tree's PodGroups, in tree order."""
    if isinstance(root, GroupRequest):
        return [root]
    return [leaf for child in root.children for leaf in leaves(child)]


def composite_usage(root: CompositeRequest, admit: CompositeAdmit) -> list[AssumedPod]:
    """The assigned pods on their nodes, ready for `Snapshot.assume` (like `admitted_usage`)."""
    pods = {pod.id: pod for leaf in leaves(root) for pod in leaf.pending}
    return [
        AssumedPod(node, pods[pod_id].requirements.request_map(), pods[pod_id])
        for _, a in admit.admits
        for pod_id, node in a.assignments
    ]
