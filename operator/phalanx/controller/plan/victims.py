"""Preemption inside `plan()` (pure): who may be a victim, what a chosen preemption turns into, and the
reservation that holds the freed room for the preemptor until it is admitted.

The victim choice itself is the engine's (`placement.choose_victims`). Here: the candidates (every pod
holding capacity, with the unit it belongs to), the actions (a victim unit taken whole is requeued the way
its owner is — a Job suspended, then resumed once its pods are gone, so the Job controller counts no
failure and applies no backoff; a partial victim or a pod Phalanx does not manage is evicted through the
Eviction API), the events, and the reservation written on the preemptor's PodGroup status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from phalanx.api.status import Reservation
from phalanx.controller.kinds.base import Owner, Unit
from phalanx.controller.model.actions import Action, DeletePod, EvictPod, PostEvent
from phalanx.controller.model.kueue import KueueIndex
from phalanx.controller.model.records import CompositePodGroupRecord, PodGroupRecord, PodRecord
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.plan.status import PREEMPTED_PREFIX
from phalanx.placement import Candidate, CompositeAdmit, CompositePreemption, Preemption, VictimGroup

RESERVATION_SECONDS = 120.0  # how long freed room is held for a preemptor that is not admitted
EVICTION_REASON = "PreemptionByPhalanx"


@dataclass(frozen=True)
class VictimUnit:
    """A unit that may lose pods to preemption: one with an owner that can take it back whole (a sliced
    Job is one victim, taken whole or not at all: evicting a pod of one slice would break the tree)."""

    owner: Owner
    group: ObjectRef  # the group that holds the unit's decision (its PodGroup, or its CompositePodGroup)
    min_count: int
    whole_only: bool  # a tree, or disruptionMode all
    # May lose pods one by one (within its minCount): losing them cannot fail its owner (kinds/job_budget.py);
    # else it is taken whole or not at all, and priced so.
    partial: bool = True
    requeue_pods: tuple[str, ...] = ()  # Unit.requeue_pods: deleting these takes the whole unit


def victim_units(units: Iterable[Unit]) -> dict[str, VictimUnit]:
    """Pod key -> the victim unit it belongs to, for every owned unit with groups."""
    out: dict[str, VictimUnit] = {}
    for unit in units:
        if unit.owner is None or unit.tree is None:
            continue
        holder = unit.tree.holder
        if isinstance(holder, PodGroupRecord):
            min_count = holder.gang_min_count or 1
            victim = VictimUnit(
                unit.owner,
                holder.ref,
                min_count,
                holder.spec.disruption_mode.all is not None,
                partial=_within_budget(unit, min_count),
                requeue_pods=unit.requeue_pods,
            )
        else:
            victim = VictimUnit(unit.owner, holder.ref, 1, True, requeue_pods=unit.requeue_pods)
        for leaf in unit.tree.leaves:
            for pod in leaf.pods:
                out[pod.key] = victim
    return out


def _within_budget(unit: Unit, min_count: int) -> bool:
    """Whether the most pods a `single` victim may lose (its running pods beyond minCount) stay within its
    owner's failure budget."""
    assert unit.owner is not None and unit.tree is not None
    budget = unit.owner.failure_budget
    if budget is None:
        return True
    running = sum(1 for leaf in unit.tree.leaves for p in leaf.pods if p.usage_node and not p.deleting)
    return budget >= running - min_count


@dataclass
class Victims:
    """Every pod that holds capacity, as a possible victim, and the units they belong to.

    Built at most once per pass, and only when some unit needs to preempt: the pods' units too (a pass
    that preempts nothing, most of them, does not walk every pod of every unit)."""

    pods: Mapping[str, PodRecord]
    units: Sequence[Unit]
    unevictable: frozenset[str] = frozenset()
    kueue: KueueIndex | None = None  # Kueue's Workloads: whose quota each pod uses (plan/kueue.py)
    _by_group: dict[str, VictimUnit] = field(default_factory=dict)

    @cached_property
    def units_by_pod(self) -> Mapping[str, VictimUnit]:
        """Pod key -> the victim unit it belongs to (victim_units)."""
        return victim_units(self.units)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:
        out = []
        for pod in self.pods.values():
            node = pod.usage_node
            if not node or pod.deleting:
                continue  # holds no capacity, or is going already
            owner = self.units_by_pod.get(pod.key)
            if pod.pod_group and owner is None:
                # A pod in a PodGroup whose unit this pass does not know: made by hand into it (nothing
                # would recreate it; such groups are never preempted, docs/design.md), or a gang's whose
                # units could not be made (kinds/common.owner_units_of). Evicting it alone would leave its
                # gang partial. (An owner's pods without a Job, an LWS group's, carry the label too: their
                # unit is a victim.)
                continue
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
    def lowest_priority(self) -> int | None:
        """The lowest priority of any candidate (None: none runs). A unit at or below it has nothing to
        take: the engine takes only pods of a lower priority than the preemptor's (a group only if all its
        pods are), so its search is not made (gangs of one priority waiting under contention: each of them
        built the victim pool of every running pod, in every pass). Read from the pods that hold capacity,
        which the candidates are some of: a bound as good, without making them."""
        return min((p.priority for p in self.pods.values() if p.usage_node and not p.deleting), default=None)

    @cached_property
    def groups(self) -> tuple[VictimGroup, ...]:
        for unit in self.units_by_pod.values():
            self._by_group[unit.group.key] = unit
        return tuple(
            VictimGroup(
                key=key,
                min_count=u.min_count,
                disruption="all" if u.whole_only else "single",
                partial=u.partial,
            )
            for key, u in sorted(self._by_group.items())
        )

    def unit(self, group_key: str) -> VictimUnit | None:
        _ = self.groups  # fills the index
        return self._by_group.get(group_key)


