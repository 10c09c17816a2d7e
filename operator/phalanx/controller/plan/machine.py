"""The one gang state machine: every unit — a Job's gang, a Job's slices, a hand-made tree — goes through
the same named steps, each rule written once. Pure.

For one unit, in this order (the first step that concludes ends placement for this pass):

1. *Held back*: its owner is suspended or finished — nothing is placed, nothing is held for it.
2. *Cannot have its pods*: its PriorityClass does not exist, or a ResourceQuota refuses them (and a
   deadlock of gangs on one quota is broken: quota.py), so its owner cannot create them.
3. *Basic*: a one-leaf basic group's pods are never held: ungated, kube-scheduler places them.
4. *Not held by us*: the owner was labelled after its creation (or its template lost the gate in an edit
   the webhooks did not see), its pods were born ungated.
5. *Stranded*: released pods kube-scheduler refuses to bind, or no scheduler binds in time, or a recorded
   decision released in part whose other releases keep failing past the bind timeout — the unit is
   requeued whole.
6. *Other gates*: pods still carry other controllers' scheduling gates while short of minCount.
7. *Finish a recorded decision*: gated pods a recorded decision names go where it says, if they still fit.
8. *Short of pods*: fewer pods exist than the min counts need — wait for them.
9. *Decide*: the engine places the whole unit — recorded, then released — or says why not; the unit then
   waits for room freed for it, or preempts (a tree too), or, once it has waited longer than
   `--starvation-age`, has the room it needs held for it (starvation.py); a broken running unit is requeued
   whole.

Then *status and events* (report.py) for every group of the unit, whatever the steps concluded.
"""

from __future__ import annotations

import dataclasses

from phalanx.api import conditions as c
from phalanx.api import keys
from phalanx.controller.kinds.base import Unit
from phalanx.controller.model.actions import UngatePod, UnitPlan
from phalanx.controller.plan import status as st
from phalanx.controller.plan.admitted import admitted_policy, waiting_since
from phalanx.controller.plan.decide import decide_leaf, decide_tree, finish
from phalanx.controller.plan.domains import present_domain
from phalanx.controller.plan.kueue import never_fits
from phalanx.controller.plan.lost import requeue_if_lost_for_good
from phalanx.controller.plan.preempt import tree_wait_or_preempt, wait_or_preempt
from phalanx.controller.plan.quota import quota_refused
from phalanx.controller.plan.report import report
from phalanx.controller.plan.requeue import (
    pods_cannot_come,
    released_in_part,
    requeue,
    requeue_if_broken,
    stranded,
)
from phalanx.controller.plan.staging import hold_again, lift_own_hold, placeholders, slots_held
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork, unit_work


def schedule(unit: Unit, ctx: Pass) -> UnitPlan | None:
    """The actions of one pass for one unit: setup, placement, status and events."""
    owner_ref = unit.owner.ref if unit.owner is not None else None
    if unit.tree is None:
        return UnitPlan(unit.key, unit.setup, owner_ref) if unit.setup else None
    work = unit_work(unit)
    _domains(work, ctx)
    place(work, ctx)
    never_fits(work, ctx)  # a gang Kueue admitted that no domain can ever hold says so (plan/kueue.py)
    report(work, ctx)
    if not work.actions:
        if settled(work):
            ctx.settled.add(unit.key)
        return None
    latency = None
    owner = unit.owner
    if work.released and work.first_admission and owner is not None and owner.created is not None:
        latency = max(0.0, (ctx.now - owner.created).total_seconds())
    admitted = admitted_policy(work)
    since = waiting_since(work) if admitted is not None else None
    return UnitPlan(
        unit.key, tuple(work.actions), owner_ref, work.released, latency, work.preempted, admitted, since
    )


