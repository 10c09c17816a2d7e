"""The cluster as Phalanx sees it: small records of nodes, pods, managed Jobs and PodGroups.

Fed by watch events (Kopf) and by our own writes (write-through, so the loop never acts on a view
older than what it just did). Records hold only what scheduling needs, not whole bodies.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api import keys as names
from phalanx.placement import (
    NodeInfo,
    PodRequirements,
    Taint,
    canonical_amount,
    pod_requests,
    pod_requirements,
)

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
HOSTNAME_KEY = "kubernetes.io/hostname"
TERMINAL_PHASES = ("Succeeded", "Failed")


def _rv(meta: Mapping[str, Any]) -> int:
    try:
        return int(meta.get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    resource_version: int
    node_name: str
    phase: str
    deleting: bool
    gated: bool  # carries Phalanx's scheduling gate
    job_uid: str  # controller Job (from the Job controller's label), "" if none
    node_selector_host: str  # the node Phalanx pinned it to, "" if none
    requests: Mapping[str, int]
    requirements: PodRequirements
    priority: int
    created: str
    pod_group: str  # label set by Phalanx at admission

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def released(self) -> bool:
        """Ungated by Phalanx, pinned to a node, not yet bound: capacity Phalanx has promised."""
        return not self.bound and not self.gated and bool(self.node_selector_host) and bool(self.pod_group)

    @property
    def usage_node(self) -> str:
        """The node whose capacity this pod takes now ("" if none)."""
        if self.terminal:
            return ""
        if self.bound:
            return self.node_name
        if self.released:
            return self.node_selector_host
        return ""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PodRecord:
        meta = body.get("metadata", {})
        spec = body.get("spec", {})
        status = body.get("status", {}) or {}
        gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        labels = meta.get("labels") or {}
        return cls(
            uid=meta.get("uid", ""),
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            resource_version=_rv(meta),
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            deleting=bool(meta.get("deletionTimestamp")),
            gated=names.ADMISSION_GATE in gates,
            job_uid=labels.get(CONTROLLER_UID_LABEL, "") or labels.get("controller-uid", ""),
            node_selector_host=(spec.get("nodeSelector") or {}).get(HOSTNAME_KEY, ""),
            requests=pod_requests(spec),
            requirements=pod_requirements(spec),
            priority=int(spec.get("priority") or 0),
            created=meta.get("creationTimestamp", ""),
            pod_group=labels.get(names.POD_GROUP_LABEL, ""),
        )


@dataclass(frozen=True, slots=True)
class JobRecord:
    uid: str
    namespace: str
    name: str
    resource_version: int
    body: Mapping[str, Any]  # managed Jobs are few; the builders need labels, annotations and template
    suspended: bool
    finished: bool
    created: str
    remaining: int | None = None  # completions still to make (None: the Job has no completion count)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobRecord:
        meta = body.get("metadata", {})
        conditions = (body.get("status") or {}).get("conditions") or []
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions
        )
        slim = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                k: meta.get(k)
                for k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")
            },
            "spec": {k: v for k, v in (body.get("spec") or {}).items() if k != "selector"},
        }
        return cls(
            uid=meta.get("uid", ""),
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            resource_version=_rv(meta),
            body=slim,
            suspended=bool((body.get("spec") or {}).get("suspend")),
            finished=finished,
            created=meta.get("creationTimestamp", ""),
            remaining=_remaining(body),
        )


def _remaining(job: Mapping[str, Any]) -> int | None:
    completions = (job.get("spec") or {}).get("completions")
    if not isinstance(completions, int):
        return None
    succeeded = int((job.get("status") or {}).get("succeeded") or 0)
    return max(0, completions - succeeded)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A PodGroup (or Workload) object as last seen."""

    uid: str
    namespace: str
    name: str
    resource_version: int
    job_uid: str
    body: Mapping[str, Any]
    job_resource_version: int = -1  # the owning Job's version last reconciled into this object

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> GroupRecord:
        meta = body.get("metadata", {})
        owner: Mapping[str, Any] = next(
            (o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job" and o.get("controller")),
            {},
        )
        return cls(
            uid=meta.get("uid", ""),
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            resource_version=_rv(meta),
            job_uid=owner.get("uid", ""),
            body={k: body.get(k) for k in ("apiVersion", "kind", "metadata", "spec", "status")},
        )


def node_info(body: Mapping[str, Any]) -> NodeInfo:

    meta = body.get("metadata", {})
    spec = body.get("spec", {}) or {}
    status = body.get("status", {}) or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    taints = tuple(
        Taint(key=t.get("key", ""), value=t.get("value", "") or "", effect=t.get("effect", ""))
        for t in spec.get("taints") or []
    )
    allocatable = {r: canonical_amount(r, q) for r, q in (status.get("allocatable") or {}).items()}
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable=allocatable,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
    )


