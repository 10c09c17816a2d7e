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
- Storage capacity (VolumeBinding with CSIStorageCapacity): an unbound WaitForFirstConsumer claim with
  a storage request, whose provisioner's CSIDriver says storageCapacity: true, may only go to nodes that
  some CSIStorageCapacity of its class (any namespace) selects with a maximumVolumeSize (else capacity)
  of at least the request; elsewhere "node(s) did not have enough free storage".
- ReadWriteOncePod claims are marked: one pod at a time may use them.
- NodeVolumeLimits (CSILimits): each claim says how it counts against a node's CSI attach limit, for the
  pods already on nodes too: a volume with spec.csi as "<driver>/<volumeHandle>"; an in-tree volume the
  scheduler migrates (aws-ebs, gce-pd, azure-disk, cinder, portworx) as its CSI driver's, on nodes with a
  CSINode; an unbound claim (or one whose volume is missing) as one new volume of its class's
  provisioner. CSINodes (limits and drivers) and VolumeAttachments (joined with their volumes'
  handles) become each node's `CSINodeInfo`; CSIDrivers with preventPodSchedulingIfMissing the strict
  drivers. Inline volumes are read from the pod (placement/requests.py): kube-scheduler counts inline
  in-tree volumes it migrates, never inline `csi` (ephemeral) volumes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from phalanx.controller.cache.csi import (
    AttachmentRecord,
    CapacityRecord,
    CSIDriverRecord,
    CSINodeRecord,
    quantity_value,
)
from phalanx.controller.model.records import meta_of
from phalanx.placement import (
    ClaimInfo,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    node_selector_terms,
)
from phalanx.placement.model import CSINodeInfo, CSIVolume
from phalanx.placement.volume_limits import MIGRATED_PLUGINS, NOT_COUNTED_PLUGINS, migrated_volume

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
    storage: int | None = None  # spec.resources.requests.storage in bytes (Quantity.Value())

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ClaimRecord:
        meta = meta_of(body)
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
            storage=quantity_value(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
        )


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    name: str
    node_terms: tuple[NodeSelectorTerm, ...] | None  # spec.nodeAffinity.required; None: no restriction
    zones: tuple[tuple[str, tuple[str, ...]], ...]
    csi: CSIVolume | None = None  # how NodeVolumeLimits counts it
    csi_handle: str = ""  # spec.csi.volumeHandle (what a VolumeAttachment of it counts as)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> VolumeRecord:
        meta = meta_of(body)
        spec = body.get("spec") or {}
        source = spec.get("csi")
        csi, handle = None, ""
        if isinstance(source, Mapping):
            driver, handle = str(source.get("driver") or ""), str(source.get("volumeHandle") or "")
            if driver and handle:  # getCSIDriverInfo: no driver or handle, not counted
                csi = CSIVolume(driver, f"{driver}/{handle}")
        else:
            csi = migrated_volume(spec)
        affinity = spec.get("nodeAffinity") or {}
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
            csi=csi,
            csi_handle=handle,
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
            name=str(meta_of(body).get("name") or ""),
            provisioner=str(body.get("provisioner") or ""),
            binding_mode=str(body.get("volumeBindingMode") or ""),
            allowed_topologies=tuple(terms),
        )


def resolve(
    claim: ClaimRecord,
    volume: Callable[[str], VolumeRecord | None],
    storage_class: Callable[[str], StorageClassRecord | None],
    driver: Callable[[str], CSIDriverRecord | None] = lambda _: None,
    capacities: Callable[[str], Iterable[CapacityRecord]] = lambda _: (),
) -> ClaimInfo:
    """What VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits make of one claim."""
    info = _binding(claim, volume, storage_class, driver, capacities)
    csi = claim_csi(claim, volume, storage_class)
    return info if csi is None else replace(info, csi=csi)


def claim_csi(
    claim: ClaimRecord,
    volume: Callable[[str], VolumeRecord | None],
    storage_class: Callable[[str], StorageClassRecord | None],
) -> CSIVolume | None:
    """CSILimits' getCSIDriverInfo: the bound volume's CSI source (in-tree ones migrated), else, for an
    unbound claim or a missing volume, one new volume of the class's provisioner, unique to the claim."""
    if claim.volume_name:
        pv = volume(claim.volume_name)
        if pv is not None:
            return pv.csi
    sc = storage_class(claim.storage_class) if claim.storage_class else None
    if sc is None or not sc.provisioner or sc.provisioner in NOT_COUNTED_PLUGINS:
        return None
    unique = f"claim:{claim.key}"
    migrated = MIGRATED_PLUGINS.get(sc.provisioner)
    if migrated is not None:
        return CSIVolume(migrated[0], f"{migrated[0]}/{unique}", migrated=True)
    return CSIVolume(sc.provisioner, f"{sc.provisioner}/{unique}")


