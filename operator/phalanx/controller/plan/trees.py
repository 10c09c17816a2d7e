"""`plan()` for groups no Job path covers: a tree rooted at a CompositePodGroup, or a standalone PodGroup.

A tree (the article's hand-made CompositePodGroup with its PodGroups, or a Job's slices) is placed whole
with `decide_composite`, a standalone hand-made PodGroup with `decide`; its pods are those that join it
(`phalanx.dev/pod-group` label, or a Job's completion index for slices). Pure, like plan.py.

Crash safety, as for a Job's group: the decision is written before any pod is released, in one atomic
write — for a tree, on the root CompositePodGroup (`status.admission` lists every pod of the tree, with a
resourceVersion precondition, so a lagging replica cannot record a second decision over a newer one),
then on each PodGroup (its own pods). A later pass that finds gated pods named in the root's decision
finishes it (releases them where it says) if every one of them still fits there and every PodGroup of the
decision reaches its minCount; otherwise it decides afresh, the pods already released counting as bound
(the old decision is undone by being replaced: nothing of a partial tree is released without a decision
that covers the whole tree).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from phalanx.api import conditions as c
from phalanx.api.naming import pod_group_label_value
from phalanx.api.status import Admission, Assignment, GroupStatus
from phalanx.controller.model.actions import (
    Action,
    EventType,
    GroupPlan,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RequeueCause,
    SuspendJob,
    UngatePod,
)
from phalanx.controller.model.records import CompositePodGroupRecord, JobRecord, PodGroupRecord, PodRecord
from phalanx.controller.model.refs import ObjectRef
from phalanx.controller.plan import status as st
from phalanx.placement import (
    Admit,
    CompositeAdmit,
    CompositeRequest,
    GroupRequest,
    PodRequest,
    TopologyMode,
    admitted_usage,
    composite_usage,
    decide,
    decide_composite,
    diagnose,
    node_eligible,
)
from phalanx.placement.model import PODS

if TYPE_CHECKING:
    from phalanx.controller.plan.jobs import _Pass

REQUEUED_BELOW_MIN_COUNT = "below its minCount"  # the requeue note of a gang that lost pods
REQUEUED_UNBINDABLE = "released but not bound"  # the requeue note of a release kube-scheduler refused
COMPOSITE_PREFIX = "CompositePodGroup/"  # plan keys (backoff) of trees; no Job key starts like this
POD_GROUP_PREFIX = "PodGroup/"


@dataclass(frozen=True)
class LeafState:
    group: PodGroupRecord
    pods: tuple[PodRecord, ...]  # the pods that join it


@dataclass(frozen=True)
class TreeState:
    """A tree of groups rooted at a CompositePodGroup, or (root None) one standalone PodGroup."""

    root: CompositePodGroupRecord | None
    composites: tuple[CompositePodGroupRecord, ...]  # every composite of the tree, the root first
    leaves: tuple[LeafState, ...]
    job: JobRecord | None = None  # the Job whose slices these are; None: made by hand
    mode: TopologyMode = "required"  # a standalone group's topology mode

    @property
    def key(self) -> str:
        if self.job is not None:
            return self.job.key  # a Job's slices back off with their Job
        if self.root is not None:
            return f"{COMPOSITE_PREFIX}{self.root.key}"
        return f"{POD_GROUP_PREFIX}{self.leaves[0].group.key}"

    @property
    def ref(self) -> ObjectRef:
        return self.root.ref if self.root is not None else self.leaves[0].group.ref

    @property
    def recorded(self) -> Admission | None:
        """The tree's decision: on the root CompositePodGroup, or on the standalone PodGroup."""
        holder = self.root if self.root is not None else self.leaves[0].group
        return holder.status.admission

    @property
    def priority(self) -> int:
        pods = [p for leaf in self.leaves for p in leaf.pods]
        return max((p.priority for p in pods), default=0)


