"""The cluster as Phalanx sees it: typed records of every watched kind, parsed once, indexed for planning.

Fed by watch events and by our own writes (write-through, so a pass never acts on a view older than
what it just did), through two entry points for every kind: `upsert(kind, body)` and `delete(kind, body)`
(kinds are named as in watch/watched.py). Our writes are tracked as expectations (expectations.py).

A pass is woken (`changed`) only when a record changed in a way that can change a decision: records
compare without their resourceVersion, and a pod record keeps only what placement and status read.
Our own writes do not wake it: the pass that made them already planned with their outcome.
The placement snapshot is kept up to date incrementally (`LiveSnapshot`), not rebuilt per pass.

The cache is the kinds' `ClusterView` (kinds/base.py): owners with what Phalanx made for them and their
pods, hand-made groups and the pods that join them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from phalanx.api.cluster_objects import node_info
from phalanx.api.lws import LeaderSet
from phalanx.controller.cache.children import Children
from phalanx.controller.cache.digests import DigestIndex
from phalanx.controller.cache.evictions import BlockedEvictions
from phalanx.controller.cache.expectations import Expectations, Reflects, same_uid, status_reflects, uid_of
from phalanx.controller.cache.listed import ListedResources
from phalanx.controller.cache.owned import GroupRecord, Owned
from phalanx.controller.cache.recent import RecentUids
from phalanx.controller.cache.shown import (
    kueue_marks,
    kueue_reflects,
    owner_marks,
    owner_reflects,
    pod_marks,
    pod_reflects,
    stale_answer,
    status_shown,
    superseded,
)
from phalanx.controller.cache.volumes import VolumeCatalog
from phalanx.controller.kinds import OWNER_KINDS
from phalanx.controller.kinds.base import OwnerKind, OwnerState
from phalanx.controller.model.dra import served_resources
from phalanx.controller.model.kueue import (
    KUEUE_QUEUE_KINDS,
    KUEUE_WORKLOAD,
    KueueIndex,
    KueueQueues,
    KueueWorkloadRecord,
    TopologyFlavors,
)
from phalanx.controller.model.quota import QuotaRecord
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
    WorkloadRecord,
)
from phalanx.controller.model.refs import kind_key
from phalanx.controller.model.topology import TopologyIndex, TopologyRecord
from phalanx.placement import LiveSnapshot, NodeInfo, Snapshot

log = logging.getLogger("phalanx.cache")

NODE, POD, PRIORITY_CLASS = "Node", "Pod", "PriorityClass"
POD_GROUP, COMPOSITE, WORKLOAD, TOPOLOGY = "PodGroup", "CompositePodGroup", "Workload", "Topology"
CLAIM, VOLUME, STORAGE_CLASS = "PersistentVolumeClaim", "PersistentVolume", "StorageClass"
CSI_NODE, ATTACHMENT, CSI_DRIVER, CAPACITY = "CSINode", "VolumeAttachment", "CSIDriver", "CSIStorageCapacity"
QUOTA, DEVICE_CLASS = "ResourceQuota", "DeviceClass"


def key_of(body: Mapping[str, Any]) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object."""
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


