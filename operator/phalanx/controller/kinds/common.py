"""What every kind of owner does the same way before its unit is scheduled: its priority and preemption
policy, notes said once per change, and letting go of an owner that is no longer managed. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping

from phalanx.api import keys
from phalanx.api.group import API_VERSION, WORKLOAD_KIND
from phalanx.api.podgroup import PodGroupSpec
from phalanx.api.scheduling import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER, PreemptionPolicy
from phalanx.controller.kinds.base import ClusterView, Leaf, OwnerKind, OwnerRecord, OwnerState, Unit
from phalanx.controller.model.actions import (
    Action,
    DeleteObject,
    DeletePod,
    PostEvent,
    RememberAnnounced,
    UngatePod,
)
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.records import PodGroupRecord, PodRecord, PriorityClassRecord
from phalanx.controller.model.refs import ObjectRef

SPLIT_WHILE_DELETING = "SplitWhileDeleting"  # the event of a gang taken down while its owner is deleted


def priority_class_of(
    name: str | None, classes: Mapping[str, PriorityClassRecord]
) -> PriorityClassRecord | None:
    """The named PriorityClass, or the cluster's global default one when none is named (as the Priority
    admission plugin does for pods)."""
    if name:
        return classes.get(name)
    return next((c for c in classes.values() if c.global_default), None)


def preemption_policy_of(
    annotation: PreemptionPolicy | None, priority_class: PriorityClassRecord | None
) -> PreemptionPolicy:
    """The owner's annotation, else its PriorityClass's, else PreemptLowerPriority."""
    if annotation is not None:
        return annotation
    if priority_class is not None and priority_class.preemption_policy == PREEMPT_NEVER:
        return PREEMPT_NEVER
    return PREEMPT_LOWER_PRIORITY


def announce_once(
    announced: Mapping[str, str], owner: ObjectRef, what: str, reason: str, message: str
) -> list[Action]:
    """A Warning on the owner, once per distinct message (not once per pass)."""
    key = f"{owner.uid}/{what}"
    if announced.get(key) == message:
        return []
    return [PostEvent(owner, "Warning", reason, message), RememberAnnounced(key, message)]


def kept_gang_size(
    group: PodGroupRecord,
    made: PodGroupSpec,
    kind: str,
    owner: ObjectRef,
    announced: Mapping[str, str],
) -> tuple[PodGroupRecord, list[Action]]:
    """An existing PodGroup of an owner whose groups follow its spec (a JobSet, a LeaderWorkerSet), with
    the gang size that spec gives (`made`: the group as Phalanx would make it now). validate-podgroup
    refuses an edit of it, but fails open: a minCount edited around it (with Phalanx away) would have the
    gang placed partly. As a Job's annotations changed after creation, the edit is said once
    (ImmutableChangeIgnored, per group), not applied; the group is scheduled with its owner's size."""
    have, want = group.gang_min_count, made.scheduling_policy.gang
    if want is None or have is None or have == want.min_count:
        return group, []
    message = (
        f"PodGroup {group.name}: spec.schedulingPolicy.gang.minCount {have} differs from {want.min_count}, "
        f"which the {kind}'s spec gives and Phalanx keeps (the gang sizes of a {kind}'s groups follow its "
        f"spec; recreate the {kind} to change them)"
    )
    spec = group.spec.model_copy(update={"scheduling_policy": made.scheduling_policy})
    notes = announce_once(announced, owner, f"immutable/{group.name}", "ImmutableChangeIgnored", message)
    return dataclasses.replace(group, spec=spec), notes


def unit_priority(pods: tuple[PodRecord, ...], default: int | None) -> int:
    """The priority a unit is ordered by: its pods' (they carry their PriorityClass's value), else its
    group's."""
    live = [p.priority for p in pods if not p.terminal and not p.deleting]
    return max(live, default=default or 0)


def let_go(state: OwnerState, kind: str) -> list[Action]:
    """An owner not (or no longer) managed: ungate its pods, delete our objects and say so (once)."""
    owner = state.owner
    actions: list[Action] = [UngatePod(p.ref) for p in state.pods if p.gated]
    actions.extend(DeleteObject(g.ref) for g in state.pod_groups)
    actions.extend(DeleteObject(g.ref) for g in state.composites)
    if state.workload is not None:
        ref = ObjectRef(API_VERSION, WORKLOAD_KIND, owner.namespace, state.workload.name, state.workload.uid)
        actions.append(DeleteObject(ref))
    if not state.pod_groups and not state.composites and state.workload is None:
        return actions  # let go before: only pods born since to ungate
    gated = sum(1 for p in state.pods if p.gated)
    message = (
        f"the {kind} is not labelled {keys.MANAGED_LABEL}=true: Phalanx no longer holds its pods "
        f"({gated} ungated, placed by kube-scheduler alone) and deleted its PodGroup and Workload"
    )
    actions.append(PostEvent(owner.ref, "Normal", "ReleasedFromPhalanx", message))
    return actions


def owners_units(kind: OwnerKind, view: ClusterView) -> Iterator[Unit]:
    """Every owner's units, owner by owner in the view's order (an OwnerKind's `units`)."""
    for state in view.owner_states(kind.name):
        yield from owner_units_of(kind, state, view)


