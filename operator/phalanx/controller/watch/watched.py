"""Every kind Phalanx watches, in one table: it drives the watches (registry.py), the cache's priming
before the first pass (process/runtime.py) and the relisting after a watch gap (relist.py) alike, so the
three can never disagree.

`phase` orders the priming: volumes, classes and CSI objects first (claims resolve against them), then
claims (before pods: their claims resolve at once), then nodes, pods and Phalanx's own objects, last the
owners (a Job is kept while objects of ours exist for it). Owner kinds come from kinds.OWNER_KINDS.

`path` says what serves a row's watch: Kopf (`on.event`, registry.py) or, for the high-volume kinds (nodes
and pods: one event per heartbeat, bind and status change of thousands), Phalanx's own list-then-watch
(informer.py), which feeds the cache from the decoded JSON without Kopf's per-event copies and per-object
memories. `--no-informers` puts every row back on Kopf.
"""

from __future__ import annotations

from dataclasses import dataclass

from phalanx.api.group import GROUP, VERSION
from phalanx.api.trainjob import API_GROUP as TRAINER_GROUP
from phalanx.api.trainjob import RUNTIME_PLURALS
from phalanx.controller.cache import store as names
from phalanx.controller.cache.digests import STATEFUL_SET
from phalanx.controller.kinds import OWNER_KINDS
from phalanx.controller.kinds.base import Resource
from phalanx.controller.model.kueue import (
    KUEUE_CLUSTER_QUEUE,
    KUEUE_FLAVOR,
    KUEUE_GROUP,
    KUEUE_LOCAL_QUEUE,
    KUEUE_VERSION,
    KUEUE_WORKLOAD,
)

KOPF, INFORMER = "kopf", "informer"  # the two watch paths (module docstring)


@dataclass(frozen=True)
class Watched:
    kind: str  # the cache's name for it (cache.upsert(kind, body))
    resource: Resource
    namespaced: bool
    phase: int  # priming order (module docstring)
    owner: bool = False  # an owner kind: only its managed namespaces (--namespaces) are cached
    optional: bool = False  # another project's kind (a JobSet): its CRD may not be installed (yet)
    path: str = KOPF  # what serves its watch: KOPF or INFORMER (module docstring)

    def __post_init__(self) -> None:
        # The informer has no NotManagedHere warning for owners outside --namespaces and no wait for a
        # CRD to appear: it serves built-in kinds every namespace of which is cached.
        if self.path == INFORMER and (self.owner or self.optional):
            raise ValueError(f"{self.kind}: the informer serves only built-in kinds cached everywhere")

    def served_by(self, informers: bool) -> str:
        """The path that serves this row: its own, unless the informers are off (then Kopf)."""
        return self.path if informers else KOPF

    @property
    def plural(self) -> str:
        return self.resource.plural


_STORAGE = Resource("storage.k8s.io", "v1", "")
_CORE = Resource("", "v1", "")
_OURS = Resource(GROUP, VERSION, "")
_KUEUE = Resource(KUEUE_GROUP, KUEUE_VERSION, "")
_TRAINER = Resource(TRAINER_GROUP, "v1alpha1", "")


def _r(base: Resource, plural: str) -> Resource:
    return Resource(base.group, base.version, plural)


