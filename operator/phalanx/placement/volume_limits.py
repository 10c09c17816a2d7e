"""NodeVolumeLimits (kube-scheduler v1.37's CSILimits) for one group decision.

A node's limit per CSI driver is its CSINode's `allocatable.count` (no CSINode or no count: unlimited).
A pod is refused on a node when, for a driver of its volumes not already used there, the volumes
attached there (used by the node's pods, plus VolumeAttachments of volumes no pod there uses) plus its
own new ones exceed the limit. With the VolumeLimitScaling gate (beta, on in v1.37) a volume whose
CSIDriver says preventPodSchedulingIfMissing is refused on a node whose CSINode lacks the driver.

The group's pods count against each other on a node. kube-scheduler binds them one at a time in an
order Phalanx does not know, so a pod is checked as if bound last: against the node's attached volumes
plus every volume of the group's pods placed there that no pod already there uses. Alone on its node
(no other pod of the group there) this is exactly the scheduler's count; with others it is the largest
count any binding order can give, so an accepted placement binds in every order. Likewise a volume is
spared as "already used on the node" only by a bound pod that is not terminating.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .model import ClaimInfo, CSIVolume, PodRequest
from .snapshot import Snapshot

__all__ = [
    "MIGRATED_PLUGINS",
    "NOT_COUNTED_PLUGINS",
    "REASON_VOLUME_COUNT",
    "LimitState",
    "VolumeLimits",
    "driver_missing",
    "migrated_volume",
    "pod_volumes",
]

REASON_VOLUME_COUNT = "node(s) exceed max volume count"

MIGRATED_PLUGINS: Final[Mapping[str, tuple[str, str, str]]] = {
    # in-tree plugin -> (CSI driver, volume source field, its volume id field); csi-translation-lib v0.37,
    # the plugins CSILimits' isCSIMigrationOn counts (azure-file and vsphere-volume are not counted).
    "kubernetes.io/aws-ebs": ("ebs.csi.aws.com", "awsElasticBlockStore", "volumeID"),
    "kubernetes.io/gce-pd": ("pd.csi.storage.gke.io", "gcePersistentDisk", "pdName"),
    "kubernetes.io/azure-disk": ("disk.csi.azure.com", "azureDisk", "diskURI"),
    "kubernetes.io/cinder": ("cinder.csi.openstack.org", "cinder", "volumeID"),
    "kubernetes.io/portworx-volume": ("pxd.portworx.com", "portworxVolume", "volumeID"),
}
NOT_COUNTED_PLUGINS: Final = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})
"""Migratable in-tree plugins CSILimits does not count (migration "off" in its isCSIMigrationOn)."""


def migrated_volume(source: Mapping[str, Any]) -> CSIVolume | None:
    """An in-tree volume source (a PersistentVolume's spec, or an inline volume) as CSILimits counts it
    after translation to CSI. The id is the in-tree disk id: the same disk in two pods counts once
    (two spellings of one disk count twice, more than the scheduler: never too few)."""
    for driver, kind, field in MIGRATED_PLUGINS.values():
        raw = source.get(kind)
        if isinstance(raw, Mapping):
            return CSIVolume(driver, f"{driver}/{kind}:{raw.get(field) or ''}", migrated=True)
    return None


def driver_missing(driver: str) -> str:
    """CSILimits' words for a strict driver the node's CSINode does not list."""
    return f"{driver} CSI driver is not installed on the node"


def pod_volumes(
    namespace: str, claims: Sequence[str], inline: Sequence[CSIVolume], resolved: Mapping[str, ClaimInfo]
) -> dict[str, CSIVolume]:
    """The volumes CSILimits counts for a pod, by unique id (claims not found or not counted are skipped)."""
    out: dict[str, CSIVolume] = {}

    def add(volume: CSIVolume) -> None:
        # One volume reached both as a migrated in-tree source and as a CSI one: the CSI one counts on nodes
        # without a CSINode too, so it must win whatever the order of the pod's volumes.
        known = out.get(volume.id)
        if known is None or (known.migrated and not volume.migrated):
            out[volume.id] = volume

    for name in claims:
        info = resolved.get(f"{namespace}/{name}")
        if info is not None and info.csi is not None:
            add(info.csi)
    for volume in inline:
        add(volume)
    return out


class VolumeLimits:
    """Per decision: the nodes with limits for the group's drivers, what is attached there, each pod's
    new volumes."""

    def __init__(self, snapshot: Snapshot, volumes: list[dict[str, CSIVolume]]) -> None:
        self.n = len(snapshot.node_names)
        self.volumes = volumes
        view = snapshot.csi
        drivers = {v.driver for vols in volumes for v in vols.values()}
        ids = {i for vols in volumes for i in vols}
        self.has_csinode = np.zeros(self.n, dtype=np.bool_)
        self.listed: dict[str, BoolArray] = {d: np.zeros(self.n, dtype=np.bool_) for d in drivers}
        # Per driver with a limit somewhere: the limit per node (-1: none), and what is attached there.
        self.limit: dict[str, IntArray] = {}
        self.used: dict[str, IntArray] = {}
        limited: dict[int, set[str]] = {}  # node -> drivers limited there
        for name, info in view.nodes.items():
            node = snapshot.node_index(name)
            if node is None:
                continue
            self.has_csinode[node] = True
            for d in info.drivers & drivers:
                self.listed[d][node] = True
            for d, count in info.limits:
                if d in drivers:
                    self.limit.setdefault(d, np.full(self.n, -1, dtype=np.int64))[node] = count
                    limited.setdefault(node, set()).add(d)
        # The volumes pods on limited nodes use ("existing", bound pods': not counted again), and those
        # attached there.
        self.existing: dict[int, set[str]] = {}
        attached: dict[int, dict[str, str]] = {}
        if limited:
            claims = snapshot.claims
            for pod in snapshot.pod_index().pods():
                wanted = limited.get(pod.node)
                if wanted is None:
                    continue
                used = pod_volumes(pod.namespace, pod.claims, pod.inline_csi, claims)
                for i, v in used.items():
                    if v.driver in wanted:
                        attached.setdefault(pod.node, {})[i] = v.driver
                        # Only a pod sure to stay there spares the volume: a terminating or not yet bound
                        # one may be gone when the scheduler counts (it still counts as attached now).
                        if i in ids and pod.sure:
                            self.existing.setdefault(pod.node, set()).add(i)
            for name, info in view.nodes.items():
                node = snapshot.node_index(name)
                wanted = limited.get(node) if node is not None else None
                if node is None or wanted is None:
                    continue
                for i, d in info.attached:
                    if d in wanted:
                        attached.setdefault(node, {}).setdefault(i, d)
        for d in self.limit:
            self.used[d] = np.zeros(self.n, dtype=np.int64)
        for node, on in attached.items():
            for d in on.values():
                self.used[d][node] += 1
        self.limited = limited
        self.strict = view.strict_drivers & drivers
        self._static: dict[frozenset[str], list[tuple[BoolArray, str]]] = {}

    @classmethod
    def of(cls, snapshot: Snapshot, pending: Sequence[PodRequest]) -> VolumeLimits | None:
        """None when no pod of the group has a counted volume, or nothing limits or requires their drivers."""
        view = snapshot.csi
        if not view.nodes and not view.strict_drivers:
            return None
        claims = snapshot.claims
        volumes = [
            pod_volumes(p.traits.namespace, p.traits.claims, p.traits.inline_csi, claims) for p in pending
        ]
        if not any(volumes):
            return None
        return cls(snapshot, volumes)

    def new_ids(self, position: int, node: int) -> dict[str, str]:
        """The pod's volumes not used by a pod already on the node, with a limit there: id -> driver."""
        existing = self.existing.get(node, set())
        limited = self.limited.get(node, set())
        return {
            i: v.driver
            for i, v in self.volumes[position].items()
            if v.driver in limited and i not in existing
        }

    def static(self, position: int) -> list[tuple[BoolArray, str]]:
        """(nodes allowed, the scheduler's reason for the others) for the pod alone on its node."""
        vols = self.volumes[position]
        key = frozenset(vols)
        if key not in self._static:
            masks = self._strict_masks(vols)
            count = self._count_mask(vols)
            if count is not None:
                masks.append((count, REASON_VOLUME_COUNT))
            self._static[key] = masks
        return self._static[key]

    def _strict_masks(self, vols: Mapping[str, CSIVolume]) -> list[tuple[BoolArray, str]]:
        out = []
        for d in sorted({v.driver for v in vols.values()} & self.strict):
            ok = self.listed[d].copy()
            if all(v.migrated for v in vols.values() if v.driver == d):
                ok |= ~self.has_csinode  # a migrated in-tree volume counts only on nodes with a CSINode
            out.append((ok, driver_missing(d)))
        return out

    def _count_mask(self, vols: Mapping[str, CSIVolume]) -> BoolArray | None:
        mask: BoolArray | None = None
        by_driver: dict[str, list[str]] = {}
        for i, v in vols.items():
            if v.driver in self.limit:
                by_driver.setdefault(v.driver, []).append(i)
        for d, ids in by_driver.items():
            new = np.full(self.n, len(ids), dtype=np.int64)
            for node, existing in self.existing.items():
                new[node] -= sum(1 for i in ids if i in existing)
            limit = self.limit[d]
            over = (limit >= 0) & (new > 0) & (self.used[d] + new > limit)
            if over.any():
                mask = ~over if mask is None else mask & ~over
        return mask

    def start(self) -> LimitState:
        return LimitState(self)


class LimitState:
    """The group's new volumes on each node where its pods are placed so far (one domain)."""

    def __init__(self, limits: VolumeLimits) -> None:
        self.limits = limits
        self.placed: dict[int, dict[str, str]] = {}  # node -> new volume ids of the group -> driver
        self.checked: dict[int, set[str]] = {}  # node -> drivers some placed pod was checked for

    def allowed(self, position: int, nodes: IndexArray, mask: BoolArray) -> BoolArray:
        if not self.placed:
            return mask
        limits = self.limits
        m = mask.copy()
        for k in np.flatnonzero(m & np.isin(nodes, np.fromiter(self.placed, dtype=np.intp))).tolist():
            node = int(nodes[k])
            mine = limits.new_ids(position, node)
            together = {**self.placed[node], **mine}
            for d in self.checked[node] | set(mine.values()):
                count = sum(1 for driver in together.values() if driver == d)
                if limits.used[d][node] + count > limits.limit[d][node]:
                    m[k] = False
                    break
        return m

    def place(self, position: int, node: int) -> None:
        mine = self.limits.new_ids(position, node)
        if mine:
            self.placed.setdefault(node, {}).update(mine)
            self.checked.setdefault(node, set()).update(mine.values())
