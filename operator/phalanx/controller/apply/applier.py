"""The applier: runs a pass's actions per group, each group in isolation, and backs off failing groups.

A group's actions run in order (its decision is recorded before its pods are released), a run of
independent ones (pod releases, labels, events) concurrently. The first failure ends that group's
actions for this pass: nothing later in its list runs, the group backs off exponentially (per key,
capped) and its Job gets a Warning event saying why; every other group goes on. What the API answers
to a write goes into the cache at once (write-through, tracked as an expectation).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from phalanx.api import keys
from phalanx.api.conditions import REASON_PREEMPTION_BY_PHALANX
from phalanx.api.group import (
    API_VERSION,
    COMPOSITE_POD_GROUP_KIND,
    COMPOSITE_POD_GROUPS,
    POD_GROUP_KIND,
    POD_GROUPS,
    TOPOLOGIES,
    TOPOLOGY_KIND,
    WORKLOAD_KIND,
    WORKLOADS,
)
from phalanx.api.status import GroupStatus, PodGroupStatus
from phalanx.controller import metrics
from phalanx.controller.apply.describe import describe, error_text, written_for
from phalanx.controller.apply.faults import (
    AFTER_DEACTIVATE,
    AFTER_RECORD,
    AFTER_RELEASES,
    AFTER_VICTIMS,
    BEFORE_STATUS,
    Faults,
)
from phalanx.controller.apply.kube import Kube
from phalanx.controller.apply.owners import OwnerGoneError, OwnerLookups, owner_alive
from phalanx.controller.cache.store import POD, ClusterCache
from phalanx.controller.model.actions import (
    CONCURRENT,
    Action,
    ActivateKueueWorkload,
    CreateCompositePodGroup,
    CreatePodGroup,
    CreateWorkload,
    DeactivateKueueWorkload,
    DeleteObject,
    DeletePod,
    EventType,
    EvictPod,
    LabelPod,
    PatchMinCount,
    PatchStatus,
    PatchTopologyStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    RequeueCause,
    ResumeJob,
    SuspendJob,
    UngatePod,
    UnitPlan,
)
from phalanx.controller.model.kueue import KUEUE_WORKLOAD
from phalanx.controller.model.refs import ObjectRef
from phalanx.kubeclient import ApiException, namespace_terminating

log = logging.getLogger("phalanx.apply")

BACKOFF_INITIAL_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 60.0
MAX_GROUPS_IN_FLIGHT = 32  # bounds the requests one pass sends at once
MAX_SETUP_IN_FLIGHT = 16  # bounds the setup plans applied beside the passes (loop/scheduler.py)


class EvictionBlockedError(RuntimeError):
    """A PodDisruptionBudget refused an eviction: the next plan chooses other victims."""


class EventSink(Protocol):
    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None: ...


@dataclass
class Backoff:
    """Per-key exponential backoff: 0.5 s, 1 s, 2 s, … up to a cap; a success forgets the key."""

    clock: Callable[[], float] = time.monotonic
    initial: float = BACKOFF_INITIAL_SECONDS
    cap: float = BACKOFF_MAX_SECONDS
    failures: dict[str, int] = field(default_factory=dict)
    until: dict[str, float] = field(default_factory=dict)

    def failed(self, key: str) -> float:
        count = self.failures.get(key, 0) + 1
        self.failures[key] = count
        delay: float = min(self.cap, self.initial * 2.0 ** (count - 1))
        self.until[key] = self.clock() + delay
        return delay

    def succeeded(self, key: str) -> None:
        self.failures.pop(key, None)
        self.until.pop(key, None)

    def waiting(self) -> frozenset[str]:
        """Keys still inside their backoff window."""
        now = self.clock()
        return frozenset(k for k, t in self.until.items() if t > now)

    def failing(self) -> frozenset[str]:
        """Keys whose last try failed, inside their backoff window or past it (not yet succeeded since)."""
        return frozenset(self.failures)

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest backing-off key may run again (None: none waits)."""
        now = self.clock()
        pending = [t - now for t in self.until.values() if t > now]
        return min(pending) if pending else None

    def forget_missing(self, keys: set[str]) -> None:
        """Drop keys whose group no longer exists (a deleted Job)."""
        for key in list(self.until):
            if key not in keys:
                self.succeeded(key)


