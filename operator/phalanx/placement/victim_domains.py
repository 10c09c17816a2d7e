"""The preemptor's candidate domains and, per priority level, which of them victims can open (preemption.py).

`VictimDomains`: the domains of the group's topology key (the pinned one when pods of the group run) and
the domain of every node. `priority_levels` yields, lowest priority first, the capacity with every
candidate up to that priority gone; `domain_bounds` keeps the domains where that is enough and gives
each a lower bound of the cheapest victim set there, so domains are searched cheapest bound first and
the search stops at the first one dearer than the best set found.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .levels import effective_levels, level_codes, level_of, path_column
from .snapshot import Snapshot
from .victim_fit import PreemptorFit
from .victim_pool import VictimPool

__all__ = ["DomainBound", "PriorityLevel", "VictimDomains", "domain_bounds", "priority_levels"]

DomainBound = tuple[tuple[int, ...], int]
"""(lower bound of the cheapest search key in the domain, domain)."""


class VictimDomains:
    """The preemptor's candidate domains: names, the domain of every node, per-domain sums, and the domains
    of every lower level (for `VictimCost.spread`).

    With `levels` that list the key, domains are paths (b1/r1 != b2/r1), as `decide` has them; the lower
    levels are those below the key, then the nodes themselves (a hostname level and the nodes count
    alike).
    """

    def __init__(
        self, snapshot: Snapshot, key: str | None, levels: Sequence[str], bound_nodes: Sequence[str]
    ) -> None:
        n = len(snapshot.node_names)
        levels = effective_levels(levels, key)
        depth = level_of(levels, key)
        below = [] if not levels else level_codes(snapshot, levels, -1 if depth is None else depth)
        self.lower: list[IndexArray] = [*below, np.arange(n, dtype=np.intp)]
        self._order: IndexArray | None = None
        self._starts: IndexArray | None = None
        if key is None:
            self.names: tuple[str | None, ...] = (None,)
            self.of_node: IndexArray = np.zeros(n, dtype=np.intp)
            self.allowed: BoolArray = np.ones(1, dtype=np.bool_)
            return
        column = snapshot.column(key) if depth is None else path_column(snapshot, levels, depth)
        groups = column.groups()
        self.names = groups.names
        self.of_node = groups.codes
        self._order = groups.order
        self._starts = groups.starts
        self.allowed = np.ones(len(groups.names), dtype=np.bool_)
        if bound_nodes:
            # decide() rejected as Unschedulable, so the bound pods pin one valid domain.
            index = snapshot.node_index(bound_nodes[0])
            assert index is not None
            self.allowed[:] = False
            self.allowed[groups.codes[index]] = True

    def sums(self, per_node: IntArray) -> IntArray:
        """Per-domain sums of a per-node array."""
        if not len(self.names):
            return np.zeros(0, dtype=np.int64)
        if self._order is None or self._starts is None:
            return np.array([int(per_node.sum())], dtype=np.int64)
        result: IntArray = np.add.reduceat(per_node[self._order], self._starts)
        return result


@dataclass(slots=True)
class PriorityLevel:
    """Every candidate up to one priority removed: what fits per node and per domain."""

    freed: IntArray  # fit columns x nodes
    counts: list[IntArray]  # per signature, per node
    totals: list[IntArray]  # per signature, per domain
    gain: IntArray  # per node: pods (all signatures) that fit more than as things are
    pods: IndexArray  # pool entries counted (priority <= level, on a node some pod may use)


def priority_levels(
    fit: PreemptorFit, domains: VictimDomains, pool: VictimPool
) -> Iterable[tuple[int, PriorityLevel]]:
    levels = sorted(set(pool.unit_priority.tolist()))
    freed = np.zeros_like(fit.free)
    useful = fit.eligible_any[pool.node] & (domains.of_node[pool.node] >= 0)
    for level in levels:
        at = np.flatnonzero((pool.priority == level) & useful)
        for j in range(freed.shape[0]):
            np.add.at(freed[j], pool.node[at], pool.delta[j, at])
        free = fit.free + freed
        counts = [fit.counts(sig, free) for sig in fit.signatures]
        gain = sum((c - b for c, b in zip(counts, fit.base, strict=True)), np.zeros_like(fit.base[0]))
        totals = [domains.sums(c) for c in counts]
        pods = np.flatnonzero((pool.priority <= level) & useful)
        yield level, PriorityLevel(freed.copy(), counts, totals, gain, pods)


def domain_bounds(
    fit: PreemptorFit,
    domains: VictimDomains,
    pool: VictimPool,
    level: PriorityLevel,
    base_totals: list[IntArray],
) -> list[DomainBound]:
    """Feasible domains at this level with a lower bound of their cheapest key, cheapest first."""
    n_domains = len(domains.names)
    placed_max = np.zeros(n_domains, dtype=np.int64)
    placed_now = np.zeros(n_domains, dtype=np.int64)
    for sig, total, base in zip(fit.signatures, level.totals, base_totals, strict=True):
        placed_max += np.minimum(total, sig.size)
        placed_now += np.minimum(base, sig.size)
    pods = level.pods
    feasible = (placed_max >= fit.need) & domains.allowed
    # Only domains with candidates: a domain the model says fits without any is decide's to refuse.
    feasible &= np.bincount(domains.of_node[pool.node[pods]], minlength=n_domains) > 0
    if not feasible.any():
        return []
    deficit = fit.need - placed_now
    n_nodes = len(fit.eligible_any)
    pod_unit = pool.unit[pods]
    pod_node = pool.node[pods]
    # (unit, domain) pairs, and (unit, node) pairs: a unit frees at most what every candidate on
    # its nodes frees (each node counted once).
    pair_keys, pod_pair = np.unique(pod_unit * n_domains + domains.of_node[pod_node], return_inverse=True)
    pod_pair = pod_pair.reshape(-1)
    in_pair = np.bincount(pod_pair, minlength=len(pair_keys))
    _, first_pod = np.unique(pod_unit * n_nodes + pod_node, return_index=True)
    node_gain = level.gain[pod_node[first_pod]]
    ub = np.zeros(len(pair_keys), dtype=np.int64)
    np.add.at(ub, pod_pair[first_pod], node_gain)
    top_gain = np.zeros(len(pair_keys), dtype=np.int64)
    np.maximum.at(top_gain, pod_pair[first_pod], node_gain)
    pair_unit = pair_keys // n_domains
    pair_dom = pair_keys % n_domains
    size = pool.unit_size[pair_unit]
    limit = pool.unit_limit[pair_unit]
    whole = pool.unit_whole[pair_unit]
    newest = pool.unit_max_start[pair_unit]
    most = np.where(whole, size, np.minimum(limit, in_pair))
    # Fewest units whose bounds reach the deficit: per domain, largest bounds first.
    order = np.lexsort((-ub, pair_dom))
    cum = np.cumsum(ub[order])
    first = np.searchsorted(pair_dom[order], np.arange(n_domains), side="left")
    before = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0)
    reach = np.searchsorted(cum, before + np.maximum(deficit, 1), side="left")
    fewest = np.where(deficit > 0, np.maximum(reach - first + 1, 1), 1)
    # Victim pods: at least `fewest` units, and at least pods/gain per pod placed for the deficit.
    smallest = np.full(n_domains, 1 << 40, dtype=np.int64)
    np.minimum.at(smallest, pair_dom, pool.unit_min_pods[pair_unit])
    with np.errstate(divide="ignore"):
        ratio = np.minimum(
            np.where(whole & (ub > 0), size / np.maximum(ub, 1), np.inf),
            np.where((limit > 0) & (top_gain > 0), 1 / np.maximum(top_gain, 1), np.inf),
        )
    cheapest = np.full(n_domains, np.inf)
    np.minimum.at(cheapest, pair_dom, ratio)
    with np.errstate(invalid="ignore"):  # no deficit in a domain without a finite ratio: 0 * inf
        by_ratio = np.ceil(np.maximum(deficit, 0) * cheapest * (1 - 1e-12))
    pods_lb = np.maximum(fewest * smallest, np.where(np.isfinite(by_ratio), by_ratio, 0).astype(np.int64))
    starts_ub = _starts_bound(pair_dom, most, newest, pods_lb, n_domains)
    # Every set has a victim in the domain, so at least one domain of each lower level.
    spread = (1,) * len(domains.lower)
    out = []
    for d in np.flatnonzero(feasible).tolist():
        out.append(((int(fewest[d]), int(pods_lb[d]), -int(starts_ub[d]), *spread, d), d))
    out.sort()
    return out


def _starts_bound(
    pair_dom: IntArray, most: IntArray, newest: IntArray, pods_lb: IntArray, n_domains: int
) -> IntArray:
    """Per domain, an upper bound of the victims' start times: the newest units' pods filled in order up to
    the fewest victim pods (`pods_lb`); per (unit, domain) pair its domain, most pods, newest start."""
    order = np.lexsort((-newest, pair_dom))
    cum_pods = np.cumsum(most[order])
    cum_starts = np.cumsum(most[order] * newest[order])
    first = np.searchsorted(pair_dom[order], np.arange(n_domains), side="left")
    last = np.searchsorted(pair_dom[order], np.arange(n_domains), side="right") - 1
    pods_before = np.where(first > 0, cum_pods[np.maximum(first - 1, 0)], 0)
    starts_before = np.where(first > 0, cum_starts[np.maximum(first - 1, 0)], 0)
    target = pods_before + pods_lb
    k = np.minimum(np.searchsorted(cum_pods, target, side="left"), np.maximum(last, 0))
    full_pods = np.where(k > first, cum_pods[np.maximum(k - 1, 0)], pods_before)
    full_starts = np.where(k > first, cum_starts[np.maximum(k - 1, 0)], starts_before)
    starts_ub = full_starts - starts_before + np.maximum(target - full_pods, 0) * newest[order][k]
    return starts_ub