@dataclass
class ClusterCache:
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)  # by namespace/name
    jobs: dict[str, JobRecord] = field(default_factory=dict)  # by uid
    pod_groups: dict[str, GroupRecord] = field(default_factory=dict)  # by namespace/name
    workloads: dict[str, GroupRecord] = field(default_factory=dict)  # by namespace/name
    pods_by_job: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # Job uid -> namespace/name of its PodGroup / Workload
    group_by_job: dict[str, str] = field(default_factory=dict)
    workload_by_job: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    generation: int = 0  # bumps on any change that can alter a decision

    def _touch(self) -> None:
        self.generation += 1
        self.changed.set()

    # -- nodes
    def upsert_node(self, body: Mapping[str, Any]) -> None:
        info = node_info(body)
        if self.nodes.get(info.name) != info:
            self.nodes[info.name] = info
            self._touch()

    def delete_node(self, name: str) -> None:
        if self.nodes.pop(name, None) is not None:
            self._touch()

    # -- pods
    def upsert_pod(self, body: Mapping[str, Any]) -> PodRecord | None:
        record = PodRecord.from_body(body)
        old = self.pods.get(record.key)
        if old is not None and old.uid == record.uid and old.resource_version > record.resource_version:
            return old  # a late event; we already hold a newer write
        if old is not None and old.job_uid and old.uid != record.uid:
            self.pods_by_job[old.job_uid].discard(record.key)
        self.pods[record.key] = record
        if record.job_uid:
            self.pods_by_job[record.job_uid].add(record.key)
        if old != record:
            self._touch()
        return record

    def delete_pod(self, namespace: str, name: str, uid: str = "") -> None:
        key = f"{namespace}/{name}"
        old = self.pods.get(key)
        if old is None or (uid and old.uid != uid):
            return
        del self.pods[key]
        if old.job_uid:
            self.pods_by_job[old.job_uid].discard(key)
            if not self.pods_by_job[old.job_uid]:
                del self.pods_by_job[old.job_uid]
        self._touch()

    def job_pods(self, job_uid: str) -> Iterator[PodRecord]:
        for key in self.pods_by_job.get(job_uid, ()):
            pod = self.pods.get(key)
            if pod is not None:
                yield pod

    # -- jobs
    def upsert_job(self, body: Mapping[str, Any]) -> None:
        record = JobRecord.from_body(body)
        old = self.jobs.get(record.uid)
        if old is not None and old.resource_version > record.resource_version:
            return
        self.jobs[record.uid] = record
        if old != record:
            self._touch()

    def delete_job(self, uid: str) -> None:
        if self.jobs.pop(uid, None) is not None:
            self._touch()

    # -- our objects
    def upsert_group(self, body: Mapping[str, Any]) -> GroupRecord:
        record = GroupRecord.from_body(body)
        is_workload = body.get("kind") == "Workload"
        store = self.workloads if is_workload else self.pod_groups
        old = store.get(record.key)
        if old is not None and old.uid == record.uid and old.resource_version > record.resource_version:
            return old
        if old is not None and old.uid == record.uid:
            record = replace(record, job_resource_version=old.job_resource_version)
        store[record.key] = record
        if record.job_uid:
            (self.workload_by_job if is_workload else self.group_by_job)[record.job_uid] = record.key
        if old != record:
            self._touch()
        return record

    def delete_group(self, kind: str, namespace: str, name: str) -> None:
        store = self.workloads if kind == "Workload" else self.pod_groups
        index = self.workload_by_job if kind == "Workload" else self.group_by_job
        old = store.pop(f"{namespace}/{name}", None)
        if old is not None:
            if index.get(old.job_uid) == old.key:
                del index[old.job_uid]
            self._touch()

    def seen_job_version(self, group: GroupRecord, job_resource_version: int) -> None:
        """Remember that the group reflects this version of its Job (skips re-parsing unchanged Jobs)."""
        current = self.pod_groups.get(group.key)
        if current is not None:
            self.pod_groups[group.key] = replace(current, job_resource_version=job_resource_version)

    def pod_group_of_job(self, job_uid: str) -> GroupRecord | None:
        key = self.group_by_job.get(job_uid)
        return self.pod_groups.get(key) if key else None

    def workload_of_job(self, job_uid: str) -> GroupRecord | None:
        key = self.workload_by_job.get(job_uid)
        return self.workloads.get(key) if key else None
