"""The cluster as Phalanx sees it: typed records of nodes, pods, managed Jobs, our objects, priorities.

Fed by watch events and by our own writes (write-through, so a pass never acts on a view older than
what it just did). `resourceVersion` is opaque: a write of ours is tracked as an *expectation* (the
version the API answered), and watch events of that object are taken as older than our write until
the event carrying that version arrives (a watch delivers an object's versions in order). An
expectation that is never met (the watch was re-listed past it) lapses after a while, and the newest
event held back meanwhile is applied then.

A pass is woken (`changed`) only when a record changed in a way that can change a decision: records
compare without their resourceVersion, and a pod record keeps only what placement and status read.
Our own writes do not wake it: the pass that made them already planned with their outcome.
The placement snapshot is kept up to date incrementally (`LiveSnapshot`), not rebuilt per pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from phalanx.api.cluster_objects import node_info
from phalanx.controller.cache.volumes import VolumeCatalog
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    JobRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
    WorkloadRecord,
)
from phalanx.controller.model.topology import TopologyIndex, TopologyRecord
from phalanx.placement import ClaimInfo, LiveSnapshot, NodeInfo, Snapshot

log = logging.getLogger("phalanx.cache")

EXPECTATION_TTL_SECONDS = 30.0  # how long a write of ours masks watch events older than it
EVICTION_BLOCK_SECONDS = 30.0  # how long a pod a budget protected is left out of victim choices
R = TypeVar("R")
S = TypeVar("S", PodGroupRecord, WorkloadRecord, CompositePodGroupRecord)


@dataclass
class _Expectation:
    resource_version: str
    deadline: float
    reflects: Callable[[Mapping[str, Any]], bool] | None = None  # does an object already carry our write?
    held_back: Mapping[str, Any] | None = None  # the newest event masked meanwhile


@dataclass
class Expectations:
    """Writes of ours the watch has not shown yet, by (kind, namespace/name)."""

    clock: Callable[[], float] = time.monotonic
    ttl: float = EXPECTATION_TTL_SECONDS
    pending: dict[tuple[str, str], _Expectation] = field(default_factory=dict)

    def wrote(
        self,
        kind: str,
        key: str,
        resource_version: str,
        reflects: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        """`reflects` tells a later version from an older one by content: a watch may skip versions
        (Kopf hands handlers the newest state of an object, not each version), so the event with our
        exact version may never come; one that already carries what we wrote is not older."""
        if resource_version:
            self.pending[(kind, key)] = _Expectation(resource_version, self.clock() + self.ttl, reflects)

    def admit(self, kind: str, key: str, body: Mapping[str, Any]) -> bool:
        """Whether a watch event's object may replace what the cache holds."""
        expected = self.pending.get((kind, key))
        if expected is None:
            return True
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        if version == expected.resource_version or (
            expected.reflects is not None and expected.reflects(body)
        ):
            del self.pending[(kind, key)]
            return True
        expected.held_back = body  # older than our write, or a re-list past it: decided on expiry
        return False

    def forget(self, kind: str, key: str) -> None:
        self.pending.pop((kind, key), None)

    def expired(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Lapsed expectations' held-back events, to apply now (the newest one seen wins)."""
        now = self.clock()
        out: list[tuple[str, Mapping[str, Any]]] = []
        for (kind, key), expected in list(self.pending.items()):
            if expected.deadline <= now:
                del self.pending[(kind, key)]
                if expected.held_back is not None:
                    out.append((kind, expected.held_back))
        return out


class _Store(Generic[R]):
    """Records by namespace/name, plus an index by owning Job uid."""

    def __init__(self) -> None:
        self.items: dict[str, R] = {}
        self.by_job: dict[str, str] = {}

    def get(self, key: str) -> R | None:
        return self.items.get(key)

    def of_job(self, job_uid: str) -> R | None:
        key = self.by_job.get(job_uid)
        return self.items.get(key) if key else None


POD, JOB, POD_GROUP, WORKLOAD, TOPOLOGY = "Pod", "Job", "PodGroup", "Workload", "Topology"
COMPOSITE = "CompositePodGroup"


class ClusterCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodRecord] = {}  # by namespace/name
        self.jobs: dict[str, JobRecord] = {}  # by uid
        self.pod_groups: _Store[PodGroupRecord] = _Store()
        self.workloads: _Store[WorkloadRecord] = _Store()
        # by namespace/name; by_job: the root of a Job's slices
        self.composite_pod_groups: _Store[CompositePodGroupRecord] = _Store()
        self.priority_classes: dict[str, PriorityClassRecord] = {}
        self.pods_by_job: dict[str, set[str]] = defaultdict(set)
        # Pods no Job made that join a PodGroup by label, by "<namespace>/<label value>".
        self.pods_by_group_label: dict[str, set[str]] = defaultdict(set)
        self.topologies: dict[str, TopologyRecord] = {}  # by name (cluster-scoped)
        # Which Topology each node label belongs to: `topology_index.levels_for(key)` for placement.
        self.topology_index = TopologyIndex()
        self.node_labels_generation = 0  # bumps when a node comes, goes or changes its labels
        self.expectations = Expectations(clock=clock)
        self.live = LiveSnapshot()
        self.volumes = VolumeCatalog()  # claims resolved for the volume filters, fed into `live`
        self.changed = asyncio.Event()
        self.generation = 0  # bumps on any change that can alter a decision
        # "<Job uid>/<what>" -> the message already announced (one event per change, not per pass).
        self.announced: dict[str, str] = {}
        # Pods a PodDisruptionBudget would not let go -> until when the victim search leaves them out.
        self.blocked_evictions: dict[str, float] = {}
        self._clock = clock

    def _touch(self, wake: bool = True) -> None:
        self.generation += 1
        if wake:
            self.changed.set()

    def snapshot(self) -> Snapshot:
        return self.live.snapshot()

    def settle_expectations(self) -> None:
        """Apply the held-back events of expectations that lapsed (called before each pass)."""
        for kind, body in self.expectations.expired():
            log.info("expectation for %s %s lapsed; applying the newest event", kind, _key(body))
            self._apply(kind, body)

    def conflicted(self, kind: str, key: str) -> None:
        """A write of ours with a resourceVersion precondition got 409: the API holds a newer version than
        the cache. An event held back as older than an earlier write of ours is then newer (a later write of
        ours went through with its answer lost): apply it now, rather than conflict until the expectation
        lapses."""
        expected = self.expectations.pending.pop((kind, key), None)
        if expected is not None and expected.held_back is not None:
            log.info("%s %s: a conflict shows the held-back event is newer; applying it", kind, key)
            self._apply(kind, expected.held_back)

    def _apply(self, kind: str, body: Mapping[str, Any]) -> None:
        if kind == POD:
            self._put_pod(PodRecord.from_body(body))
        elif kind == POD_GROUP:
            self._put_pod_group(body)
        elif kind == WORKLOAD:
            self._put_workload(WorkloadRecord.from_body(body))
        elif kind == JOB:
            self._put_job(JobRecord.from_body(body))
        elif kind == TOPOLOGY:
            self._put_topology(body)
        elif kind == COMPOSITE:
            self._put_composite(body)

    # -- nodes
    def upsert_node(self, body: Mapping[str, Any]) -> None:
        info = node_info(body)
        old = self.nodes.get(info.name)
        if old != info:
            if old is None or old.labels != info.labels:
                self.node_labels_generation += 1
            self.nodes[info.name] = info
            self.live.upsert_node(info)
            self._touch()

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self.node_labels_generation += 1
            self.live.remove_node(name)
            self._touch()

    # -- pods
    def upsert_pod(self, body: Mapping[str, Any], *, own_write: bool = False) -> PodRecord | None:
        key = _key(body)
        record = PodRecord.from_body(body)
        if own_write:
            self.expectations.wrote(POD, key, _version(body), _pod_reflects(record))
        elif not self.expectations.admit(POD, key, body):
            return self.pods.get(key)
        return self._put_pod(record, wake=not own_write)

    def _put_pod(self, record: PodRecord, wake: bool = True) -> PodRecord:
        old = self.pods.get(record.key)
        if old is not None and old.job_uid and (old.uid != record.uid or old.job_uid != record.job_uid):
            self._unindex_pod(old)
        if old is not None and old.joins_group and old.joins_group != record.joins_group:
            self._unindex_group_label(old)
        self.pods[record.key] = record
        if record.job_uid:
            self.pods_by_job[record.job_uid].add(record.key)
        if record.joins_group:
            self.pods_by_group_label[f"{record.namespace}/{record.joins_group}"].add(record.key)
        if old != record:
            usage = record.bound_pod()
            if usage is not None:
                self.live.upsert_pod(usage)
            elif old is not None and old.usage_node:
                self.live.remove_pod(record.key)
            self._touch(wake)
        return record

    def _unindex_pod(self, old: PodRecord) -> None:
        keys = self.pods_by_job.get(old.job_uid)
        if keys is not None:
            keys.discard(old.key)
            if not keys:
                del self.pods_by_job[old.job_uid]

    def _unindex_group_label(self, old: PodRecord) -> None:
        index = f"{old.namespace}/{old.joins_group}"
        keys = self.pods_by_group_label.get(index)
        if keys is not None:
            keys.discard(old.key)
            if not keys:
                del self.pods_by_group_label[index]

    def group_label_pods(self, namespace: str, label_value: str) -> Iterator[PodRecord]:
        """Pods no Job made that carry `phalanx.dev/pod-group: <label_value>` in `namespace`."""
        for key in self.pods_by_group_label.get(f"{namespace}/{label_value}", ()):
            pod = self.pods.get(key)
            if pod is not None:
                yield pod

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        key = f"{namespace}/{name}"
        old = self.pods.get(key)
        if old is None or (uid and old.uid != uid):
            return
        self.expectations.forget(POD, key)
        del self.pods[key]
        if old.job_uid:
            self._unindex_pod(old)
        if old.joins_group:
            self._unindex_group_label(old)
        if old.usage_node:
            self.live.remove_pod(key)
        self._touch()

    def job_pods(self, job_uid: str) -> Iterator[PodRecord]:
        for key in self.pods_by_job.get(job_uid, ()):
            pod = self.pods.get(key)
            if pod is not None:
                yield pod

    # -- jobs
    def upsert_job(self, body: Mapping[str, Any], *, own_write: bool = False) -> None:
        """A managed Job, or one Phalanx still has to let go of (see _worth_keeping)."""
        key = _key(body)
        record = JobRecord.from_body(body)
        if own_write:
            self.expectations.wrote(JOB, key, _version(body), _job_reflects(record))
        elif not self.expectations.admit(JOB, key, body):
            return
        self._put_job(record, wake=not own_write)

    def _put_job(self, record: JobRecord, wake: bool = True) -> None:
        old = self.jobs.get(record.uid)
        if not self._worth_keeping(record):
            if old is not None:
                self.delete_job(record.uid)
            return
        self.jobs[record.uid] = record
        if old != record:
            self._touch(wake)

    def eviction_blocked(self, pod_key: str, seconds: float = EVICTION_BLOCK_SECONDS) -> None:
        self.blocked_evictions[pod_key] = self._clock() + seconds

    def unevictable(self) -> frozenset[str]:
        """Pods whose eviction a budget refused recently (the victim search tries others first)."""
        now = self._clock()
        for key in [k for k, until in self.blocked_evictions.items() if until <= now]:
            del self.blocked_evictions[key]
        return frozenset(self.blocked_evictions)

    def _worth_keeping(self, job: JobRecord) -> bool:
        """Managed Jobs; and unmanaged ones Phalanx still has to let go of: objects of ours to delete, or
        a template carrying our gate (label removed, or YAML copied from a gang Job) whose pods we ungate."""
        if job.managed:
            return True
        if self.pod_groups.of_job(job.uid) is not None or self.workloads.of_job(job.uid) is not None:
            return True
        if self.composite_pod_groups.of_job(job.uid) is not None:  # a sliced Job's root
            return True
        return job.gated_template and not job.finished

    def delete_job(self, uid: str) -> None:
        for key in [k for k in self.announced if k.startswith(f"{uid}/")]:
            del self.announced[key]
        if self.jobs.pop(uid, None) is not None:
            self._touch()

    # -- our objects
    def upsert_pod_group(self, body: Mapping[str, Any], *, own_write: bool = False) -> PodGroupRecord | None:
        key = _key(body)
        if own_write:
            self.expectations.wrote(POD_GROUP, key, _version(body), _pod_group_reflects(body))
        elif not self.expectations.admit(POD_GROUP, key, body):
            return self.pod_groups.get(key)
        return self._put_pod_group(body, wake=not own_write)

    def _put_pod_group(self, body: Mapping[str, Any], wake: bool = True) -> PodGroupRecord | None:
        try:
            record = PodGroupRecord.from_body(body)
        except ValidationError as e:
            # Our CRD schema refuses such objects; one that got in (an older schema) is left alone.
            log.warning("ignoring PodGroup %s: %s", _key(body), e.errors()[:3])
            return None
        # A Job's slices (groups under its CompositePodGroup) are found through their parent, not by Job.
        return self._put(self.pod_groups, record, "" if record.parent else record.job_uid, wake)

    def upsert_workload(self, body: Mapping[str, Any], *, own_write: bool = False) -> WorkloadRecord:
        key = _key(body)
        if own_write:
            uid = str((body.get("metadata") or {}).get("uid") or "")
            self.expectations.wrote(WORKLOAD, key, _version(body), lambda b: _uid(b) == uid)
        elif not self.expectations.admit(WORKLOAD, key, body):
            current = self.workloads.get(key)
            if current is not None:
                return current
        return self._put_workload(WorkloadRecord.from_body(body), wake=not own_write)

    def _put_workload(self, record: WorkloadRecord, wake: bool = True) -> WorkloadRecord:
        return self._put(self.workloads, record, record.job_uid, wake)

    def _put(self, store: _Store[S], record: S, job_uid: str, wake: bool = True) -> S:
        key: str = record.key
        old = store.items.get(key)
        store.items[key] = record
        if job_uid:
            store.by_job[job_uid] = key
        if old != record:
            self._touch(wake)
        return record

    def upsert_composite_pod_group(
        self, body: Mapping[str, Any], *, own_write: bool = False
    ) -> CompositePodGroupRecord | None:
        key = _key(body)
        if own_write:
            self.expectations.wrote(COMPOSITE, key, _version(body), _pod_group_reflects(body))
        elif not self.expectations.admit(COMPOSITE, key, body):
            return self.composite_pod_groups.get(key)
        return self._put_composite(body, wake=not own_write)

    def _put_composite(self, body: Mapping[str, Any], wake: bool = True) -> CompositePodGroupRecord | None:
        try:
            record = CompositePodGroupRecord.from_body(body)
        except ValidationError as e:
            log.warning("ignoring CompositePodGroup %s: %s", _key(body), e.errors()[:3])
            return None
        # Only a root is indexed by its Job: a Job's slices hang under one CompositePodGroup.
        return self._put(self.composite_pod_groups, record, "" if record.parent else record.job_uid, wake)

    def delete_composite_pod_group(self, namespace: str, name: str) -> None:
        self._delete(self.composite_pod_groups, COMPOSITE, f"{namespace}/{name}")

    def delete_pod_group(self, namespace: str, name: str) -> None:
        self._delete(self.pod_groups, POD_GROUP, f"{namespace}/{name}")

    def delete_workload(self, namespace: str, name: str) -> None:
        self._delete(self.workloads, WORKLOAD, f"{namespace}/{name}")

    def _delete(self, store: _Store[Any], kind: str, key: str) -> None:
        self.expectations.forget(kind, key)
        old = store.items.pop(key, None)
        if old is not None:
            if store.by_job.get(old.job_uid) == key:
                del store.by_job[old.job_uid]
            job = self.jobs.get(old.job_uid)
            if job is not None and not self._worth_keeping(job):
                self.delete_job(job.uid)
            self._touch()

    # -- topologies (cluster-scoped)
    def upsert_topology(self, body: Mapping[str, Any], *, own_write: bool = False) -> TopologyRecord | None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if own_write:
            self.expectations.wrote(TOPOLOGY, name, _version(body), _topology_reflects(body))
        elif not self.expectations.admit(TOPOLOGY, name, body):
            return self.topologies.get(name)
        return self._put_topology(body, wake=not own_write)

    def _put_topology(self, body: Mapping[str, Any], wake: bool = True) -> TopologyRecord | None:
        try:
            record = TopologyRecord.from_body(body)
        except ValidationError as e:
            log.warning("ignoring Topology %s: %s", _key(body), e.errors()[:3])
            return None
        old = self.topologies.get(record.name)
        self.topologies[record.name] = record
        if old != record:
            self.topology_index = TopologyIndex.build(self.topologies.values())
            self._touch(wake)
        return record

    def delete_topology(self, name: str) -> None:
        self.expectations.forget(TOPOLOGY, name)
        if self.topologies.pop(name, None) is not None:
            self.topology_index = TopologyIndex.build(self.topologies.values())
            self._touch()

    # -- priority classes
    def upsert_priority_class(self, body: Mapping[str, Any]) -> None:
        record = PriorityClassRecord.from_body(body)
        if self.priority_classes.get(record.name) != record:
            self.priority_classes[record.name] = record
            self._touch()

    def delete_priority_class(self, name: str) -> None:
        if self.priority_classes.pop(name, None) is not None:
            self._touch()

    # -- volumes: a claim's resolution changes only when something the volume filters read changed
    def upsert_claim(self, body: Mapping[str, Any]) -> None:
        self._claims_changed(self.volumes.upsert_claim(body))

    def delete_claim(self, namespace: str, name: str) -> None:
        self._claims_changed(self.volumes.delete_claim(namespace, name))

    def upsert_volume(self, body: Mapping[str, Any]) -> None:
        self._claims_changed(self.volumes.upsert_volume(body))

    def delete_volume(self, name: str) -> None:
        self._claims_changed(self.volumes.delete_volume(name))

    def upsert_storage_class(self, body: Mapping[str, Any]) -> None:
        self._claims_changed(self.volumes.upsert_class(body))

    def delete_storage_class(self, name: str) -> None:
        self._claims_changed(self.volumes.delete_class(name))

    # CSI: CSINodes and VolumeAttachments (NodeVolumeLimits), CSIDrivers and CSIStorageCapacities
    def upsert_csi_node(self, body: Mapping[str, Any]) -> None:
        self.volumes.upsert_csi_node(body)
        self._claims_changed([])

    def delete_csi_node(self, name: str) -> None:
        self.volumes.delete_csi_node(name)
        self._claims_changed([])

    def upsert_volume_attachment(self, body: Mapping[str, Any]) -> None:
        self.volumes.upsert_attachment(body)
        self._claims_changed([])

    def delete_volume_attachment(self, name: str) -> None:
        self.volumes.delete_attachment(name)
        self._claims_changed([])

    def upsert_csi_driver(self, body: Mapping[str, Any]) -> None:
        self._claims_changed(self.volumes.upsert_driver(body))

    def delete_csi_driver(self, name: str) -> None:
        self._claims_changed(self.volumes.delete_driver(name))

    def upsert_storage_capacity(self, body: Mapping[str, Any]) -> None:
        self._claims_changed(self.volumes.upsert_capacity(body))

    def delete_storage_capacity(self, namespace: str, name: str) -> None:
        self._claims_changed(self.volumes.delete_capacity(namespace, name))

    def _claims_changed(self, changes: list[tuple[str, ClaimInfo | None]]) -> None:
        """Claims resolved anew, and nodes whose CSINode or attachments changed, into the live snapshot."""
        for key, info in changes:
            self.live.set_claim(key, info)
        nodes = self.volumes.take_node_changes()
        for name, csi in nodes:
            self.live.set_csi_node(name, csi)
        strict = self.live.set_strict_drivers(self.volumes.strict_drivers)
        if changes or nodes or strict:
            self._touch()


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