def settled(work: UnitWork) -> bool:
    """A unit that planned nothing and whose next plan depends only on its own records and the nodes'
    and Topologies' (loop/incremental.py skips it until one of those changes): no status change held back
    for later, no pod waiting to be placed (the snapshot and the time decide those), none released and not
    yet bound (the bind timeout is a time). What is left of the steps for it reads its unit, the priority
    classes (in its unit's making), the nodes' labels (its domain) and the quota deadlocks (plan() never
    skips a unit that has one); the time only stamps a status that changed, and a change is an action."""
    return (
        not work.actions
        and not work.deferred
        and not work.timed
        and all(
            not leaf.waiting and not leaf.virtual and all(p.bound for p in leaf.placed)
            for leaf in work.leaves.values()
        )
    )


def _domains(work: UnitWork, ctx: Pass) -> None:
    """Where each leaf's pods are now: its recorded domain while pods are placed, else where they run."""
    owner = work.owner
    for leaf in work.leaves.values():
        key = leaf.group.topology_key
        if key:
            leaf.domain = present_domain(leaf, ctx.nodes, key)  # the decision's, or where the pods are
        recorded = leaf.admission
        if leaf.domain is None and recorded is not None and (leaf.placed or slots_held(work, leaf, ctx)):
            leaf.domain = recorded.domain  # no key of its own (its tree's), or only its slots so far
        if leaf.domain is None and owner is not None and owner.finished:
            leaf.domain = leaf.group.status.domain  # where it ran: its pods are gone, the answer stays


def _conclude(work: UnitWork, outcome: st.Outcome, leaves: list[LeafWork] | None = None) -> None:
    """The same outcome for the root and for each of `leaves` (every leaf by default)."""
    work.outcome = outcome
    for leaf in work.leaves.values() if leaves is None else leaves:
        leaf.outcome = outcome


def place(work: UnitWork, ctx: Pass) -> None:
    """Steps 1-9 (module docstring)."""
    owner, single = work.owner, work.single
    if owner is not None and (owner.suspended or owner.finished):
        return
    if (missing := _missing_priority_class(work, ctx)) is not None:
        _conclude(work, missing)
        return
    if quota_refused(work, ctx):
        return
    if single is not None and not single.gang:
        work.actions.extend(UngatePod(p.ref) for p in single.waiting)
        single.ungated = len(single.waiting)
        return
    if owner is not None and not owner.gated_template:
        _conclude(work, _not_gated(owner.kind))
        return
    if (why := stranded(work, ctx)) is not None:
        requeue(work, why, "unbindable")
        return
    if (why := released_in_part(work, ctx)) is not None:
        requeue(work, why, "released-in-part")
        return
    if not any(leaf.waiting for leaf in work.leaves.values()):
        if never_coming := pods_cannot_come(work):
            requeue_if_broken(work, ctx, never_coming)
        else:
            requeue_if_lost_for_good(work, ctx)  # its controller backs off: will they fit once they come?
        return
    if _blocked_by_gates(work) or finish(work, ctx):
        return
    placeholders(work)  # a staged unit is decided whole with its first stage (staging.py)
    if _short_of_pods(work):
        requeue_if_lost_for_good(work, ctx)  # some came, others not yet: will the rest fit?
        return
    lifted = lift_own_hold(work, ctx)
    if single is not None:
        _decide_single(work, single, ctx)
    elif (refused := decide_tree(work, ctx)) is not None:
        tree_wait_or_preempt(work, refused, ctx)
        if work.outcome is not None and work.outcome.reason == c.REASON_UNSCHEDULABLE:
            requeue_if_broken(work, ctx)
    if not work.decided:
        hold_again(work, lifted, ctx)  # not decided anew: its recorded slots stay held


def _decide_single(work: UnitWork, leaf: LeafWork, ctx: Pass) -> None:
    request, rejected, message = decide_leaf(work, leaf, ctx)
    if rejected is None:
        return
    outcome = wait_or_preempt(work, leaf, request, message, ctx)
    if outcome.reason == c.REASON_UNSCHEDULABLE:
        outcome = dataclasses.replace(outcome, upstream=rejected.message)
    leaf.outcome = work.outcome = outcome
    if outcome.reason == c.REASON_UNSCHEDULABLE:
        requeue_if_broken(work, ctx)


