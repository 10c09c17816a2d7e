"""Deciding a unit: the engine's answer turned into a recorded decision and releases, or into why it waits.

A one-leaf unit is decided with `decide` (levels, topology mode), a tree with `decide_composite`. Either
way the decision is recorded before any pod is released: on the PodGroup, or for a tree first on the root
CompositePodGroup (the whole tree's pods, one atomic write with a resourceVersion precondition, so a
lagging replica cannot record a second decision over a newer one), then on each PodGroup (its own pods).
`finish` releases the gated pods a recorded decision names, where it says, when they all still fit there;
otherwise the unit is decided afresh, the pods already released counting as bound. Pure.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterable, Mapping

from phalanx.api import conditions as c
from phalanx.api import keys
from phalanx.api.status import Admission, Assignment, GroupStatus
from phalanx.api.suggest import closest
from phalanx.controller.model.actions import PostEvent, RecordAdmission, ReleasePod
from phalanx.controller.model.records import CompositePodGroupRecord, PodRecord
from phalanx.controller.plan import status as st
from phalanx.controller.plan.requeue import grown
from phalanx.controller.plan.staging import held_slots, slot_of
from phalanx.controller.plan.work import LeafWork, Pass, UnitWork
from phalanx.placement import (
    Admit,
    CompositeAdmit,
    CompositeRequest,
    Diagnosis,
    GroupRequest,
    NodeInfo,
    PodRequest,
    Reject,
    TopologyMode,
    admitted_usage,
    composite_usage,
    decide,
    decide_composite,
    diagnose,
    node_eligible,
)
from phalanx.placement.model import PODS


def levels_of(keys_: Iterable[str | None], levels: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The levels of the Topology that lists a key of the unit (the first one that does)."""
    return next((levels[k] for k in keys_ if k is not None and k in levels), ())


def request_of(leaf: LeafWork, levels: tuple[str, ...], mode: TopologyMode | None = None) -> GroupRequest:
    """The engine's request for a leaf (its PodGroup's topology mode unless `mode` says otherwise: a tree's
    preferred and auto leaves are decided so)."""
    return GroupRequest(
        name=leaf.group.name,  # a tree names its groups by name (CompositeAdmit.admits)
        pending=tuple(
            PodRequest(id=p.key, requirements=p.requirements, traits=p.traits) for p in leaf.to_place
        ),
        min_count=leaf.min_count,
        topology_key=leaf.group.topology_key,
        bound_nodes=tuple(p.usage_node for p in leaf.placed),
        levels=levels,
        mode=leaf.group.topology_mode if mode is None else mode,
        preferred_domain=leaf.group.status.last_domain,  # where it was before its pods were made anew
    )


def admission_of(
    domain: str | None,
    assignments: Iterable[tuple[str, str]],
    ctx: Pass,
    status: GroupStatus,
    level: str | None = None,
    mode_note: str = "",
) -> Admission:
    return Admission(
        domain=domain,
        assignments=[Assignment(pod=pod.split("/", 1)[1], node=node) for pod, node in assignments],
        admitted_at=ctx.now,
        attempt=st.next_attempt(status),
        level=level,
        mode_note=mode_note or None,
    )


def admitted_message(count: int, key: str | None, decision: Admit) -> str:
    nodes = ", ".join(node for _, node in decision.assignments)
    if decision.mode_note:
        # Topology mode auto: which level applied and why.
        at = key if decision.level is None else decision.level
        where = f" in {at}={decision.domain}" if at and decision.domain else ""
        return f"admitted {count} pod(s){where} on {nodes} ({decision.mode_note})"
    if decision.level is not None:
        # Preferred topology climbed: say so, it is not what the key asked for.
        wider = f"one domain of {decision.level} ({decision.domain})" if decision.level else "anywhere"
        return (
            f"admitted {count} pod(s) on {nodes}: no domain of {key} had room for the group, so it was "
            f"placed in {wider} (topology mode preferred)"
        )
    where = f" in {key}={decision.domain}" if decision.domain and key else ""
    where = where or (f" in {decision.domain}" if decision.domain else "")  # a leaf in its parent's domain
    return f"admitted {count} pod(s){where} on {nodes}"


def pinned_keys(work: UnitWork, leaf: LeafWork) -> set[str]:
    """The topology keys a release of the leaf's pods pins to their node's labels: the unit's and its
    groups' down to the leaf (`release_pairs`)."""
    assert work.unit.tree is not None
    keys = {g.topology_key for g in work.unit.tree.composites}
    keys |= {work.unit.tree.holder.topology_key, leaf.group.topology_key}
    return {k for k in keys if k}


