"""The placement decision: which topology domain a pod group goes to, and which node each pod gets.

`decide` is pure: same snapshot and group, same decision. See docs of `decide` for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import messages
from .auto import AutoChoice, choose_auto
from .columns import IndexArray, IntArray
from .constraints import REASON_RESOURCES, GroupConstraints, Refusal
from .levels import Levels, effective_levels, level_codes, level_of, path_column, wider_levels
from .model import Admit, AssumedPod, Decision, GroupRequest, Reject
from .packing import DecisionContext, Signature, pod_capacity
from .snapshot import Snapshot

__all__ = ["admitted_usage", "auto_choice", "decide", "resolve_mode"]


@dataclass(frozen=True, slots=True)
class _Placements:
    """Candidate domains; domain i owns nodes order[starts[i]:ends[i]] (ascending node index)."""

    names: tuple[str | None, ...]
    order: IndexArray
    starts: IndexArray
    ends: IndexArray
    all_nodes: bool = False  # order is 0..n-1: no gather needed

    def nodes(self, d: int) -> IndexArray:
        return self.order[self.starts[d] : self.ends[d]]

    def sums(self, per_node: IntArray) -> IntArray:
        """Per-domain sums of a per-node 1-D array, exact in int64."""
        if self.order.size == 0:
            return np.zeros(len(self.names), dtype=np.int64)
        grouped = per_node if self.all_nodes else per_node[self.order]
        result: IntArray = np.add.reduceat(grouped, self.starts)
        return result

    def row_sums(self, rows: IntArray) -> IntArray:
        """Per-domain sums of each row of a rows x nodes array, as domains x rows."""
        out = np.empty((len(self.names), rows.shape[0]), dtype=np.int64)
        for j in range(rows.shape[0]):
            out[:, j] = self.sums(rows[j])
        return out


@dataclass(slots=True)
class _Outcome:
    """Result of packing the group into one domain."""

    placed: int
    leftover: IntArray  # per scored resource
    targets: dict[int, int]  # pending position -> node index
    why: str = ""  # the filter that refused the first pod left out (constrained packing only)


def _placements(snapshot: Snapshot, group: GroupRequest) -> _Placements | Reject:
    """Domains of the group's own key, without levels."""
    return _placements_at(snapshot, group, group.topology_key, ())


def _placements_at(
    snapshot: Snapshot, group: GroupRequest, key: str | None, levels: Levels
) -> _Placements | Reject:
    """Domains of `key` (paths when it is one of `levels`), or all nodes for None."""
    scheduled, remaining = len(group.bound_nodes), len(group.pending)
    if key is None:
        n = len(snapshot.node_names)
        return _Placements(
            names=(None,),
            order=np.arange(n, dtype=np.intp),
            starts=np.zeros(1, dtype=np.intp),
            ends=np.full(1, n, dtype=np.intp),
            all_nodes=True,
        )
    depth = level_of(levels, key)
    groups = snapshot.domain_groups(key) if depth is None else path_column(snapshot, levels, depth).groups()
    if not groups.names:
        return Reject(messages.no_domain(key), 0, 0, scheduled, remaining, "NoDomain")
    if not group.bound_nodes:
        return _Placements(groups.names, groups.order, groups.starts, groups.ends)

    # Pods of the group already hold nodes: their domain is the only placement.
    pinned: set[int] = set()
    for node in group.bound_nodes:
        index = snapshot.node_index(node)
        if index is None:
            message = messages.bound_node_missing(node)
        elif groups.codes[index] < 0:
            message = messages.bound_node_unlabelled(node, key)
        else:
            pinned.add(int(groups.codes[index]))
            continue
        return Reject(message, 0, 0, scheduled, remaining, "DomainConflict")
    if len(pinned) > 1:
        message = messages.bound_pods_span_domains(groups.names[d] for d in pinned)
        return Reject(message, 0, 0, scheduled, remaining, "DomainConflict")
    (d,) = pinned
    return _only(_Placements(groups.names, groups.order, groups.starts, groups.ends), d)


