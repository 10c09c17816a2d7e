"""plan/: one scheduling pass as a pure function — `plan(PlanInput, now) -> Plan` (no Kopf, no API client,
no aiohttp, no asyncio: the same input and time give the same actions).

    input.py       PlanInput (the units and the cluster, as the loop read them from the cache) and Plan
    machine.py     the one gang state machine: the named steps every unit goes through
    work.py        the working state of a pass (Pass) and of one unit (UnitWork, LeafWork)
    decide.py      the engine's answer turned into a recorded decision and releases, or why it waits
    preempt.py     a gang that does not fit: wait for freed room, preempt, or wait
    victims.py     who may be a victim, what a preemption turns into, the reservation
    starvation.py  bounded waiting: room held for a gang that waited too long behind later ones
    requeue.py     taking a unit back whole (unbindable releases, a broken running gang)
    quota.py       gangs whose pods a ResourceQuota refuses: said, and deadlocks on a quota broken
    staging.py     staged units (JobSet InOrder, LWS LeaderReady): decided whole, later pods into slots
    report.py      statuses, events (said on the owner too) and pod labels
    status.py      what a group's status should say (conditions, counters)
    topologies.py  Topologies' status

Units are scheduled in one list ordered by rule (`Unit.order`) — a decision released in part first, then
priority (highest first), then age (oldest first), then key — whatever their kind; each admission is
assumed into the snapshot, so a later unit cannot take its room.
"""

from __future__ import annotations

import datetime as dt
import traceback

from phalanx.controller.kinds.base import Unit
from phalanx.controller.model.actions import UnitPlan
from phalanx.controller.plan.input import Plan, PlanInput
from phalanx.controller.plan.machine import schedule
from phalanx.controller.plan.quota import deadlocked
from phalanx.controller.plan.staging import hold, hold_released_in_part
from phalanx.controller.plan.victims import Victims
from phalanx.controller.plan.work import Pass

__all__ = ["Plan", "PlanInput", "plan"]


def plan(state: PlanInput, now: dt.datetime, *, isolate: bool = False) -> Plan:
    """The actions of one pass, per unit, in the order units are scheduled. `isolate` (the loop's): a unit
    whose planning raises plans nothing and the pass goes on (Plan.failed) — an error met in one unit's
    records must not stop every other unit's admission; a test wants it raised."""
    units = [u for u in state.units if u.key not in state.backing_off]
    # Every unit, those backing off too: their pods are victims only with their unit (its minCount, its
    # disruption mode), never as loose pods whose eviction would leave a running gang short.
    victims = Victims(state.pods, state.units, state.unevictable, state.kueue)
    ctx = Pass(
        snapshot=state.snapshot,
        nodes=state.nodes,
        now=now,
        victims=victims,
        node_failure_grace=state.node_failure_grace,
        starvation_age=state.starvation_age,
        bind_timeout=state.bind_timeout,
        failing=state.failing,
        levels=state.levels,
        priority_classes=state.priority_classes,
        reported=state.reported,
    )
    # Gangs whose gated pods hold a quota others need; the backing-off too (the one to requeue may be one).
    ctx.quota_deadlocks = deadlocked(state.units)
    # Staged units' slots: their room is taken before any unit decides — of those backing off too (their
    # leaders run; a slot given away meanwhile would leave them short when their later pods come).
    hold(state.units, ctx)
    # A decision released in part whose unit backs off: its gated pods' room, until their release lands.
    hold_released_in_part([u for u in state.units if u.key in state.backing_off], ctx)
    skip = state.skip - ctx.quota_deadlocks.keys()
    plans = []
    failed: list[tuple[str, str]] | None = [] if isolate else None
    for unit in sorted(units, key=lambda u: u.order):
        if unit.key in skip and unit.tree is not None:
            ctx.settled.add(unit.key)  # settled and unchanged: it would plan nothing (loop/incremental.py)
        elif (p := _schedule(unit, ctx, failed)) is not None:
            plans.append(p)
    return Plan(
        tuple(plans),
        dict(ctx.waiting),
        tuple(ctx.decision_seconds),
        ctx.longest_wait,
        frozenset(ctx.settled),
        ctx.due,
        tuple(failed or ()),
    )


def _schedule(unit: Unit, ctx: Pass, failed: list[tuple[str, str]] | None) -> UnitPlan | None:
    """schedule(unit); with `failed`, an error is noted there instead of raised. Nothing the unit planned is
    applied then, so the room it assumed before the error is given back, and it is not settled (planned
    again next pass)."""
    if failed is None:
        return schedule(unit, ctx)
    snapshot = ctx.snapshot
    try:
        return schedule(unit, ctx)
    except Exception:
        ctx.snapshot = snapshot
        ctx.settled.discard(unit.key)
        failed.append((unit.key, traceback.format_exc()))
        return None