def release_pairs(work: UnitWork, leaf: LeafWork, pairs: Iterable[tuple[PodRecord, str]], ctx: Pass) -> None:
    """Release each pod to its node: pinned by name too unless it has a node affinity of its own, and to the
    node's labels of the unit's topology keys (model/actions.py ReleasePod says why)."""
    keys = pinned_keys(work, leaf)
    for pod, node in pairs:
        labels = ctx.nodes[node].labels if node in ctx.nodes else {}
        domain = tuple(sorted((k, labels[k]) for k in keys if k in labels))
        by_name = pod.requirements.affinity_terms is None
        work.actions.append(ReleasePod(pod.ref, node, leaf.group.name, by_name=by_name, domain=domain))
        leaf.released_now += 1


def release(work: UnitWork, leaf: LeafWork, assignments: Iterable[tuple[str, str]], ctx: Pass) -> None:
    """Release the leaf's ready pods an engine decision placed (pinned and ungated, labelled, one request)."""
    by_key = {p.key: p for p in leaf.ready}
    release_pairs(work, leaf, [(by_key[pod], node) for pod, node in assignments if pod in by_key], ctx)


# ---------------------------------------------------------------------- one leaf
def decide_leaf(work: UnitWork, leaf: LeafWork, ctx: Pass) -> tuple[GroupRequest, Reject | None, str]:
    """Decide a one-leaf unit: admitted (recorded, released, assumed), or the engine's refusal and the
    refusal explained."""
    assert work.unit.tree is not None
    key = leaf.group.topology_key
    request = GroupRequest(
        name=leaf.group.key,
        pending=tuple(
            PodRequest(id=p.key, requirements=p.requirements, traits=p.traits) for p in leaf.to_place
        ),
        min_count=leaf.min_count,
        topology_key=key,
        bound_nodes=tuple(p.usage_node for p in leaf.placed),
        levels=levels_of([key], ctx.levels),
        mode=work.unit.tree.mode,  # as at the group's creation (a later change is not applied)
        preferred_domain=leaf.group.status.last_domain,  # where it was before its pods were made anew
    )
    started = time.perf_counter()
    decision = decide(ctx.snapshot, request)
    ctx.decision_seconds.append(time.perf_counter() - started)
    if isinstance(decision, Admit):
        if decision.assignments:  # none: minCount is met by placed pods; the extras wait for room
            _admit_leaf(work, leaf, request, decision, ctx)
        return request, None, ""
    return request, decision, explained(decision, request, ctx)


def _admit_leaf(work: UnitWork, leaf: LeafWork, request: GroupRequest, decision: Admit, ctx: Pass) -> None:
    group = leaf.group
    work.first_admission, work.decided = never_admitted(group.status), True
    # A replacement joins the pods still placed by the decisions before it: the record names them all, so
    # a later scale-up (placed == recorded, more pods waiting) is not taken for a loss (requeue.grown).
    kept = still_placed(group.status, group.namespace, [leaf])
    admission = admission_of(
        decision.domain, [*kept, *decision.assignments], ctx, group.status, decision.level, decision.mode_note
    )
    if grown(leaf):  # the running pods were the whole gang before it was scaled up (requeue.released_in_part)
        admission = admission.model_copy(update={"scaled_up": True})
    work.actions.append(RecordAdmission(group.ref, admission, group.resource_version))
    release(work, leaf, decision.assignments, ctx)
    leaf.admission = admission
    leaf.domain = decision.domain or leaf.domain
    ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, decision))
    message = admitted_message(leaf.released_now, group.topology_key, decision)
    leaf.outcome = st.Outcome(c.REASON_ADMITTED, message)
    work.actions.append(PostEvent(group.ref, "Normal", "Admitted", message))


def still_placed(status: GroupStatus, namespace: str, leaves: Iterable[LeafWork]) -> list[tuple[str, str]]:
    """The pods of an earlier record still placed, as (namespace/pod, node): a decision taken again while
    some of the gang runs (a replacement, a record whose release a crash cut short) names them beside the
    new ones, so the record stays the whole gang (lost.py, requeue.grown and finish read it so). A staged
    unit's pod released into its slot is named by the slot in the earlier record: it is named by its own
    name now (a JobSet decided again after its second child Job's pods went into their slots lost one of
    them from its record: a node soak saw it)."""
    placed = {p.name: p.name for leaf in leaves for p in leaf.placed}
    placed |= {slot: p.name for leaf in leaves for p in leaf.placed if (slot := slot_of(leaf, p))}
    if status.admission is None or not placed:
        return []
    named = {placed[a.pod]: a.node for a in status.admission.assignments if a.pod in placed}
    return [(f"{namespace}/{pod}", node) for pod, node in named.items()]


