"""A one-leaf unit that does not fit now (pure): wait for room being freed for it, preempt, or just wait.

A unit whose owner, PodGroup or pods (their PriorityClass's policy) say Never only waits. Otherwise the
engine chooses the cheapest victims (`choose_victims`); the room they free is reserved for the preemptor
(`status.reservation`), and every later unit of the pass sees it taken.
"""

from __future__ import annotations

import time

from phalanx.api import conditions as c
from phalanx.api.scheduling import PREEMPT_NEVER
from phalanx.controller.plan import status as st
from phalanx.controller.plan.kueue import allowed_candidates, waits_for_evictions
from phalanx.controller.plan.victims import actuate, reservation_active, reserved_usage
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork
from phalanx.placement import GroupRequest, admitted_usage, choose_victims


def may_preempt(work: UnitWork, leaf: LeafWork) -> bool:
    """Not if its owner, its PodGroup or any of its pods (from their PriorityClass) say Never."""
    owner = work.owner
    if owner is None or owner.preemption_never or leaf.group.spec.preemption_policy == PREEMPT_NEVER:
        return False
    return not any(p.never_preempts for p in leaf.waiting)


def wait_or_preempt(
    work: UnitWork, leaf: LeafWork, request: GroupRequest, rejected: str, ctx: Pass
) -> st.Outcome:
    """The outcome of a gang that does not fit now; a reservation it holds is kept on `leaf`."""
    current = leaf.group.status.reservation
    if reservation_active(current, ctx.victims.pods, ctx.now):
        assert current is not None
        left = [v for v in current.victims if v in ctx.victims.pods]
        # Nobody else may be admitted into the room: later units of this pass see it taken.
        ctx.snapshot = ctx.snapshot.assume(reserved_usage(current, leaf.ready))
        where = f" in {current.domain}" if current.domain else ""
        leaf.reservation = current
        return st.Outcome(
            c.REASON_PREEMPTING,
            f"waiting for {len(left)} preempted pod(s) to terminate{where}; the room they free is "
            f"reserved for this group until {current.expires_at.strftime('%H:%M:%SZ')}",
        )
    if (freeing_room := waits_for_evictions(work, request, ctx)) is not None:
        return freeing_room
    if not may_preempt(work, leaf):
        return st.Outcome(
            c.REASON_UNSCHEDULABLE,
            rejected + "; it does not preempt (preemptionPolicy Never) and waits for room",
        )
    started = time.perf_counter()
    preemption = choose_victims(
        ctx.snapshot,
        request,
        work.unit.priority,
        allowed_candidates(work.owner, ctx.victims),  # Kueue's queues (plan/kueue.py)
        ctx.victims.groups,
        excluded_pods=ctx.victims.unevictable,
    )
    ctx.decision_seconds.append(time.perf_counter() - started)
    if preemption is None:
        return st.Outcome(c.REASON_UNSCHEDULABLE, rejected)
    assert work.owner is not None
    freeing, reservation, summary = actuate(preemption, leaf.group, ctx.victims, ctx.now)
    work.actions.extend(freeing)
    work.preempted += len(preemption.victims)
    ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, preemption.admit))
    leaf.reservation = reservation
    return st.Outcome(c.REASON_PREEMPTING, summary)
