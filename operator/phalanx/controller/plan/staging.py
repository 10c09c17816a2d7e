"""Staged units (pure): owners that make their pods in stages — a JobSet with `startupPolicyOrder: InOrder`
(each replicated Job once the previous one is Ready), a LeaderWorkerSet with `startupPolicy: LeaderReady`
(the workers once the leader is Ready). Gang-holding every pod until all exist would deadlock them, and
releasing the first stage alone would break the gang. So the whole unit is decided as soon as the first
stage's pods are there, with a placeholder for each pod still to come (its *slot*, named
`<PodGroup>-slot-<rank>`, shaped like the owner's pod template); the decision records every slot; the
first stage is released; the room of the slots is held (assumed taken at the start of every pass, before
any unit decides) until its pod is released into it, also while that pod exists but is still gated; and each
later pod is released into its slot when it comes. A slot's room is held as long as the decision is (while
pods of the unit are placed). A slot whose node went away holds nothing; one whose node no longer takes its
pod (deleted, tainted) makes the unit decided again, with the room held for its own slots given back first
(`lift_own_hold`): it is the unit's own, not another gang's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from phalanx.api.naming import pod_group_label_value
from phalanx.controller.kinds.base import Leaf, PodTemplate, Unit
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork
from phalanx.placement.filters import node_eligible


def slot_name(group: str, rank: int) -> str:
    return f"{group}-slot-{rank}"


def slot_of(leaf: LeafWork, pod: PodRecord) -> str:
    """The slot a pod of a staged unit fills ("" when its leaf has no ranks)."""
    rank = leaf.leaf.rank_of.get(pod.key)
    return "" if rank is None else slot_name(leaf.group.name, rank)


def slots_of(leaf: LeafWork, pods: Iterable[PodRecord]) -> set[str]:
    """The slots `pods` of `leaf` fill (slot_of each, its ranks read once)."""
    ranks = leaf.leaf.rank_of
    return {slot_name(leaf.group.name, ranks[p.key]) for p in pods if p.key in ranks}


def _present(leaf: Leaf) -> set[int]:
    """The ranks that have their pod: live, or Succeeded (it ran its part; its owner makes no other)."""
    ranks = leaf.rank_of
    kept = (p for p in leaf.pods if (p.succeeded or not p.terminal) and not p.deleting)
    return {ranks[p.key] for p in kept if p.key in ranks}


def held_slots(leaf: LeafWork, recorded: Mapping[str, str], ctx: Pass) -> list[tuple[str, str]]:
    """(slot, node) of the recorded slots of `leaf` whose pod does not exist yet, on nodes still in the
    cluster (a slot whose node went away will not take its pod: the unit is decided again, not finished)."""
    present = _present(leaf.leaf)
    slots = ((r, slot_name(leaf.group.name, r)) for r in leaf.leaf.ranked_slots if r not in present)
    return [
        (slot, recorded[slot])
        for _, slot in slots
        if slot in recorded and ctx.snapshot.node_index(recorded[slot]) is not None
    ]


def held_now(work: UnitWork, leaf: LeafWork, ctx: Pass) -> list[tuple[str, str]]:
    """held_slots of a staged unit's PodGroup, by its own decision, while the unit's decision stands (a pod
    of it holds a node); [] for any other group."""
    if not work.unit.staged or leaf.admission is None:
        return []
    if not any(x.holds_a_node for x in work.leaves.values()):
        return []
    return held_slots(leaf, {a.pod: a.node for a in leaf.admission.assignments}, ctx)


def slots_held(work: UnitWork, leaf: LeafWork, ctx: Pass) -> bool:
    """The PodGroup of a staged unit has its own decision naming slots whose room is held for its pods still
    to come (a JobSet's later child Job, made once the one before it is Ready), and the unit's decision
    stands: the PodGroup keeps that decision and its domain in its status until they come — as written when
    decided, so no second write undoes it and then writes it again."""
    return bool(held_now(work, leaf, ctx))


def slots_to_come(leaf: LeafWork, held: list[tuple[str, str]], ctx: Pass) -> int:
    """Of the leaf's `held` slots (held_now), the ones whose node still takes their pod (ready, schedulable,
    its taints tolerated) and still has their room: they count as admitted, so the PodGroup says Admitted
    until its pods come, and a pod lost later turns it to waiting at the time of the loss. A slot on a node
    that no longer takes its pod does not (its pod will be placed afresh): a later stage's pod lost with a
    tainted node is then judged from the loss (plan/lost.py), not from its replacement's refusal after its
    controller's backoff. Nor does a slot on a node overcommitted with the room held there counted (a pod
    Phalanx does not place, which kube-scheduler put there, took it; or the node's GPUs went unhealthy):
    every slot there is then not to come, since which of them lost their room is not known. The room others
    leave is read, so a unit holding slots is never skipped as settled (report.py)."""
    template = leaf.leaf.template
    if template is None:
        return 0
    req = template.requirements
    count = 0
    for _, node_name in held:
        node = ctx.nodes.get(node_name)
        if node is None or not node_eligible(node, req.node_selector, req.affinity_terms, req.tolerations):
            continue
        free = ctx.snapshot.free(node_name)
        if all(free.get(r, 0) >= 0 for r in (*template.requests, "pods")):
            count += 1
    return count


def placeholder(leaf: LeafWork, template: PodTemplate, name: str) -> PodRecord:
    """A pod of `leaf` not made yet, named `name`, shaped like `template`: gated, on no node."""
    return PodRecord(
        uid="",
        namespace=leaf.group.namespace,
        name=name,
        node_name="",
        terminal=False,
        deleting=False,
        gated=True,
        other_gates=(),
        job_uid="",
        node_selector_host="",
        requests=template.requests,
        requirements=template.requirements,
        priority=0,
        pod_group=pod_group_label_value(leaf.group.name),
        traits=template.traits,
    )


def placeholders(work: UnitWork) -> None:
    """Give each leaf of a staged unit a placeholder for every pod still to come (from its template)."""
    if not work.unit.staged:
        return
    for leaf in work.leaves.values():
        template = leaf.leaf.template
        if template is None or leaf.done:
            continue
        present = _present(leaf.leaf)
        leaf.virtual = tuple(
            placeholder(leaf, template, slot_name(leaf.group.name, rank))
            for rank in leaf.leaf.ranked_slots
            if rank not in present
        )


def hold_released_in_part(units: Iterable[Unit], ctx: Pass) -> None:
    """At the start of a pass: the recorded room of the gated pods of each decision released in part
    (Unit.mid_release) among `units` — those the pass does not plan, their writes backing off after a failed
    release — assumed taken, so that no unit takes it before the release lands (a unit the pass plans
    finishes its decision first instead: Unit.order)."""
    usage: list[tuple[str, Mapping[str, int]]] = []
    for unit in units:
        if unit.mid_release:
            usage.extend(
                (node, p.requests)
                for p, node in unit.recorded_pods()
                if p.gated and ctx.snapshot.node_index(node) is not None
            )
    if usage:
        ctx.snapshot = ctx.snapshot.assume(usage)


def _filled(leaf: Leaf) -> set[int]:
    """The ranks whose pod takes its room itself: released or bound (the snapshot counts it there), or
    Succeeded (it ran its part). A pod made but still gated does not: its slot's room is still to hold."""
    ranks = leaf.rank_of
    kept = (p for p in leaf.pods if p.succeeded or (p.usage_node and not p.terminal and not p.deleting))
    return {ranks[p.key] for p in kept if p.key in ranks}