def explained(decision: Reject, request: GroupRequest, ctx: Pass) -> str:
    """The refusal with why: upstream's sentence first, then per domain in kube-scheduler's words (in
    Phalanx's Admitted condition; upstream's own condition keeps upstream's sentence)."""
    message = decision.message
    if decision.mode_note:
        message = f"{message} ({decision.mode_note})"
    if decision.reason == "Unschedulable":
        message = f"{message}; {_diagnosis_text(diagnose(ctx.snapshot, request))}"
    elif decision.reason == "NoDomain":
        message += label_hint(request.topology_key, ctx.nodes)
    return message


def _diagnosis_text(diagnosis: Diagnosis) -> str:
    """Per domain; for a gang that can never fit in this cluster only that, which stays true while other
    work comes and goes (so its condition, and the event, change only when it does)."""
    if not diagnosis.never_fits:
        return diagnosis.summary()
    # Pods that fit on no node even empty: the reasons are the static ones (a resource no node has enough of).
    shown = diagnosis.domains[:1] if diagnosis.best_when_empty == 0 else ()
    return dataclasses.replace(diagnosis, domains=shown).summary().removeprefix("; ")


def label_hint(key: str | None, nodes: Mapping[str, NodeInfo]) -> str:
    """For a topology key no node carries: the node label it was probably meant to be."""
    if not key:
        return ""
    counts = Counter(label for node in nodes.values() for label in node.labels)
    match = closest(key, sorted(counts))
    if match is None:
        return f"; set {keys.TOPOLOGY_KEY_ANNOTATION} to a node label, or label the nodes"
    return f"; did you mean {match} (on {counts[match]} node(s))?"


def never_admitted(status: GroupStatus) -> bool:
    initial = status.condition(c.POD_GROUP_INITIALLY_SCHEDULED)
    return initial is None or initial.status != c.TRUE


# ---------------------------------------------------------------------- a tree
def _composite_request(
    work: UnitWork, g: CompositePodGroupRecord, levels: tuple[str, ...]
) -> CompositeRequest:
    composites, leaves = work.children(g.name)
    children: list[GroupRequest | CompositeRequest] = [
        request_of(leaf, levels) for leaf in leaves if not leaf.done
    ]
    children.extend(_composite_request(work, child, ()) for child in composites)
    done = sum(1 for leaf in leaves if leaf.done)  # ran to completion: they count as placed
    return CompositeRequest(
        name=g.name,
        children=tuple(children),
        min_count=max(1, (g.min_group_count or 1) - done),
        topology_key=g.topology_key,
        levels=levels,
        preferred_domain=g.status.last_domain,  # a restart's new pods go back there when the tree fits
        mode=g.topology_mode,  # the root's is read (a preferred tree may go wider)
    )


def tree_request(work: UnitWork, ctx: Pass) -> CompositeRequest:
    """The whole tree's request, with the levels of the Topology that lists one of its keys."""
    root, tree = work.root, work.unit.tree
    assert root is not None and tree is not None
    keys_ = [g.topology_key for g in tree.composites] + [
        leaf.group.topology_key for leaf in work.leaves.values()
    ]
    return _composite_request(work, root, levels_of(keys_, ctx.levels))


def decide_tree(work: UnitWork, ctx: Pass) -> CompositeRequest | None:
    """Decide a tree whole; when it does not fit, the request it was refused for (each group's outcome
    then says why)."""
    root = work.root
    assert root is not None
    request = tree_request(work, ctx)
    started = time.perf_counter()
    decision = decide_composite(ctx.snapshot, request)
    ctx.decision_seconds.append(time.perf_counter() - started)
    if isinstance(decision, CompositeAdmit):
        _admit_tree(work, root, request, decision, ctx)
        return None
    first = decision.message.split("; ")[0]
    work.outcome = st.Outcome(c.REASON_UNSCHEDULABLE, decision.message, upstream=first)
    where = first.removeprefix("composite group is unschedulable: ")
    upstream = f"pod group is unschedulable: CompositePodGroup {root.name} cannot be placed whole ({where})"
    for leaf in work.leaves.values():
        why = decision.why(leaf.group.name)
        leaf.outcome = st.Outcome(c.REASON_UNSCHEDULABLE, f"{upstream}; {why}", upstream=upstream)
    return request


