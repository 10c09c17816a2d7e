"""Kueue's Workloads (kueue.x-k8s.io/v1beta2) as Phalanx reads them: which owner each one is for, whether
Kueue admitted it (and into which ClusterQueue), whether Kueue is evicting it, and whether Kueue's own
Topology-Aware Scheduling placed it. Parsed once at the cache boundary (`KueueWorkloadRecord`) and indexed
by owner (`KueueIndex`), so the kinds can ask "does Kueue hold this Job?" and the victim search "which
ClusterQueue's quota does this pod use?". Pure: no API client.

Kueue makes one Workload per Job or JobSet (owned by it, `controller: true`) and one per LeaderWorkerSet
group (owned by the set, its group index in `kueue.x-k8s.io/component-workload-index`); a plain pod group's
Workload is owned by its pods. Kueue's own names are kept in the constants below.

Kueue's queue set-up is read too (`KueueQueues`): each LocalQueue's ClusterQueue, each ClusterQueue's
ResourceFlavors and each flavor's `topologyName`, so that a Phalanx-managed owner queued where Kueue's own
Topology-Aware Scheduling would place it is warned of before Kueue admits it (kinds/kueue.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.keys import REQUEUED_ANNOTATION

# Kueue's condition names, kept in api/kueue_workload.py with the rule that reads them; re-exported here.
from phalanx.api.kueue_workload import ADMITTED as ADMITTED
from phalanx.api.kueue_workload import EVICTED as EVICTED
from phalanx.api.kueue_workload import FINISHED as FINISHED
from phalanx.api.kueue_workload import PODS_READY as PODS_READY
from phalanx.api.kueue_workload import PREEMPTED as PREEMPTED
from phalanx.api.kueue_workload import QUOTA_RESERVED as QUOTA_RESERVED
from phalanx.api.kueue_workload import REQUEUED as REQUEUED
from phalanx.api.kueue_workload import KueueCondition as KueueCondition
from phalanx.api.kueue_workload import condition as _condition
from phalanx.api.kueue_workload import conditions_of
from phalanx.api.kueue_workload import is_true as _is_true
from phalanx.controller.model.refs import ObjectRef

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_WORKLOAD = "KueueWorkload"  # the cache's name for the kind (Phalanx has a Workload kind of its own)
# The cache's names for Kueue's queue set-up (KueueQueues).
KUEUE_LOCAL_QUEUE, KUEUE_CLUSTER_QUEUE, KUEUE_FLAVOR = "KueueLocalQueue", "KueueClusterQueue", "KueueFlavor"
KUEUE_QUEUE_KINDS = (KUEUE_LOCAL_QUEUE, KUEUE_CLUSTER_QUEUE, KUEUE_FLAVOR)
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
COMPONENT_INDEX_ANNOTATION = "kueue.x-k8s.io/component-workload-index"


@dataclass(frozen=True, slots=True)
class KueueOwner:
    """One ownerReference of a Kueue Workload."""

    kind: str
    name: str
    uid: str
    controller: bool


@dataclass(frozen=True, slots=True)
class KueueWorkloadRecord:
    uid: str
    namespace: str
    name: str
    owners: tuple[KueueOwner, ...]
    queue_name: str  # spec.queueName: the LocalQueue
    active: bool  # spec.active (False: deactivated)
    cluster_queue: str  # status.admission.clusterQueue ("" without a quota reservation)
    conditions: tuple[KueueCondition, ...]
    component_index: str  # a LeaderWorkerSet group's Workload: the group index ("" otherwise)
    # Kueue's Topology-Aware Scheduling assigned (or will assign) nodes to a pod set: a ResourceFlavor with
    # a topologyName was chosen (status.admission.podSetAssignments[].topologyAssignment or
    # delayedTopologyRequest).
    topology_assigned: bool
    flavors: tuple[str, ...]  # the ResourceFlavors of the admission
    admitted_counts: tuple[int, ...]  # pods per pod set Kueue admitted (partial admission lowers them)
    # Why Phalanx deactivated it to requeue its owner through Kueue (its phalanx.dev/requeued note; "" when
    # it did not): kinds/kueue.py activates it again once Kueue has stopped the owner.
    requeued: str = ""
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(f"{KUEUE_GROUP}/{KUEUE_VERSION}", "Workload", self.namespace, self.name, self.uid)

    def condition(self, kind: str) -> KueueCondition | None:
        return _condition(self.conditions, kind)

    def is_true(self, kind: str) -> bool:
        return _is_true(self.conditions, kind)

    @property
    def admitted(self) -> bool:
        """Admitted by Kueue and not being evicted: its owner may run."""
        return self.is_true(ADMITTED) and not self.is_true(EVICTED) and self.active

    @property
    def finished(self) -> bool:
        return self.is_true(FINISHED)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> KueueWorkloadRecord:
        meta = _mapping(body.get("metadata"))
        spec, status = _mapping(body.get("spec")), _mapping(body.get("status"))
        admission = _mapping(status.get("admission"))
        assignments = [_mapping(a) for a in _list(admission.get("podSetAssignments"))]
        flavors = sorted({str(f) for a in assignments for f in _mapping(a.get("flavors")).values()})
        return cls(
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            owners=tuple(
                KueueOwner(
                    str(ref.get("kind") or ""),
                    str(ref.get("name") or ""),
                    str(ref.get("uid") or ""),
                    bool(ref.get("controller")),
                )
                for ref in map(_mapping, _list(meta.get("ownerReferences")))
            ),
            queue_name=str(spec.get("queueName") or ""),
            active=spec.get("active") is not False,
            cluster_queue=str(admission.get("clusterQueue") or ""),
            conditions=conditions_of(_list(status.get("conditions"))),
            component_index=str(_mapping(meta.get("annotations")).get(COMPONENT_INDEX_ANNOTATION) or ""),
            topology_assigned=any(
                a.get("topologyAssignment") is not None or a.get("delayedTopologyRequest") is not None
                for a in assignments
            ),
            flavors=tuple(flavors),
            admitted_counts=tuple(int(a["count"]) for a in assignments if isinstance(a.get("count"), int)),
            requeued=str(_mapping(meta.get("annotations")).get(REQUEUED_ANNOTATION) or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class KueueIndex:
    """Every Kueue Workload the cache holds, by key and by each owner it names (uid, and
    `<namespace>/<name>` for owners whose pods name their owner only: a LeaderWorkerSet's; a TrainJob's
    pods name their JobSet, which is named after it: `trainjob_key`)."""

    def __init__(self) -> None:
        self.items: dict[str, KueueWorkloadRecord] = {}
        self._by_owner: dict[str, set[str]] = defaultdict(set)

    def upsert(self, body: Mapping[str, Any]) -> bool:
        """Whether what Phalanx reads of it changed."""
        record = KueueWorkloadRecord.from_body(body)
        old = self.items.get(record.key)
        if old is not None:
            self._unindex(old)
        self.items[record.key] = record
        for owner in _owner_keys(record):
            self._by_owner[owner].add(record.key)
        return old != record

    def delete(self, key: str) -> bool:
        old = self.items.pop(key, None)
        if old is None:
            return False
        self._unindex(old)
        return True

    def _unindex(self, old: KueueWorkloadRecord) -> None:
        for owner in _owner_keys(old):
            keys = self._by_owner.get(owner)
            if keys is not None:
                keys.discard(old.key)
                if not keys:
                    del self._by_owner[owner]

    def copy(self) -> KueueIndex:
        """An index that later upserts and deletes of this one do not change (a pass planned off the loop's
        thread reads it while the loop goes on applying Kueue's events)."""
        other = KueueIndex()
        other.items = dict(self.items)
        other._by_owner = defaultdict(set, {owner: set(keys) for owner, keys in self._by_owner.items()})
        return other

    def of_owner(self, *owner_keys: str) -> tuple[KueueWorkloadRecord, ...]:
        """The Workloads owned by any of these owners (uids, or `<namespace>/<name>`), by name."""
        keys = sorted({k for owner in owner_keys if owner for k in self._by_owner.get(owner, ())})
        return tuple(self.items[k] for k in keys if k in self.items)

    def queue_of(self, owner_keys: Iterable[str]) -> str | None:
        """The ClusterQueue whose quota an owner's pods use: None when no Kueue Workload owns it, "" when
        one does but has no quota reserved now."""
        found = self.of_owner(*owner_keys)
        if not found:
            return None
        return next((w.cluster_queue for w in found if w.cluster_queue), "")


def trainjob_key(namespace: str, name: str) -> str:
    """The key a TrainJob's Workload is found by from its pods: they carry their JobSet's name, which Trainer
    gives the TrainJob's (Kueue finds a TrainJob's pods so too), never the TrainJob's uid."""
    return f"{namespace}/TrainJob/{name}"


def _owner_keys(record: KueueWorkloadRecord) -> list[str]:
    out = []
    for owner in record.owners:
        if owner.uid:
            out.append(owner.uid)
        if owner.name and owner.kind == "LeaderWorkerSet":
            out.append(f"{record.namespace}/{owner.name}")
        if owner.name and owner.kind == "TrainJob":
            out.append(trainjob_key(record.namespace, owner.name))
    return out


@dataclass(frozen=True, slots=True)
class KueueQueueRecord:
    """What Phalanx reads of a LocalQueue (`refs`: its ClusterQueue), a ClusterQueue (its ResourceFlavors,
    in order) or a ResourceFlavor (its topologyName, when it has one)."""

    key: str
    uid: str
    refs: tuple[str, ...]

    @classmethod
    def from_body(cls, kind: str, body: Mapping[str, Any]) -> KueueQueueRecord:
        meta, spec = _mapping(body.get("metadata")), _mapping(body.get("spec"))
        name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
        refs: list[str] = []
        if kind == KUEUE_LOCAL_QUEUE:
            refs = [str(spec.get("clusterQueue") or "")]
        elif kind == KUEUE_CLUSTER_QUEUE:
            for group in map(_mapping, _list(spec.get("resourceGroups"))):
                refs += [str(_mapping(f).get("name") or "") for f in _list(group.get("flavors"))]
        elif spec.get("topologyName"):
            refs = [str(spec["topologyName"])]
        return cls(
            key=f"{namespace}/{name}" if namespace else name,
            uid=str(meta.get("uid") or ""),
            refs=tuple(r for r in refs if r),
        )


@dataclass(frozen=True, slots=True)
class TopologyFlavors:
    """A LocalQueue whose ClusterQueue has ResourceFlavors with a topologyName (Kueue's TAS places there)."""

    local_queue: str  # <namespace>/<name>
    cluster_queue: str
    flavors: tuple[tuple[str, str], ...]  # (flavor, topologyName)


class KueueQueues:
    """Kueue's LocalQueues, ClusterQueues and ResourceFlavors the cache holds, by kind and key."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, KueueQueueRecord]] = {kind: {} for kind in KUEUE_QUEUE_KINDS}

    def upsert(self, kind: str, body: Mapping[str, Any]) -> bool:
        """Whether what Phalanx reads of it changed."""
        record = KueueQueueRecord.from_body(kind, body)
        old = self.items[kind].get(record.key)
        self.items[kind][record.key] = record
        return old != record

    def delete(self, kind: str, key: str) -> bool:
        return self.items[kind].pop(key, None) is not None

    def topology_flavors(self, namespace: str, local_queue: str) -> TopologyFlavors | None:
        """The ResourceFlavors with a topologyName of the ClusterQueue `<namespace>/<local_queue>` feeds;
        None when it has none (or Phalanx has not seen that LocalQueue or ClusterQueue)."""
        key = f"{namespace}/{local_queue}"
        lq = self.items[KUEUE_LOCAL_QUEUE].get(key)
        cq = self.items[KUEUE_CLUSTER_QUEUE].get(lq.refs[0]) if lq is not None and lq.refs else None
        if lq is None or cq is None:
            return None
        found = tuple(
            (name, flavor.refs[0])
            for name in dict.fromkeys(cq.refs)
            if (flavor := self.items[KUEUE_FLAVOR].get(name)) is not None and flavor.refs
        )
        return TopologyFlavors(key, cq.key, found) if found else None