def hand_made_trees(
    composites: Iterable[CompositePodGroupRecord],
    pod_groups: Iterable[PodGroupRecord],
    pods_of: Callable[[PodGroupRecord], Iterable[PodRecord]],
) -> tuple[TreeState, ...]:
    """The trees of hand-made groups (no Job owner): one per root CompositePodGroup, one per standalone
    PodGroup. A group whose parent does not exist (yet) is in no tree: its pods stay gated."""
    mine = [g for g in composites if not g.job_uid]
    children: dict[str, list[CompositePodGroupRecord]] = {}
    for g in mine:
        if g.parent:
            children.setdefault(f"{g.namespace}/{g.parent}", []).append(g)
    leaves: dict[str, list[PodGroupRecord]] = {}
    trees: list[TreeState] = []
    for pg in pod_groups:
        if pg.job_uid:
            continue
        if pg.parent:
            leaves.setdefault(f"{pg.namespace}/{pg.parent}", []).append(pg)
        else:
            trees.append(TreeState(None, (), (LeafState(pg, tuple(pods_of(pg))),)))
    for root in sorted((g for g in mine if not g.parent), key=lambda g: g.key):
        found: list[CompositePodGroupRecord] = []
        found_leaves: list[LeafState] = []
        stack = [root]
        while stack and len(found) < 64:
            g = stack.pop(0)
            found.append(g)
            stack.extend(sorted(children.get(g.key, ()), key=lambda x: x.name))
            for pg in sorted(leaves.get(g.key, ()), key=lambda x: x.name):
                found_leaves.append(LeafState(pg, tuple(pods_of(pg))))
        trees.append(TreeState(root, tuple(found), tuple(found_leaves)))
    return tuple(sorted(trees, key=lambda t: t.key))


def hand_made_pods(
    pods_by_label: Callable[[str, str], Iterable[PodRecord]],
) -> Callable[[PodGroupRecord], Iterable[PodRecord]]:
    """Pods that join a hand-made PodGroup by the `phalanx.dev/pod-group` label."""
    return lambda pg: pods_by_label(pg.namespace, pod_group_label_value(pg.name))


# ---------------------------------------------------------------------- one pass over one tree


@dataclass
class _Leaf:
    state: LeafState
    min_count: int
    gang: bool
    waiting: tuple[PodRecord, ...]
    ready: tuple[PodRecord, ...]
    placed: tuple[PodRecord, ...]
    released_now: int = 0
    ungated: int = 0
    admission: Admission | None = None
    outcome: st.Outcome | None = None
    domain: str | None = None

    @property
    def group(self) -> PodGroupRecord:
        return self.state.group

    @property
    def enough(self) -> bool:
        return len(self.ready) + len(self.placed) >= self.min_count


def _rank(pod: PodRecord) -> tuple[int, str]:
    return (pod.completion_index if pod.completion_index is not None else 1 << 31, pod.name)


def _leaf(state: LeafState) -> _Leaf:
    pods = [p for p in state.pods if not p.terminal and not p.deleting]
    # Rank order (an Indexed Job's completion index) first: the engine places pods in this order.
    waiting = tuple(sorted((p for p in pods if p.gated), key=_rank))
    placed = tuple(sorted((p for p in pods if p.usage_node), key=lambda p: p.name))
    gang = state.group.gang_min_count is not None
    leaf = _Leaf(
        state=state,
        min_count=state.group.gang_min_count or 1,
        gang=gang,
        waiting=waiting,
        ready=tuple(p for p in waiting if not p.other_gates),
        placed=placed,
        admission=state.group.status.admission,
    )
    if placed:
        leaf.domain = state.group.status.domain
    return leaf


@dataclass
class _Tree:
    state: TreeState
    leaves: dict[str, _Leaf]
    actions: list[Action] = field(default_factory=list)
    outcome: st.Outcome | None = None  # the root's
    admission: Admission | None = None  # the root's record
    domain: str | None = None

    @property
    def released(self) -> int:
        return sum(leaf.released_now for leaf in self.leaves.values())


def schedule_tree(tree: TreeState, ctx: _Pass) -> GroupPlan | None:
    """The actions of one pass for one tree (or standalone PodGroup): decide, record, release, status."""
    t = _Tree(tree, {ls.group.name: _leaf(ls) for ls in tree.leaves})
    if tree.root is not None:
        t.admission = tree.root.status.admission
        if t.admission is not None and any(leaf.placed for leaf in t.leaves.values()):
            t.domain = tree.root.status.domain
    _decide(t, ctx)
    _statuses(t, ctx)
    if tree.job is not None and tree.root is not None:
        # A Job's slices: what is said on the CompositePodGroup is said on the Job too.
        root_ref = tree.root.ref
        t.actions.extend(
            _event(tree.job.ref, a.type, a.reason, a.message)
            for a in list(t.actions)
            if isinstance(a, PostEvent) and a.involved == root_ref
        )
    if not t.actions:
        return None
    return GroupPlan(tree.key, tuple(t.actions), tree.job.ref if tree.job else None, t.released)