def hold(units: Iterable[Unit], ctx: Pass) -> None:
    """At the start of a pass: the room of every recorded slot whose pod does not take it yet (not made, or
    made and still gated), assumed taken — until the pod is released into it, no unit ordered before this
    one may take that room."""
    usage: list[tuple[str, Mapping[str, int]]] = []
    for unit in units:
        tree = unit.tree
        if not unit.staged or tree is None or tree.holder.status.admission is None:
            continue
        recorded = {a.pod: a.node for a in tree.holder.status.admission.assignments}
        for leaf in tree.leaves:
            if leaf.template is None or leaf.done:
                continue
            filled = _filled(leaf)
            for rank in leaf.ranked_slots:
                slot = slot_name(leaf.group.name, rank)
                # a slot on a node gone from the cluster holds nothing: its pod is placed afresh (finish)
                if (
                    rank not in filled
                    and slot in recorded
                    and ctx.snapshot.node_index(recorded[slot]) is not None
                ):
                    entry = (recorded[slot], leaf.template.requests)
                    usage.append(entry)
                    ctx.held_slots.setdefault(unit.key, []).append(entry)
                    ctx.reserved_slots.add(f"{leaf.group.namespace}/{slot}")
    if usage:
        ctx.snapshot = ctx.snapshot.assume(usage)


def lift_own_hold(work: UnitWork, ctx: Pass) -> list[tuple[str, Mapping[str, int]]]:
    """Before a staged unit is decided again (its recorded decision could not be finished: a slot's node went
    away or no longer takes its pod): the room `hold` assumed for its own slots given back, since the new
    decision places those pods afresh — counting both would refuse it room it has and requeue it (a running
    leader's group restarted). Returns what it gave back, to hold again if the unit is not decided anew
    (its recorded decision, and so its slots, stay)."""
    usage = ctx.held_slots.pop(work.unit.key, [])
    if usage:
        ctx.snapshot = ctx.snapshot.release(usage)
    return usage


def hold_again(work: UnitWork, lifted: list[tuple[str, Mapping[str, int]]], ctx: Pass) -> None:
    """Undo lift_own_hold: the unit's recorded slots stay (it was not decided anew)."""
    if lifted:
        ctx.snapshot = ctx.snapshot.assume(lifted)
        ctx.held_slots[work.unit.key] = lifted
