"""The one scheduling loop: cache → snapshot → placement engine → appliers.

Each pass: make sure every managed Job has its Workload and PodGroup, take one snapshot, walk the
pending groups in order (priority, then age), and admit a group only when the engine found a whole
placement for it. A decision is recorded on the PodGroup before any pod is released, and the
snapshot assumes the released pods so the next group in the same pass cannot take their room.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import conditions as c
from phalanx.api.builders import build_pod_group, build_workload
from phalanx.api.group import POD_GROUPS, WORKLOADS
from phalanx.api.job_policy import JobPolicyError, parse_job_policy
from phalanx.api.naming import pod_group_label_value
from phalanx.controller import status as st
from phalanx.controller.cache import ClusterCache, GroupRecord, JobRecord, PodRecord
from phalanx.controller.kube import Kube, now_rfc3339
from phalanx.placement import (
    Admit,
    BoundPod,
    GroupRequest,
    PodRequest,
    Reject,
    Snapshot,
    admitted_usage,
    decide,
)

log = logging.getLogger("phalanx.scheduler")

RESYNC_SECONDS = 10.0  # a pass also runs this often with no event, as a safety net
DEBOUNCE_SECONDS = 0.05  # let a burst of pod creations land in one pass


@dataclass(frozen=True)
class GroupView:
    """One managed Job, its PodGroup and its pods, classified for scheduling."""

    job: JobRecord
    group: GroupRecord
    gang: bool
    min_count: int
    topology_key: str | None
    waiting: tuple[PodRecord, ...]  # gated by us, to place
    placed: tuple[PodRecord, ...]  # bound or released: they take node capacity now
    priority: int

    @property
    def order(self) -> tuple[int, str, str]:
        return (-self.priority, self.job.created, self.group.key)


def gang_min_count(spec: Mapping[str, Any]) -> int | None:
    gang = (spec.get("schedulingPolicy") or {}).get("gang")
    if gang is None:
        return None
    return int(gang.get("minCount") or 1)


def topology_key_of(spec: Mapping[str, Any]) -> str | None:
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    return topology[0]["key"] if topology else None


def view_of(cache: ClusterCache, job: JobRecord, group: GroupRecord) -> GroupView:
    spec = group.body.get("spec") or {}
    min_count = gang_min_count(spec)
    pods = [p for p in cache.job_pods(job.uid) if not p.terminal and not p.deleting]
    waiting = tuple(sorted((p for p in pods if p.gated), key=lambda p: p.name))
    placed = tuple(p for p in pods if p.usage_node)
    priority = max((p.priority for p in pods), default=int(spec.get("priority") or 0))
    if min_count is not None and job.remaining is not None:
        # Near the end of a Job with more completions than parallelism, fewer pods than minCount are
        # left to run; asking for minCount then would hold the last ones forever.
        min_count = max(1, min(min_count, job.remaining))
    return GroupView(
        job=job,
        group=group,
        gang=min_count is not None,
        min_count=min_count or 1,
        topology_key=topology_key_of(spec),
        waiting=waiting,
        placed=placed,
        priority=priority,
    )


def build_snapshot(cache: ClusterCache) -> Snapshot:
    """Every pod that holds capacity counts: bound ones (Phalanx's or not, terminating too) and
    the ones Phalanx released that kube-scheduler has not bound yet."""
    bound = [
        BoundPod(id=p.key, node=p.usage_node, requests=p.requests)
        for p in cache.pods.values()
        if p.usage_node and p.usage_node in cache.nodes
    ]
    return Snapshot.build(cache.nodes.values(), bound)


class Scheduler:
    def __init__(self, cache: ClusterCache, kube: Kube) -> None:
        self.cache = cache
        self.kube = kube
        self.passes = 0
        self._priorities: dict[str, int | None] = {}

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.cache.changed.wait(), timeout=RESYNC_SECONDS)
                await asyncio.sleep(DEBOUNCE_SECONDS)
            except TimeoutError:
                pass
            self.cache.changed.clear()
            try:
                await self.pass_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                # One bad pass must not stop scheduling; the next event or resync retries.
                log.exception("scheduling pass failed")
                await asyncio.sleep(1.0)
                self.cache.changed.set()

    async def pass_once(self) -> None:
        self.passes += 1
        await self.ensure_objects()
        snapshot = build_snapshot(self.cache)
        views = []
        for job in list(self.cache.jobs.values()):
            group = self.cache.pod_group_of_job(job.uid)
            if group is not None:
                views.append(view_of(self.cache, job, group))
        for view in sorted(views, key=lambda v: v.order):
            snapshot = await self.schedule(view, snapshot)

    # ------------------------------------------------------------------ objects
    async def ensure_objects(self) -> None:
        """Workload then PodGroup for every managed Job (idempotent; owned by the Job for GC)."""
        for job in list(self.cache.jobs.values()):
            existing = self.cache.pod_group_of_job(job.uid)
            if existing is not None and existing.job_resource_version == job.resource_version:
                continue  # nothing in the Job changed since we last looked
            try:
                policy = parse_job_policy(job.body)
            except JobPolicyError as e:
                # Only reachable if the webhook was bypassed; say so where the user looks.
                await self.kube.event(job.body, "Warning", "InvalidPolicy", str(e))
                continue
            if existing is not None:
                await self._sync_min_count(job, existing, policy.min_count)
                continue
            priority = await self._priority(policy.priority_class_name)
            workload = self.cache.workload_of_job(job.uid)
            if workload is None:
                created = await self.kube.create_object(WORKLOADS, build_workload(job.body, policy, priority))
                workload = self.cache.upsert_group(created)
            body = build_pod_group(job.body, workload.name, policy, priority, workload_uid=workload.uid)
            created = await self.kube.create_object(POD_GROUPS, body)
            group = self.cache.upsert_group(created)
            await self.kube.event(
                job.body,
                "Normal",
                "PodGroupCreated",
                f"created Workload {workload.name} and PodGroup {group.name}",
            )

    async def _sync_min_count(self, job: JobRecord, group: GroupRecord, min_count: int | None) -> None:
        """Like upstream, only the gang size follows the Job (min-count annotation or parallelism)."""
        current = gang_min_count(group.body.get("spec") or {})
        if min_count is not None and current is not None and current != min_count:
            patched = await self.kube.patch_spec(
                POD_GROUPS,
                group.namespace,
                group.name,
                {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            )
            group = self.cache.upsert_group(patched)
            await self.kube.event(
                job.body, "Normal", "MinCountChanged", f"gang minCount {current} -> {min_count}"
            )
        self.cache.seen_job_version(group, job.resource_version)

    async def _priority(self, class_name: str | None) -> int | None:
        if not class_name:
            return None
        if class_name not in self._priorities:
            self._priorities[class_name] = await self.kube.priority_of(class_name)
        return self._priorities[class_name]

    # ------------------------------------------------------------------ one group
    async def link_pods(self, view: GroupView) -> None:
        """Every pod of the group carries its PodGroup's name (label), also while it waits."""
        value = pod_group_label_value(view.group.name)
        unlinked = [p for p in (*view.waiting, *view.placed) if p.pod_group != value]
        results = await asyncio.gather(
            *(self.kube.label_pod(p.namespace, p.name, view.group.name) for p in unlinked),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, dict):
                self.cache.upsert_pod(result)
            elif isinstance(result, BaseException):
                log.warning("labelling a pod of %s failed: %s", view.group.key, result)

    async def schedule(self, view: GroupView, snapshot: Snapshot) -> Snapshot:
        await self.link_pods(view)
        outcome: st.Outcome | None = None
        domain = self._domain_of(view)
        released = 0
        if view.job.suspended or view.job.finished or not view.gang:
            pass  # basic groups are never held; suspended/finished ones have nothing to place
        elif view.waiting:
            have = len(view.waiting) + len(view.placed)
            if have < view.min_count:
                outcome = st.Outcome(
                    c.REASON_WAITING_FOR_PODS,
                    f"minCount ({view.min_count}) is not yet satisfied: {len(view.placed)} scheduled, "
                    f"{len(view.waiting)} waiting; waiting for the Job to create the other pods",
                )
            else:
                request = GroupRequest(
                    name=view.group.key,
                    pending=tuple(PodRequest(id=p.key, requirements=p.requirements) for p in view.waiting),
                    min_count=view.min_count,
                    topology_key=view.topology_key,
                    bound_nodes=tuple(p.usage_node for p in view.placed),
                )
                decision = decide(snapshot, request)
                if isinstance(decision, Admit) and not decision.assignments:
                    pass  # minCount already met by placed pods; the extras wait for room in their domain
                elif isinstance(decision, Admit):
                    released = await self.admit(view, decision)
                    snapshot = snapshot.assume(admitted_usage(request, decision))
                    domain = decision.domain or domain
                    outcome = st.Outcome(c.REASON_ADMITTED, "")
                else:
                    assert isinstance(decision, Reject)
                    outcome = st.Outcome(c.REASON_UNSCHEDULABLE, decision.message)
        await self.update_status(view, outcome, domain, released)
        return snapshot

    def _domain_of(self, view: GroupView) -> str | None:
        if not view.topology_key:
            return None
        for pod in view.placed:
            node = self.cache.nodes.get(pod.usage_node)
            if node is not None and view.topology_key in node.labels:
                return node.labels[view.topology_key]
        return None

    async def admit(self, view: GroupView, decision: Admit) -> int:
        """Record the decision on the PodGroup, then release every pod (nodeSelector + ungate)."""
        current = dict(view.group.body.get("status") or {})
        attempt = int((current.get("admission") or {}).get("attempt", -1)) + 1
        admission = {
            "domain": decision.domain,
            "assignments": [
                {"pod": pod.split("/", 1)[1], "node": node} for pod, node in decision.assignments
            ],
            "admittedAt": now_rfc3339(),
            "attempt": attempt,
        }
        recorded = await self.kube.patch_status(
            POD_GROUPS, view.group.namespace, view.group.name, {"admission": admission}
        )
        self.cache.upsert_group(recorded)
        by_key = {p.key: p for p in view.waiting}
        results = await asyncio.gather(
            *(
                self.kube.release_pod(by_key[pod].namespace, by_key[pod].name, node, view.group.name)
                for pod, node in decision.assignments
            ),
            return_exceptions=True,
        )
        released = 0
        for (pod, node), result in zip(decision.assignments, results, strict=True):
            if isinstance(result, BaseException):
                # The pod stays gated; the next pass places it in the same domain (running pods pin it).
                log.warning("releasing %s to %s failed: %s", pod, node, result)
                self.cache.changed.set()
            elif result is not None:
                self.cache.upsert_pod(result)
                released += 1
        where = f" in {view.topology_key}={decision.domain}" if decision.domain else ""
        nodes = ", ".join(node for _, node in decision.assignments)
        message = f"admitted {len(decision.assignments)} pod(s){where} on {nodes}"
        log.info("%s: %s", view.group.key, message)
        await asyncio.gather(
            self.kube.event(view.job.body, "Normal", "Admitted", message),
            self.kube.event(view.group.body, "Normal", "Admitted", message),
        )
        return released

    async def update_status(
        self, view: GroupView, outcome: st.Outcome | None, domain: str | None, released_now: int
    ) -> None:
        group = self.cache.pod_groups.get(view.group.key, view.group)
        current = dict(group.body.get("status") or {})
        scheduled = sum(1 for p in view.placed if p.bound)
        released = sum(1 for p in view.placed if not p.bound) + released_now
        facts = st.GroupFacts(
            gang=view.gang,
            min_count=view.min_count,
            scheduled=scheduled,
            released=released,
            waiting=len(view.waiting) - released_now,
            domain=domain,
            suspended=view.job.suspended,
            finished=view.job.finished,
        )
        generation = int((group.body.get("metadata") or {}).get("generation") or 1)
        desired = st.desired_status(current, facts, outcome, now_rfc3339(), generation)
        if view.job.suspended or view.job.finished:
            desired["admission"] = None  # nothing is held for a suspended or finished Job
        elif current.get("admission") and not view.placed and not released_now:
            desired["admission"] = None  # the decision's pods are gone; the next one starts afresh
        if not st.status_changed(current, desired) and (
            "admission" not in desired or not current.get("admission")
        ):
            return
        patched = await self.kube.patch_status(POD_GROUPS, group.namespace, group.name, desired)
        self.cache.upsert_group(patched)
        await self._announce(view, current, desired)

    async def _announce(
        self, view: GroupView, current: Mapping[str, Any], desired: Mapping[str, Any]
    ) -> None:
        """An event on the Job and the PodGroup whenever the reason or message of Admitted changes."""
        before = st.find(current.get("conditions") or [], c.ADMITTED)
        after = st.find(desired.get("conditions") or [], c.ADMITTED)
        if after is None or after.get("reason") == c.REASON_ADMITTED:
            return  # admission has its own event, posted by admit()
        if before is not None and (before.get("reason"), before.get("message")) == (
            after.get("reason"),
            after.get("message"),
        ):
            return
        event_type = "Warning" if after.get("reason") == c.REASON_UNSCHEDULABLE else "Normal"
        reason = str(after.get("reason"))
        message = str(after.get("message"))
        await asyncio.gather(
            self.kube.event(view.job.body, event_type, reason, message),
            self.kube.event(view.group.body, event_type, reason, message),
        )