# What each kind of write of ours changes, and never changes back: an object that shows it is not older
# than our write. (A pod's gate is only ever removed, its nodeSelector fixed once ungated.)
def _pod_reflects(written: PodRecord) -> Callable[[Mapping[str, Any]], bool]:
    def reflects(body: Mapping[str, Any]) -> bool:
        seen = PodRecord.from_body(body)
        return (seen.uid, seen.gated, seen.node_selector_host, seen.pod_group) == (
            written.uid,
            written.gated,
            written.node_selector_host,
            written.pod_group,
        )

    return reflects


def _job_reflects(written: JobRecord) -> Callable[[Mapping[str, Any]], bool]:
    def reflects(body: Mapping[str, Any]) -> bool:
        seen = JobRecord.from_body(body)
        return (seen.uid, seen.suspended, seen.requeued) == (written.uid, written.suspended, written.requeued)

    return reflects


def _pod_group_reflects(written: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """Phalanx is the only writer of a PodGroup's status: a different status is an older one."""
    uid, status = _uid(written), written.get("status")
    generation = int((written.get("metadata") or {}).get("generation") or 0)

    def reflects(body: Mapping[str, Any]) -> bool:
        seen_generation = int((body.get("metadata") or {}).get("generation") or 0)
        return _uid(body) == uid and body.get("status") == status and seen_generation >= generation

    return reflects


def _topology_reflects(written: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool]:
    """Phalanx is the only writer of a Topology's status: a different status is an older one."""
    uid, status = _uid(written), written.get("status")
    return lambda body: _uid(body) == uid and body.get("status") == status


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")
