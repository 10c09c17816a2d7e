"""Telling the truth about a unit after it was scheduled (pure): each group's status (conditions, counters,
the decision), written when its state changes and its numbers alone at most every st.REFRESH_SECONDS; one
event whenever the reason or message of its `Admitted` condition is written changed (but for waiting for its
pods, which the condition alone says); every event about the unit's holder group said on its owner too; and
each waiting pod labelled with its group (once its gang waits for more than the rest of its pods)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from phalanx.api import conditions as c
from phalanx.api.naming import pod_group_label_value
from phalanx.api.status import GroupStatus
from phalanx.controller.model.actions import (
    Action,
    EventType,
    LabelPod,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
)
from phalanx.controller.model.records import CompositePodGroupRecord
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.plan import status as st
from phalanx.controller.plan.staging import held_now, slots_to_come
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork

# reasons said as Warning events
WARN = (c.REASON_UNSCHEDULABLE, c.REASON_PRIORITY_CLASS_NOT_FOUND, c.REASON_QUOTA_EXCEEDED)


# reasons said by the condition alone: waiting for the owner's pods is every gang's first state, over in
# well under a second as its controller makes them; an event for it (on the group and on its owner) was two
# of a gang's ~17 writes and told nothing the condition does not. Its end (admitted, or why not) is said.
# Finished: the owner's own controller says it (the Job controller's Completed, JobSet's, ...); two more
# events per gang, on the group and on the owner, said nothing new.
QUIET = (c.REASON_WAITING_FOR_PODS, c.REASON_FINISHED)

# Seconds a gang may wait for the rest of its pods before the ones it has are labelled with its PodGroup one
# by one. A gang whose controller makes its pods in slow-start batches (the Job controller: 1, 2, 4, ...)
# spends a pass or two waiting for them: a label write per pod then, and its release a moment later, was two
# writes per pod where the release alone carries the label (171 extra writes for 100 8-pod gangs at 1,000
# nodes). A gang that keeps waiting for its pods (a quota, a missing PriorityClass) is labelled at the first
# pass past this (one runs at least every --resync-seconds); one waiting for room, at once: `phalanx
# explain` finds one gang of an owner that has several (a LeaderWorkerSet's groups) by that label.
LABEL_WAITING_FOR_PODS_AFTER = 5.0


def announce(ref: ObjectRef, before: GroupStatus, after: GroupStatus) -> list[Action]:
    """An event whenever the reason or message of Admitted changes (an admission has its own), but for the
    QUIET reasons."""
    old, new = before.condition(c.ADMITTED), after.condition(c.ADMITTED)
    if new is None or new.reason in (c.REASON_ADMITTED, c.REASON_REQUEUED, *QUIET):
        return []  # an admission, and a requeue (its Warning says why, once: requeue.py), have their own
    if old is not None and (old.reason, old.message) == (new.reason, new.message):
        return []
    type_: EventType = "Warning" if new.reason in WARN else "Normal"
    return [PostEvent(ref, type_, new.reason, new.message)]


def report(work: UnitWork, ctx: Pass) -> None:
    """Statuses, events and labels of every group of the unit, appended to its actions."""
    held = {name: held_now(work, leaf, ctx) for name, leaf in work.leaves.items()}  # once a pass
    to_come = {name: slots_to_come(leaf, held[name], ctx) for name, leaf in work.leaves.items()}
    if any(held.values()):
        work.timed = True  # the room others leave on its slots' nodes is read: never skipped as settled
    gone = {name: len(held[name]) - to_come[name] for name in work.leaves}
    for name, leaf in work.leaves.items():
        _leaf_status(work, leaf, bool(held[name]), to_come[name], gone[name], ctx)
    if work.root is not None:
        for composite in work.unit.tree.composites if work.unit.tree else ():
            _composite_status(work, composite, to_come, gone, ctx)
    _labels(work)
    _said_on_owner(work)


def _ran_to_the_end(work: UnitWork, leaf: LeafWork) -> bool:
    """Its pods ran to completion (a JobSet's child Job that succeeded), or, of a one-leaf unit, every
    completion its owner needs has succeeded and no pod of it is placed: finished, before its owner's
    controller says so (the Job controller writes Complete a pass or two later). Said once, then: not
    "waiting for its pods" in between, and the owner's Complete changes nothing more."""
    owner = work.owner
    if leaf.done:
        return True
    return (
        owner is not None
        and owner.remaining == 0
        and not leaf.placed
        and not leaf.released_now
        and any(p.succeeded for p in leaf.leaf.pods)
    )


def _facts(work: UnitWork, leaf: LeafWork, to_come: int, room_gone: int) -> st.GroupFacts:
    owner = work.owner
    ended = _ran_to_the_end(work, leaf)
    return st.GroupFacts(
        gang=leaf.gang,
        min_count=leaf.min_count,
        scheduled=sum(1 for p in leaf.placed if p.bound),
        released=sum(1 for p in leaf.placed if not p.bound) + leaf.released_now,
        waiting=len(leaf.waiting) - leaf.released_now - leaf.ungated,
        domain=leaf.domain,
        suspended=owner.suspended if owner else False,
        finished=(owner.finished if owner else False) or ended,
        held=owner is None or owner.gated_template or not leaf.gang,
        finished_how=owner.finished_how if owner and owner.finished else "succeeded" if ended else "",
        requeued=owner.requeued if owner else "",
        note=st.climbed_note(leaf.admission, leaf.group.topology_key),
        # A leaf done before its owner (a JobSet's child Job that succeeded) says so of itself.
        owner_kind=owner.kind if owner and (owner.finished or not leaf.done) else "child Job",
        held_by=owner.held_by if owner else "",
        succeeded=sum(1 for p in leaf.leaf.pods if p.succeeded),
        to_come=to_come,
        room_gone=room_gone,
    )


def _leaf_status(
    work: UnitWork, leaf: LeafWork, slots_held: bool, to_come: int, room_gone: int, ctx: Pass
) -> None:
    """`slots_held`, `to_come`, `room_gone`: whether it holds slots, how many of them count as admitted and
    how many no longer have their room (staging.py)."""
    group, owner = leaf.group, work.owner
    admission = leaf.admission
    if owner is not None and (owner.suspended or owner.finished or _ran_to_the_end(work, leaf)):
        admission, to_come, room_gone = None, 0, 0  # nothing is held for a suspended or finished owner
    elif not leaf.holds_a_node and not slots_held:
        admission = None  # the decision's pods are gone; the next one starts afresh
    facts = _facts(work, leaf, to_come, room_gone)
    desired = st.desired_status(
        group.status, facts, leaf.outcome, ctx.now, group.generation, admission, leaf.reservation
    )
    _write_status(work, group.ref, group.status, desired, ctx, group.created)
    present = desired.condition(c.ADMITTED)
    leaf.label_waiting = not (
        present is not None
        and present.reason == c.REASON_WAITING_FOR_PODS
        and (ctx.now - present.last_transition_time).total_seconds() < LABEL_WAITING_FOR_PODS_AFTER
    )
    if facts.gang and facts.waiting and present is not None and present.reason != c.REASON_ADMITTED:
        ctx.waiting[present.reason] += 1
        waited = (ctx.now - present.last_transition_time).total_seconds()
        ctx.longest_wait = max(ctx.longest_wait, waited)


def _placed(leaf: LeafWork, to_come: Mapping[str, int]) -> tuple[bool, bool]:
    """(placed: its minCount holds a node, was released now or has its room held to come
    (staging.slots_to_come), running: its minCount is bound); a leaf whose pods ran to completion counts
    as both."""
    if leaf.done:
        return True, True
    bound = sum(1 for p in leaf.placed if p.bound)
    placed = len(leaf.placed) + leaf.released_now + to_come[leaf.group.name]
    return placed >= leaf.min_count, bound >= leaf.min_count


def _subtree_placed(
    work: UnitWork, g: CompositePodGroupRecord, to_come: Mapping[str, int]
) -> tuple[bool, bool]:
    composites, leaves = work.children(g.name)
    states = [_placed(leaf, to_come) for leaf in leaves] + [
        _subtree_placed(work, child, to_come) for child in composites
    ]
    need = g.min_group_count or 1
    return sum(1 for p, _ in states if p) >= need, sum(1 for _, r in states if r) >= need


def _gone_under(work: UnitWork, g: CompositePodGroupRecord, gone: Mapping[str, int]) -> int:
    """The held slots under `g` whose room is gone."""
    composites, leaves = work.children(g.name)
    return sum(gone[leaf.group.name] for leaf in leaves) + sum(_gone_under(work, c, gone) for c in composites)


def _composite_status(
    work: UnitWork,
    composite: CompositePodGroupRecord,
    to_come: Mapping[str, int],
    gone: Mapping[str, int],
    ctx: Pass,
) -> None:
    owner, root = work.owner, work.root
    composites, leaves = work.children(composite.name)
    states = [_placed(leaf, to_come) for leaf in leaves] + [
        _subtree_placed(work, g, to_come) for g in composites
    ]
    running = sum(1 for _, r in states if r)
    placed = sum(1 for p, _ in states if p)
    is_root = composite is root
    facts = st.GroupFacts(
        gang=composite.min_group_count is not None,
        min_count=composite.min_group_count or 1,
        scheduled=running,
        released=placed - running,
        waiting=len(states) - placed,
        domain=work.domain if is_root else None,
        suspended=owner.suspended if owner else False,
        finished=owner.finished if owner else False,
        finished_how=owner.finished_how if owner else "",
        requeued=owner.requeued if owner else "",
        members="child group(s)",
        owner_kind=owner.kind if owner else "Job",
        held_by=owner.held_by if owner else "",
        room_gone=_gone_under(work, composite, gone),
    )
    # The tree's decision stays while a child group is placed, or while any pod of it still holds a node,
    # as a PodGroup keeps its own (_leaf_status): a tree whose every child group lost a pod (a JobSet of
    # one child Job after a node failure) still runs where it says, and is completed or requeued there.
    holds = any(leaf.holds_a_node for leaf in work.leaves.values())
    admission = work.admission if is_root and (placed or holds) else None
    desired = st.desired_status(
        composite.status,
        facts,
        work.outcome if is_root else None,
        ctx.now,
        composite.generation,
        admission,
        work.reservation if is_root else None,
        initial_type=c.COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
    )
    _write_status(work, composite.ref, composite.status, desired, ctx, composite.created)


def _write_status(
    work: UnitWork,
    ref: ObjectRef,
    current: GroupStatus,
    desired: GroupStatus,
    ctx: Pass,
    created: dt.datetime | None,
) -> None:
    """The group's new status, if it changed: folded into the decision this pass records, else its own write
    (but for counters alone while its pods come or bind: st.settling); an event if its Admitted changed.
    New words for why it waits alone wait for st.REFRESH_SECONDS since its last write (st.refreshing); a new
    group's first "waiting for its pods", for st.SETTLE_SECONDS of its life (st.first_wait)."""
    if not st.status_changed(current, desired):
        return
    if st.first_wait(current, desired, ctx.now, created) or st.refreshing(
        current, desired, ctx.now, ctx.reported.get(ref.kind_key)
    ):
        work.deferred = True  # written by a later pass (machine.settled)
        return
    if not _fold_into_record(work, ref, desired):
        if st.settling(current, desired, ctx.now):
            work.deferred = True
        else:
            work.actions.append(PatchStatus(ref, desired))
    work.actions.extend(announce(ref, current, desired))


def _fold_into_record(work: UnitWork, ref: ObjectRef, desired: GroupStatus) -> bool:
    """A group whose decision this pass records gets its whole status in that one write (recorded before
    any of its pods is released, as the decision alone was): one status write per admission, not two. The
    status says the pods are released while the releases are on their way; if the process dies between,
    the next pass finishes the recorded decision and the status becomes true."""
    for i, action in enumerate(work.actions):
        if (
            isinstance(action, RecordAdmission)
            and action.group == ref
            and action.admission == desired.admission
        ):
            work.actions[i] = dataclasses.replace(action, status=desired)
            return True
    return False


def _labels(work: UnitWork) -> None:
    """Every pod of an owner carries its PodGroup's name, also while it waits (a release sets it in the same
    request), but for the first LABEL_WAITING_FOR_PODS_AFTER seconds of waiting for the rest of its gang's
    pods. Pods of hand-made groups carry it already: that is how they join."""
    if work.owner is None:
        return
    released = {a.pod.key for a in work.actions if isinstance(a, ReleasePod)}
    for leaf in work.leaves.values():
        label = pod_group_label_value(leaf.group.name)
        work.actions.extend(
            LabelPod(p.ref, leaf.group.name)
            for p in (*(leaf.waiting if leaf.label_waiting else ()), *leaf.placed)
            if p.pod_group != label and p.key not in released
        )


def _said_on_owner(work: UnitWork) -> None:
    """What is said on the group that holds the unit's decision is said on its owner too (owner first)."""
    owner, tree = work.owner, work.unit.tree
    if owner is None or tree is None:
        return
    holder = tree.holder.ref
    out: list[Action] = []
    for action in work.actions:
        if isinstance(action, PostEvent) and action.involved == holder:
            out.append(PostEvent(owner.ref, action.type, action.reason, action.message))
        out.append(action)
    work.actions = out