def reservation_active(
    reservation: Reservation | None, pods: Mapping[str, PodRecord], now: dt.datetime
) -> bool:
    """Room is still being freed: not expired, and some victim is still there (victims_left)."""
    if reservation is None or reservation.expires_at <= now:
        return False
    return bool(victims_left(reservation, pods))


def victims_left(reservation: Reservation, pods: Mapping[str, PodRecord]) -> list[str]:
    """The reservation's victims still there: terminating, or still holding their node. A reservation names
    its victims by namespace/name, and a pod made again under the same name since is not the victim: a
    LeaderWorkerSet group's StatefulSets make its pods again under their names at once, born gated (before,
    the preemptor waited for them, the room freed and held for nothing, until the reservation expired)."""
    left = []
    for key in reservation.victims:
        pod = pods.get(key)
        if pod is None or (pod.created is not None and pod.created > reservation.reserved_at):
            continue
        if pod.deleting or pod.usage_node:
            left.append(key)
    return left


def actuate(
    preemption: Preemption | CompositePreemption,
    preemptor: PodGroupRecord | CompositePodGroupRecord,
    victims: Victims,
    now: dt.datetime,
    nodes: Sequence[str] | None = None,
) -> tuple[list[Action], Reservation, str]:
    """The actions that free the room, the reservation to record, and a message for the status.

    `preemptor`: the group that records the reservation (a tree's root CompositePodGroup); `nodes`: where
    its pods go once the victims are gone, one per pod (default: the admission's, for a one-leaf unit)."""
    kind = preemptor.ref.kind.lower()
    why = f"{PREEMPTED_PREFIX}{kind} {preemptor.key} (priority {preemptor.spec.priority or 0})"
    said = f"Preempted by {kind} {preemptor.key}"
    actions: list[Action] = []
    requeued: list[str] = []
    for key in preemption.whole_groups:
        unit = victims.unit(key)
        if unit is None:
            continue
        if unit.owner.requeue == "delete-pods":  # no suspend (a LeaderWorkerSet group): its pods go
            members = [k for k, u in victims.units_by_pod.items() if u.group.key == key and k in victims.pods]
            through = [k for k in members if k in unit.requeue_pods]  # they take the rest (an LWS leader)
            actions.extend(
                DeletePod(victims.pods[k].ref, why, "preempted", bool(through))
                for k in sorted(through or members)
            )
        else:
            actions.append(unit.owner.take_back(why, "preempted"))
        actions.append(PostEvent(unit.owner.ref, "Warning", "Preempted", said))
        actions.append(PostEvent(unit.group, "Warning", "Preempted", said))
        # The requeue's one Warning (its Requeued condition posts none: report.announce), as requeue.py says
        # it on a unit it takes back itself.
        actions.append(PostEvent(unit.owner.ref, "Warning", "Requeued", why))
        actions.append(PostEvent(unit.group, "Warning", "Requeued", why))
        requeued.append(key)
    whole = set(preemption.whole_groups)
    message = f"phalanx: preempting to make room for {kind} {preemptor.key}"
    evicted = 0
    for pod_id in preemption.victims:
        pod = victims.pods.get(pod_id)
        if pod is None:
            continue
        owner = victims.units_by_pod.get(pod.key)
        if owner is not None and owner.group.key in whole:
            continue  # the owner's requeue takes its pods
        actions.append(EvictPod(pod.ref, EVICTION_REASON, message))
        evicted += 1
        target = owner.owner.ref if owner is not None else pod.ref
        actions.append(PostEvent(target, "Warning", "Preempted", said))
    where = f" in {preemption.domain}" if preemption.domain else ""
    parts = []
    if requeued:
        parts.append(f"requeued {len(requeued)} lower-priority group(s) whole ({', '.join(requeued)})")
    if evicted:
        parts.append(f"evicted {evicted} lower-priority pod(s)")
    summary = f"preempting{where}: " + "; ".join(parts) if parts else f"preempting{where}"
    actions.append(PostEvent(preemptor.ref, "Normal", "Preempting", summary))  # said on its owner too
    reservation = Reservation(
        domain=preemption.domain,
        nodes=list(nodes) if nodes is not None else [node for _, node in _assignments(preemption)],
        victims=list(preemption.victims),
        reserved_at=now,
        expires_at=now + dt.timedelta(seconds=RESERVATION_SECONDS),
    )
    return actions, reservation, summary


def _assignments(preemption: Preemption | CompositePreemption) -> list[tuple[str, str]]:
    admit = preemption.admit
    if isinstance(admit, CompositeAdmit):
        return [pair for _, leaf in admit.admits for pair in leaf.assignments]
    return list(admit.assignments)


def reserved_usage(
    reservation: Reservation, pending: Sequence[PodRecord]
) -> list[tuple[str, Mapping[str, int]]]:
    """The room the reservation holds, as usage for `Snapshot.assume` (the group's pods on its nodes)."""
    return [(node, pod.requests) for node, pod in zip(reservation.nodes, pending, strict=False)]
