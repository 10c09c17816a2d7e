"""storage.k8s.io objects kube-scheduler's CSI rules read (v1.37), as records for the VolumeCatalog.

- CSINode: a node's drivers and their attach limits (NodeVolumeLimits).
- VolumeAttachment: CSI volumes attached to a node, which count against its limits (NodeVolumeLimits).
- CSIDriver: whether the driver opts into storage capacity tracking (VolumeBinding) and whether its
  volumes need the driver on the node's CSINode (preventPodSchedulingIfMissing, NodeVolumeLimits).
- CSIStorageCapacity: how large a volume of a class can be provisioned for the nodes it selects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.controller.model.records import meta_of
from phalanx.placement import NodeSelectorRequirement, NodeSelectorTerm, QuantityError, parse_quantity
from phalanx.placement.filters import requirement_is_valid

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def quantity_value(raw: Any) -> int | None:
    """resource.Quantity.Value(): the amount rounded up to an integer; None when absent or unparsable."""
    if raw is None:
        return None
    try:
        return math.ceil(parse_quantity(raw))
    except QuantityError:
        return None


@dataclass(frozen=True, slots=True)
class CSINodeRecord:
    name: str
    drivers: frozenset[str]
    limits: tuple[tuple[str, int], ...]  # drivers with allocatable.count

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CSINodeRecord:
        drivers = []
        limits = []
        for raw in (body.get("spec") or {}).get("drivers") or []:
            name = str((raw or {}).get("name") or "")
            drivers.append(name)
            count = ((raw or {}).get("allocatable") or {}).get("count")
            if isinstance(count, int):
                limits.append((name, count))
        return cls(str(meta_of(body).get("name") or ""), frozenset(drivers), tuple(sorted(limits)))


@dataclass(frozen=True, slots=True)
class AttachmentRecord:
    name: str
    node: str
    attacher: str
    volume: str  # spec.source.persistentVolumeName ("" for an inline volume's attachment)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> AttachmentRecord:
        spec = body.get("spec") or {}
        return cls(
            name=str(meta_of(body).get("name") or ""),
            node=str(spec.get("nodeName") or ""),
            attacher=str(spec.get("attacher") or ""),
            volume=str((spec.get("source") or {}).get("persistentVolumeName") or ""),
        )


@dataclass(frozen=True, slots=True)
class CSIDriverRecord:
    name: str
    storage_capacity: bool
    prevent_if_missing: bool

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CSIDriverRecord:
        spec = body.get("spec") or {}
        return cls(
            name=str(meta_of(body).get("name") or ""),
            storage_capacity=spec.get("storageCapacity") is True,
            prevent_if_missing=spec.get("preventPodSchedulingIfMissing") is True,
        )


@dataclass(frozen=True, slots=True)
class CapacityRecord:
    key: str  # namespace/name
    storage_class: str
    limit: int | None  # maximumVolumeSize, else capacity; None: neither (no volume fits)
    term: NodeSelectorTerm | None  # nodeTopology as a node selector term; None: it selects no node
    everywhere: bool  # nodeTopology {} selects every node

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CapacityRecord:
        meta = meta_of(body)
        maximum = quantity_value(body.get("maximumVolumeSize"))
        term, everywhere = _topology(body.get("nodeTopology"))
        return cls(
            key=f"{meta.get('namespace') or ''}/{meta.get('name') or ''}",
            storage_class=str(body.get("storageClassName") or ""),
            limit=maximum if maximum is not None else quantity_value(body.get("capacity")),
            term=term,
            everywhere=everywhere,
        )

    def fits(self, size: int) -> bool:
        """capacitySufficient: the volume limit is there and at least the claim's size."""
        return self.limit is not None and self.limit >= size


def _topology(raw: Any) -> tuple[NodeSelectorTerm | None, bool]:
    """metav1.LabelSelector -> one node selector term (the operators are the same, with the same meaning
    for a missing label); nil or unconvertible: no node (nodeHasAccess)."""
    if not isinstance(raw, Mapping):
        return None, False
    labels = sorted((raw.get("matchLabels") or {}).items())
    requirements = [NodeSelectorRequirement(str(k), "In", (str(v),)) for k, v in labels]
    for e in raw.get("matchExpressions") or []:
        e = e or {}
        values = tuple(str(v) for v in e.get("values") or [])
        requirements.append(
            NodeSelectorRequirement(str(e.get("key") or ""), str(e.get("operator") or ""), values)
        )
    if not requirements:
        return None, True
    if not all(r.operator in _SELECTOR_OPERATORS and requirement_is_valid(r) for r in requirements):
        return None, False
    return NodeSelectorTerm(match_expressions=tuple(requirements)), False