def _pack_homogeneous(
    ctx: DecisionContext, pl: _Placements, d: int, count: IntArray, placed: int
) -> dict[int, int]:
    sig = ctx.signatures[0]
    nodes = pl.nodes(d)
    nodes = ctx.fill_order(nodes[count[nodes] > 0], count, placed)
    caps = count[nodes]
    # Only the first nodes whose capacity covers `placed` are used.
    used_nodes = int(np.searchsorted(np.cumsum(caps), placed)) + 1
    targets = np.repeat(nodes[:used_nodes], caps[:used_nodes])[:placed]
    return dict(zip(sig.positions, targets.tolist(), strict=False))


def _decide_homogeneous(
    ctx: DecisionContext, pl: _Placements, group: GroupRequest, min_count: int
) -> Decision:
    sig = ctx.signatures[0]
    bound = len(group.bound_nodes)
    count = ctx.capacity(sig)
    placed = np.minimum(pl.sums(count), len(sig.positions))
    feasible = placed + bound >= min_count
    if not feasible.any():
        return _reject(pl, int(placed.max()), bound, min_count)

    best = int(placed[feasible].max())
    candidates = np.flatnonzero(feasible & (placed == best))
    leftover = pl.row_sums(ctx.score_free)[candidates] - best * sig.request[ctx.score_pos]
    d = int(candidates[ctx.scorer.argmin(leftover)])
    targets = _pack_homogeneous(ctx, pl, d, count, best)
    return _admit(ctx, pl, d, group, targets)


def _pack_mixed(
    ctx: DecisionContext, pl: _Placements, d: int, order: list[Signature], domain_free: IntArray
) -> _Outcome:
    """First-fit decreasing: bigger pods first, each on the first node in the fill order with room.

    Greedy, not optimal: a different order could sometimes place more pods. Pods with the same
    requirements are consecutive, and first fit for identical pods is a prefix fill, so each
    signature is placed in one vectorised step.
    """
    nodes = pl.nodes(d)
    nodes = ctx.fill_order(nodes[ctx.eligible[nodes]], None, sum(len(s.positions) for s in order))
    free = ctx.free[:, nodes]
    targets: dict[int, int] = {}
    placed_requests = np.zeros(len(ctx.score_pos), dtype=np.int64)
    placed = 0
    for sig in order:
        if sig.fits_nowhere:
            continue
        count = pod_capacity(free, sig.request, len(sig.positions))
        count[~sig.eligible[nodes]] = 0
        before = np.cumsum(count) - count
        take = np.clip(len(sig.positions) - before, 0, count)
        n = int(take.sum())
        if n == 0:
            continue
        free -= sig.request[:, None] * take
        chosen = np.repeat(nodes, take)
        targets.update(zip(sig.positions[:n], chosen.tolist(), strict=True))
        placed_requests += n * sig.request[ctx.score_pos]
        placed += n
    leftover = domain_free[d] - placed_requests
    return _Outcome(placed, leftover, targets)


def _decide_mixed(ctx: DecisionContext, pl: _Placements, group: GroupRequest, min_count: int) -> Decision:
    bound = len(group.bound_nodes)
    order = sorted(ctx.signatures, key=lambda s: (-ctx.size(s), s.positions[0]))
    # Upper bound per domain: every signature alone, ignoring the others. Domains are packed in
    # decreasing bound order and we stop once no remaining domain could place as many pods.
    upper = np.zeros(len(pl.names), dtype=np.int64)
    for sig in ctx.signatures:
        upper += np.minimum(pl.sums(ctx.capacity(sig)), len(sig.positions))

    domain_free = pl.row_sums(ctx.score_free)
    best: tuple[int, int, _Outcome] | None = None  # (domain, exact score, outcome), feasible only
    most = -1  # most pods placed in any domain packed so far
    for d in sorted(range(len(pl.names)), key=lambda i: (-int(upper[i]), i)):
        if upper[d] < most:
            break
        outcome = _pack_mixed(ctx, pl, d, order, domain_free)
        most = max(most, outcome.placed)
        if outcome.placed + bound < min_count:
            continue
        score = ctx.scorer.exact(outcome.leftover)
        if best is None or (-outcome.placed, score, d) < (-best[2].placed, best[1], best[0]):
            best = (d, score, outcome)

    if best is None:
        return _reject(pl, most, bound, min_count)
    return _admit(ctx, pl, best[0], group, best[2].targets)