def _decide(t: _Tree, ctx: _Pass) -> None:
    job = t.state.job
    if job is not None and (job.suspended or job.finished):
        return
    leaves = list(t.leaves.values())
    if t.state.root is None and not leaves[0].gang:
        leaf = leaves[0]
        # A basic group's pods are never held.
        t.actions.extend(UngatePod(p.ref) for p in leaf.waiting)
        leaf.ungated = len(leaf.waiting)
        return
    if job is not None and (stranded := _stranded(t)) is not None:
        # Released pods kube-scheduler cannot bind: the Job's release is rolled back whole.
        _requeue(t, stranded, "unbindable")
        return
    if not any(leaf.waiting for leaf in leaves):
        return
    blocked = [leaf for leaf in leaves if not leaf.enough and len(leaf.ready) < len(leaf.waiting)]
    if blocked:
        for leaf in blocked:
            gates = sorted({g for p in leaf.waiting for g in p.other_gates})
            leaf.outcome = st.Outcome(
                c.REASON_WAITING_FOR_GATES,
                f"minCount ({leaf.min_count}) is not yet satisfied: pods still carry scheduling gates of "
                f"other controllers ({', '.join(gates)}); Phalanx admits a pod only when its gate is the "
                "last one",
            )
        t.outcome = st.Outcome(
            c.REASON_WAITING_FOR_GATES,
            "waiting for other controllers' scheduling gates on pods of "
            + ", ".join(leaf.group.name for leaf in blocked),
        )
        return
    if _finish(t, ctx):
        return
    short = _short_of_pods(t)
    if short is not None:
        t.outcome = st.Outcome(c.REASON_WAITING_FOR_PODS, short)
        return
    if t.state.root is None:
        _decide_standalone(t, leaves[0], ctx)
    else:
        _decide_tree(t, ctx)


def _short_of_pods(t: _Tree) -> str | None:
    """Why the tree cannot be placed yet for want of pods (each leaf at its minCount, each composite at its
    minGroupCount), or None."""
    for leaf in t.leaves.values():
        if not leaf.enough:
            leaf.outcome = st.Outcome(
                c.REASON_WAITING_FOR_PODS,
                f"minCount ({leaf.min_count}) is not yet satisfied: {len(leaf.placed)} scheduled, "
                f"{len(leaf.waiting)} waiting; waiting for more pods to join it",
            )
    if t.state.root is None:
        leaf = next(iter(t.leaves.values()))
        return None if leaf.enough else (leaf.outcome.message if leaf.outcome else "")
    root = t.state.root
    if _countable(t, root):
        for leaf in t.leaves.values():
            leaf.outcome = None  # optional children short of pods do not hold the tree back
        return None
    missing = [leaf.group.name for leaf in t.leaves.values() if not leaf.enough]
    return (
        f"minGroupCount ({root.min_group_count or 1}) is not yet satisfied: "
        f"waiting for pods of {', '.join(missing) or 'its child groups'}"
    )


def _children(t: _Tree, parent: str) -> tuple[list[CompositePodGroupRecord], list[_Leaf]]:
    composites = [g for g in t.state.composites if g.parent == parent]
    leaves = [leaf for leaf in t.leaves.values() if leaf.group.parent == parent]
    return composites, leaves


def _countable(t: _Tree, composite: CompositePodGroupRecord) -> bool:
    composites, leaves = _children(t, composite.name)
    ok = sum(1 for leaf in leaves if leaf.enough) + sum(1 for g in composites if _countable(t, g))
    return ok >= (composite.min_group_count or 1)


def _request(leaf: _Leaf, levels: tuple[str, ...], mode: TopologyMode = "required") -> GroupRequest:
    return GroupRequest(
        name=leaf.group.name,
        pending=tuple(PodRequest(id=p.key, requirements=p.requirements, traits=p.traits) for p in leaf.ready),
        min_count=leaf.min_count,
        topology_key=leaf.group.topology_key,
        bound_nodes=tuple(p.usage_node for p in leaf.placed),
        levels=levels,
        mode=mode,
    )


