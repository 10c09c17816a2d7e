"""Live nodes and pods as the placement engine sees them, read from plain API dicts.

The same rules as the controller's records (`phalanx.controller.records`), written again here because the
CLI tools must not import the controller: a pod holds capacity on its node while it is bound, or while
Phalanx has released it (ungated, pinned to a node by nodeSelector, labelled with its group) and
kube-scheduler has not bound it yet; terminal pods hold none, terminating ones still do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys
from phalanx.placement import (
    BoundPod,
    NodeInfo,
    PodRequirements,
    Snapshot,
    Taint,
    canonical_amount,
    pod_requests,
    pod_requirements,
)

HOSTNAME_KEY = "kubernetes.io/hostname"
TERMINAL_PHASES = ("Succeeded", "Failed")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    meta, spec, status = (
        _mapping(body.get("metadata")),
        _mapping(body.get("spec")),
        _mapping(body.get("status")),
    )
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value") or ""), effect=str(t.get("effect", "")))
        for t in spec.get("taints") or []
    )
    return NodeInfo(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        allocatable={r: canonical_amount(r, q) for r, q in (status.get("allocatable") or {}).items()},
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
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

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def released(self) -> bool:
        """Released by Phalanx to a node, not yet bound by kube-scheduler."""
        return not self.bound and not self.gated and bool(self.pinned_node) and bool(self.pod_group)

    @property
    def usage_node(self) -> str:
        """The node whose capacity the pod takes now ("" if none)."""
        if self.terminal:
            return ""
        if self.bound:
            return self.node_name
        return self.pinned_node if self.released else ""

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PodView:
        meta, spec, status = (
            _mapping(body.get("metadata")),
            _mapping(body.get("spec")),
            _mapping(body.get("status")),
        )
        gates = tuple(str(_mapping(g).get("name")) for g in spec.get("schedulingGates") or [])
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
            pinned_node=str(_mapping(spec.get("nodeSelector")).get(HOSTNAME_KEY) or ""),
            pod_group=str(_mapping(meta.get("labels")).get(keys.POD_GROUP_LABEL) or ""),
            requests=pod_requests(spec),
            requirements=pod_requirements(spec),
        )


def snapshot_of(nodes: Iterable[NodeInfo], pods: Iterable[PodView]) -> Snapshot:
    """The cluster as one pass of Phalanx's scheduling loop sees it."""
    held = (BoundPod(id=p.key, node=p.usage_node, requests=p.requests) for p in pods if p.usage_node)
    return Snapshot.build(nodes, held)