class ClusterCache:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, kinds: Iterable[OwnerKind] = OWNER_KINDS
    ) -> None:
        self.kinds: dict[str, OwnerKind] = {k.name: k for k in kinds}
        self.nodes: dict[str, NodeInfo] = {}
        self._listed = ListedResources()  # what the webhooks ask of every review (cache/listed.py)
        self.pods: dict[str, PodRecord] = {}  # by namespace/name
        self.owners: dict[str, dict[str, Any]] = {k: {} for k in self.kinds}  # kind -> uid -> record
        self._owner_uids: dict[str, dict[str, str]] = {k: {} for k in self.kinds}  # kind -> key -> uid
        self.pods_by_owner: dict[tuple[str, str], set[str]] = defaultdict(set)  # (kind, uid) -> pod keys
        self.pod_groups = Owned()
        self.composite_pod_groups = Owned()
        self.workloads = Owned()
        self.priority_classes: dict[str, PriorityClassRecord] = {}
        # ResourceQuotas by namespace, then name: why an owner cannot create a gang's pods (model/quota.py).
        self.quotas: dict[str, dict[str, QuotaRecord]] = defaultdict(dict)
        # DRA DeviceClasses by name -> the extended resources each serves (model/dra.py): what the webhooks
        # refuse a gang to request, as Phalanx does not model device allocation. No decision reads them.
        self.device_classes: dict[str, frozenset[str]] = {}
        self.digests = DigestIndex()  # LWS's leader StatefulSets, Trainer's runtimes (cache/digests.py)
        self.children = Children(self.kinds)  # a JobSet's child Jobs, by name (cache/children.py)
        # Pods no owner made that join a PodGroup by label, by "<namespace>/<label value>".
        self.pods_by_group_label: dict[str, set[str]] = defaultdict(set)
        self.topologies: dict[str, TopologyRecord] = {}  # by name (cluster-scoped)
        # Which Topology each node label belongs to: `topology_index.levels_for(key)` for placement.
        self.topology_index = TopologyIndex()
        self.node_labels_generation = 0  # bumps when a node comes, goes or changes its labels
        # Bumps when anything a kind reads beside an owner's own records changes (ClusterView: priority
        # classes, quotas, notes said, Kueue's objects, owners other kinds read): every unit is made again.
        self.view_generation = 0
        # Bumps when a node or a Topology comes, goes or changes: what a settled unit's plan reads beside
        # its unit (loop/units.py plans it again).
        self.placement_generation = 0
        self.expectations = Expectations(clock=clock)
        # uids of the latest objects deleted (pods, owners, our groups; oldest first): the answer to a write
        # of ours that comes after the object's DELETED event is not put back (it would bring it to life).
        self.gone = RecentUids()
        # Owners an object of ours went from while the cache held them alive: the garbage collector's doing
        # when the owner's deletion is not seen yet (two watches keep no order), or a user's. The applier
        # asks the API before making one again for them (apply/owners.py).
        self.bereft = RecentUids()
        self.live = LiveSnapshot()
        self.volumes = VolumeCatalog()  # claims resolved for the volume filters, fed into `live`
        self.changed = asyncio.Event()
        self.generation = 0  # bumps on any change that can alter a decision
        # "<owner uid>/<what>" -> the message already announced (one event per change, not per pass).
        self.announced: dict[str, str] = {}
        # ObjectRef.kind_key -> when this process last wrote that group's status (plan/status.refreshing).
        self.reported: dict[str, dt.datetime] = {}
        self.evictions = BlockedEvictions(clock)  # pods a PodDisruptionBudget would not let go, lately
        self.kueue = KueueIndex()  # Kueue's Workloads (model/kueue.py), when Kueue runs
        self.kueue_queues = KueueQueues()  # its LocalQueues, ClusterQueues and ResourceFlavors
        self._clock = clock

    # ------------------------------------------------------------------ the two entry points
    def upsert(self, kind: str, body: Mapping[str, Any], *, own_write: bool = False) -> None:
        """A watch event's object (or, with `own_write`, the API's answer to a write of ours)."""
        if kind in self.kinds:
            self._upsert_owner(self.kinds[kind], body, own_write)
        elif kind == POD:
            self._upsert_pod(body, own_write)
        elif kind in (POD_GROUP, COMPOSITE, WORKLOAD, TOPOLOGY):
            self._upsert_written(kind, body, own_write)
        elif kind == NODE:
            self._upsert_node(body)
        elif kind == PRIORITY_CLASS:
            self._upsert_priority_class(body)
        elif kind == KUEUE_WORKLOAD:
            self._upsert_kueue(body, own_write)
        elif kind in KUEUE_QUEUE_KINDS:
            if self.kueue_queues.upsert(kind, body):
                self._touch_view()
        elif kind == QUOTA:
            self._upsert_quota(body)
        elif kind == DEVICE_CLASS:
            self.device_classes[key_of(body)] = served_resources(body)
        elif kind in self.digests:
            if self.digests.event(kind, key_of(body), body):
                self._touch_view()
        else:
            self._volume_event(kind, body, deleted=False)

    def delete(self, kind: str, body: Mapping[str, Any]) -> None:
        """A DELETED watch event's object (its metadata is enough), or the answer to our delete."""
        key = key_of(body)
        if kind in self.kinds:
            uid = uid_of(body) or self._owner_uids[kind].get(key, "")
            self._delete_owner(kind, uid)
            self._went(uid)
            if self.children.gone(kind, key, uid_of(body)):
                self._touch()
        elif kind == POD:
            self._delete_pod(key, uid_of(body))
        elif kind in (POD_GROUP, COMPOSITE, WORKLOAD):
            self._delete_owned(kind, key)
            self._went(uid_of(body))
        elif kind == TOPOLOGY:
            self.expectations.forget(TOPOLOGY, key)
            if self.topologies.pop(key, None) is not None:
                self.topology_index = TopologyIndex.build(self.topologies.values())
                self.placement_generation += 1
                self._touch()
        elif kind == NODE:
            if (gone := self.nodes.pop(key, None)) is not None:
                self._listed.count(gone, -1)
                self.node_labels_generation += 1
                self.placement_generation += 1
                self.live.remove_node(key)
                self._touch()
        elif kind == PRIORITY_CLASS:
            if self.priority_classes.pop(key, None) is not None:
                self._touch_view()
        elif kind == KUEUE_WORKLOAD:
            self.expectations.forget(KUEUE_WORKLOAD, key)
            if self.kueue.delete(key):
                self._touch_view()
        elif kind in KUEUE_QUEUE_KINDS:
            if self.kueue_queues.delete(kind, key):
                self._touch_view()
        elif kind == QUOTA:
            namespace, _, name = key.partition("/")
            if self.quotas.get(namespace, {}).pop(name, None) is not None:
                self._touch_view()
        elif kind == DEVICE_CLASS:
            self.device_classes.pop(key, None)
        elif kind in self.digests:
            if self.digests.event(kind, key, None):
                self._touch_view()
        else:
            self._volume_event(kind, body, deleted=True)

    def records(self, kind: str) -> set[tuple[str, str]]:
        """(key, uid) of every record of `kind` the cache holds (nodes have no uid here): the Relister's
        view of what might have been deleted while a watch was away."""
        if kind in self.kinds:
            return {(key, uid) for key, uid in self._owner_uids[kind].items()} | self.children.records(kind)
        stores: dict[str, Mapping[str, Any]] = {
            POD: self.pods,
            POD_GROUP: self.pod_groups.items,
            COMPOSITE: self.composite_pod_groups.items,
            WORKLOAD: self.workloads.items,
            TOPOLOGY: self.topologies,
            KUEUE_WORKLOAD: self.kueue.items,
            **{k: self.kueue_queues.items[k] for k in KUEUE_QUEUE_KINDS},
        }
        if kind in stores:
            return {(key, str(r.uid)) for key, r in stores[kind].items()}
        if kind == NODE:
            return {(name, "") for name in self.nodes}
        if kind == PRIORITY_CLASS:
            return {(name, "") for name in self.priority_classes}
        if kind == QUOTA:
            return {(q.key, "") for quotas in self.quotas.values() for q in quotas.values()}
        if kind == DEVICE_CLASS:
            return {(name, "") for name in self.device_classes}
        if kind in self.digests:
            return {(key, "") for key in self.digests.keys(kind)}
        return {(key, "") for key in self.volumes.keys(kind)}

    # ------------------------------------------------------------------ passes
    def _touch(self, wake: bool = True) -> None:
        self.generation += 1
        if wake:
            self.changed.set()

    def _touch_view(self, wake: bool = True) -> None:
        self.view_generation += 1
        self._touch(wake)

    def announce(self, key: str, message: str) -> None:
        """Remember a note said once ("<owner uid>/<what>" -> its message: kinds/common.announce_once)."""
        if self.announced.get(key) != message:
            self.announced[key] = message
            self.view_generation += 1

    def snapshot(self) -> Snapshot:
        return self.live.snapshot()

    def settle_expectations(self) -> None:
        """Apply the held-back events of expectations that lapsed (called before each pass)."""
        for kind, body in self.expectations.expired():
            log.info("expectation for %s %s lapsed; applying the newest event", kind, key_of(body))
            self.upsert(kind, body)

    def conflicted(self, kind: str, key: str) -> None:
        """A write of ours with a resourceVersion precondition got 409: the API holds a newer version than
        the cache. An event held back as older than an earlier write of ours is then newer (a later write of
        ours went through with its answer lost): apply it now, rather than conflict until the expectation
        lapses."""
        held_back = self.expectations.take(kind, key)
        if held_back is not None:
            log.info("%s %s: a conflict shows the held-back event is newer; applying it", kind, key)
            self.upsert(kind, held_back)

    def _admitted(
        self,
        kind: str,
        key: str,
        body: Mapping[str, Any],
        own_write: bool,
        reflects: Reflects,
        shown: bool = False,
    ) -> bool:
        """Whether the object goes into the cache: a watch event unless it is older than a write of ours; our
        own write (remembered as an expectation) unless the watch already showed it — `shown`: the record the
        cache holds carries what we wrote, and no write of ours is pending, so it came from the watch. The
        answer is then not newer than that record (which may show more, such as kube-scheduler's binding),
        and expecting its version would wait for an event gone by."""
        if own_write:
            if shown and not self.expectations.waits(kind, key):
                return False
            self.expectations.wrote(kind, key, _version(body), reflects)
            return True
        return self.expectations.admit(kind, key, body)

    def _upsert_kueue(self, body: Mapping[str, Any], own_write: bool) -> None:
        """A Kueue Workload; with `own_write`, the answer to our deactivation or activation of it (a requeue
        through Kueue), which an older watch event must not undo."""
        record = KueueWorkloadRecord.from_body(body)
        held = self.kueue.items.get(record.key) if own_write else None
        shown = held is not None and kueue_marks(held) == kueue_marks(record)
        reflects = kueue_reflects(record)
        if not self._admitted(KUEUE_WORKLOAD, record.key, body, own_write, reflects, shown):
            return
        if self.kueue.upsert(body):
            self._touch_view(wake=not own_write)

    # ------------------------------------------------------------------ nodes and priority classes
    def _upsert_node(self, body: Mapping[str, Any]) -> None:
        info = node_info(body)
        old = self.nodes.get(info.name)
        if old != info:
            if old is None or old.labels != info.labels:
                self.node_labels_generation += 1
            self.placement_generation += 1
            if old is not None:
                self._listed.count(old, -1)
            self._listed.count(info, 1)
            self.nodes[info.name] = info
            self.live.upsert_node(info)
            self._touch()

    @property
    def listed_resources(self) -> Collection[str]:
        """The resource names some node lists in its allocatable now."""
        return self._listed.names

    def _upsert_priority_class(self, body: Mapping[str, Any]) -> None:
        record = PriorityClassRecord.from_body(body)
        if self.priority_classes.get(record.name) != record:
            self.priority_classes[record.name] = record
            self._touch_view()

    def _upsert_quota(self, body: Mapping[str, Any]) -> None:
        record = QuotaRecord.from_body(body)
        quotas = self.quotas[record.namespace]
        if quotas.get(record.name) != record:
            quotas[record.name] = record
            self._touch_view()

    def lws_leader_set(self, namespace: str, name: str) -> LeaderSet | None:
        return self.digests.leader_set(namespace, name)  # ClusterView

    def resource_quotas(self, namespace: str) -> tuple[QuotaRecord, ...]:
        """The ResourceQuotas of a namespace (ClusterView)."""
        return tuple(self.quotas.get(namespace, {}).values())

    # ------------------------------------------------------------------ pods
    def _upsert_pod(self, body: Mapping[str, Any], own_write: bool) -> None:
        record = PodRecord.from_body(body)
        held = self.pods.get(record.key)
        if own_write and stale_answer(record, held, self.gone):
            return
        if not own_write and superseded(record, held, self.gone):
            return  # a late event of the pod its name had before (the watch orders events per object only)
        shown = own_write and held is not None and pod_marks(held) == pod_marks(record)
        if self._admitted(POD, record.key, body, own_write, pod_reflects(record), shown):
            self._put_pod(record, wake=not own_write)

    def _pod_owners(self, pod: PodRecord) -> list[tuple[str, str]]:
        return [(name, uid) for name, kind in self.kinds.items() if (uid := kind.pod_owner(pod))]

    def _put_pod(self, record: PodRecord, wake: bool = True) -> None:
        old = self.pods.get(record.key)
        if old is not None:
            self._unindex_pod(old)
        self.pods[record.key] = record
        owners = self._pod_owners(record)
        for owner in owners:
            self.pods_by_owner[owner].add(record.key)
        if record.joins_group and not owners:  # an owner's pod is its owner's, whatever its label says
            self.pods_by_group_label[f"{record.namespace}/{record.joins_group}"].add(record.key)
        if old != record:
            usage = record.bound_pod()
            if usage is not None:
                self.live.upsert_pod(usage)
            elif old is not None and old.usage_node:
                self.live.remove_pod(record.key)
            self._touch(wake)

    def _unindex_pod(self, old: PodRecord) -> None:
        owners = self._pod_owners(old)
        for owner in owners:
            keys = self.pods_by_owner.get(owner)
            if keys is not None:
                keys.discard(old.key)
                if not keys:
                    del self.pods_by_owner[owner]
        if old.joins_group and not owners:
            index = f"{old.namespace}/{old.joins_group}"
            labelled = self.pods_by_group_label.get(index)
            if labelled is not None:
                labelled.discard(old.key)
                if not labelled:
                    del self.pods_by_group_label[index]

    def _delete_pod(self, key: str, uid: str = "") -> None:
        old = self.pods.get(key)
        if old is None or (uid and old.uid != uid):
            return
        self.expectations.forget(POD, key)
        del self.pods[key]
        self._went(old.uid)
        self._unindex_pod(old)
        if old.usage_node:
            self.live.remove_pod(key)
        self._touch()

    def _went(self, uid: str) -> None:
        self.gone.add(uid)

    def pods_of(self, kind: str, index_key: str) -> Iterator[PodRecord]:
        """The pods of an owner of `kind`, by its index key (OwnerKind.index_key: usually its uid)."""
        for key in self.pods_by_owner.get((kind, index_key), ()):
            pod = self.pods.get(key)
            if pod is not None:
                yield pod

    # ------------------------------------------------------------------ owners (Jobs, ...)
    def _upsert_owner(self, kind: OwnerKind, body: Mapping[str, Any], own_write: bool) -> None:
        record = kind.parse(body)
        if own_write and record.uid in self.gone:
            return  # our write's answer came after its DELETED event
        key = key_of(body)
        held = self.owners[kind.name].get(record.uid) if own_write else None
        shown = held is not None and owner_marks(held) == owner_marks(record)
        if self._admitted(kind.name, key, body, own_write, owner_reflects(kind, record), shown):
            self._put_owner(kind, record, wake=not own_write)
            if self.children.seen(kind.name, key, record.uid, body, not record.deleting):
                self._touch()

    def _has_objects(self, uid: str) -> bool:
        return any(
            store.by_owner.get(uid) for store in (self.pod_groups, self.workloads, self.composite_pod_groups)
        )

    def _put_owner(self, kind: OwnerKind, record: Any, wake: bool = True) -> None:
        owners = self.owners[kind.name]
        old = owners.get(record.uid)
        if not kind.worth_keeping(record, self._has_objects(record.uid)):
            if old is not None:
                self._delete_owner(kind.name, record.uid)
            return
        key = f"{record.namespace}/{record.name}"
        previous = self._owner_uids[kind.name].get(key)
        if previous is not None and previous != record.uid:
            # Deleted and made again under the same name: the old one is gone, and an answer to a write of
            # it, late, must not bring it back in place of the new one.
            self._delete_owner(kind.name, previous)
            self._went(previous)
        owners[record.uid] = record
        self._owner_uids[kind.name][key] = record.uid
        if old is not record and kind.read_by_other_kinds:
            self.view_generation += 1
        if old != record:
            self._touch(wake)

    def _delete_owner(self, kind: str, uid: str) -> None:
        for key in [k for k in self.announced if k.startswith(f"{uid}/")]:
            del self.announced[key]
            self.view_generation += 1
        old = self.owners[kind].pop(uid, None)
        self.bereft.discard(uid)
        if old is not None:
            if self.kinds[kind].read_by_other_kinds:
                self.view_generation += 1
            self._owner_uids[kind].pop(f"{old.namespace}/{old.name}", None)
            self.expectations.forget(kind, f"{old.namespace}/{old.name}")
            self._touch()

    def _alive(self, uid: str) -> bool:
        records = (self.owners[name].get(uid) for name in self.kinds) if uid else ()
        return any(r is not None and not r.deleting for r in records)  # held, not seen being deleted

    def _recheck_owner(self, uid: str) -> None:
        """An object of ours is gone: an owner kept only to be let go of may go too."""
        for name, kind in self.kinds.items():
            record = self.owners[name].get(uid)
            if record is not None and not kind.worth_keeping(record, self._has_objects(uid)):
                self._delete_owner(name, uid)

    # ------------------------------------------------------------------ our objects
    def _store(self, kind: str) -> Owned:
        return {POD_GROUP: self.pod_groups, COMPOSITE: self.composite_pod_groups, WORKLOAD: self.workloads}[
            kind
        ]

    def _upsert_written(self, kind: str, body: Mapping[str, Any], own_write: bool) -> None:
        key = key_of(body)
        if own_write and uid_of(body) in self.gone:
            return  # our write's answer came after its DELETED event
        reflects = same_uid(body) if kind == WORKLOAD else status_reflects(body)
        try:
            record = _parse(kind, body)
        except ValidationError as e:
            # Our CRD schema refuses such objects; one that got in (an older schema) is left alone.
            log.warning("ignoring %s %s: %s", kind, key, e.errors()[:3])
            return
        held = self._store(kind).get(key) if own_write and kind in (POD_GROUP, COMPOSITE) else None
        shown = held is not None and status_shown(record, held)
        if not self._admitted(kind, key, body, own_write, reflects, shown):
            return
        if kind == TOPOLOGY:
            old = self.topologies.get(record.name)
            self.topologies[record.name] = record
            if old != record:
                self.topology_index = TopologyIndex.build(self.topologies.values())
                self.placement_generation += 1
                self._touch(not own_write)
        elif self._store(kind).put(record):
            self._touch(not own_write)

    def _delete_owned(self, kind: str, key: str) -> None:
        self.expectations.forget(kind, key)
        self.reported.pop(kind_key(kind, key), None)
        old = self._store(kind).pop(key)
        if old is not None:
            if self._alive(old.owner_uid):
                self.bereft.add(old.owner_uid)
            self._recheck_owner(old.owner_uid)
            self._touch()

    # ------------------------------------------------------------------ volumes
    def _volume_event(self, kind: str, body: Mapping[str, Any], *, deleted: bool) -> None:
        """Claims, volumes, classes and CSI objects: a claim's resolution changes only when something the
        volume filters read changed; changed claims and nodes go into the live snapshot."""
        changes = self.volumes.event(kind, body, deleted=deleted)
        for key, info in changes:
            self.live.set_claim(key, info)
        nodes = self.volumes.take_node_changes()
        for name, csi in nodes:
            self.live.set_csi_node(name, csi)
        strict = self.live.set_strict_drivers(self.volumes.strict_drivers)
        if changes or nodes or strict:
            self._touch()

    # ------------------------------------------------------------------ ClusterView (kinds/base.py)
    def owner_states(self, kind: str) -> Iterator[OwnerState]:
        for uid, owner in self.owners.get(kind, {}).items():
            workloads = self.workloads.of_owner(uid)
            yield OwnerState(
                owner=owner,
                workload=workloads[0] if workloads else None,
                pod_groups=tuple(self.pod_groups.of_owner(uid)),
                composites=tuple(self.composite_pod_groups.of_owner(uid)),
                pods=tuple(
                    sorted(self.pods_of(kind, self.kinds[kind].index_key(owner)), key=lambda p: p.name)
                ),
                children=self.children.of(uid),
            )

    def owner_record(self, kind: str, uid: str) -> Any:
        return self.owners.get(kind, {}).get(uid)

    def unowned_groups(self) -> tuple[list[CompositePodGroupRecord], list[PodGroupRecord]]:
        """Groups no owner kind of ours made (hand-made, or another controller's)."""

        def mine(record: GroupRecord) -> bool:
            return bool(record.owner_uid) and record.owner_kind in self.kinds

        composites = [g for g in self.composite_pod_groups.items.values() if not mine(g)]
        groups = [g for g in self.pod_groups.items.values() if not mine(g)]
        return composites, groups

    def kueue_workloads(self, *owner_keys: str) -> tuple[KueueWorkloadRecord, ...]:
        return self.kueue.of_owner(*owner_keys)

    def kueue_topology_flavors(self, namespace: str, local_queue: str) -> TopologyFlavors | None:
        return self.kueue_queues.topology_flavors(namespace, local_queue)

    def pods_joining(self, namespace: str, label_value: str) -> Iterator[PodRecord]:
        """Pods no owner made that carry `phalanx.dev/pod-group: <label_value>` in `namespace`."""
        for key in sorted(self.pods_by_group_label.get(f"{namespace}/{label_value}", ())):
            pod = self.pods.get(key)
            if pod is not None:
                yield pod


def _parse(kind: str, body: Mapping[str, Any]) -> Any:
    """Raises pydantic.ValidationError for an object our CRD schema should have refused."""
    if kind == POD_GROUP:
        return PodGroupRecord.from_body(body)
    if kind == COMPOSITE:
        return CompositePodGroupRecord.from_body(body)
    if kind == WORKLOAD:
        return WorkloadRecord.from_body(body)
    return TopologyRecord.from_body(body)