def capacity_terms(
    claim: ClaimRecord,
    sc: StorageClassRecord,
    driver: Callable[[str], CSIDriverRecord | None],
    capacities: Callable[[str], Iterable[CapacityRecord]],
) -> tuple[NodeSelectorTerm, ...] | None:
    """hasEnoughCapacity: None when not checked (no storage request, no CSIDriver of the provisioner or
    it does not track capacity, or a large enough capacity selects every node); else the node selector
    terms of the capacities of the class large enough for the claim (none: no node has room)."""
    record = driver(sc.provisioner)
    if claim.storage is None or record is None or not record.storage_capacity:
        return None
    terms: set[NodeSelectorTerm] = set()
    for capacity in capacities(sc.name):
        if not capacity.fits(claim.storage):
            continue
        if capacity.everywhere:
            return None
        if capacity.term is not None:
            terms.add(capacity.term)
    return tuple(sorted(terms, key=repr))


def _binding(
    claim: ClaimRecord,
    volume: Callable[[str], VolumeRecord | None],
    storage_class: Callable[[str], StorageClassRecord | None],
    driver: Callable[[str], CSIDriverRecord | None],
    capacities: Callable[[str], Iterable[CapacityRecord]],
) -> ClaimInfo:
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
        capacity_terms=capacity_terms(claim, sc, driver, capacities),
    )