WATCHED: tuple[Watched, ...] = (
    # Volumes: kube-scheduler's volume filters read claims, volumes and classes, so the engine does too;
    # CSI: attach limits per node (NodeVolumeLimits) and storage capacity (VolumeBinding).
    Watched(names.STORAGE_CLASS, _r(_STORAGE, "storageclasses"), False, 0),
    Watched(names.CSI_DRIVER, _r(_STORAGE, "csidrivers"), False, 0),
    Watched(names.CAPACITY, _r(_STORAGE, "csistoragecapacities"), True, 0),
    Watched(names.VOLUME, _r(_CORE, "persistentvolumes"), False, 0),
    Watched(names.CSI_NODE, _r(_STORAGE, "csinodes"), False, 0),
    Watched(names.ATTACHMENT, _r(_STORAGE, "volumeattachments"), False, 0),
    Watched(names.CLAIM, _r(_CORE, "persistentvolumeclaims"), True, 1),
    Watched(names.NODE, _r(_CORE, "nodes"), False, 2, path=INFORMER),
    Watched(names.POD, _r(_CORE, "pods"), True, 2, path=INFORMER),
    Watched(names.PRIORITY_CLASS, Resource("scheduling.k8s.io", "v1", "priorityclasses"), False, 2),
    # Gated pods count against their namespace's quotas: why a gang's pods cannot all be created, and two
    # gangs deadlocked on one quota (model/quota.py).
    Watched(names.QUOTA, _r(_CORE, "resourcequotas"), True, 2),
    # DRA DeviceClasses: the extended resources they serve (model/dra.py), refused on a gang at creation.
    Watched(names.DEVICE_CLASS, Resource("resource.k8s.io", "v1", "deviceclasses"), False, 2, optional=True),
    # LWS's leader StatefulSets (the cache keeps only those, cache/digests.py): the groups an LWS wants,
    # surge groups included, which its own status.replicas cannot tell while a leader is made again.
    Watched(STATEFUL_SET, Resource("apps", "v1", "statefulsets"), True, 2),
    # Trainer's runtimes (their Kueue TAS problems only, cache/digests.py): the TrainJob webhook refuses a
    # TrainJob whose runtime has any, without reading it live on the review's path.
    *(
        Watched(kind, _r(_TRAINER, plural), kind == "TrainingRuntime", 2, optional=True)
        for kind, plural in RUNTIME_PLURALS.items()
    ),
    Watched(names.WORKLOAD, _r(_OURS, "workloads"), True, 2),
    Watched(names.POD_GROUP, _r(_OURS, "podgroups"), True, 2),
    # A tree's decision is recorded on its root CompositePodGroup: without it the first pass would take a
    # partly released tree (or a sliced Job) for an undecided one and decide it again.
    Watched(names.COMPOSITE, _r(_OURS, "compositepodgroups"), True, 2),
    Watched(names.TOPOLOGY, _r(_OURS, "topologies"), False, 2),
    # Kueue's Workloads, when Kueue runs (kinds/kueue.py): whether Kueue admitted or evicts an owner, and the
    # ClusterQueue of every pod it manages (victims). Every namespace: a victim may be anywhere.
    Watched(KUEUE_WORKLOAD, Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads"), True, 2, optional=True),
    # Kueue's queue set-up: a Phalanx-managed owner queued where a ResourceFlavor has a topologyName (Kueue's
    # own Topology-Aware Scheduling would place it too) is warned of before Kueue admits it.
    Watched(KUEUE_LOCAL_QUEUE, _r(_KUEUE, "localqueues"), True, 2, optional=True),
    Watched(KUEUE_CLUSTER_QUEUE, _r(_KUEUE, "clusterqueues"), False, 2, optional=True),
    Watched(KUEUE_FLAVOR, _r(_KUEUE, "resourceflavors"), False, 2, optional=True),
    # Every owner, not only labelled ones: one whose label was removed must be seen to be let go.
    *(
        Watched(kind.name, kind.resource, True, 3, owner=True, optional=kind.resource.group != "batch")
        for kind in OWNER_KINDS
    ),
)


def watched(kind: str) -> Watched:
    return next(w for w in WATCHED if w.kind == kind)


# What the admission webhooks read of the cache (webhooks.py): nodes (the resources they list, slice keys'
# labels), PodGroups, owners (a pod's Job), quotas, Topologies, DeviceClasses, PriorityClasses and Trainer's
# runtimes (a TrainJob's). A process that only serves the webhooks (--role webhooks) watches these and not the
# rest (no pods: the heaviest).
WEBHOOK_READS = frozenset(
    {
        names.NODE,
        names.POD_GROUP,
        names.QUOTA,
        names.TOPOLOGY,
        names.DEVICE_CLASS,
        names.PRIORITY_CLASS,
        *RUNTIME_PLURALS,
        *(kind.name for kind in OWNER_KINDS),
    }
)


def rows_for(webhooks_only: bool) -> tuple[Watched, ...]:
    """The rows a process watches: every one, or only what the webhooks read (WEBHOOK_READS)."""
    return tuple(row for row in WATCHED if not webhooks_only or row.kind in WEBHOOK_READS)


def served_by(path: str, informers: bool, rows: tuple[Watched, ...] = WATCHED) -> tuple[Watched, ...]:
    """The rows (of `rows`) whose watch `path` (KOPF or INFORMER) serves, with the informers on or off."""
    return tuple(row for row in rows if row.served_by(informers) == path)