def _missing_priority_class(work: UnitWork, ctx: Pass) -> st.Outcome | None:
    """The owner's pods name a PriorityClass that does not exist, and pods are missing: the Priority
    admission plugin refuses every pod its controller creates, so they never come until it exists."""
    owner = work.owner
    if owner is None or not owner.priority_class or owner.priority_class in ctx.priority_classes:
        return None
    name = owner.priority_class
    if all(
        leaf.done or len(leaf.waiting) + len(leaf.placed) >= leaf.min_count for leaf in work.leaves.values()
    ):
        return None  # its pods exist (made before the class was deleted): nothing is missing yet
    return st.Outcome(
        c.REASON_PRIORITY_CLASS_NOT_FOUND,
        f"spec.template.spec.priorityClassName: PriorityClass {name!r} does not exist, so the {owner.kind} "
        "controller cannot create its pods (the Priority admission plugin refuses them); create the "
        f"PriorityClass or change the {owner.kind}",
    )


def _not_gated(kind: str) -> st.Outcome:
    """Its template lacks the gate: never gated (labelled late), or the gate taken off by an edit the
    webhooks did not see (they refuse or mend such an edit, but fail open while no replica answers)."""
    return st.Outcome(
        c.REASON_NOT_GATED,
        f"the {kind}'s pod template does not carry {keys.ADMISSION_GATE}: the {kind} was labelled "
        f"{keys.MANAGED_LABEL} after its creation, or the gate was taken off its template by an edit made "
        "while Phalanx's webhooks were not answering; so its pods are not held and Phalanx admits nothing "
        f"for it (kube-scheduler places them one by one); create the {kind} with the label, and keep the "
        "gate in its template, to gang-schedule it",
    )


def _blocked_by_gates(work: UnitWork) -> bool:
    """Leaves short of minCount while some of their pods still carry other controllers' gates wait for
    those: Phalanx admits a pod only when its gate is the last one."""
    blocked = [
        leaf for leaf in work.leaves.values() if not leaf.enough and len(leaf.ready) < len(leaf.waiting)
    ]
    if not blocked:
        return False
    for leaf in blocked:
        gates = sorted({g for p in leaf.waiting for g in p.other_gates})
        held = len(leaf.waiting) - len(leaf.ready)
        leaf.outcome = st.Outcome(
            c.REASON_WAITING_FOR_GATES,
            f"minCount ({leaf.min_count}) is not yet satisfied: {held} pod(s) still carry scheduling gates "
            f"of other controllers ({', '.join(gates)}); Phalanx admits a pod only when its gate is the last "
            "one",
        )
    if work.root is not None:
        work.outcome = st.Outcome(
            c.REASON_WAITING_FOR_GATES,
            "waiting for other controllers' scheduling gates on pods of "
            + ", ".join(leaf.group.name for leaf in blocked),
        )
    else:
        work.outcome = blocked[0].outcome
    return True


def _short_of_pods(work: UnitWork) -> bool:
    """Whether the unit cannot be placed yet for want of pods (each leaf at its minCount, each composite at
    its minGroupCount); each group short of pods says so."""
    owner = work.owner
    source = owner.pods_from if owner is not None else "more pods to join it"
    for leaf in work.leaves.values():
        if not leaf.enough:
            leaf.outcome = st.Outcome(
                c.REASON_WAITING_FOR_PODS,
                f"minCount ({leaf.min_count}) is not yet satisfied: {len(leaf.placed)} scheduled, "
                f"{len(leaf.waiting)} waiting; waiting for {source}",
            )
    root, single = work.root, work.single
    if single is not None:
        work.outcome = single.outcome
        return not single.enough
    assert root is not None
    if work.countable(root):
        for leaf in work.leaves.values():
            leaf.outcome = None  # optional children short of pods do not hold the tree back
        return False
    missing = [leaf.group.name for leaf in work.leaves.values() if not leaf.enough]
    work.outcome = st.Outcome(
        c.REASON_WAITING_FOR_PODS,
        f"minGroupCount ({root.min_group_count or 1}) is not yet satisfied: "
        f"waiting for pods of {', '.join(missing) or 'its child groups'}",
    )
    return True