def levels_of(keys: Iterable[str | None], levels: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The levels of the Topology that lists a key of the group (the first one that does)."""
    return next((levels[k] for k in keys if k is not None and k in levels), ())


def _composite_request(t: _Tree, g: CompositePodGroupRecord, levels: tuple[str, ...]) -> CompositeRequest:
    composites, leaves = _children(t, g.name)
    children: list[GroupRequest | CompositeRequest] = [_request(leaf, levels) for leaf in leaves]
    children.extend(_composite_request(t, child, ()) for child in composites)
    return CompositeRequest(
        name=g.name,
        children=tuple(children),
        min_count=g.min_group_count or 1,
        topology_key=g.topology_key,
        levels=levels,
    )


def _decide_standalone(t: _Tree, leaf: _Leaf, ctx: _Pass) -> None:
    key = leaf.group.topology_key
    levels = levels_of([key], ctx.levels)
    request = _request(leaf, levels, t.state.mode)
    started = time.perf_counter()
    decision = decide(ctx.snapshot, request)
    ctx.decision_seconds.append(time.perf_counter() - started)
    if isinstance(decision, Admit):
        if not decision.assignments:
            return  # minCount met by placed pods; the rest wait for room
        admission = _admission(
            decision.domain, decision.assignments, ctx.now, leaf.group.status, decision.level
        )
        t.actions.append(RecordAdmission(leaf.group.ref, admission, leaf.group.resource_version))
        _release(t, leaf, decision.assignments, admission)
        ctx.snapshot = ctx.snapshot.assume(admitted_usage(request, decision))
        message = admitted_message(len(decision.assignments), key, decision)
        leaf.outcome = st.Outcome(c.REASON_ADMITTED, message)
        t.actions.append(_event(leaf.group.ref, "Normal", "Admitted", message))
        return
    message = decision.message
    if decision.reason == "Unschedulable":
        message = f"{message}; {diagnose(ctx.snapshot, request).summary()}"
    leaf.outcome = st.Outcome(c.REASON_UNSCHEDULABLE, message, upstream=decision.message)


def admitted_message(count: int, key: str | None, decision: Admit) -> str:
    nodes = ", ".join(node for _, node in decision.assignments)
    if decision.level is not None:
        # Preferred topology climbed: say so, it is not what the key asked for.
        wider = f"one domain of {decision.level} ({decision.domain})" if decision.level else "anywhere"
        return (
            f"admitted {count} pod(s) on {nodes}: no domain of {key} had room for the group, so it was "
            f"placed in {wider} (topology mode preferred)"
        )
    where = f" in {key}={decision.domain}" if decision.domain else ""
    return f"admitted {count} pod(s){where} on {nodes}"


def _admission(
    domain: str | None,
    assignments: Iterable[tuple[str, str]],
    now: dt.datetime,
    status: GroupStatus,
    level: str | None = None,
) -> Admission:
    return Admission(
        domain=domain,
        assignments=[Assignment(pod=pod.split("/", 1)[1], node=node) for pod, node in assignments],
        admitted_at=now,
        attempt=st.next_attempt(status),
        level=level,
    )


def _release(
    t: _Tree, leaf: _Leaf, assignments: Iterable[tuple[str, str]], admission: Admission | None
) -> None:
    by_key = {p.key: p for p in leaf.ready}
    pairs = [(by_key[pod], node) for pod, node in assignments if pod in by_key]
    t.actions.extend(ReleasePod(p.ref, node, leaf.group.name) for p, node in pairs)
    leaf.released_now += len(pairs)
    if admission is not None:
        leaf.admission = admission
        leaf.domain = admission.domain


def _decide_tree(t: _Tree, ctx: _Pass) -> None:
    root = t.state.root
    assert root is not None
    keys = [g.topology_key for g in t.state.composites]
    keys += [leaf.group.topology_key for leaf in t.leaves.values()]
    levels = levels_of(keys, ctx.levels)
    request = _composite_request(t, root, levels)
    started = time.perf_counter()
    decision = decide_composite(ctx.snapshot, request)
    ctx.decision_seconds.append(time.perf_counter() - started)
    if isinstance(decision, CompositeAdmit):
        _admit_tree(t, root, request, decision, ctx)
        return
    first = decision.message.split("; ")[0]
    t.outcome = st.Outcome(c.REASON_UNSCHEDULABLE, decision.message, upstream=first)
    where = first.removeprefix("composite group is unschedulable: ")
    for leaf in t.leaves.values():
        upstream = (
            f"pod group is unschedulable: CompositePodGroup {root.name} cannot be placed whole ({where})"
        )
        why = decision.why(leaf.group.name)
        leaf.outcome = st.Outcome(c.REASON_UNSCHEDULABLE, f"{upstream}; {why}", upstream=upstream)
    if t.state.job is not None:
        _requeue_if_broken(t, ctx)


def _whole(t: _Tree, g: CompositePodGroupRecord) -> bool:
    """Whether the pods placed now (bound or released) alone meet every min count under `g`."""
    composites, leaves = _children(t, g.name)
    ok = sum(1 for leaf in leaves if len(leaf.placed) >= leaf.min_count)
    ok += sum(1 for child in composites if _whole(t, child))
    return ok >= (g.min_group_count or 1)


def _stranded(t: _Tree) -> str | None:
    """Pods of a Job's tree Phalanx released that kube-scheduler refuses to bind (their node filled up, was
    tainted or went away between the decision and the binding): never leave them behind a stale selector."""
    job = t.state.job
    if job is None or job.requeued:
        return None
    refused = [p for leaf in t.leaves.values() for p in leaf.placed if p.released and p.unschedulable]
    if not refused:
        return None
    first = refused[0]
    return (
        f"{REQUEUED_UNBINDABLE}: {len(refused)} released pod(s) cannot be bound where Phalanx placed them "
        f"({first.name} on {first.node_selector_host}: {first.unschedulable})"
    )


def _requeue_if_broken(t: _Tree, ctx: _Pass) -> None:
    """A running Job tree left short (a node failed: a slice lost pods, so it or the tree is below its min
    count) whose missing pods do not fit in its domains any more holds nodes for nothing: after the grace
    period (at once for disruptionMode all) requeue the Job whole, as for a plain gang (plan.py)."""
    job, root = t.state.job, t.state.root
    assert job is not None and root is not None
    placed = sum(len(leaf.placed) for leaf in t.leaves.values())
    if not placed or job.requeued or _whole(t, root):
        return
    admitted = root.status.condition(c.ADMITTED)
    since = ctx.now
    if admitted is not None and admitted.status == c.FALSE and admitted.reason == c.REASON_UNSCHEDULABLE:
        since = admitted.last_transition_time
    all_mode = job.policy is not None and job.policy.disruption_mode == "all"
    waited = (ctx.now - since).total_seconds()
    if not all_mode and waited < ctx.node_failure_grace:
        return
    short = [leaf.group.name for leaf in t.leaves.values() if len(leaf.placed) < leaf.min_count]
    domain = t.domain or (t.admission.domain if t.admission is not None else None)
    where = f" in {domain}" if domain else ""
    why = (
        f"{REQUEUED_BELOW_MIN_COUNT}: {placed} pod(s) of the tree were left{where}, "
        f"{', '.join(short)} short of its minCount, and the missing pods no longer fit there "
        f"(after {waited:.0f} s)"
    )
    _requeue(t, why, "below-min-count")


def _requeue(t: _Tree, why: str, cause: RequeueCause) -> None:
    """Suspend the Job to place its whole tree again; it is resumed once its pods are gone (plan_slices)."""
    job, root = t.state.job, t.state.root
    assert job is not None and root is not None
    t.actions.append(SuspendJob(job.ref, why, cause))
    t.actions.append(_event(root.ref, "Warning", "Requeued", why))  # said on the Job too (schedule_tree)
    outcome = st.Outcome(c.REASON_REQUEUED, f"requeued by Phalanx: {why}")
    t.outcome = outcome
    for leaf in t.leaves.values():
        leaf.outcome = outcome


def _admit_tree(
    t: _Tree, root: CompositePodGroupRecord, request: CompositeRequest, decision: CompositeAdmit, ctx: _Pass
) -> None:
    everything = [pair for _, a in decision.admits for pair in a.assignments]
    if not everything:
        return  # min counts met by placed pods
    record = _admission(decision.domain(root.name), everything, ctx.now, root.status)
    # One atomic write holds the whole tree's decision; a changed root (another writer) makes it fail.
    t.actions.append(RecordAdmission(root.ref, record, root.resource_version))
    t.admission = record
    t.domain = record.domain
    leaf_records = []
    for name, admit in decision.admits:
        leaf = t.leaves[name]
        if admit.assignments:
            own = _admission(admit.domain, admit.assignments, ctx.now, leaf.group.status)
            leaf_records.append(RecordAdmission(leaf.group.ref, own))
            leaf.admission, leaf.domain = own, admit.domain
    t.actions.extend(leaf_records)
    for name, admit in decision.admits:
        _release(t, t.leaves[name], admit.assignments, None)
    ctx.snapshot = ctx.snapshot.assume(composite_usage(request, decision))
    where = f" in {record.domain}" if record.domain else ""
    message = f"admitted {len(everything)} pod(s) of {len(decision.admits)} PodGroup(s){where}"
    t.outcome = st.Outcome(c.REASON_ADMITTED, message)
    t.actions.append(_event(root.ref, "Normal", "Admitted", message))
    for name, admit in decision.admits:
        leaf = t.leaves[name]
        msg = admitted_message(len(admit.assignments), leaf.group.topology_key, admit)
        leaf.outcome = st.Outcome(c.REASON_ADMITTED, msg)
        note = f"{msg} (CompositePodGroup {root.name})"
        t.actions.append(_event(leaf.group.ref, "Normal", "Admitted", note))


def _finish(t: _Tree, ctx: _Pass) -> bool:
    """Release the gated pods a recorded decision names, where it says — only if all of them still fit
    and every PodGroup it covers reaches its minCount with them; True when it did."""
    recorded = t.state.recorded
    if recorded is None:
        return False
    nodes = {a.pod: a.node for a in recorded.assignments}
    chosen: dict[str, list[tuple[PodRecord, str]]] = {}
    for name, leaf in t.leaves.items():
        pairs = [(p, nodes[p.name]) for p in leaf.ready if p.name in nodes]
        if pairs:
            chosen[name] = pairs
    if not chosen:
        return False
    for name, pairs in chosen.items():
        leaf = t.leaves[name]
        if len(pairs) + len(leaf.placed) < leaf.min_count:
            return False
    if not still_fit([pair for pairs in chosen.values() for pair in pairs], ctx):
        return False
    for name, pairs in chosen.items():
        leaf = t.leaves[name]
        if t.state.root is not None and leaf.group.status.admission is None:
            # Recorded on the root, not yet on the PodGroup (a restart in between): write it now.
            own = _admission(recorded.domain, [(p.key, n) for p, n in pairs], ctx.now, leaf.group.status)
            t.actions.append(RecordAdmission(leaf.group.ref, own))
            leaf.admission = own
        t.actions.extend(ReleasePod(p.ref, node, leaf.group.name) for p, node in pairs)
        leaf.released_now += len(pairs)
        leaf.domain = (leaf.admission.domain if leaf.admission else None) or leaf.domain
        on = ", ".join(n for _, n in pairs)
        message = f"released {len(pairs)} more pod(s) of the recorded decision on {on}"
        leaf.outcome = st.Outcome(c.REASON_ADMITTED, message)
        t.actions.append(_event(leaf.group.ref, "Normal", "Admitted", message))
    ctx.snapshot = ctx.snapshot.assume([(n, p.requests) for pairs in chosen.values() for p, n in pairs])
    t.outcome = st.Outcome(c.REASON_ADMITTED, "released the rest of the recorded decision")
    t.domain = recorded.domain
    return True


def still_fit(pairs: list[tuple[PodRecord, str]], ctx: _Pass) -> bool:
    """Every pod still fits on the node a recorded decision gave it: node present, schedulable, its taints
    tolerated and selectors met, room left for all of them together."""
    room: dict[str, dict[str, int]] = {}
    for pod, node_name in pairs:
        node = ctx.nodes.get(node_name)
        req = pod.requirements
        if node is None or not node_eligible(node, req.node_selector, req.affinity_terms, req.tolerations):
            return False
        if ctx.snapshot.node_index(node_name) is None:
            return False
        free = room.setdefault(node_name, ctx.snapshot.free(node_name))
        free[PODS] = free.get(PODS, 0) - 1
        for resource, amount in pod.requests.items():
            free[resource] = free.get(resource, 0) - amount
        if any(v < 0 for v in free.values()):
            return False
    return True


# ---------------------------------------------------------------------- status and events


def _event(involved: ObjectRef, type_: EventType, reason: str, message: str) -> PostEvent:
    return PostEvent(involved, type_, reason, message)


def _announce(ref: ObjectRef, before: GroupStatus, after: GroupStatus) -> list[Action]:
    """An event whenever the reason or message of Admitted changes (an admission has its own)."""
    old, new = before.condition(c.ADMITTED), after.condition(c.ADMITTED)
    if new is None or new.reason == c.REASON_ADMITTED:
        return []
    if old is not None and (old.reason, old.message) == (new.reason, new.message):
        return []
    type_: EventType = "Warning" if new.reason == c.REASON_UNSCHEDULABLE else "Normal"
    return [_event(ref, type_, new.reason, new.message)]


def _leaf_facts(leaf: _Leaf, job: JobRecord | None) -> st.GroupFacts:
    return st.GroupFacts(
        gang=leaf.gang,
        min_count=leaf.min_count,
        scheduled=sum(1 for p in leaf.placed if p.bound),
        released=sum(1 for p in leaf.placed if not p.bound) + leaf.released_now,
        waiting=len(leaf.waiting) - leaf.released_now - leaf.ungated,
        domain=leaf.domain,
        suspended=job.suspended if job else False,
        finished=job.finished if job else False,
        finished_how=job.finished_how if job else "",
        requeued=job.requeued if job else "",
        note=st.climbed_note(leaf.admission, leaf.group.topology_key),
    )


def _placed(leaf: _Leaf) -> tuple[bool, bool]:
    """(placed: its minCount holds a node or was released now, running: its minCount is bound)."""
    bound = sum(1 for p in leaf.placed if p.bound)
    return len(leaf.placed) + leaf.released_now >= leaf.min_count, bound >= leaf.min_count


def _statuses(t: _Tree, ctx: _Pass) -> None:
    job = t.state.job
    for leaf in t.leaves.values():
        group = leaf.group
        admission = leaf.admission
        if job is not None and (job.suspended or job.finished):
            admission = None
        elif not leaf.placed and not leaf.released_now:
            admission = None  # the decision's pods are gone
        facts = _leaf_facts(leaf, job)
        desired = st.desired_status(group.status, facts, leaf.outcome, ctx.now, group.generation, admission)
        if st.status_changed(group.status, desired):
            t.actions.append(PatchStatus(group.ref, desired))
            t.actions.extend(_announce(group.ref, group.status, desired))
        _count_waiting(desired, facts, ctx)
    root = t.state.root
    if root is None:
        return
    for composite in t.state.composites:
        composites, leaves = _children(t, composite.name)
        states = [_placed(leaf) for leaf in leaves] + [_subtree_placed(t, g) for g in composites]
        running = sum(1 for _, r in states if r)
        placed = sum(1 for p, _ in states if p)
        facts = st.GroupFacts(
            gang=composite.min_group_count is not None,
            min_count=composite.min_group_count or 1,
            scheduled=running,
            released=placed - running,
            waiting=len(states) - placed,
            domain=t.domain if composite is root else None,
            suspended=job.suspended if job else False,
            finished=job.finished if job else False,
            finished_how=job.finished_how if job else "",
            requeued=job.requeued if job else "",
            members="child group(s)",
        )
        outcome = t.outcome if composite is root else None
        admission = t.admission if composite is root and placed else None
        root_desired = st.desired_status(
            composite.status,
            facts,
            outcome,
            ctx.now,
            composite.generation,
            admission,
            initial_type=c.COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
        )
        if st.status_changed(composite.status, root_desired):
            t.actions.append(PatchStatus(composite.ref, root_desired))
            t.actions.extend(_announce(composite.ref, composite.status, root_desired))


def _subtree_placed(t: _Tree, g: CompositePodGroupRecord) -> tuple[bool, bool]:
    composites, leaves = _children(t, g.name)
    states = [_placed(leaf) for leaf in leaves] + [_subtree_placed(t, child) for child in composites]
    need = g.min_group_count or 1
    return sum(1 for p, _ in states if p) >= need, sum(1 for _, r in states if r) >= need


def _count_waiting(desired: GroupStatus, facts: st.GroupFacts, ctx: _Pass) -> None:
    present = desired.condition(c.ADMITTED)
    if facts.gang and facts.waiting and present is not None and present.reason != c.REASON_ADMITTED:
        ctx.waiting[present.reason] += 1
