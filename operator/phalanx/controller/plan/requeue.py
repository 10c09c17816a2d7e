"""Taking a unit back whole (pure): released pods kube-scheduler refuses to bind, and a running unit left
short of its min counts whose missing pods no longer fit in its domains. Either way the owner is requeued
the way its kind says (a Job is suspended, then resumed once its pods are gone, and its new pods wait for a
whole placement again); a gang short only because its owner was scaled up is not broken (its new pods
wait beside the running ones). A unit without an owner (hand-made groups) is requeued by deleting its pods
that hold nodes: those another controller made come back (gated, if their template says so) and are placed
whole again; pods made by hand are gone — but a gang that lost a member for good, or whose released pods
can never bind, only held nodes for nothing. Whatever deletes the pods also drops the recorded decision, so
pods made again under the same names (a StatefulSet's, a LeaderWorkerSet's) are decided afresh, not
released where it said."""

from __future__ import annotations

from phalanx.api import conditions as c
from phalanx.api.keys import ON_SCALE_UP_ANNOTATION
from phalanx.controller.model.actions import DeletePod, PostEvent, RequeueCause
from phalanx.controller.plan import status as st
from phalanx.controller.plan.staging import slot_of
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork

REQUEUED_BELOW_MIN_COUNT = "below its minCount"  # the requeue note of a gang that lost pods
REQUEUED_UNBINDABLE = "released but not bound"  # the requeue note of a release kube-scheduler refused
REQUEUED_RELEASED_IN_PART = "released in part"  # the requeue note of a decision whose releases did not land
ON_SCALE_UP = f"{ON_SCALE_UP_ANNOTATION}: requeue"
REQUEUED_SCALED_UP = "scaled up"  # the requeue note of a scale-up the owner asked to be placed whole


def stranded(work: UnitWork, ctx: Pass) -> str | None:
    """Pods Phalanx released that kube-scheduler refuses to bind (their node filled up, was tainted or went
    away between the decision and the binding), or that no scheduler bound within `ctx.bind_timeout` of
    the decision (another scheduler's pods, a scheduler that is down): never leave them Pending behind a
    stale nodeSelector."""
    owner = work.owner
    if owner is not None and owner.requeued:
        return None
    refused = [p for leaf in work.leaves.values() for p in leaf.placed if p.released and p.unschedulable]
    if refused:
        first = refused[0]
        return (
            f"{REQUEUED_UNBINDABLE}: {len(refused)} released pod(s) cannot be bound where Phalanx placed "
            f"them ({first.name} on {first.node_selector_host}: {first.unschedulable})"
        )
    return _unbound_too_long(work, ctx)


def released_in_part(work: UnitWork, ctx: Pass) -> str | None:
    """Some pods of a recorded decision were released (kube-scheduler binds them at once) while releasing
    the others keeps failing (the API gives no answer for them, or refuses the patch): the gang runs split.
    No release of several pods is atomic (each pod's gate is its own), so the window cannot be closed, only
    bounded: once a pod the decision names has been waiting `ctx.bind_timeout` for its release (from the
    decision, or from its own creation if it came later) and the unit's last apply failed, the unit is
    requeued whole. Not while its releases may still land: a unit whose last apply did not fail (a process
    that restarted after a crash between releases) finishes its decision first (step 7), which makes the
    gang whole at once."""
    decided = work.unit.tree.holder.status.admission if work.unit.tree is not None else None
    if (
        decided is None
        or work.unit.key not in ctx.failing
        or (work.owner is not None and work.owner.requeued)
    ):
        return None
    if decided.scaled_up:
        return None  # its running pods were the whole gang before a scale-up: the new pods wait (grown)
    released = [p for leaf in work.leaves.values() for p in leaf.placed]
    if not released:
        return None  # nothing runs: the gang is not split, its release is only late
    nodes = {a.pod: a.node for a in decided.assignments}
    pending = [
        (p, node)
        for leaf in work.leaves.values()
        for p in leaf.ready
        if (node := nodes.get(p.name) or nodes.get(slot_of(leaf, p), ""))
        and ctx.over(ctx.bind_timeout, max(decided.admitted_at, p.created or decided.admitted_at), work)
    ]
    if not pending:
        return None
    first, node = pending[0]
    return (
        f"{REQUEUED_RELEASED_IN_PART}: {len(pending)} pod(s) of the recorded decision could not be released "
        f"within {ctx.bind_timeout:.0f} s while {len(released)} of its pods run ({first.name} to {node}: "
        "still gated, the unit's writes failing); requeued whole so that the gang does not run split"
    )