@dataclass
class VolumeCatalog:
    """Claims, volumes, classes and the CSI objects as last seen, each claim resolved and each node's
    CSINode joined with its VolumeAttachments; says which claims changed (and, through
    `take_node_changes`, which nodes)."""

    claims: dict[str, ClaimRecord] = field(default_factory=dict)
    volumes: dict[str, VolumeRecord] = field(default_factory=dict)
    classes: dict[str, StorageClassRecord] = field(default_factory=dict)
    resolved: dict[str, ClaimInfo] = field(default_factory=dict)
    csi_nodes: dict[str, CSINodeRecord] = field(default_factory=dict)
    attachments: dict[str, AttachmentRecord] = field(default_factory=dict)
    drivers: dict[str, CSIDriverRecord] = field(default_factory=dict)
    capacities: dict[str, CapacityRecord] = field(default_factory=dict)
    node_infos: dict[str, CSINodeInfo] = field(default_factory=dict)
    _node_changes: dict[str, CSINodeInfo | None] = field(default_factory=dict)

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
        self._refresh_nodes(a.node for a in self.attachments.values() if a.volume == record.name)
        return self._refresh(self._claims_of_volume(record.name))

    def delete_volume(self, name: str) -> list[tuple[str, ClaimInfo | None]]:
        if self.volumes.pop(name, None) is None:
            return []
        self._refresh_nodes(a.node for a in self.attachments.values() if a.volume == name)
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

    # -- CSI: CSINodes and VolumeAttachments change nodes; CSIDrivers and capacities change claims
    def upsert_csi_node(self, body: Mapping[str, Any]) -> None:
        record = CSINodeRecord.from_body(body)
        self.csi_nodes[record.name] = record
        self._refresh_nodes([record.name])

    def delete_csi_node(self, name: str) -> None:
        if self.csi_nodes.pop(name, None) is not None:
            self._refresh_nodes([name])

    def upsert_attachment(self, body: Mapping[str, Any]) -> None:
        record = AttachmentRecord.from_body(body)
        old = self.attachments.get(record.name)
        self.attachments[record.name] = record
        self._refresh_nodes({record.node, *([old.node] if old is not None else [])})

    def delete_attachment(self, name: str) -> None:
        old = self.attachments.pop(name, None)
        if old is not None:
            self._refresh_nodes([old.node])

    def upsert_driver(self, body: Mapping[str, Any]) -> list[tuple[str, ClaimInfo | None]]:
        record = CSIDriverRecord.from_body(body)
        if self.drivers.get(record.name) == record:
            return []
        self.drivers[record.name] = record
        return self._refresh(self._claims_of_provisioner(record.name))

    def delete_driver(self, name: str) -> list[tuple[str, ClaimInfo | None]]:
        if self.drivers.pop(name, None) is None:
            return []
        return self._refresh(self._claims_of_provisioner(name))

    def upsert_capacity(self, body: Mapping[str, Any]) -> list[tuple[str, ClaimInfo | None]]:
        record = CapacityRecord.from_body(body)
        old = self.capacities.get(record.key)
        if old == record:
            return []
        self.capacities[record.key] = record
        classes = {record.storage_class, *([old.storage_class] if old is not None else [])}
        return self._refresh(key for c in classes for key in self._claims_of_class(c))

    def delete_capacity(self, namespace: str, name: str) -> list[tuple[str, ClaimInfo | None]]:
        old = self.capacities.pop(f"{namespace}/{name}", None)
        if old is None:
            return []
        return self._refresh(self._claims_of_class(old.storage_class))

    def event(
        self, kind: str, body: Mapping[str, Any], *, deleted: bool
    ) -> list[tuple[str, ClaimInfo | None]]:
        """One watch event of a volume kind (named as in watch/watched.py); the claims it changed."""
        meta = meta_of(body)
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        if kind == "PersistentVolumeClaim":
            return self.delete_claim(namespace, name) if deleted else self.upsert_claim(body)
        if kind == "PersistentVolume":
            return self.delete_volume(name) if deleted else self.upsert_volume(body)
        if kind == "StorageClass":
            return self.delete_class(name) if deleted else self.upsert_class(body)
        if kind == "CSIDriver":
            return self.delete_driver(name) if deleted else self.upsert_driver(body)
        if kind == "CSIStorageCapacity":
            return self.delete_capacity(namespace, name) if deleted else self.upsert_capacity(body)
        if kind == "CSINode":
            self.delete_csi_node(name) if deleted else self.upsert_csi_node(body)
        elif kind == "VolumeAttachment":
            self.delete_attachment(name) if deleted else self.upsert_attachment(body)
        else:
            raise ValueError(f"not a volume kind: {kind}")
        return []

    def keys(self, kind: str) -> set[str]:
        """The keys of what is held of a volume kind (for the Relister)."""
        held: dict[str, Mapping[str, Any]] = {
            "PersistentVolumeClaim": self.claims,
            "PersistentVolume": self.volumes,
            "StorageClass": self.classes,
            "CSIDriver": self.drivers,
            "CSIStorageCapacity": self.capacities,
            "CSINode": self.csi_nodes,
            "VolumeAttachment": self.attachments,
        }
        return set(held[kind])

    @property
    def strict_drivers(self) -> frozenset[str]:
        """CSI drivers whose CSIDriver has preventPodSchedulingIfMissing: true."""
        return frozenset(name for name, d in self.drivers.items() if d.prevent_if_missing)

    def take_node_changes(self) -> list[tuple[str, CSINodeInfo | None]]:
        """(node name, its CSINodeInfo or None without a CSINode) for nodes changed since the last call."""
        changes = list(self._node_changes.items())
        self._node_changes.clear()
        return changes

    def _node_info(self, name: str) -> CSINodeInfo | None:
        record = self.csi_nodes.get(name)
        if record is None:
            return None  # no CSINode: no limits, and attachments there count against nothing
        attached = set()
        for a in self.attachments.values():
            pv = self.volumes.get(a.volume) if a.node == name and a.attacher and a.volume else None
            if pv is not None and pv.csi_handle:  # getNodeVolumeAttachmentInfo: CSI volumes only
                attached.add((f"{a.attacher}/{pv.csi_handle}", a.attacher))
        return CSINodeInfo(drivers=record.drivers, limits=record.limits, attached=tuple(sorted(attached)))

    def _refresh_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            info = self._node_info(name)
            if self.node_infos.get(name) != info:
                if info is None:
                    self.node_infos.pop(name, None)
                else:
                    self.node_infos[name] = info
                self._node_changes[name] = info

    def _claims_of_provisioner(self, driver: str) -> list[str]:
        classes = {name for name, c in self.classes.items() if c.provisioner == driver}
        return [key for key, c in self.claims.items() if c.storage_class in classes]

    def _capacities_of(self, storage_class: str) -> list[CapacityRecord]:
        return [c for c in self.capacities.values() if c.storage_class == storage_class]

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
            info = (
                None
                if claim is None
                else resolve(claim, self.volumes.get, self.classes.get, self.drivers.get, self._capacities_of)
            )
            if self.resolved.get(key) != info:
                if info is None:
                    self.resolved.pop(key, None)
                else:
                    self.resolved[key] = info
                changed.append((key, info))
        return changed
