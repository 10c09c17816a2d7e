"""Preemption inside `plan()` (pure): who may be a victim, what a chosen preemption turns into, and the
reservation that holds the freed room for the preemptor until it is admitted.

The victim choice itself is the engine's (`placement.choose_victims`). Here: the candidates (every pod
holding capacity, with its group), the actions (a whole victim group of a Job is requeued — suspended,
then resumed once its pods are gone, so the Job controller counts no failure and applies no backoff; a
partial victim or a pod Phalanx does not manage is evicted through the Eviction API), the events, and
the reservation written on the preemptor's PodGroup status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from phalanx.api.status import Reservation
from phalanx.controller.model.actions import Action, EvictPod, PostEvent, SuspendJob
from phalanx.controller.model.records import CompositePodGroupRecord, JobRecord, PodGroupRecord, PodRecord
from phalanx.controller.plan.status import PREEMPTED_PREFIX
from phalanx.placement import Candidate, Preemption, VictimGroup

RESERVATION_SECONDS = 120.0  # how long freed room is held for a preemptor that is not admitted
EVICTION_REASON = "PreemptionByPhalanx"


@dataclass(frozen=True)
class GroupOfJob:
    """A managed Job and its group: its PodGroup, or the CompositePodGroup of its slices (a sliced Job is
    one victim, taken whole or not at all: evicting a pod of one slice would break the tree)."""

    job: JobRecord
    group: PodGroupRecord | CompositePodGroupRecord


@dataclass
class Victims:
    """Every pod that holds capacity, as a possible victim, and the managed groups they belong to.

    Built at most once per pass, and only when some group needs to preempt."""

    pods: Mapping[str, PodRecord]
    groups_by_job: Mapping[str, GroupOfJob]  # Job uid -> its group
    unevictable: frozenset[str] = frozenset()
    _by_key: dict[str, GroupOfJob] = field(default_factory=dict)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:
        out = []
        for pod in self.pods.values():
            node = pod.usage_node
            if not node or pod.deleting:
                continue  # holds no capacity, or is going already
            if pod.joins_group:
                # A pod made by hand into a PodGroup (no Job): nothing would recreate it, and evicting it
                # would leave its gang partial. Such groups are never preempted (docs/design.md).
                continue
            owner = self.groups_by_job.get(pod.job_uid) if pod.job_uid else None
            started = pod.created.timestamp() if pod.created is not None else 0.0
            out.append(
                Candidate(
                    id=pod.key,
                    node=node,
                    requests=pod.requests,
                    priority=pod.priority,
                    started=started,
                    group=owner.group.key if owner is not None else None,
                )
            )
        return tuple(out)

    @cached_property
    def groups(self) -> tuple[VictimGroup, ...]:
        out = []
        for owner in self.groups_by_job.values():
            group = owner.group
            self._by_key[group.key] = owner
            if isinstance(group, CompositePodGroupRecord):
                out.append(VictimGroup(key=group.key, min_count=1, disruption="all"))
                continue
            all_mode = group.spec.disruption_mode.all is not None
            out.append(
                VictimGroup(
                    key=group.key,
                    min_count=group.gang_min_count or 1,
                    disruption="all" if all_mode else "single",
                )
            )
        return tuple(out)

    def owner(self, group_key: str) -> GroupOfJob | None:
        _ = self.groups  # fills the index
        return self._by_key.get(group_key)


def reservation_active(
    reservation: Reservation | None, pods: Mapping[str, PodRecord], now: dt.datetime
) -> bool:
    """Room is still being freed: not expired, and some victim still exists."""
    if reservation is None or reservation.expires_at <= now:
        return False
    return any(victim in pods for victim in reservation.victims)


def actuate(
    preemption: Preemption,
    preemptor: PodGroupRecord,
    preemptor_job: JobRecord,
    victims: Victims,
    now: dt.datetime,
) -> tuple[list[Action], Reservation, str]:
    """The actions that free the room, the reservation to record, and a message for the status."""
    why = f"{PREEMPTED_PREFIX}podgroup {preemptor.key} (priority {preemptor.spec.priority or 0})"
    actions: list[Action] = []
    requeued: list[str] = []
    for key in preemption.whole_groups:
        owner = victims.owner(key)
        if owner is None:
            continue
        actions.append(SuspendJob(owner.job.ref, why, "preempted"))
        actions.append(
            PostEvent(owner.job.ref, "Warning", "Preempted", f"Preempted by podgroup {preemptor.key}")
        )
        actions.append(
            PostEvent(owner.group.ref, "Warning", "Preempted", f"Preempted by podgroup {preemptor.key}")
        )
        requeued.append(key)
    whole = set(preemption.whole_groups)
    message = f"phalanx: preempting to make room for podgroup {preemptor.key}"
    evicted = 0
    for pod_id in preemption.victims:
        pod = victims.pods.get(pod_id)
        if pod is None:
            continue
        owner = victims.groups_by_job.get(pod.job_uid) if pod.job_uid else None
        if owner is not None and owner.group.key in whole:
            continue  # the Job's suspension takes its pods
        actions.append(EvictPod(pod.ref, EVICTION_REASON, message))
        evicted += 1
        target = owner.job.ref if owner is not None else pod.ref
        actions.append(PostEvent(target, "Warning", "Preempted", f"Preempted by podgroup {preemptor.key}"))
    where = f" in {preemption.domain}" if preemption.domain else ""
    parts = []
    if requeued:
        parts.append(f"requeued {len(requeued)} lower-priority group(s) whole ({', '.join(requeued)})")
    if evicted:
        parts.append(f"evicted {evicted} lower-priority pod(s)")
    summary = f"preempting{where}: " + "; ".join(parts) if parts else f"preempting{where}"
    actions.append(PostEvent(preemptor_job.ref, "Normal", "Preempting", summary))
    actions.append(PostEvent(preemptor.ref, "Normal", "Preempting", summary))
    reservation = Reservation(
        domain=preemption.domain,
        nodes=[node for _, node in preemption.admit.assignments],
        victims=list(preemption.victims),
        reserved_at=now,
        expires_at=now + dt.timedelta(seconds=RESERVATION_SECONDS),
    )
    return actions, reservation, summary


def reserved_usage(
    reservation: Reservation, pending: Sequence[PodRecord]
) -> list[tuple[str, Mapping[str, int]]]:
    """The room the reservation holds, as usage for `Snapshot.assume` (the group's pods on its nodes)."""
    usage: list[tuple[str, Mapping[str, int]]] = []
    for node, pod in zip(reservation.nodes, pending, strict=False):
        usage.append((node, pod.requests))
    return usage