def _admit_tree(
    work: UnitWork,
    root: CompositePodGroupRecord,
    request: CompositeRequest,
    decision: CompositeAdmit,
    ctx: Pass,
) -> None:
    everything = [pair for _, a in decision.admits for pair in a.assignments]
    if not everything:
        return  # min counts met by placed pods
    work.first_admission, work.decided = never_admitted(root.status), True
    kept = still_placed(root.status, root.namespace, work.leaves.values())
    record = admission_of(decision.domain(root.name), [*kept, *everything], ctx, root.status, decision.level)
    # One atomic write holds the whole tree's decision; a changed root (another writer) makes it fail.
    work.actions.append(RecordAdmission(root.ref, record, root.resource_version))
    work.admission, work.domain = record, record.domain
    for name, admit in decision.admits:
        leaf = work.leaves[name]
        if admit.assignments:
            mine = [*still_placed(leaf.group.status, leaf.group.namespace, [leaf]), *admit.assignments]
            own = admission_of(admit.domain, mine, ctx, leaf.group.status, admit.level, admit.mode_note)
            work.actions.append(RecordAdmission(leaf.group.ref, own))
            leaf.admission, leaf.domain = own, admit.domain
    for name, admit in decision.admits:
        release(work, work.leaves[name], admit.assignments, ctx)
    ctx.snapshot = ctx.snapshot.assume(composite_usage(request, decision))
    where = f" in {record.domain}" if record.domain else ""
    if decision.level is not None:  # a preferred root climbed: not what its key asked for
        wider = f"one domain of {decision.level}" if decision.level else "anywhere"
        where = (
            f"{where}: no domain of {root.topology_key} had room for the whole tree, so it was placed in "
            f"{wider} (topology mode preferred)"
        )
    message = f"admitted {len(everything)} pod(s) of {len(decision.admits)} PodGroup(s){where}"
    work.outcome = st.Outcome(c.REASON_ADMITTED, message)
    work.actions.append(PostEvent(root.ref, "Normal", "Admitted", message))
    for name, admit in decision.admits:
        leaf = work.leaves[name]
        msg = admitted_message(len(admit.assignments), leaf.group.topology_key, admit)
        leaf.outcome = st.Outcome(c.REASON_ADMITTED, msg)
        work.actions.append(
            PostEvent(leaf.group.ref, "Normal", "Admitted", f"{msg} (CompositePodGroup {root.name})")
        )


# ---------------------------------------------------------------------- a recorded decision
def finish(work: UnitWork, ctx: Pass) -> bool:
    """Release the gated pods the unit's recorded decision names, where it says — only if all of them still
    fit and every PodGroup it covers reaches its minCount with them; True when it did."""
    assert work.unit.tree is not None
    recorded = work.unit.tree.holder.status.admission
    if recorded is None:
        return False
    nodes = {a.pod: a.node for a in recorded.assignments}
    chosen: dict[str, list[tuple[PodRecord, str]]] = {}
    for name, leaf in work.leaves.items():
        pairs = [
            (p, node) for p in leaf.ready if (node := nodes.get(p.name) or nodes.get(slot_of(leaf, p), ""))
        ]
        if pairs:
            chosen[name] = pairs
    if not chosen:
        return False
    # What each leaf will have: its placed pods, those released now, a staged unit's pods still to come
    # (their room held). Every leaf released into reaches its minCount, and so does the tree: a leaf of the
    # decision left short (its gated pod replaced under another name) means deciding again, not finishing.
    counts = {
        name: len(leaf.placed) + len(chosen.get(name, ())) + len(held_slots(leaf, nodes, ctx))
        for name, leaf in work.leaves.items()
    }
    if any(counts[name] < work.leaves[name].min_count for name in chosen) or not work.whole(counts=counts):
        return False
    arriving = {
        p.key
        for name, pairs in chosen.items()
        for p, _ in pairs
        if f"{p.namespace}/{slot_of(work.leaves[name], p)}" in ctx.reserved_slots
    }
    if not still_fit([pair for pairs in chosen.values() for pair in pairs], ctx, arriving):
        return False
    if not _in_recorded_domains(work, chosen, nodes, ctx):
        return False
    for name, pairs in chosen.items():
        _finish_leaf(work, work.leaves[name], pairs, recorded, ctx)
    # Assumed taken now, but for the pods arriving in held slots: their room was assumed at the pass's start.
    ctx.snapshot = ctx.snapshot.assume(
        [(n, p.requests) for pairs in chosen.values() for p, n in pairs if p.key not in arriving]
    )
    work.outcome = st.Outcome(c.REASON_ADMITTED, "released the rest of the recorded decision")
    work.domain = recorded.domain
    return True