def owner_units_of(kind: OwnerKind, state: OwnerState, view: ClusterView) -> tuple[Unit, ...]:
    """One owner's units — or, when they cannot be made (an object no admission check foresaw, made around
    the webhook or before an upgrade; a bug), a Warning on the owner once and nothing scheduled for it: its
    pods stay gated, so it never runs partly, and every other owner is still scheduled in this pass.

    An owner being deleted has none to schedule: the garbage collector deletes its Workload and groups
    (owned by it, blockOwnerDeletion) before it in a foreground deletion, or with it, and its pods go too;
    made again, they would be deleted again, or left behind once a finalizer let it go. Only a gang of it
    left split meanwhile is taken down (`split_while_deleting`), unless the garbage collector takes its pods
    first (a foreground deletion)."""
    owner: OwnerRecord = state.owner
    if owner.deleting:
        if owner.dependents_first:
            return ()  # its pods go first, all of them
        try:
            made = tuple(kind.owner_units(state, view))
        except Exception:
            return ()  # said on the owner when it was made (below); its pods stay as they are
        return split_while_deleting(kind.name, owner.ref, made)
    try:
        units = tuple(kind.owner_units(state, view))
    except Exception as error:
        first = str(error).strip().splitlines()
        message = (
            f"Phalanx cannot make this {kind.name}'s groups ({type(error).__name__}: "
            f"{'; '.join(first[:3])[:500]}); its pods stay gated: fix or recreate the {kind.name}"
        )
        notes = announce_once(view.announced, owner.ref, "policy", "InvalidPolicy", message)
        key = unit_key(kind.name, owner.namespace, owner.name)
        return (Unit(key, None, None, tuple(notes), created=owner.created),)
    return _said_managed_problem(units, kind, state, view)


def split_while_deleting(kind: str, owner: ObjectRef, units: Iterable[Unit]) -> tuple[Unit, ...]:
    """An owner whose deletion waits (another tool's finalizer, under a background deletion) keeps its pods
    running until the garbage collector deletes them after it. If a gang of it loses pods meanwhile (a node
    died), nothing places them again (its Job controller makes no more pods for a Job being deleted; a
    StatefulSet's remade pods wait gated, since nothing is placed for an owner being deleted), so the rest
    would run split for as long as the finalizer holds: they are deleted at once (no grace period: nothing
    can come to make the gang whole). So are those of a decision whose releases the deletion interrupted
    (nothing finishes it for an owner being deleted). A gang is split when a pod its recorded decision named
    does not run and the pods that run fall short of its min counts. Nothing else is made, written or
    placed: only the deletions, in a unit with nothing to schedule. `units`: the owner's units as its kind
    makes them (their setup is dropped); `owner`: the object being deleted, where the event goes."""
    out = []
    for unit in units:
        placed, lost = _split(unit)
        if not placed:
            continue
        why = (
            f"{kind} {owner.name} is being deleted and its gang runs short: {len(lost)} pod(s) of "
            f"its decision do not run ({', '.join(sorted(lost)[:3])}) and nothing places them while a "
            f"finalizer holds the {kind}, so its {len(placed)} running pod(s) are deleted rather than "
            "run split"
        )
        actions: list[Action] = [DeletePod(p.ref, why, "below-min-count") for p in placed]
        actions.append(PostEvent(owner, "Warning", SPLIT_WHILE_DELETING, why))
        out.append(Unit(unit.key, unit.owner, None, tuple(actions), unit.priority, unit.created))
    return tuple(out)


def _split(unit: Unit) -> tuple[list[PodRecord], set[str]]:
    """A split gang's running pods, and the pods its recorded decision named that do not run (gone, failed,
    or never released); nothing when it is not split (whole, or only grown beyond its decision)."""
    tree = unit.tree
    if tree is None:
        return [], set()
    placed = [p for leaf in tree.leaves for p in leaf.placed]
    decisions = (g.status.admission for g in (tree.holder, *(leaf.group for leaf in tree.leaves)))
    named = {a.pod for decision in decisions if decision is not None for a in decision.assignments}
    succeeded = {p.name for leaf in tree.leaves for p in leaf.pods if p.succeeded}
    lost = named - succeeded - {p.name for p in placed}
    single = tree.root is None

    def leaf_whole(leaf: Leaf) -> bool:
        return leaf.done or len(leaf.placed) >= (leaf.gang_min(unit.owner, single) or 1)

    if not placed or not lost or tree.whole(leaf_whole):
        return [], set()
    return placed, lost


def _said_managed_problem(
    units: tuple[Unit, ...], kind: OwnerKind, state: OwnerState, view: ClusterView
) -> tuple[Unit, ...]:
    """An owner whose managed label has a value the webhooks refuse (edited while they did not answer) is
    still managed (api managed_by_label): its first unit says so on the owner, once."""
    owner: OwnerRecord = state.owner
    problem = owner.managed_problem
    if not problem:
        return units
    notes = announce_once(view.announced, owner.ref, "managed-label", "InvalidPolicy", problem)
    if not notes:
        return units
    if not units:
        key = unit_key(kind.name, owner.namespace, owner.name)
        return (Unit(key, None, None, tuple(notes), created=owner.created),)
    first = units[0]
    return (dataclasses.replace(first, setup=(*first.setup, *notes)), *units[1:])
