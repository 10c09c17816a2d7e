"""A running unit whose lost pods its controller has not made again yet (pure).

A unit short of its min counts is requeued whole when its missing pods no longer fit in its domains, after
the grace period (requeue.requeue_if_broken), but that was only found out once the missing pods existed and
were refused. The Job controller makes a failed pod again only after a backoff (10 s, then 20 s, 40 s, ...
for the same Job, up to 6 minutes), so a unit that lost pods a second or third time ran in part that long,
past the grace. So, once the grace since the unit went short is over (its Admitted condition went False
then), the pods still to come are tried as placeholders shaped like their template, beside its running pods
and with those that came already: when they would not fit, the unit is taken back whole now, as it would be
once they came. Only a unit that lost a pod of its recorded decision (not one scaled up: requeue.grown), and
not before the grace (a controller making a group's pods again, an LWS rollout, is never told anything); a
staged unit is left to its slots (staging.py), which hold the room of its pods to come.
"""

from __future__ import annotations

import dataclasses

from phalanx.api import conditions as c
from phalanx.api.cluster_objects import HOSTNAME_KEY
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan.decide import levels_of, pinned_keys, request_of, tree_request
from phalanx.controller.plan.requeue import requeue_if_broken
from phalanx.controller.plan.staging import hold_again, lift_own_hold, placeholder, slot_name, slots_of
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork
from phalanx.placement import Admit, CompositeAdmit, PodRequirements, decide, decide_composite


def requeue_if_lost_for_good(work: UnitWork, ctx: Pass) -> bool:
    """Requeue the unit (requeue_if_broken) if it runs short past the grace and its pods still to come would
    not fit; True when it was."""
    owner, tree = work.owner, work.unit.tree
    assert tree is not None
    if owner is None or owner.requeued or not work.placed or work.whole():
        return False
    if not _lost(work):
        return False
    work.timed = True  # the grace and the room decide its next plan: never skipped (machine.settled)
    if not _grace_over(work, ctx):
        return False
    short = [leaf for leaf in work.leaves.values() if not leaf.done and not leaf.enough]
    if not short or any(leaf.leaf.template is None and not leaf.placed for leaf in short):
        return False  # nothing missing to try, or nothing to shape it by: wait for the pods
    before = {leaf.group.name: leaf.virtual for leaf in short}
    for leaf in short:
        leaf.virtual = _to_come(work, leaf)
    lifted = lift_own_hold(work, ctx)  # a staged unit's held slots: placeholders of them are in the request
    try:
        fits = _fits(work, ctx)
    finally:
        for leaf in short:
            leaf.virtual = before[leaf.group.name]
        hold_again(work, lifted, ctx)
    if fits:
        return False
    requeue_if_broken(work, ctx)
    return work.outcome is not None and work.outcome.reason == c.REASON_REQUEUED


def _grace_over(work: UnitWork, ctx: Pass) -> bool:
    """The grace since the unit went short is over — also for a kind requeued at once once its missing pods
    are refused (disruptionMode all, a JobSet, an LWS group): until they exist, its controller may be making
    them again whole (a JobSet's failurePolicy restart deletes every child Job; their pods still hold their
    nodes while they terminate, so nothing would fit in that moment)."""
    assert work.unit.tree is not None
    admitted = work.unit.tree.holder.status.condition(c.ADMITTED)
    if admitted is None or admitted.status != c.FALSE or admitted.reason != c.REASON_WAITING_FOR_PODS:
        return False
    return ctx.over(ctx.node_failure_grace, admitted.last_transition_time, work)


def _lost(work: UnitWork) -> bool:
    """A pod its recorded decision names is gone (neither placed nor succeeded); a staged unit's slot is
    named instead of its pod, and counts as lost only once its stage came (module docstring)."""
    single = work.single
    recorded = single.admission if single is not None else work.admission
    if recorded is None:
        return False
    names = {a.pod for a in recorded.assignments}
    kept: set[str] = set()
    came: set[str] = set()  # the slots of stages that came
    started = False
    for leaf in reversed(work.leaves.values()):  # in the order its owner makes them (InOrder, dependsOn)
        there = [*leaf.placed, *(p for p in leaf.leaf.pods if p.succeeded)]
        slots = slots_of(leaf, there)
        kept |= {p.name for p in there} | slots
        # A pod in a slot of this leaf, or of a later one, exists — placed, ended, or being deleted (an LWS
        # worker stuck terminating on a NotReady node: its StatefulSet makes no other until it is gone) —,
        # or its owner made what makes its pods (a JobSet's child Job, whose pods may all be lost): the
        # stage of this leaf's slots came (an LWS group's first stage, its leader, is named by its own
        # name: it alone says nothing).
        started = started or leaf.leaf.made or bool(slots_of(leaf, leaf.leaf.pods) & names)
        if started:
            came |= {slot_name(leaf.group.name, r) for r in leaf.leaf.ranked_slots}
    slots_named = {
        slot_name(leaf.group.name, r) for leaf in work.leaves.values() for r in leaf.leaf.ranked_slots
    }
    return any(a not in kept and (a not in slots_named or a in came) for a in names)


def _to_come(work: UnitWork, leaf: LeafWork) -> tuple[PodRecord, ...]:
    """A placeholder for each pod its minCount still lacks, shaped like the leaf's template (a staged kind's)
    or, for kinds whose pods share one template (a Job's), like a pod of it that runs as it was made."""
    missing = leaf.min_count - len(leaf.placed) - len(leaf.ready)
    template = leaf.leaf.template
    if template is not None:
        shape = placeholder(leaf, template, "")
    else:
        sibling = leaf.placed[0]
        shape = dataclasses.replace(
            sibling,
            uid="",
            node_name="",
            gated=True,
            node_selector_host="",
            unschedulable="",
            created=None,
            requirements=_as_made(sibling, pinned_keys(work, leaf)),
        )
    return tuple(
        dataclasses.replace(shape, name=f"{leaf.group.name}-to-come-{i}") for i in range(max(0, missing))
    )


def _as_made(pod: PodRecord, keys: set[str]) -> PodRequirements:
    """A released pod's requirements without the pins its release added (decide.release_pairs): its node's
    name and its node's labels of the unit's topology keys. With them, a pod to come shaped like it would
    fit on that one node only, and a gang whose missing pod has room elsewhere in its domain would be
    requeued."""
    req = pod.requirements
    pins = {HOSTNAME_KEY, *keys}
    kept = tuple((k, v) for k, v in req.node_selector if k not in pins)
    return dataclasses.replace(req, node_selector=kept)


def _fits(work: UnitWork, ctx: Pass) -> bool:
    """Whether the unit's pods to come (and those waiting) fit beside its placed ones (the engine alone:
    nothing is recorded or assumed)."""
    assert work.unit.tree is not None
    single = work.single
    if single is None:
        return isinstance(decide_composite(ctx.snapshot, tree_request(work, ctx)), CompositeAdmit)
    key = single.group.topology_key
    request = request_of(single, levels_of([key], ctx.levels), mode=work.unit.tree.mode)
    return isinstance(decide(ctx.snapshot, request), Admit)