def _pack_constrained(
    ctx: DecisionContext,
    cons: GroupConstraints,
    pl: _Placements,
    d: int,
    order: list[int],
    sig_of: list[Signature],
    domain_free: IntArray,
) -> _Outcome:
    """One pod at a time, biggest first, each on the first node in the fill order where it passes every
    filter given the pods of the group placed before it (see constraints.py)."""
    nodes = pl.nodes(d)
    nodes = ctx.fill_order(nodes[ctx.eligible[nodes]], None, len(order))
    free = ctx.free[:, nodes].copy()
    state = cons.start()
    targets: dict[int, int] = {}
    placed_requests = np.zeros(len(ctx.score_pos), dtype=np.int64)
    why = ""
    for position in order:
        sig = sig_of[position]
        mask = sig.eligible[nodes].copy() if not sig.fits_nowhere else np.zeros(len(nodes), dtype=np.bool_)
        for j in np.flatnonzero(sig.request > 0).tolist():
            mask &= free[j] >= sig.request[j]
        reason = REASON_RESOURCES
        static = cons.static(position)
        if static is not None and mask.any():
            mask &= static[nodes]
            reason = cons.pods[position].static_reason or reason
        if mask.any():
            mask, reason = state.allowed(position, nodes, mask)
        hits = np.flatnonzero(mask)
        if not hits.size:
            why = why or reason
            continue
        k = int(hits[0])
        free[:, k] -= sig.request
        node = int(nodes[k])
        state.place(position, node)
        targets[position] = node
        placed_requests += sig.request[ctx.score_pos]
    leftover = domain_free[d] - placed_requests
    return _Outcome(len(targets), leftover, targets, why)


def _decide_constrained(
    ctx: DecisionContext, cons: GroupConstraints, pl: _Placements, group: GroupRequest, min_count: int
) -> Decision:
    bound = len(group.bound_nodes)
    sig_of: list[Signature] = [ctx.signatures[0]] * len(group.pending)
    for sig in ctx.signatures:
        for position in sig.positions:
            sig_of[position] = sig
    order = sorted(range(len(group.pending)), key=lambda i: (-ctx.size(sig_of[i]), i))
    # Resources alone bound what a domain can place; the other filters only take pods away.
    upper = np.zeros(len(pl.names), dtype=np.int64)
    for sig in ctx.signatures:
        upper += np.minimum(pl.sums(ctx.capacity(sig)), len(sig.positions))

    domain_free = pl.row_sums(ctx.score_free)
    # Branch and bound: no packing of a domain places more than `upper` pods nor leaves less free than
    # if its `upper` biggest pods (per resource) were placed, so domains are packed in the order of that
    # optimistic (placed, score) and the search stops once none can beat the best found.
    optimistic = [ctx.scorer.exact(row) for row in domain_free - _top_sums(ctx, sig_of, upper)]
    best: tuple[int, int, _Outcome] | None = None
    closest: _Outcome | None = None
    for d in sorted(range(len(pl.names)), key=lambda i: (-int(upper[i]), optimistic[i], i)):
        if closest is not None and upper[d] < closest.placed:
            break
        if best is not None and (-int(upper[d]), optimistic[d], d) > (-best[2].placed, best[1], best[0]):
            break
        outcome = _pack_constrained(ctx, cons, pl, d, order, sig_of, domain_free)
        if closest is None or outcome.placed > closest.placed:
            closest = outcome
        if outcome.placed + bound < min_count:
            continue
        score = ctx.scorer.exact(outcome.leftover)
        if best is None or (-outcome.placed, score, d) < (-best[2].placed, best[1], best[0]):
            best = (d, score, outcome)

    if best is None:
        why = closest.why if closest is not None and closest.why != REASON_RESOURCES else ""
        return _reject(pl, closest.placed if closest is not None else 0, bound, min_count, why)
    return _admit(ctx, pl, best[0], group, best[2].targets)


