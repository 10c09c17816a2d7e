"""A unit that does not fit now (pure): wait for room being freed for it, preempt, or wait — with room held
for it once it has waited too long (bounded waiting, starvation.py).

A unit whose owner, groups or pods (their PriorityClass's policy) say Never only waits. Otherwise the
engine chooses the cheapest victims: `choose_victims` for a one-leaf unit, `choose_composite_victims` for a
tree (a sliced Job, hand-made groups: every leaf in one domain of its key, the whole tree in one domain of
its root's). The room they free is reserved for the preemptor (`status.reservation` of its PodGroup, or of
its root CompositePodGroup for a tree), and every later unit of the pass sees it taken.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from phalanx.api import conditions as c
from phalanx.api.scheduling import PREEMPT_NEVER
from phalanx.api.status import Reservation
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan import status as st
from phalanx.controller.plan.kueue import allowed_candidates, waits_for_evictions
from phalanx.controller.plan.starvation import hold_room
from phalanx.controller.plan.victims import actuate, reservation_active, reserved_usage, victims_left
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork
from phalanx.placement import (
    CompositePreemption,
    CompositeRequest,
    GroupRequest,
    Preemption,
    admitted_usage,
    choose_composite_victims,
    choose_victims,
    composite_usage,
)


def may_preempt(work: UnitWork, leaf: LeafWork) -> bool:
    """Not if its owner, its PodGroup or any of its pods (from their PriorityClass) say Never."""
    owner = work.owner
    if owner is not None and owner.preemption_never:
        return False
    if leaf.group.spec.preemption_policy == PREEMPT_NEVER:
        return False
    return not any(p.never_preempts for p in leaf.waiting)


def _tree_may_preempt(work: UnitWork) -> bool:
    """A tree: not if its owner, any of its groups or any of its pods say Never."""
    assert work.unit.tree is not None
    if any(g.spec.preemption_policy == PREEMPT_NEVER for g in work.unit.tree.composites):
        return False
    return all(may_preempt(work, leaf) for leaf in work.leaves.values())


def wait_or_preempt(
    work: UnitWork, leaf: LeafWork, request: GroupRequest, rejected: str, ctx: Pass
) -> st.Outcome:
    """The outcome of a gang that does not fit now; a reservation it holds is kept on `leaf`."""
    current = leaf.group.status.reservation
    if (waits := _still_freeing(current, leaf.ready, "group", ctx)) is not None:
        leaf.reservation = current
        return waits
    if (freeing_room := waits_for_evictions(work, request, ctx)) is not None:
        return freeing_room
    if not may_preempt(work, leaf):
        waits = st.Outcome(
            c.REASON_UNSCHEDULABLE,
            rejected + "; it does not preempt (preemptionPolicy Never) and waits for room",
        )
        outcome, leaf.reservation = hold_room(leaf.group.status, request, waits, ctx)
        return outcome
    preemption = _search(choose_victims, request, work, ctx)
    if preemption is None:
        outcome, leaf.reservation = hold_room(
            leaf.group.status, request, st.Outcome(c.REASON_UNSCHEDULABLE, rejected), ctx
        )
        return outcome
    freeing, reservation, summary = actuate(preemption, leaf.group, ctx.victims, ctx.now)
    work.actions.extend(freeing)
    work.preempted += len(preemption.victims)
    ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, preemption.admit))
    leaf.reservation = reservation
    return st.Outcome(c.REASON_PREEMPTING, summary)


def tree_wait_or_preempt(work: UnitWork, request: CompositeRequest, ctx: Pass) -> None:
    """The same for a tree that does not fit now: its root and every leaf say what it waits for; a
    reservation it holds is kept on `work` (its root CompositePodGroup's status)."""
    root = work.root
    assert root is not None and work.outcome is not None
    pending = [p for leaf in work.leaves.values() for p in leaf.to_place]
    current = root.status.reservation
    if (waits := _still_freeing(current, pending, "tree", ctx)) is not None:
        work.reservation = current
        _tree_outcome(work, waits)
        return
    if _tree_may_preempt(work) and _tree_preempts(work, request, pending, ctx):
        return
    outcome, work.reservation = hold_room(root.status, request, work.outcome, ctx)
    if work.reservation is not None:
        note = outcome.message.removeprefix(work.outcome.message)
        work.outcome = outcome
        for leaf in work.leaves.values():
            if leaf.outcome is not None and leaf.outcome.reason == c.REASON_UNSCHEDULABLE:
                leaf.outcome = dataclasses.replace(leaf.outcome, message=leaf.outcome.message + note)


def _tree_preempts(work: UnitWork, request: CompositeRequest, pending: list[PodRecord], ctx: Pass) -> bool:
    """Preempt for the tree if some victims make it fit: actions, reservation, outcomes; True if so."""
    root = work.root
    assert root is not None
    preemption = _search(choose_composite_victims, request, work, ctx)
    if preemption is None:
        return False
    placed = {pod: node for _, admit in preemption.admit.admits for pod, node in admit.assignments}
    nodes = [placed[p.key] for p in pending if p.key in placed]  # in the order of `pending`, as later read
    freeing, reservation, summary = actuate(preemption, root, ctx.victims, ctx.now, nodes)
    work.actions.extend(freeing)
    work.preempted += len(preemption.victims)
    ctx.snapshot = ctx.snapshot.assume(composite_usage(request, preemption.admit))
    work.reservation = reservation
    _tree_outcome(work, st.Outcome(c.REASON_PREEMPTING, summary))
    return True


def _tree_outcome(work: UnitWork, outcome: st.Outcome) -> None:
    work.outcome = outcome
    for leaf in work.leaves.values():
        leaf.outcome = outcome


def _still_freeing(
    current: Reservation | None, pending: Sequence[PodRecord], what: str, ctx: Pass
) -> st.Outcome | None:
    """While the victims of an earlier preemption terminate: the room they free stays the preemptor's
    (later units of this pass see it taken), and it says so. Also when a node of the reservation is gone
    from the cluster meanwhile (deleted): no new victims while earlier ones still terminate (upstream's
    rule too) — the room on the nodes left stays held, and the gang is placed again (or preempts again)
    once they are gone, rather than taking a second gang for the room the first is about to free."""
    if current is None or not reservation_active(current, ctx.victims.pods, ctx.now):
        return None
    left = victims_left(current, ctx.victims.pods)
    gone = sorted({node for node in current.nodes if ctx.snapshot.node_index(node) is None})
    usage = reserved_usage(current, pending)
    ctx.snapshot = ctx.snapshot.assume([(node, requests) for node, requests in usage if node not in gone])
    where = f" in {current.domain}" if current.domain else ""
    lost = f"; its node(s) {', '.join(gone)} went away: it is placed again once they are gone" if gone else ""
    return st.Outcome(
        c.REASON_PREEMPTING,
        f"waiting for {len(left)} preempted pod(s) to terminate{where}; the room they free is "
        f"reserved for this {what} until {current.expires_at.strftime('%H:%M:%SZ')}{lost}",
    )


_Found = TypeVar("_Found", Preemption, CompositePreemption)


def _search(
    choose: Callable[..., _Found | None], request: GroupRequest | CompositeRequest, work: UnitWork, ctx: Pass
) -> _Found | None:
    """The engine's victim search for the unit at its priority, timed for the metrics."""
    lowest = ctx.victims.lowest_priority
    if lowest is None or lowest >= work.unit.priority:
        return None  # no pod of a lower priority runs: the engine would find no victim
    started = time.perf_counter()
    found = choose(
        ctx.snapshot,
        request,
        work.unit.priority,
        allowed_candidates(work.owner, ctx.victims),  # Kueue's queues (plan/kueue.py)
        ctx.victims.groups,
        excluded_pods=ctx.victims.unevictable,
    )
    ctx.decision_seconds.append(time.perf_counter() - started)
    return found