def _unbound_too_long(work: UnitWork, ctx: Pass) -> str | None:
    assert work.unit.tree is not None
    decided = work.unit.tree.holder.status.admission
    if decided is None:
        return None
    # Each pod from when it could be released: the decision, or its own creation if it came later (a
    # staged unit's later pods go into their slots when they come, maybe long after the decision).
    unbound = [
        p
        for leaf in work.leaves.values()
        for p in leaf.placed
        if p.released
        and ctx.over(ctx.bind_timeout, max(decided.admitted_at, p.created or decided.admitted_at), work)
    ]
    if not unbound:
        return None
    first = unbound[0]
    by = f"schedulerName {first.scheduler_name!r}" if first.scheduler_name else "kube-scheduler"
    return (
        f"{REQUEUED_UNBINDABLE}: {len(unbound)} released pod(s) were not bound within "
        f"{ctx.bind_timeout:.0f} s of the decision ({first.name} on {first.node_selector_host}, to be "
        f"bound by {by})"
    )


def requeue(work: UnitWork, why: str, cause: RequeueCause) -> None:
    """Take the unit back whole through its owner (by deleting its pods when it has none, or when its kind
    has no suspend); every group of it says so."""
    owner, tree = work.owner, work.unit.tree
    assert tree is not None
    if owner is None or owner.requeue == "delete-pods":
        # The pods that hold nodes: a gated one holds nothing and is placed afresh with the rest (deleting
        # it would only cost its Job one more failure).
        pods = [
            p for leaf in tree.leaves for p in leaf.pods if not p.terminal and not p.deleting and p.usage_node
        ]
        through = [p for leaf in tree.leaves for p in leaf.pods if p.key in work.unit.requeue_pods]
        # Deleting these takes the rest (an LWS group's leader), in the foreground (DeletePod.foreground).
        work.actions.extend(DeletePod(p.ref, why, cause, bool(through)) for p in through or pods)
        work.admission = None  # the decision goes with its pods (the module docstring)
        for leaf in work.leaves.values():
            leaf.admission = None
    else:
        work.actions.append(owner.take_back(why, cause))
    work.actions.append(PostEvent(tree.holder.ref, "Warning", "Requeued", why))  # said on the owner too
    outcome = st.Outcome(c.REASON_REQUEUED, f"requeued by Phalanx: {why}")
    work.outcome = outcome
    for leaf in work.leaves.values():
        leaf.outcome = outcome


def grown(leaf: LeafWork) -> bool:
    """Short of its minCount only because its owner was scaled up: the pods placed are exactly those of
    its recorded decision (none was lost; a replacement placed since is recorded alone, so after a loss
    the two differ) and more pods came. The new pods join the domain when they fit, else wait; the
    running ones are never taken back for it (docs/reliability.md)."""
    admission = leaf.admission
    if admission is None or not admission.assignments or not leaf.waiting:
        return False
    return {a.pod for a in admission.assignments} == {p.name for p in leaf.placed}


