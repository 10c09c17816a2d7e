"""Live nodes and pods as the placement engine sees them, read from plain API dicts.

The rules are the controller's too (`phalanx.api.cluster_objects`): a pod holds capacity on its node
while it is bound, or while Phalanx has released it (ungated, pinned to a node by nodeSelector, labelled
with its group) and kube-scheduler has not bound it yet; terminal pods hold none, terminating ones do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import cluster_objects, keys
from phalanx.api.cluster_objects import HOSTNAME_KEY, TERMINAL_PHASES, placement_spec
from phalanx.api.job_layout import COMPLETION_INDEX_LABEL
from phalanx.bodies import mapping
from phalanx.placement import (
    BoundPod,
    NodeInfo,
    PodRequirements,
    PodTraits,
    Snapshot,
    pod_requests,
    pod_requirements,
    pod_traits,
)


@dataclass(frozen=True)
class PodView:
    """What scheduling reads of one pod."""

    namespace: str
    name: str
    phase: str
    node_name: str
    terminal: bool
    deleting: bool
    gated: bool
    """Held by Phalanx's gate phalanx.dev/admission."""
    other_gates: tuple[str, ...]
    pinned_node: str
    """The node of its kubernetes.io/hostname nodeSelector, "" if none."""
    pod_group: str
    """Its phalanx.dev/pod-group label."""
    requests: Mapping[str, int]
    requirements: PodRequirements
    traits: PodTraits
    labels: Mapping[str, str]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def released(self) -> bool:
        """Released by Phalanx to a node, not yet bound by kube-scheduler."""
        return cluster_objects.released(
            node_name=self.node_name, gated=self.gated, pinned_node=self.pinned_node, pod_group=self.pod_group
        )

    @property
    def usage_node(self) -> str:
        """The node whose capacity the pod takes now ("" if none)."""
        return cluster_objects.usage_node(
            terminal=self.terminal,
            node_name=self.node_name,
            gated=self.gated,
            pinned_node=self.pinned_node,
            pod_group=self.pod_group,
        )

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PodView:
        meta, spec, status = (
            mapping(body.get("metadata")),
            mapping(body.get("spec")),
            mapping(body.get("status")),
        )
        gates = tuple(str(mapping(g).get("name")) for g in spec.get("schedulingGates") or [])
        phase = str(status.get("phase") or "")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            phase=phase,
            node_name=str(spec.get("nodeName") or ""),
            terminal=phase in TERMINAL_PHASES,
            deleting=bool(meta.get("deletionTimestamp")),
            gated=keys.ADMISSION_GATE in gates,
            other_gates=tuple(g for g in gates if g != keys.ADMISSION_GATE),
            pinned_node=str(mapping(spec.get("nodeSelector")).get(HOSTNAME_KEY) or ""),
            pod_group=str(mapping(meta.get("labels")).get(keys.POD_GROUP_LABEL) or ""),
            requests=(requests := pod_requests(spec)),
            requirements=pod_requirements(placement_spec(spec), requests),
            traits=pod_traits(meta, spec),
            labels={str(k): str(v) for k, v in mapping(meta.get("labels")).items()},
        )

    def bound_pod(self) -> BoundPod | None:
        """The pod as the placement engine counts it while it holds capacity (the controller's rule)."""
        if not self.usage_node:
            return None
        return cluster_objects.held_pod(
            key=self.key,
            node=self.usage_node,
            bound=self.bound,
            deleting=self.deleting,
            requests=self.requests,
            traits=self.traits,
            requirements=self.requirements,
        )

    @property
    def completion_index(self) -> int | None:
        """An Indexed Job's pod: its rank (which picks its slice)."""
        text = self.labels.get(COMPLETION_INDEX_LABEL, "")
        return int(text) if text.isascii() and text.isdigit() else None


def snapshot_of(nodes: Iterable[NodeInfo], pods: Iterable[PodView]) -> Snapshot:
    """The cluster as one pass of Phalanx's scheduling loop sees it."""
    held = (bound for p in pods if (bound := p.bound_pod()) is not None)
    return Snapshot.build(nodes, held)