def _top_sums(ctx: DecisionContext, sig_of: list[Signature], upper: IntArray) -> IntArray:
    """Per domain and scored resource: the sum of that resource over the `upper[d]` pods asking most of it."""
    requests = np.array([sig.request[ctx.score_pos] for sig in sig_of], dtype=np.int64).reshape(
        len(sig_of), len(ctx.score_pos)
    )
    prefix = np.zeros((len(sig_of) + 1, len(ctx.score_pos)), dtype=np.int64)
    if len(sig_of):
        np.cumsum(-np.sort(-requests, axis=0), axis=0, out=prefix[1:])
    result: IntArray = prefix[np.minimum(upper, len(sig_of))]
    return result


def _reject(pl: _Placements, placed: int, bound: int, min_count: int, why: str = "") -> Reject:
    """Report the placement that came closest (most pods placed), in upstream's words."""
    scheduled = bound + placed
    # Upstream tries pods one by one and stops as soon as scheduled + remaining < minCount.
    remaining = max(0, min_count - scheduled - 1)
    message = messages.unschedulable(len(pl.names), min_count, scheduled, remaining, why)
    return Reject(message, len(pl.names), 0, scheduled, remaining, "Unschedulable")


def _admit(
    ctx: DecisionContext, pl: _Placements, d: int, group: GroupRequest, targets: dict[int, int]
) -> Admit:
    names = ctx.snapshot.node_names
    assignments = tuple((pod.id, names[targets[i]]) for i, pod in enumerate(group.pending) if i in targets)
    return Admit(domain=pl.names[d], assignments=assignments)


def decide(snapshot: Snapshot, group: GroupRequest) -> Decision:
    """Place a pod group all-or-nothing in one topology domain.

    1. A node fits a pod if it is Ready and not cordoned, its NoSchedule/NoExecute taints are
       tolerated, nodeSelector, required node affinity and required node features match, and
       used + request <= allocatable for every resource the pod requests (plus one pod slot); and
       if the pod or the pods around it need it, the filters that depend on other pods and on
       volumes pass for the whole group together (constraints.py: inter-pod affinity and
       anti-affinity, host ports, topology spread, volume binding, zone and ReadWriteOncePod).
    2. Placements are the values of label `topology_key` (all nodes when None); nodes where the
       group already runs pin the placement. With `levels` that list the key, a placement is the path
       of level values down to the key (b1/r1 != b2/r1), so it never spans two parent domains.
    3. A placement is feasible if the pods that fit there plus the bound ones reach minCount;
       every pending pod that fits is placed, not only minCount of them.
    4. Among feasible placements: most pods placed, then least normalised free capacity left
       (best fit), then smallest domain name.
    5. Inside it, Kueue's BestFit with the node as the lowest level always: with levels the fewest
       domains of each lower level, and with or without levels the fewest nodes, the last one the
       tightest fit (levels.py); ties: the fullest node, then the name.
    6. `mode: preferred`: if no domain of the key is feasible, the next wider level is tried (one
       domain of it, the fewest domains of the finer levels inside), and so on up to all nodes;
       `Admit.level` then names the level used ("" for all nodes).
    7. `mode: auto`: `required` at the narrowest of those levels where the gang can ever fit one domain
       (the cluster's nodes empty: auto.py); `Admit.level` / `Reject.level` name a wider level used and
       `mode_note` says which applied and why.
    """
    if group.mode == "auto" and group.topology_key is not None:
        choice = auto_choice(snapshot, group)
        chosen = _decide_required(snapshot, choice.group(group))
        return replace(chosen, level=choice.level, mode_note=choice.note)
    levels = effective_levels(group.levels, group.topology_key)
    if group.mode != "preferred" or group.topology_key is None:
        return _decide_at(snapshot, group, group.topology_key, levels)
    decision: Decision = Reject("", 0, 0, 0, 0, "Unschedulable")
    for key, at_levels in wider_levels(group.topology_key, levels):
        decision = _decide_at(snapshot, group, key, at_levels)
        if isinstance(decision, Admit):
            return decision if key == group.topology_key else replace(decision, level=key or "")
        # A narrower level that cannot hold the group (no domain fits, no node carries it, or pods that
        # already run span its domains) gives way to the next wider one.
    return decision


