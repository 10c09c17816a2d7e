"""PersistentVolumeClaims, PersistentVolumes and StorageClasses, resolved the way kube-scheduler's volume
filters (VolumeBinding, VolumeZone, VolumeRestrictions, v1.37) see a claim, into the engine's `ClaimInfo`.

- A claim fully bound to a volume (spec.volumeName and the bind-completed annotation) restricts nodes
  by the volume's required node affinity and its zone/region labels.
- A claim the scheduler would not bind now makes its pods wait, with the scheduler's words: claim
  being deleted or lost, volume missing, unbound claim of no class or of an Immediate class ("pod has
  unbound immediate PersistentVolumeClaims"), class missing its volumeBindingMode.
- An unbound WaitForFirstConsumer claim of a class with a provisioner may go wherever the class's
  allowedTopologies allow (and only to its selected-node when it has one). Without a provisioner the
  scheduler would have to match it to an existing volume: not modelled, so its pods are not released
  and the condition says so.
- ReadWriteOncePod claims are marked: one pod at a time may use them.

Not modelled (docs/design.md): CSIStorageCapacity (dynamic provisioning with capacity tracking) and
CSI volume count limits (NodeVolumeLimits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from phalanx.placement import (
    ClaimInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    node_selector_terms,
)

BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
ZONE_LABELS: Final = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)
MULTI_ZONE_DELIMITER: Final = "__"
UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    namespace: str
    name: str
    storage_class: str  # "" when the claim asks for no class
    volume_name: str
    bind_completed: bool
    deleting: bool
    lost: bool
    selected_node: str
    read_write_once_pod: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ClaimRecord:
        meta = _meta(body)
        spec = body.get("spec") or {}
        annotations = meta.get("annotations") or {}
        if BETA_STORAGE_CLASS in annotations:
            storage_class = str(annotations[BETA_STORAGE_CLASS])
        else:
            storage_class = str(spec.get("storageClassName") or "")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            storage_class=storage_class,
            volume_name=str(spec.get("volumeName") or ""),
            bind_completed=BIND_COMPLETED in annotations,
            deleting=bool(meta.get("deletionTimestamp")),
            lost=(body.get("status") or {}).get("phase") == "Lost",
            selected_node=str(annotations.get(SELECTED_NODE) or ""),
            read_write_once_pod="ReadWriteOncePod" in (spec.get("accessModes") or []),
        )


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    name: str
    node_terms: tuple[NodeSelectorTerm, ...] | None  # spec.nodeAffinity.required; None: no restriction
    zones: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> VolumeRecord:
        meta = _meta(body)
        affinity = (body.get("spec") or {}).get("nodeAffinity") or {}
        required = affinity.get("required")
        labels = meta.get("labels") or {}
        zones = []
        for key in ZONE_LABELS:
            if key in labels:
                values = tuple(v.strip() for v in str(labels[key]).split(MULTI_ZONE_DELIMITER))
                if all(values):  # like LabelZonesToSet, an empty entry makes the label ignored
                    zones.append((key, tuple(sorted(set(values)))))
        return cls(
            name=str(meta.get("name") or ""),
            node_terms=(
                node_selector_terms(required.get("nodeSelectorTerms"))
                if isinstance(required, Mapping)
                else None
            ),
            zones=tuple(zones),
        )


@dataclass(frozen=True, slots=True)
class StorageClassRecord:
    name: str
    provisioner: str
    binding_mode: str  # "" when not set
    allowed_topologies: tuple[NodeSelectorTerm, ...]  # as node selector terms (In on each key)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> StorageClassRecord:
        terms = []
        for raw in body.get("allowedTopologies") or []:
            requirements = tuple(
                NodeSelectorRequirement(
                    str(e.get("key", "")), "In", tuple(str(v) for v in e.get("values") or [])
                )
                for e in (raw or {}).get("matchLabelExpressions") or []
            )
            terms.append(NodeSelectorTerm(match_expressions=requirements))
        return cls(
            name=str(_meta(body).get("name") or ""),
            provisioner=str(body.get("provisioner") or ""),
            binding_mode=str(body.get("volumeBindingMode") or ""),
            allowed_topologies=tuple(terms),
        )


def resolve(
    claim: ClaimRecord,
    volume: Callable[[str], VolumeRecord | None],
    storage_class: Callable[[str], StorageClassRecord | None],
) -> ClaimInfo:
    """What VolumeBinding, VolumeZone and VolumeRestrictions make of one claim."""
    name = claim.name
    rwop = claim.read_write_once_pod
    if claim.lost:
        why = f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume "{claim.volume_name}"'
        return ClaimInfo(waiting=why)
    if claim.deleting:
        return ClaimInfo(waiting=f'persistentvolumeclaim "{name}" is being deleted')
    if claim.volume_name and claim.bind_completed:
        pv = volume(claim.volume_name)
        if pv is None:
            return ClaimInfo(
                waiting=f'persistentvolume "{claim.volume_name}" of persistentvolumeclaim "{name}" not found'
            )
        return ClaimInfo(
            node_terms=() if pv.node_terms is None else (pv.node_terms,),
            zones=pv.zones,
            read_write_once_pod=rwop,
        )
    sc = storage_class(claim.storage_class) if claim.storage_class else None
    if sc is not None and not sc.binding_mode:
        return ClaimInfo(waiting=f'VolumeBindingMode not set for StorageClass "{sc.name}"')
    if sc is None or sc.binding_mode != WAIT_FOR_FIRST_CONSUMER or claim.volume_name:
        # No class, an unknown class, Immediate, or pre-bound and not yet completed by the PV controller.
        return ClaimInfo(waiting=f'{UNBOUND_IMMEDIATE} ("{name}")')
    if not sc.provisioner or sc.provisioner == NO_PROVISIONER:
        return ClaimInfo(
            unsupported=(
                f'persistentvolumeclaim "{name}" (unbound, StorageClass "{sc.name}" with volumeBindingMode '
                "WaitForFirstConsumer and no provisioner: matching it to an existing PersistentVolume)"
            )
        )
    return ClaimInfo(
        node_terms=(sc.allowed_topologies,) if sc.allowed_topologies else (),
        selected_node=claim.selected_node,
        read_write_once_pod=rwop,
    )


@dataclass
class VolumeCatalog:
    """Claims, volumes and classes as last seen, and each claim resolved; says which claims changed."""

    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    volumes: dict[str, VolumeRecord] = field(default_factory=dict)
    classes: dict[str, StorageClassRecord] = field(default_factory=dict)
    resolved: dict[str, ClaimInfo] = field(default_factory=dict)

    def upsert_claim(self, body: Mapping[str, Any]) -> list[tuple[str, ClaimInfo | None]]:
        record = ClaimRecord.from_body(body)
        self.claims[record.key] = record
        return self._refresh([record.key])

    def delete_claim(self, namespace: str, name: str) -> list[tuple[str, ClaimInfo | None]]:
        key = f"{namespace}/{name}"
        self.claims.pop(key, None)
        return self._refresh([key])

    def upsert_volume(self, body: Mapping[str, Any]) -> list[tuple[str, ClaimInfo | None]]:
        record = VolumeRecord.from_body(body)
        if self.volumes.get(record.name) == record:
            return []
        self.volumes[record.name] = record
        return self._refresh(self._claims_of_volume(record.name))

    def delete_volume(self, name: str) -> list[tuple[str, ClaimInfo | None]]:
        if self.volumes.pop(name, None) is None:
            return []
        return self._refresh(self._claims_of_volume(name))

    def upsert_class(self, body: Mapping[str, Any]) -> list[tuple[str, ClaimInfo | None]]:
        record = StorageClassRecord.from_body(body)
        if self.classes.get(record.name) == record:
            return []
        self.classes[record.name] = record
        return self._refresh(self._claims_of_class(record.name))

    def delete_class(self, name: str) -> list[tuple[str, ClaimInfo | None]]:
        if self.classes.pop(name, None) is None:
            return []
        return self._refresh(self._claims_of_class(name))

    def _claims_of_volume(self, name: str) -> list[str]:
        # Few claims per cluster compared to pods; a scan keeps no second index to maintain.
        return [key for key, c in self.claims.items() if c.volume_name == name]

    def _claims_of_class(self, name: str) -> list[str]:
        return [key for key, c in self.claims.items() if c.storage_class == name]

    def _refresh(self, keys: Iterable[str]) -> list[tuple[str, ClaimInfo | None]]:
        """(claim key, new info or None when gone) for the claims whose resolution changed."""
        changed: list[tuple[str, ClaimInfo | None]] = []
        for key in keys:
            claim = self.claims.get(key)
            info = None if claim is None else resolve(claim, self.volumes.get, self.classes.get)
            if self.resolved.get(key) != info:
                if info is None:
                    self.resolved.pop(key, None)
                else:
                    self.resolved[key] = info
                changed.append((key, info))
        return changed
