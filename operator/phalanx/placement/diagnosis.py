"""Why a gang does not fit, per domain, in kube-scheduler's words (pure, vectorised).

`diagnose(snapshot, group)` says, for the closest domains, how many of the gang's waiting pods fit there
now and which filter or resource keeps the other nodes out ("1 node: Insufficient nvidia.com/gpu",
"2 nodes: untolerated taint example.com/x"), and whether the gang could fit at all in this cluster with
every node empty — so a gang that only has to wait is told apart from one that never fits. Counts per
domain are exact for a gang whose pods are alike (the usual case). Pods of several kinds (a leader and the
slots of its workers to come, a JobSet's child Jobs) share the free room: each kind takes its part in turn,
so a node is never counted for two pods it cannot hold both; the count is then one packing (a lower bound),
and "room for N pods" is said only when the resources hold all of them at once. Whether a gang can never
fit stays an upper bound (it is not told "never" on a packing that missed). The decision itself stays
`decide`'s; this only explains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .constraints import GroupConstraints
from .engine import resolve_mode
from .levels import effective_levels, level_of, path_column
from .model import PODS, GroupRequest, PodRequirements
from .snapshot import Snapshot

__all__ = ["Diagnosis", "DomainReport", "diagnose"]

SHOWN_DOMAINS = 2


@dataclass(frozen=True, slots=True)
class DomainReport:
    domain: str | None  # None: the whole cluster (no topology key)
    fit: int  # of the gang's waiting pods, how many fit here now
    reasons: tuple[tuple[str, int], ...]  # (reason, nodes) for nodes that take none, most nodes first


@dataclass(frozen=True, slots=True)
class Diagnosis:
    need: int  # pods that must fit together now
    domains: tuple[DomainReport, ...]  # the closest ones first
    never_fits: bool  # not even with every node of the cluster empty
    best_when_empty: int  # the most pods one domain holds with every node empty

    def summary(self) -> str:
        parts = []
        for report in self.domains:
            where = f"{report.domain}: " if report.domain is not None else ""
            if report.fit >= self.need:
                # Resources and node filters would allow it: what refuses is a rule between pods.
                parts.append(
                    f"{where}room for {self.need} pods, but their pod (anti-)affinity, topology spread, "
                    "host ports or volumes do not allow them there together"
                )
                continue
            text = f"{where}{report.fit} of {self.need} pods fit"
            if report.reasons:
                text += " (" + ", ".join(f"{_nodes(n)}: {why}" for why, n in report.reasons) + ")"
            parts.append(text)
        line = "; ".join(parts)
        if self.never_fits:
            line += (
                f"; it can never fit in this cluster: with every node empty the largest domain holds "
                f"{self.best_when_empty} of the {self.need} pods"
            )
        return line


def _nodes(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def _per_node(
    snapshot: Snapshot, free: IntArray, req: PodRequirements, cap: int, nodes: IndexArray | None = None
) -> IntArray:
    """How many pods with `req` fit on each node alone (at most `cap`), statically eligible nodes only.
    `free`: the free resource rows of `nodes` (of every node when None)."""
    width = free.shape[1]
    count = np.full(width, cap, dtype=np.int64)
    for resource, amount in (*req.requests, (PODS, 1)):
        if amount <= 0:
            continue
        row = snapshot.resource_index(resource)
        if row is None:
            return np.zeros(width, dtype=np.int64)
        np.minimum(count, free[row] // amount, out=count)
    np.maximum(count, 0, out=count)
    eligible = snapshot.eligible(req)
    result: IntArray = count * (eligible if nodes is None else eligible[nodes])
    return result


def _reasons(
    snapshot: Snapshot, free: IntArray, req: PodRequirements, nodes: IntArray, static: _Static = None
) -> list[tuple[str, int]]:
    """Why the given nodes take no pod with `req`: the first failing filter per node, as kube-scheduler
    reports it (static filters, then each requested resource, then the pod's volumes, ports and existing
    pods' anti-affinity)."""
    table = snapshot.table
    left = np.ones(len(nodes), dtype=np.bool_)
    out: list[tuple[str, int]] = []

    def take(mask: BoolArray, why: str) -> None:
        nonlocal left
        hit = left & mask
        count = int(np.count_nonzero(hit))
        if count:
            out.append((why, count))
        left &= ~mask

    take(~table.base_mask[nodes], "not ready or unschedulable")
    take(~table.tolerated(req.tolerations)[nodes], "untolerated taint")
    take(~table.node_affinity(req)[nodes], "node(s) didn't match Pod's node affinity/selector")
    if req.required_features:
        take(~table.features(req.required_features)[nodes], "node(s) lack a required feature")
    for resource, amount in (*req.requests, (PODS, 1)):
        if amount <= 0:
            continue
        row = snapshot.resource_index(resource)
        if row is None:
            take(np.ones(len(nodes), dtype=np.bool_), f"Insufficient {resource}")
            continue
        take(free[row][nodes] < amount, "Too many pods" if resource == PODS else f"Insufficient {resource}")
    if static is not None:
        take(~static[0][nodes], static[1])
    out.sort(key=lambda item: -item[1])
    return out


def _domains(
    snapshot: Snapshot, group: GroupRequest, within: BoolArray | None = None
) -> list[tuple[str | None, IndexArray]]:
    n = len(snapshot.node_names)
    if group.topology_key is None:
        everywhere = np.arange(n, dtype=np.intp)
        return [(None, everywhere if within is None else everywhere[within])]
    levels = effective_levels(group.levels, group.topology_key)
    depth = level_of(levels, group.topology_key)
    if depth is None:
        groups = snapshot.domain_groups(group.topology_key)
    else:
        groups = path_column(snapshot, levels, depth).groups()
    out: list[tuple[str | None, IndexArray]] = [
        (name, groups.order[groups.starts[d] : groups.ends[d]]) for d, name in enumerate(groups.names)
    ]
    if within is not None:
        out = [(name, nodes[within[nodes]]) for name, nodes in out]
        out = [(name, nodes) for name, nodes in out if nodes.size]
    pinned = {
        groups.names[int(groups.codes[i])]
        for node in group.bound_nodes
        if (i := snapshot.node_index(node)) is not None and groups.codes[i] >= 0
    }
    return [(name, nodes) for name, nodes in out if name in pinned] if pinned else out


def diagnose(snapshot: Snapshot, group: GroupRequest, *, within: BoolArray | None = None) -> Diagnosis:
    """`within`: only nodes in this mask count (a composite child inside its parent's domain). An `auto`
    group is diagnosed at the level it is decided at (`resolve_mode`)."""
    group = resolve_mode(snapshot, group)
    need = max(0, group.min_count - len(group.bound_nodes))
    pending = len(group.pending)
    statics = _statics(snapshot, group)
    # Pods alike for the engine's filters: same requirements and the same per-pod node restriction.
    signatures: dict[tuple[PodRequirements, int], int] = {}
    for position, pod in enumerate(group.pending):
        key = (pod.requirements, statics.index[position])
        signatures[key] = signatures.get(key, 0) + 1
    alloc = np.asarray(snapshot.allocatable_by_resource)
    free = alloc - np.asarray(snapshot.used_by_resource)
    now = [
        _restricted(_per_node(snapshot, free, req, count), statics.masks[k])
        for (req, k), count in signatures.items()
    ]
    # With every node empty only resources and node filters count: what existing pods or volumes refuse
    # now is not proof that the gang can never fit.
    empty = [_per_node(snapshot, alloc, req, count) for (req, _), count in signatures.items()]
    domains = _domains(snapshot, group, within)

    # Every domain's nodes in one array, for sums over all domains at once (a gang waiting under contention
    # is diagnosed in every pass, over every domain: 100 local blocks at 1,000 nodes).
    sizes = np.array([len(nodes) for _, nodes in domains], dtype=np.intp)
    ends = np.cumsum(sizes)
    order = np.concatenate([nodes for _, nodes in domains]) if domains else np.zeros(0, dtype=np.intp)

    def fits(per_node: Sequence[IntArray]) -> list[int]:
        """Per domain (in `domains`' order): how many pending pods its nodes take, each node alone."""
        if not per_node:
            return [0] * len(domains)
        running = np.concatenate([[0], np.cumsum(np.sum(per_node, axis=0)[order])])
        sums: IntArray = np.minimum(running[ends] - running[ends - sizes], pending)
        return [int(x) for x in sums.tolist()]

    # Pods of one kind: the sum of what each node takes is exact. Several kinds: one packing of them
    # (`_together`), which that sum bounds: a domain where it is 0 (most, when the cluster is full) is not
    # packed at all. Computed for every waiting gang in every pass the nodes change in.
    upper = dict(zip((name for name, _ in domains), fits(now), strict=True))
    if len(signatures) == 1:
        together = upper
    else:
        kinds = [(req, statics.masks[k], count) for (req, k), count in signatures.items()]
        together = {
            name: _together(snapshot, free, kinds, nodes) if upper[name] else 0 for name, nodes in domains
        }
    ranked = sorted(domains, key=lambda d: (-together[d[0]], d[0] or ""))
    reports = []
    for name, nodes in ranked[:SHOWN_DOMAINS]:
        taking_none = nodes[np.sum([counts[nodes] for counts in now], axis=0) == 0] if now else nodes
        reasons: dict[str, int] = {}
        for req, k in signatures:
            for why, count in _reasons(snapshot, free, req, taking_none, statics.masks[k]):
                reasons[why] = max(reasons.get(why, 0), count)
        ordered = tuple(sorted(reasons.items(), key=lambda item: -item[1]))
        reports.append(DomainReport(name, together[name], ordered))
    best_empty = max(fits(empty), default=0)
    return Diagnosis(need, tuple(reports), best_empty < need, best_empty)


_Static = tuple[BoolArray, str] | None  # (nodes a pod may use, kube-scheduler's reason for the others)


def _together(
    snapshot: Snapshot,
    free: IntArray,
    kinds: Sequence[tuple[PodRequirements, _Static, int]],
    nodes: IndexArray,
) -> int:
    """How many of the waiting pods fit on `nodes` at once, pods of a kind being alike (`kinds`: their
    requirements, node restriction and count). Each kind in turn (the one that fits on the fewest nodes
    first) takes the room it fits in, on the nodes in their order, and leaves the rest to the next: one
    packing, never a node counted for pods it cannot hold together."""
    left = free[:, nodes].copy()

    def room(req: PodRequirements, static: _Static, count: int) -> IntArray:
        return _restricted(_per_node(snapshot, left, req, count, nodes), static, nodes)

    total = 0
    for req, static, count in sorted(kinds, key=lambda kind: int(np.count_nonzero(room(*kind)))):
        here = room(req, static, count)
        taken = np.minimum(here, np.maximum(count - (np.cumsum(here) - here), 0))
        for resource, amount in (*req.requests, (PODS, 1)):
            row = snapshot.resource_index(resource)
            if amount > 0 and row is not None:
                left[row] -= taken * amount
        total += int(taken.sum())
    return total


@dataclass(frozen=True, slots=True)
class _Statics:
    masks: tuple[_Static, ...]  # distinct restrictions; masks[0] is None (no restriction)
    index: tuple[int, ...]  # per pending pod: its restriction in `masks`


def _statics(snapshot: Snapshot, group: GroupRequest) -> _Statics:
    """Each pod's node restriction from the filters `constraints.py` models per pod (volumes, volume limits,
    host ports and anti-affinity of pods already there), so a domain those refuse says why."""
    requirements = list({p.requirements: None for p in group.pending})
    cons = GroupConstraints.of(snapshot, group.pending, requirements) if group.pending else None
    if not isinstance(cons, GroupConstraints):
        return _Statics((None,), (0,) * len(group.pending))
    masks: list[_Static] = [None]
    seen: dict[tuple[bytes, str], int] = {}
    index = []
    for position in range(len(group.pending)):
        mask = cons.static(position)
        if mask is None or mask.all():
            index.append(0)
            continue
        reason = cons.pods[position].static_reason
        key = (np.packbits(mask).tobytes(), reason)
        if key not in seen:
            seen[key] = len(masks)
            masks.append((mask, reason))
        index.append(seen[key])
    return _Statics(tuple(masks), tuple(index))


def _restricted(counts: IntArray, static: _Static, nodes: IndexArray | None = None) -> IntArray:
    """`counts` (of `nodes`, or of every node when None) where the pods' node restriction allows."""
    if static is None:
        return counts
    result: IntArray = counts * (static[0] if nodes is None else static[0][nodes])
    return result