def auto_choice(snapshot: Snapshot, group: GroupRequest) -> AutoChoice:
    """Where an `auto` group is decided, as `required` (auto.py): its key when the gang can ever fit one
    domain of it on this cluster's nodes, else the narrowest wider level that can, else all nodes."""
    return choose_auto(snapshot, group, _decide_at)


def resolve_mode(snapshot: Snapshot, group: GroupRequest) -> GroupRequest:
    """An `auto` group as the `required` group it is decided as (same placement, without `mode_note`);
    any other group unchanged. For what works on required groups only (the victim search, diagnosis)."""
    if group.mode == "auto" and group.topology_key is not None:
        return auto_choice(snapshot, group).group(group)
    return group


def _decide_required(snapshot: Snapshot, group: GroupRequest) -> Decision:
    return _decide_at(snapshot, group, group.topology_key, effective_levels(group.levels, group.topology_key))


def _decide_at(snapshot: Snapshot, group: GroupRequest, key: str | None, levels: Levels) -> Decision:
    min_count = max(1, group.min_count)
    bound, pending = len(group.bound_nodes), len(group.pending)
    if pending + bound < min_count:
        return Reject(messages.too_few_pods(min_count, bound, pending), 0, 0, bound, pending, "Unschedulable")
    pl = _placements_at(snapshot, group, key, levels)
    if isinstance(pl, Reject):
        return pl
    if pending == 0:
        return Admit(domain=pl.names[0], assignments=())
    lower: list[IndexArray] = []
    if levels:
        depth = level_of(levels, key)
        lower = level_codes(snapshot, levels, -1 if depth is None else depth)
    ctx = DecisionContext(snapshot, group.pending, lower)
    cons = GroupConstraints.of(snapshot, group.pending, [sig.requirements for sig in ctx.signatures])
    if isinstance(cons, Refusal):
        return Reject(cons.message, 0, 0, bound, pending, cons.reason)
    if group.preferred_domain in pl.names and len(pl.names) > 1:
        # The domain it had before, when the group fits there (else the usual rule over all of them).
        first = _decide_in(ctx, cons, _only(pl, pl.names.index(group.preferred_domain)), group, min_count)
        if isinstance(first, Admit):
            return first
    return _decide_in(ctx, cons, pl, group, min_count)


def _decide_in(
    ctx: DecisionContext, cons: GroupConstraints | None, pl: _Placements, group: GroupRequest, min_count: int
) -> Decision:
    if cons is not None:
        return _decide_constrained(ctx, cons, pl, group, min_count)
    if len(ctx.signatures) == 1:
        return _decide_homogeneous(ctx, pl, group, min_count)
    return _decide_mixed(ctx, pl, group, min_count)


def _only(pl: _Placements, d: int) -> _Placements:
    """The placements narrowed to domain d."""
    return _Placements(
        names=(pl.names[d],),
        order=pl.order[pl.starts[d] : pl.ends[d]],
        starts=np.zeros(1, dtype=np.intp),
        ends=np.full(1, pl.ends[d] - pl.starts[d], dtype=np.intp),
    )


def admitted_usage(group: GroupRequest, admit: Admit) -> list[AssumedPod]:
    """The assigned pods on their nodes, ready for `Snapshot.assume` (their usage, and what the filters of
    later decisions see of them: released pods kube-scheduler has not bound yet)."""
    pods = {pod.id: pod for pod in group.pending}
    return [
        AssumedPod(node, pods[pod_id].requirements.request_map(), pods[pod_id])
        for pod_id, node in admit.assignments
    ]