def _in_recorded_domains(
    work: UnitWork, chosen: Mapping[str, list[tuple[PodRecord, str]]], slots: Mapping[str, str], ctx: Pass
) -> bool:
    """Every node of the unit's pods placed, released now or held a slot on, still in the domain the decision
    recorded (the unit's, and each PodGroup's of a tree): after a node was relabelled into another domain (a
    topology label corrected, a node moved), finishing would split the gang across domains as its nodes are
    labelled now — it is decided again (around its pods that run, as their nodes are labelled now)."""
    assert work.unit.tree is not None
    holder = work.unit.tree.holder
    nodes = {
        name: [p.usage_node for p in leaf.placed]
        + [n for _, n in chosen.get(name, ())]
        + [n for _, n in held_slots(leaf, slots, ctx)]
        for name, leaf in work.leaves.items()
    }
    groups = [(holder, [n for ns in nodes.values() for n in ns])]
    if work.root is not None:
        groups += [(leaf.group, nodes[n]) for n, leaf in work.leaves.items()]
    for group, names in groups:
        admission, key = group.status.admission, group.topology_key
        if admission is not None and admission.domain:
            level = admission.level if admission.level is not None else key
            want: set[str | None] | None = {admission.domain} if level else None  # "": placed anywhere
        else:
            # No record of its own (recorded on the root only: a restart between the root's write and
            # its own): a required key still asks for one domain among its nodes.
            level = key if admission is None and group.topology_mode == "required" else None
            want = None
        if not level:
            continue
        values = {node.labels.get(level) if (node := ctx.nodes.get(m)) else None for m in names}
        if (want is not None and values - want) or None in values or len(values) > 1:
            return False
    return True


def _finish_leaf(
    work: UnitWork, leaf: LeafWork, pairs: list[tuple[PodRecord, str]], recorded: Admission, ctx: Pass
) -> None:
    if work.root is not None and leaf.group.status.admission is None:
        # Recorded on the root, not yet on the PodGroup (a restart in between): write it now, with the
        # PodGroup's own domain (of its key, where its nodes are), as deciding would have.
        key = leaf.group.topology_key
        values = (
            {node.labels.get(key) for _, n in pairs if (node := ctx.nodes.get(n)) is not None}
            if key
            else set()
        )
        domain = recorded.domain if not key else next(iter(values)) if len(values) == 1 else None
        own = admission_of(domain, [(p.key, n) for p, n in pairs], ctx, leaf.group.status)
        work.actions.append(RecordAdmission(leaf.group.ref, own))
        leaf.admission = own
    release_pairs(work, leaf, pairs, ctx)
    leaf.domain = (leaf.admission.domain if leaf.admission else None) or leaf.domain
    on = ", ".join(n for _, n in pairs)
    message = f"released {len(pairs)} more pod(s) of the recorded decision on {on}"
    leaf.outcome = st.Outcome(c.REASON_ADMITTED, message)
    work.actions.append(PostEvent(leaf.group.ref, "Normal", "Admitted", message))


def still_fit(pairs: list[tuple[PodRecord, str]], ctx: Pass, held: set[str] | None = None) -> bool:
    """Every pod still fits on the node a recorded decision gave it: node present, schedulable, its taints
    tolerated and selectors met, room left for all of them together (`held`: pods whose room is held for
    them already, a staged unit's slots)."""
    room: dict[str, dict[str, int]] = {}
    for pod, node_name in pairs:
        node = ctx.nodes.get(node_name)
        req = pod.requirements
        if node is None or not node_eligible(node, req.node_selector, req.affinity_terms, req.tolerations):
            return False
        if ctx.snapshot.node_index(node_name) is None:
            return False
        free = room.setdefault(node_name, ctx.snapshot.free(node_name))
        if held and pod.key in held:
            # A staged pod arriving in its slot: its room was held for it (staging.py), so counted already —
            # unless the node shrank since (GPUs gone unhealthy): then the hold overcommits it.
            if any(v < 0 for v in free.values()):
                return False
            continue
        free[PODS] = free.get(PODS, 0) - 1
        for resource, amount in pod.requests.items():
            free[resource] = free.get(resource, 0) - amount
        if any(v < 0 for v in free.values()):
            return False
    return True