class Requeues:
    """When this process requeued a unit itself (a node failure, an unbindable release), so that its next
    admission's wait is counted from then: its Admitted condition may have turned False earlier (a gang
    short of pods waits out the grace period before it is requeued). Bounded: the oldest are forgotten."""

    def __init__(self, size: int = 4096, clock: Callable[[], dt.datetime] | None = None) -> None:
        self.size = size
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._at: OrderedDict[str, dt.datetime] = OrderedDict()

    def requeued(self, key: str) -> None:
        self._at[key] = self.clock()
        self._at.move_to_end(key)
        while len(self._at) > self.size:
            self._at.popitem(last=False)

    def started(self, key: str, since: dt.datetime | None) -> dt.datetime | None:
        """When the admitted unit's wait began: the later of the plan's answer and our own requeue."""
        mine = self._at.pop(key, None)
        if mine is None:
            return since
        return mine if since is None else max(mine, since)


@dataclass(frozen=True)
class GroupResult:
    key: str
    ok: bool
    failed_action: str = ""
    error: str = ""
    retry_in: float = 0.0


def _gone(error: BaseException) -> bool:
    """A 404: the object written, or its namespace, no longer exists (writes of pods and owners answer
    None for that already); or the owner of one about to be made is going."""
    return isinstance(error, OwnerGoneError) or (isinstance(error, ApiException) and error.status == 404)


def _written(action: Action) -> ObjectRef | None:
    """The existing object of Phalanx's own an action writes (None: it creates one, or writes no group)."""
    match action:
        case PatchStatus(group=ref) | RecordAdmission(group=ref) | PatchMinCount(pod_group=ref):
            return ref
        case PatchTopologyStatus(topology=ref):
            return ref
    return None


def _plural(ref: ObjectRef) -> str:
    """PodGroups and CompositePodGroups take the same status writes."""
    return COMPOSITE_POD_GROUPS if ref.kind == COMPOSITE_POD_GROUP_KIND else POD_GROUPS


def _runs(actions: Sequence[Action]) -> list[list[Action]]:
    """Consecutive independent actions of one kind run together; everything else alone, in order."""
    runs: list[list[Action]] = []
    for action in actions:
        if runs and isinstance(action, CONCURRENT) and type(runs[-1][0]) is type(action):
            runs[-1].append(action)
        else:
            runs.append([action])
    return runs