def _requeue_scaled_up(work: UnitWork, leaf: LeafWork) -> None:
    """The owner asked (phalanx.dev/on-scale-up: requeue) that a scale-up which does not fit beside its
    running pods be placed again whole at the new size: at once, not after a grace period (nothing was
    lost, and waiting would not make the running pods' domain any larger)."""
    where = f" in {leaf.domain}" if leaf.domain else ""
    why = (
        f"{REQUEUED_SCALED_UP} to {leaf.min_count} pods: the {len(leaf.waiting)} new pod(s) do not fit "
        f"beside its {len(leaf.placed)} running pod(s){where}, and {ON_SCALE_UP} asks to place it again whole"
    )
    requeue(work, why, "scale-up")


def pods_cannot_come(work: UnitWork) -> str:
    """Why a running unit short of its min counts, with no pod waiting, will never get the missing ones
    ("" when they may still come): nothing makes them again (hand-made groups), or a ResourceQuota refuses
    its owner's controller the pods. Such a unit is requeued like one whose pods no longer fit."""
    if not work.placed or work.whole() or any(leaf.waiting for leaf in work.leaves.values()):
        return ""
    owner = work.owner
    if owner is None:
        return "nothing makes its lost pods again"
    if owner.pods_refused is not None:
        return f"a ResourceQuota refuses the {owner.kind} controller the missing pods"
    return ""


def requeue_if_broken(work: UnitWork, ctx: Pass, never_coming: str = "") -> None:
    """A running unit left short of its min counts (a node failed, its pods went) whose other pods no longer
    fit in its domains holds nodes for nothing: after the grace period (at once for disruptionMode all),
    requeue it whole so that it is placed again as a whole, possibly in another domain. `never_coming`: the
    missing pods will not come at all (pods_cannot_come): the grace counts from when it stopped being
    admitted, whatever it said since."""
    owner, tree = work.owner, work.unit.tree
    assert tree is not None
    placed = work.placed
    if not placed or (owner is not None and owner.requeued) or work.whole():
        return
    if work.single is not None and grown(work.single):
        if owner is not None and owner.requeue_on_scale_up:
            _requeue_scaled_up(work, work.single)
        return  # scaled up: the new pods wait for room beside the running ones, which keep running
    # The grace counts from when the running unit went short: the pass that saw it so wrote Admitted False
    # (WaitingForPods while no pod of it waits: a Job controller backs off 10 s, 20 s, ... before making a
    # lost pod again; Unschedulable once one waits and does not fit), and the condition keeps that time
    # while it stays False. Counting from the replacement's refusal instead let a gang run in part for the
    # backoff plus the grace, plus a resync for the refusal to be written first.
    admitted = tree.holder.status.condition(c.ADMITTED)
    since = ctx.now
    counted = admitted is not None and admitted.status == c.FALSE
    went_short = (c.REASON_UNSCHEDULABLE, c.REASON_WAITING_FOR_PODS)
    if admitted is not None and counted and (never_coming or admitted.reason in went_short):
        since = admitted.last_transition_time
    waited = (ctx.now - since).total_seconds()
    at_once = owner.disruption_all if owner is not None else tree.holder.spec.disruption_mode.all is not None
    if not at_once and not ctx.over(ctx.node_failure_grace, since, work):
        return
    single = work.single
    if single is not None:
        where = f" in {single.domain}" if single.domain else ""
        why = (
            f"{REQUEUED_BELOW_MIN_COUNT}: {placed} of its {single.min_count} pods were left{where} "
            f"and {never_coming or 'the others no longer fit there'} (after {waited:.0f} s)"
        )
    else:
        short = [leaf.group.name for leaf in work.leaves.values() if not leaf.whole]
        missing = never_coming or "the missing pods no longer fit there"
        domain = work.domain or (work.admission.domain if work.admission is not None else None)
        where = f" in {domain}" if domain else ""
        why = (
            f"{REQUEUED_BELOW_MIN_COUNT}: {placed} pod(s) of the tree were left{where}, "
            f"{', '.join(short)} short of its minCount, and {missing} (after {waited:.0f} s)"
        )
    requeue(work, why, "below-min-count")