class Applier:
    def __init__(
        self,
        cache: ClusterCache,
        kube: Kube,
        events: EventSink,
        backoff: Backoff | None = None,
    ) -> None:
        self.cache = cache
        self.kube = kube
        self.events = events
        self.backoff = backoff or Backoff()
        self._limit = asyncio.Semaphore(MAX_GROUPS_IN_FLIGHT)
        self._setup_limit = asyncio.Semaphore(MAX_SETUP_IN_FLIGHT)  # its own: setup never queues a decision
        self._event_tasks: set[asyncio.Future[None]] = set()  # events of a cancelled unit, still posted
        self._owner_lookups = OwnerLookups()  # reads of owners whose objects went (apply/owners.py)
        self.requeues = Requeues()
        self.faults = Faults.from_env()  # test-only switches (faults.py); inert unless set

    async def apply(self, groups: Sequence[UnitPlan]) -> list[GroupResult]:
        results = await asyncio.gather(*(self._group(g) for g in groups))
        metrics.GROUPS_BACKING_OFF.set(len(self.backoff.waiting()))
        return list(results)

    async def apply_setup(self, group: UnitPlan, written: Callable[[], None] | None = None) -> GroupResult:
        """One setup-only plan (model/actions.places_nothing), applied beside the passes under a bound of
        its own, so that a burst of creates never holds back the releases of a pass. `written` is called
        once its writes went through, before its events are posted (`_group`)."""
        result = await self._group(group, self._setup_limit, written)
        metrics.GROUPS_BACKING_OFF.set(len(self.backoff.waiting()))
        return result

    async def _group(
        self,
        group: UnitPlan,
        limit: asyncio.Semaphore | None = None,
        written: Callable[[], None] | None = None,
    ) -> GroupResult:
        """The unit's actions in order, each run of independent ones at once. Its events wait until the
        writes after them are done (or one failed): an event is posted when everything before it in the plan
        went through, as if in order, but never holds back a write (a new gang's "PodGroupCreated" came
        between its groups' creates and its release: a round trip on the first pod of a burst). `written`
        is told when every write went through, before those events: what waits for the writes (the next
        pass, for a setup) does not wait for the events too."""
        async with limit or self._limit:
            let_through = False  # its releases went through
            events: list[Action] = []  # reached, posted once the unit's writes end
            try:
                for run in _runs(group.actions):
                    if isinstance(run[0], PostEvent):
                        events.extend(run)
                        continue
                    if isinstance(run[0], ReleasePod):
                        await self.faults.before_release()
                    outcomes = await asyncio.gather(*(self._one(a) for a in run), return_exceptions=True)
                    for action, outcome in zip(run, outcomes, strict=True):
                        if isinstance(outcome, asyncio.CancelledError):
                            raise outcome
                        if isinstance(outcome, BaseException):
                            await self._post_events(events)
                            events = []
                            if _gone(outcome):
                                return self._gone(group, action)
                            if namespace_terminating(outcome):
                                return self._namespace_going(group, action)
                            if let_through:  # released all the same: a later write (its status) failed
                                self._released(group)
                            return await self._failed(group, action, outcome)
                    let_through = let_through or isinstance(run[0], ReleasePod)
                self.backoff.succeeded(group.key)
                self._released(group)
                self._admitted(group)
                self._observe(group)
                if written is not None:
                    written()
                await self._post_events(events)
                events = []
            finally:
                if events:  # cancelled: what was reached is still said, in the background
                    self._background_events(events)
            return GroupResult(group.key, True)

    async def _post_events(self, events: Sequence[Action]) -> None:
        """Post them at once (the recorder never raises: a failed post is logged)."""
        if events:
            await asyncio.gather(*(self._one(e) for e in events), return_exceptions=True)

    def _background_events(self, events: Sequence[Action]) -> None:
        task = asyncio.ensure_future(self._post_events(events))
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    def _released(self, group: UnitPlan) -> None:
        """Once the unit's releases went through (the next pass does not release these pods again)."""
        if group.admitted_pods:
            metrics.PODS_RELEASED.inc(group.admitted_pods)
        if group.admission_latency is not None:
            metrics.ADMISSION_LATENCY.observe(group.admission_latency)

    def _admitted(self, group: UnitPlan) -> None:
        """Once the status write that says it was admitted went through (a failed one is made again by the
        next pass, and counted then)."""
        if group.admitted is None:
            return
        metrics.ADMISSIONS.labels(group.admitted).inc()
        since = self.requeues.started(group.key, group.waiting_since)
        if since is not None:
            waited = (dt.datetime.now(dt.UTC) - since).total_seconds()
            metrics.ADMISSION_WAIT.labels(group.admitted).observe(max(0.0, waited))

    def _observe(self, group: UnitPlan) -> None:
        # One requeue per suspension, or per group of pods deleted for the same reason.
        requeues: list[SuspendJob | DeactivateKueueWorkload | DeletePod] = [
            a for a in group.actions if isinstance(a, SuspendJob | DeactivateKueueWorkload)
        ]
        requeues += list({a.why: a for a in group.actions if isinstance(a, DeletePod)}.values())
        for requeue in requeues:
            metrics.REQUEUES.labels(requeue.cause).inc()
            if requeue.cause == "unbindable":
                metrics.RELEASES_ROLLED_BACK.inc()
        if any(r.cause != "preempted" for r in requeues):
            self.requeues.requeued(group.key)  # the unit took itself back: its next wait starts now
        if group.preempted_pods:
            metrics.PREEMPTED_PODS.inc(group.preempted_pods)
            if requeues:
                metrics.PREEMPTIONS.labels("whole").inc()
            if any(isinstance(a, EvictPod) for a in group.actions):
                metrics.PREEMPTIONS.labels("partial").inc()

    def _gone(self, group: UnitPlan, action: Action) -> GroupResult:
        """What the action writes (or its namespace) was deleted meanwhile: its Job was deleted (also by a
        TTL) and the garbage collector took its groups. Not a failure (no warning, event, failure metric
        or backoff): the cache forgets the object, the watch confirms, the next pass plans without it."""
        target = _written(action)
        if target is not None:
            self.cache.delete(target.kind, {"metadata": {"namespace": target.namespace, "name": target.name}})
        log.debug("%s: %s: gone meanwhile (404); nothing left to do", group.key, describe(action))
        self.backoff.succeeded(group.key)
        return GroupResult(group.key, True)

    def _namespace_going(self, group: UnitPlan, action: Action) -> GroupResult:
        """Nothing new can be made in a namespace being deleted (a 403 whose cause is NamespaceTerminating),
        and all that is in it goes, the owner too; no event could be posted there either. Not a failure (no
        warning, event or failure metric), but the unit backs off all the same: the passes until the
        owner's deletion reaches the cache do not ask again and again."""
        delay = self.backoff.failed(group.key)
        log.debug(
            "%s: %s: its namespace is being deleted; next try in %.1f s", group.key, describe(action), delay
        )
        return GroupResult(group.key, True, retry_in=delay)

    async def _failed(self, group: UnitPlan, action: Action, error: BaseException) -> GroupResult:
        name = type(action).__name__
        metrics.APPLY_FAILURES.labels(name).inc()
        delay = self.backoff.failed(group.key)
        text = error_text(error)
        what = describe(action)
        log.warning("%s: %s failed: %s; retrying in %.1f s", group.key, what, text, delay)
        if group.owner is not None and not isinstance(action, PostEvent):
            creating = isinstance(action, CreateWorkload | CreatePodGroup | CreateCompositePodGroup)
            reason = "FailedCreate" if creating else "FailedSync"
            await self._post(
                group.owner, "Warning", reason, f"{what} failed: {text}; retrying in {delay:.2g} s"
            )
        return GroupResult(group.key, False, name, text, delay)

    async def _post(self, involved: ObjectRef, type_: EventType, reason: str, message: str) -> None:
        metrics.WRITES.labels("PostEvent", reason).inc()
        try:
            await self.events.post(involved, type_, reason, message)
        except Exception as e:  # losing an event is not worth failing a group for
            log.warning("could not post event %s on %s: %s", reason, involved, e)

    def _resolved(self, ref: ObjectRef) -> ObjectRef:
        """A PodGroup planned in this pass has no uid in the plan; it has one once created."""
        if ref.uid or ref.kind not in (POD_GROUP_KIND, COMPOSITE_POD_GROUP_KIND):
            return ref
        store = self.cache.pod_groups if ref.kind == POD_GROUP_KIND else self.cache.composite_pod_groups
        record = store.get(ref.key)
        if record is None:
            return ref
        return ObjectRef(ref.api_version, ref.kind, ref.namespace, ref.name, record.uid)

    def _reported(self, ref: ObjectRef) -> None:
        """Note when the group's status was written (plan/status.refreshing reads it)."""
        self.cache.reported[ref.kind_key] = dt.datetime.now(dt.UTC)

    def _upsert_group(self, ref: ObjectRef, body: dict[str, Any]) -> None:
        if ref.kind == COMPOSITE_POD_GROUP_KIND:
            self.cache.upsert(COMPOSITE_POD_GROUP_KIND, body, own_write=True)
        else:
            self.cache.upsert(POD_GROUP_KIND, body, own_write=True)

    async def _one(self, action: Action) -> None:
        counted = written_for(action)
        if counted is not None:
            metrics.WRITES.labels(*counted).inc()
        match action:
            case PostEvent(involved=involved, type=type_, reason=reason, message=message):
                await self._post(self._resolved(involved), type_, reason, message)
            case RememberAnnounced(key=key, message=message):
                self.cache.announce(key, message)
            case ReleasePod() | UngatePod() | LabelPod() | EvictPod() | DeletePod():
                await self._pod(action)
            case SuspendJob() | ResumeJob() | DeactivateKueueWorkload() | ActivateKueueWorkload():
                await self._owner(action)
            case _:
                await self._ours(action)

    async def _ours(self, action: Action) -> None:
        """Writes of Phalanx's own objects: Workloads, groups, their status, Topologies' status."""
        cache, kube = self.cache, self.kube
        if isinstance(action, CreateWorkload | CreatePodGroup | CreateCompositePodGroup):
            await owner_alive(cache, kube, action, self._owner_lookups)
        match action:
            case CreateWorkload(workload=workload):
                created = await kube.create_object(WORKLOADS, workload.to_api())
                cache.upsert(WORKLOAD_KIND, created, own_write=True)
            case CreatePodGroup(pod_group=pod_group, workload=workload_name):
                body = pod_group.to_api()
                namespace = str(body["metadata"].get("namespace", ""))
                owner = cache.workloads.get(f"{namespace}/{workload_name}")
                if owner is not None:
                    # Also owned by its Workload, as upstream (the Workload's uid is known only now).
                    body["metadata"].setdefault("ownerReferences", []).append(
                        {
                            "apiVersion": API_VERSION,
                            "kind": WORKLOAD_KIND,
                            "name": owner.name,
                            "uid": owner.uid,
                        }
                    )
                created = await kube.create_object(POD_GROUPS, body)
                cache.upsert(POD_GROUP_KIND, created, own_write=True)
            case CreateCompositePodGroup(group=composite):
                created = await kube.create_object(COMPOSITE_POD_GROUPS, composite.to_api())
                cache.upsert(COMPOSITE_POD_GROUP_KIND, created, own_write=True)
            case PatchMinCount(pod_group=ref, min_count=count):
                patched = await kube.patch_spec(
                    POD_GROUPS, ref.namespace, ref.name, {"schedulingPolicy": {"gang": {"minCount": count}}}
                )
                cache.upsert(POD_GROUP_KIND, patched, own_write=True)
            case RecordAdmission(group=ref, admission=admission, resource_version=version, status=whole):
                written = (
                    status_patch(whole)["status"] if whole is not None else {"admission": admission.to_api()}
                )
                try:
                    patched = await kube.patch_status(_plural(ref), ref.namespace, ref.name, written, version)
                except ApiException as e:
                    if e.status == 409:  # the cache's group is stale: the next pass plans on the newest seen
                        cache.conflicted(ref.kind, ref.key)
                    raise
                self._upsert_group(ref, patched)
                if whole is not None:
                    self._reported(ref)
                self.faults.reached(AFTER_RECORD)
            case PatchStatus(group=ref, status=status):
                self.faults.reached(BEFORE_STATUS)
                patched = await kube.patch_status(
                    _plural(ref), ref.namespace, ref.name, status_patch(status)["status"]
                )
                self._upsert_group(ref, patched)
                self._reported(ref)
            case PatchTopologyStatus(topology=ref, status=topology_status):
                written = await kube.patch_cluster_status(TOPOLOGIES, ref.name, topology_status.to_api())
                cache.upsert(TOPOLOGY_KIND, written, own_write=True)
            case DeleteObject(target=target):
                plural = WORKLOADS if target.kind == WORKLOAD_KIND else _plural(target)
                await kube.delete_object(plural, target.namespace, target.name)
                cache.delete(target.kind, {"metadata": {"namespace": target.namespace, "name": target.name}})
            case _:
                raise AssertionError(f"unknown action {action!r}")

    async def _pod(self, action: Action) -> None:
        """Writes of pods: released (pinned and ungated), ungated, labelled, evicted."""
        cache, kube = self.cache, self.kube
        match action:
            case ReleasePod(pod=pod, node=node, pod_group=group_name, by_name=by_name, domain=domain):
                async with self.faults.release_slot():
                    released = await kube.release_pod(
                        pod.namespace, pod.name, node, group_name, by_name, domain
                    )
                    if released is not None:  # None: the pod is gone, nothing to release
                        cache.upsert(POD, released, own_write=True)
                    self.faults.reached(AFTER_RELEASES)
            case UngatePod(pod=pod):
                ungated = await kube.ungate_pod(pod.namespace, pod.name)
                if ungated is not None:
                    cache.upsert(POD, ungated, own_write=True)
            case LabelPod(pod=pod, pod_group=group_name):
                labelled = await kube.label_pod(pod.namespace, pod.name, group_name)
                if labelled is not None:
                    cache.upsert(POD, labelled, own_write=True)
            case DeletePod(pod=pod, why=why, cause=cause, foreground=foreground):
                # Marked a DisruptionTarget first: a podFailurePolicy may ignore it (docs/kueue.md).
                reason = REASON_PREEMPTION_BY_PHALANX if cause == "preempted" else "RequeueByPhalanx"
                async with self._victim_slot(cause):
                    await kube.delete_pod(pod.namespace, pod.name, reason, why, foreground=foreground)
                    self._victim_taken(cause)
            case EvictPod(pod=pod, reason=reason, message=message):
                async with self.faults.victim_slot():  # only preemption evicts
                    if not await kube.evict_pod(pod.namespace, pod.name, reason, message):
                        cache.evictions.block(pod.key)
                        raise EvictionBlockedError(
                            f"a PodDisruptionBudget does not allow evicting {pod.key} now"
                        )
                    self.faults.reached(AFTER_VICTIMS)
            case _:
                raise AssertionError(f"unknown action {action!r}")

    async def _owner(self, action: Action) -> None:
        """Writes of owners: suspended to be requeued whole, resumed once its pods are gone; a Kueue-managed
        one's Kueue Workload deactivated instead, activated again once Kueue stopped it."""
        cache, kube = self.cache, self.kube
        match action:
            case SuspendJob(job=job, why=why, cause=cause):
                async with self._victim_slot(cause):
                    suspended = await kube.patch_owner(
                        job,
                        {
                            "metadata": {"annotations": {keys.REQUEUED_ANNOTATION: why}},
                            "spec": {"suspend": True},
                        },
                    )
                    if suspended is not None:
                        cache.upsert(job.kind, suspended, own_write=True)
                        self._victim_taken(cause)
            case ResumeJob(job=job):
                resumed = await kube.patch_owner(
                    job,
                    {
                        "metadata": {"annotations": {keys.REQUEUED_ANNOTATION: None}},
                        "spec": {"suspend": False},
                    },
                )
                if resumed is not None:
                    cache.upsert(job.kind, resumed, own_write=True)
            case DeactivateKueueWorkload(workload=workload, why=why, cause=cause):
                async with self._victim_slot(cause):
                    deactivated = await kube.patch_kueue_workload(
                        workload,
                        {
                            "metadata": {"annotations": {keys.REQUEUED_ANNOTATION: why}},
                            "spec": {"active": False},
                        },
                    )
                    if deactivated is not None:
                        cache.upsert(KUEUE_WORKLOAD, deactivated, own_write=True)
                        self.faults.reached(AFTER_DEACTIVATE)
                        self._victim_taken(cause)
            case ActivateKueueWorkload(workload=workload):
                activated = await kube.patch_kueue_workload(
                    workload,
                    {"metadata": {"annotations": {keys.REQUEUED_ANNOTATION: None}}, "spec": {"active": True}},
                )
                if activated is not None:
                    cache.upsert(KUEUE_WORKLOAD, activated, own_write=True)
            case _:
                raise AssertionError(f"unknown action {action!r}")

    def _victim_slot(self, cause: RequeueCause) -> AbstractAsyncContextManager[Any]:
        """A victim action of a preemption goes one at a time while its test-only abort is armed."""
        return self.faults.victim_slot() if cause == "preempted" else contextlib.nullcontext()

    def _victim_taken(self, cause: RequeueCause) -> None:
        """A write that takes a victim back for a preemption went through (the test-only abort's count)."""
        if cause == "preempted":
            self.faults.reached(AFTER_VICTIMS)


def status_patch(status: GroupStatus) -> dict[str, Any]:
    """A merge patch that makes the status exactly `status` (unset fields are cleared)."""
    body = status.to_api()
    for name in STATUS_FIELDS:
        alias = PodGroupStatus.model_fields[name].alias or name
        body.setdefault(alias, None)
    return {"status": body}


# A status patch replaces these whole; a None among them is written as null (cleared).
STATUS_FIELDS = tuple(PodGroupStatus.model_fields)
