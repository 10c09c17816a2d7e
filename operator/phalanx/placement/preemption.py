"""Victim choice: which lower-priority pods to remove so that a pod group that does not fit can be admitted.

Pure, like the rest of the engine: `choose_victims(snapshot, group, priority, candidates, groups)`
returns the cheapest `Preemption`, or None. The rules (docs/design.md, "Preemption: victim choice"):

- Never preempt when `decide(snapshot, group)` admits, nor when removing pods cannot help (no
  domain, a domain conflict, too few pods).
- Victims have a priority strictly lower than the preemptor's. A Phalanx group is as important as
  its most important running pod; a pod Phalanx does not manage is a victim on its own.
- Victim units: a `disruption: all` group, all of its pods or none; a `single` group, pods one by
  one while it keeps minCount running pods, else all of them (a gang is never left below minCount
  holding nodes); an unmanaged pod.
- Cost, compared in order (`VictimCost`): the highest victim priority; the number of victim groups
  (an unmanaged pod is one); the number of victim pods; the sum of the victims' start times, larger
  (more recent: less run time lost) is cheaper; then the domain name and the sorted victim ids.
- Every domain of the group's topology key is searched (the pinned one if pods of the group run);
  the cheapest victim set over all domains wins. The admission returned is `decide` on the snapshot
  without the victims.

How. A per-node capacity model mirrors `decide` (same free capacity, eligibility and request
clipping) and is updated in O(resources) per pod taken or given back. For each priority level,
lowest first, numpy finds the domains where removing every candidate up to that level would make
the group fit, with a lower bound of the cost there; domains are searched cheapest bound first, and
the search stops at the first domain whose bound is dearer than the best set found. In a domain, a
greedy add-then-reprieve gives a first set, then a branch and bound finds the cheapest one. It
prunes with (a) the capacity if every undecided candidate were removed, (b) lower bounds of the
groups still needed (a unit frees at most what all candidates on its nodes free) and of the pods
they bring, and an upper bound of their start times. The search is exact; `max_steps` bounds it,
and a search cut short returns the cheapest set found so far (`Preemption.exact` is False).

The model knows resources, pod slots and the static node filters, not the filters that depend on
other pods (inter-pod affinity, host ports, topology spread, volumes), so it never refuses what
`decide` admits. The chosen set is checked with `decide`; if `decide` refuses it, the search runs
again with `decide` as the check of every candidate set (the model then only prunes), which is also
how groups with several pod shapes are searched.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .engine import decide
from .model import PODS, Admit, GroupRequest, PodRequirements
from .preemption_model import Candidate, Preemption, VictimCost, VictimGroup
from .snapshot import Snapshot

__all__ = ["DEFAULT_MAX_STEPS", "choose_victims"]

DEFAULT_MAX_STEPS: Final = 20_000
"""Search steps (a candidate tried) before the search returns the cheapest set found so far."""

_ORACLE_STEPS: Final = 25
"""A capacity check through `decide` (groups with several pod shapes) counts as this many steps."""

_MAX_DEPTH: Final = 250
"""The branch and bound recurses once per unit or single pod taken (two frames each); deeper branches
are not explored, and the result is then not exact."""

_US: Final = 1_000_000
_NEVER: Final = (1 << 62, 0, 0, 0)


# --- the preemptor's fit, per node ----------------------------------------------------------------


@dataclass(slots=True)
class _Signature:
    size: int
    pairs: tuple[tuple[int, int], ...]  # (fit column, amount > 0); the pod slot included
    eligible: BoolArray


class _Fit:
    """How many pods of each signature of the group fit per node, computed like `decide`."""

    def __init__(self, snapshot: Snapshot, group: GroupRequest) -> None:
        self.need = max(1, group.min_count) - len(group.bound_nodes)
        sizes: dict[PodRequirements, int] = {}
        for pod in group.pending:
            sizes[pod.requirements] = sizes.get(pod.requirements, 0) + 1
        pods_row = snapshot.resource_index(PODS)
        assert pods_row is not None, "every snapshot has a pods column"
        rows = {pods_row}
        for req in sizes:
            for resource, amount in req.requests:
                row = snapshot.resource_index(resource)
                if amount > 0 and resource != PODS and row is not None:
                    rows.add(row)
        self.rows = sorted(rows)
        self.resources = [snapshot.resources[r] for r in self.rows]
        column = {r: j for j, r in enumerate(self.rows)}
        alloc, used = snapshot.allocatable_by_resource, snapshot.used_by_resource
        self.free: IntArray = alloc[self.rows] - used[self.rows]
        self.cap = snapshot.max_amount
        n = len(snapshot.node_names)
        self.signatures: list[_Signature] = []
        for req, size in sizes.items():
            amounts = {column[pods_row]: 1}
            fits_nowhere = False
            for resource, amount in req.requests:
                if amount <= 0 or resource == PODS:
                    continue
                row = snapshot.resource_index(resource)
                if row is None:
                    fits_nowhere = True  # no node offers it
                else:
                    amounts[column[row]] = min(amount, self.cap + 1)
            eligible = np.zeros(n, dtype=np.bool_) if fits_nowhere else snapshot.eligible(req)
            self.signatures.append(_Signature(size, tuple(sorted(amounts.items())), eligible))
        self.eligible_any: BoolArray = np.zeros(n, dtype=np.bool_)
        for sig in self.signatures:
            self.eligible_any |= sig.eligible
        self.base: list[IntArray] = [self.counts(sig, self.free) for sig in self.signatures]
        """Pods of each signature that fit per node as things are."""

    def counts(self, sig: _Signature, free: IntArray) -> IntArray:
        """Pods of `sig` that fit per node given free capacity (columns x nodes)."""
        count: IntArray | None = None
        for j, amount in sig.pairs:
            q = free[j] // amount
            count = q if count is None else np.minimum(count, q)
        assert count is not None
        np.maximum(count, 0, out=count)
        count *= sig.eligible
        return count

    def placed(self, totals: Iterable[int]) -> int:
        """Pods placed with these per-signature totals (decide: at most the signature's size)."""
        return sum(min(t, s.size) for t, s in zip(totals, self.signatures, strict=True))


# --- candidates -----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Unit:
    """What is preempted together: a group (whole, or some pods of a `single` one) or a loose pod."""

    key: str
    managed: bool
    priority: int
    ids: list[str]  # every running pod: the whole option takes them all
    whole: bool  # all of them may go at once (none is excluded)
    limit: int  # at most this many may go one by one (single groups)
    start_total: int
    max_start: int


class _Pool:
    """The candidates that may be preempted: one entry per pod that may go (arrays), and per unit
    (arrays; the `_Unit` record of a unit is built when a domain search needs it)."""

    def __init__(
        self,
        snapshot: Snapshot,
        fit: _Fit,
        priority: int,
        candidates: Iterable[Candidate],
        groups: Iterable[VictimGroup],
        excluded_pods: Collection[str],
        excluded_groups: Collection[str],
    ) -> None:
        counted = snapshot.bound_pod_ids
        node_index = snapshot.node_index
        latest = {c.id: c for c in candidates}
        loose: list[Candidate] = []
        members: dict[str, list[Candidate]] = {}
        for c in latest.values():
            key = c.group
            if key is None:
                if c.priority < priority and c.id not in excluded_pods:
                    loose.append(c)
            else:
                members.setdefault(key, []).append(c)
        definitions = {g.key: g for g in groups}
        keys = [k for k in sorted(members) if k in definitions and k not in excluded_groups]

        # Group members, contiguous per group; only pods the snapshot counts are running.
        flat = [c for k in keys for c in members[k]]
        where = [node_index(c.node) for c in flat]
        running = np.fromiter(
            (node is not None and c.id in counted for c, node in zip(flat, where, strict=True)),
            dtype=np.bool_,
            count=len(flat),
        )
        code = np.repeat(np.arange(len(keys)), [len(members[k]) for k in keys])[running]
        keep = running.tolist()
        flat = [c for c, k in zip(flat, keep, strict=True) if k]
        node = np.array([n for n, k in zip(where, keep, strict=True) if k], dtype=np.intp)
        prio = np.array([c.priority for c in flat], dtype=np.int64)
        start = np.array([round(c.started * _US) for c in flat], dtype=np.int64)
        out = np.fromiter((c.id in excluded_pods for c in flat), dtype=np.bool_, count=len(flat))
        g = len(keys)
        size = np.bincount(code, minlength=g)
        top = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(top, code, prio)
        held = np.bincount(code[out], minlength=g)  # excluded pods: the group never goes all at once
        single = np.array([definitions[k].disruption == "single" for k in keys], dtype=np.bool_)
        min_count = np.array([max(1, definitions[k].min_count) for k in keys], dtype=np.int64)
        limit = np.where(single, np.maximum(size - min_count, 0), 0)
        whole = held == 0
        useful = (size > held) & (top < priority) & (whole | (limit > 0))
        n_groups = int(useful.sum())
        group_unit = np.full(g, -1, dtype=np.intp)
        group_unit[useful] = np.arange(n_groups)
        go = useful[code] & ~out  # pods that may go

        # Units: useful groups (members _ids[first:first + size]), then loose pods.
        loose = [c for c in loose if c.id in counted and node_index(c.node) is not None]
        self._keys = [k for k, u in zip(keys, useful.tolist(), strict=True) if u] + [c.id for c in loose]
        self._managed = n_groups
        self._first = np.searchsorted(code, np.flatnonzero(useful))
        self._ids = [c.id for c in flat]
        self._starts: list[int] = start.tolist()
        loose_start = np.array([round(c.started * _US) for c in loose], dtype=np.int64)
        newest = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(newest, code, start)
        self.unit_priority: IntArray = np.concatenate(
            [top[useful], np.array([c.priority for c in loose], dtype=np.int64)]
        )
        self.unit_size: IntArray = np.concatenate([size[useful], np.ones(len(loose), dtype=np.int64)])
        self.unit_limit: IntArray = np.concatenate([limit[useful], np.zeros(len(loose), dtype=np.int64)])
        self.unit_whole: BoolArray = np.concatenate([whole[useful], np.ones(len(loose), dtype=np.bool_)])
        self.unit_min_pods: IntArray = np.where(self.unit_limit > 0, 1, self.unit_size)
        self.unit_max_start: IntArray = np.concatenate([newest[useful], loose_start])
        self._units: dict[int, _Unit] = {}

        # Pods that may go: group members, then loose pods.
        picked = np.flatnonzero(go)
        self.ids = [flat[i].id for i in picked.tolist()] + [c.id for c in loose]
        self.node: IndexArray = np.concatenate(
            [node[picked], np.array([node_index(c.node) for c in loose], dtype=np.intp)]
        ).astype(np.intp)
        self.unit: IndexArray = np.concatenate(
            [group_unit[code[picked]], n_groups + np.arange(len(loose), dtype=np.intp)]
        ).astype(np.intp)
        self.start: IntArray = np.concatenate([start[picked], loose_start])
        self.priority: IntArray = self.unit_priority[self.unit]
        requests = [flat[i].requests for i in picked.tolist()] + [c.requests for c in loose]
        self.delta = _deltas(fit, requests)

    def unit_record(self, u: int) -> _Unit:
        record = self._units.get(u)
        if record is None:
            managed = u < self._managed
            if managed:
                first, last = int(self._first[u]), int(self._first[u] + self.unit_size[u])
                ids, start_total = self._ids[first:last], sum(self._starts[first:last])
            else:
                ids, start_total = [self._keys[u]], int(self.unit_max_start[u])
            record = _Unit(
                self._keys[u],
                managed,
                int(self.unit_priority[u]),
                ids,
                bool(self.unit_whole[u]),
                int(self.unit_limit[u]),
                start_total,
                int(self.unit_max_start[u]),
            )
            self._units[u] = record
        return record


def _deltas(fit: _Fit, requests: list[Mapping[str, int]]) -> IntArray:
    """Capacity each pod frees per fit column (columns x pods), as Snapshot.without subtracts it."""
    named = [r for r in fit.resources if r != PODS]
    delta = np.ones((len(fit.resources), len(requests)), dtype=np.int64)
    if named:
        flat = [r.get(name, 0) for r in requests for name in named]
        try:
            values = np.array(flat, dtype=np.int64).reshape(len(requests), len(named)).T
        except OverflowError:
            values = np.array([min(int(v), fit.cap) for v in flat], dtype=np.int64)
            values = values.reshape(len(requests), len(named)).T
        rows = [j for j, r in enumerate(fit.resources) if r != PODS]
        delta[rows] = np.clip(values, 0, fit.cap)
    return delta


# --- domains --------------------------------------------------------------------------------------


class _Domains:
    """The group's candidate domains: names, the domain of every node, per-domain sums."""

    def __init__(self, snapshot: Snapshot, group: GroupRequest) -> None:
        n = len(snapshot.node_names)
        key = group.topology_key
        self._order: IndexArray | None = None
        self._starts: IndexArray | None = None
        if key is None:
            self.names: tuple[str | None, ...] = (None,)
            self.of_node: IndexArray = np.zeros(n, dtype=np.intp)
            self.allowed: BoolArray = np.ones(1, dtype=np.bool_)
            return
        groups = snapshot.domain_groups(key)
        self.names = groups.names
        self.of_node = groups.codes
        self._order = groups.order
        self._starts = groups.starts
        self.allowed = np.ones(len(groups.names), dtype=np.bool_)
        if group.bound_nodes:
            # decide() rejected as Unschedulable, so the bound pods pin one valid domain.
            index = snapshot.node_index(group.bound_nodes[0])
            assert index is not None
            self.allowed[:] = False
            self.allowed[groups.codes[index]] = True

    def sums(self, per_node: IntArray) -> IntArray:
        if self._order is None or self._starts is None:
            return np.array([int(per_node.sum())], dtype=np.int64)
        result: IntArray = np.add.reduceat(per_node[self._order], self._starts)
        return result


# --- one priority level, all domains --------------------------------------------------------------


@dataclass(slots=True)
class _Level:
    """Every candidate up to one priority removed: what fits per node and per domain."""

    freed: IntArray  # fit columns x nodes
    counts: list[IntArray]  # per signature, per node
    totals: list[IntArray]  # per signature, per domain
    gain: IntArray  # per node: pods (all signatures) that fit more than as things are
    pods: IndexArray  # pool entries counted (priority <= level, on a node some pod may use)


def _levels(fit: _Fit, domains: _Domains, pool: _Pool) -> Iterable[tuple[int, _Level]]:
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
        yield level, _Level(freed.copy(), counts, totals, gain, pods)


def _domain_bounds(
    fit: _Fit, domains: _Domains, pool: _Pool, level: _Level, base_totals: list[IntArray]
) -> list[tuple[tuple[int, int, int, int], int]]:
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
    by_ratio = np.ceil(np.maximum(deficit, 0) * cheapest * (1 - 1e-12))
    pods_lb = np.maximum(fewest * smallest, np.where(np.isfinite(by_ratio), by_ratio, 0).astype(np.int64))
    # Start times: at most those of the newest units' pods, filled in order.
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
    out = []
    for d in np.flatnonzero(feasible).tolist():
        out.append(((int(fewest[d]), int(pods_lb[d]), -int(starts_ub[d]), d), d))
    out.sort()
    return out


# --- the search in one domain ---------------------------------------------------------------------

_Key = tuple[int, int, int, int]  # (groups, pods, -start total, domain)


@dataclass(slots=True, eq=False)
class _DPod:
    """A takeable pod on a node of the domain that some pod of the group may use."""

    id: str
    slot: int
    nz: tuple[tuple[int, int], ...]  # (fit column, amount) it frees
    start: int
    bucket: int  # same node and same requests in one unit: interchangeable


@dataclass(slots=True, eq=False)
class _DUnit:
    unit: _Unit
    pods: list[_DPod]
    partial: bool
    whole: bool
    ub: int  # at most this many more pods placed with all its pods gone
    ub_partial: int  # ... with at most `limit` of them gone
    ratio: tuple[int, int]  # (pods, gain): each pod placed costs at least pods/gain victim pods
    min_pods: int
    most_pods: int


@dataclass(slots=True, eq=False)
class _Chosen:
    unit: _DUnit
    whole: bool
    pods: list[_DPod]  # the partial pods (whole: all the unit's pods go)


@dataclass(slots=True)
class _Best:
    key: _Key
    ids: tuple[str, ...]
    chosen: list[_Chosen]


class _Run:
    """State shared by the domains of one call: the step budget and the best set so far."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.steps = 0
        self.exhausted = False
        """The step budget is spent: the search stopped early."""
        self.truncated = False
        """A branch deeper than _MAX_DEPTH was not explored."""
        self.best: _Best | None = None

    def tick(self, steps: int = 1) -> bool:
        """Count steps; True once the budget is spent."""
        self.steps += steps
        if self.steps > self.max_steps:
            self.exhausted = True
        return self.exhausted

    def key(self) -> _Key:
        return _NEVER if self.best is None else self.best.key


class _Layer:
    """Freed capacity per tracked node and the resulting counts per signature."""

    __slots__ = ("counts", "extra", "totals")

    def __init__(self, extra: list[list[int]], counts: list[list[int]], totals: list[int]) -> None:
        self.extra = extra
        self.counts = counts
        self.totals = totals


class _DomainSearch:
    def __init__(
        self,
        run: _Run,
        snapshot: Snapshot,
        group: GroupRequest,
        fit: _Fit,
        pool: _Pool,
        level: _Level,
        domain: int,
        base_totals: list[int],
        max_totals: list[int],
        pods: IndexArray,
        trusted: bool,
    ) -> None:
        self.run = run
        self.snapshot = snapshot
        self.group = group
        self.fit = fit
        self.rank = domain
        self.need = fit.need
        self.trusted = trusted
        self.single = len(fit.signatures) == 1
        self.pairs = [s.pairs for s in fit.signatures]
        self.oracle_memo: dict[frozenset[str], bool] = {}

        nodes, slot_of = np.unique(pool.node[pods], return_inverse=True)
        self.free: list[list[int]] = fit.free[:, nodes].T.tolist()
        self.eligible: list[list[bool]] = [s.eligible[nodes].tolist() for s in fit.signatures]
        self.cur = _Layer(
            [[0] * len(fit.resources) for _ in range(len(nodes))],
            [b[nodes].tolist() for b in fit.base],
            list(base_totals),
        )
        self.max = _Layer(
            level.freed[:, nodes].T.tolist(), [c[nodes].tolist() for c in level.counts], list(max_totals)
        )
        gain: list[int] = level.gain[nodes].tolist()

        by_unit: dict[int, list[_DPod]] = {}
        buckets: dict[tuple[int, int, tuple[tuple[int, int], ...]], int] = {}
        shapes: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        for unit, slot, start, pod_id, delta in zip(
            pool.unit[pods].tolist(),
            slot_of.tolist(),
            pool.start[pods].tolist(),
            [pool.ids[p] for p in pods.tolist()],
            map(tuple, pool.delta[:, pods].T.tolist()),
            strict=True,
        ):
            nz = shapes.get(delta)
            if nz is None:
                nz = shapes[delta] = tuple((j, v) for j, v in enumerate(delta) if v)
            bucket = buckets.setdefault((unit, slot, nz), len(buckets))
            by_unit.setdefault(unit, []).append(_DPod(pod_id, slot, nz, start, bucket))
        self.units: list[_DUnit] = []
        for u, dpods in by_unit.items():
            unit = pool.unit_record(u)
            # Most useful node first, newest first, the pods of one bucket next to each other.
            first: dict[int, tuple[int, int, str]] = {}
            for dp in dpods:
                key = (-gain[dp.slot], -dp.start, dp.id)
                first[dp.bucket] = min(first.get(dp.bucket, key), key)
            dpods.sort(key=lambda dp: (first[dp.bucket], -dp.start, dp.id))
            slots = sorted({dp.slot for dp in dpods}, key=lambda s: -gain[s])
            ub = sum(gain[s] for s in slots)
            partial = unit.limit > 0
            # Whole is dominated when the limit allows taking every pod that matters here.
            whole = unit.whole and not (partial and unit.limit >= len(dpods))
            ub_partial = sum(gain[s] for s in slots[: unit.limit])
            min_pods = 1 if partial else len(unit.ids)
            most = len(unit.ids) if whole else min(unit.limit, len(dpods))
            # A partial pod frees at most its node's gain; the whole unit at most ub.
            ratio = (len(unit.ids), ub) if unit.whole and ub > 0 else (1, 0)
            if partial and gain[slots[0]] > 0 and (ratio[1] == 0 or gain[slots[0]] * ratio[0] > ratio[1]):
                ratio = (1, gain[slots[0]])
            self.units.append(_DUnit(unit, dpods, partial, whole, ub, ub_partial, ratio, min_pods, most))

        # Branch and bound order: newest first (the start-time bound fills in this order).
        self.units.sort(key=lambda du: (-du.unit.max_start, -du.ub, du.unit.key))
        u = len(self.units)
        self.suffix_ub = [0] * (u + 1)
        self.suffix_min_pods = [1 << 40] * (u + 1)
        self.suffix_ratio = [(1, 0)] * (u + 1)  # the smallest pods/gain (1/0: none)
        for i in range(u - 1, -1, -1):
            du = self.units[i]
            self.suffix_ub[i] = max(du.ub, self.suffix_ub[i + 1])
            self.suffix_min_pods[i] = min(du.min_pods, self.suffix_min_pods[i + 1])
            (a, b), (c, d) = du.ratio, self.suffix_ratio[i + 1]
            self.suffix_ratio[i] = du.ratio if a * d < c * b or d == 0 else (c, d)
        self.cum_pods = [0]
        self.cum_starts = [0]
        for du in self.units:
            self.cum_pods.append(self.cum_pods[-1] + du.most_pods)
            self.cum_starts.append(self.cum_starts[-1] + du.most_pods * du.unit.max_start)

        self.chosen: list[_Chosen] = []
        self.taken: list[_DPod] = []
        self.groups = 0
        self.pod_count = 0
        self.start_total = 0

    # --- capacity ----------------------------------------------------------------------------------

    def _apply(self, layer: _Layer, dp: _DPod, sign: int) -> None:
        s_ = dp.slot
        extra = layer.extra[s_]
        for j, v in dp.nz:
            extra[j] += sign * v
        free = self.free[s_]
        for s, pairs in enumerate(self.pairs):
            if not self.eligible[s][s_]:
                continue
            m = -1
            for j, amount in pairs:
                q = (free[j] + extra[j]) // amount
                if m < 0 or q < m:
                    m = q
            if m < 0:
                m = 0
            counts = layer.counts[s]
            old = counts[s_]
            if m != old:
                counts[s_] = m
                layer.totals[s] += m - old

    def _deficit(self, layer: _Layer) -> int:
        if self.single:
            return self.need - min(layer.totals[0], self.fit.signatures[0].size)
        return self.need - self.fit.placed(layer.totals)

    def _feasible(self) -> bool:
        if self._deficit(self.cur) > 0:
            return False
        if self.trusted:
            return True
        ids = frozenset(dp.id for dp in self.taken)
        known = self.oracle_memo.get(ids)
        if known is None:
            self.run.tick(_ORACLE_STEPS)
            known = isinstance(decide(self.snapshot.without(ids), self.group), Admit)
            self.oracle_memo[ids] = known
        return known

    def _take(self, dp: _DPod) -> None:
        self._apply(self.cur, dp, 1)
        self.taken.append(dp)

    def _give_back(self, dp: _DPod) -> None:
        self._apply(self.cur, dp, -1)
        if self.taken[-1] is dp:
            self.taken.pop()
        else:
            self.taken.remove(dp)

    # --- cost --------------------------------------------------------------------------------------

    def _record(self, chosen: list[_Chosen]) -> None:
        """Offer a feasible victim set as the best one."""
        if not chosen:
            return  # the model says the group fits as is; decide() said no (see _result)
        groups = len(chosen)
        pods = sum(len(c.unit.unit.ids) if c.whole else len(c.pods) for c in chosen)
        starts = sum(c.unit.unit.start_total if c.whole else sum(dp.start for dp in c.pods) for c in chosen)
        key = (groups, pods, -starts, self.rank)
        best = self.run.best
        if best is not None and key > best.key:
            return
        ids = tuple(sorted(_victim_ids(chosen)))
        if best is not None and key == best.key and ids >= best.ids:
            return
        self.run.best = _Best(key, ids, [_Chosen(c.unit, c.whole, list(c.pods)) for c in chosen])

    def _fill(self, j: int, count: int) -> int | None:
        """Upper bound of the start times of `count` more pods from units[j:] (None: not that many)."""
        if count <= 0:
            return 0
        target = self.cum_pods[j] + count
        if target > self.cum_pods[-1]:
            return None
        k = bisect_right(self.cum_pods, target) - 1
        total = self.cum_starts[k] - self.cum_starts[j]
        if target > self.cum_pods[k]:
            total += (target - self.cum_pods[k]) * self.units[k].unit.max_start
        return total

    def _beaten(self, j: int, groups: int, pods: int, starts: int | None, deficit: int) -> bool:
        """True if no set that adds units from units[j:] to (groups, pods, starts) and frees
        `deficit` more pods' worth can beat the best set (`starts` None: do not bound start times)."""
        best = self.run.key()
        more = 0
        if deficit > 0:
            top = self.suffix_ub[j]
            if top <= 0:
                return True
            more = -(-deficit // top)
        g = groups + more
        n = pods
        if more:
            num, den = self.suffix_ratio[j]
            n += max(more * self.suffix_min_pods[j], -(-deficit * num // den))
        if (g, n) != best[:2]:
            return (g, n) > best[:2]
        if starts is None:
            return False
        fill = self._fill(j, n - pods)
        if fill is None:
            return True
        return (-(starts + fill), self.rank) > best[2:]

    # --- greedy ------------------------------------------------------------------------------------

    def greedy(self) -> None:
        """Add units (most capacity first) until the group fits, give back units, then single pods."""
        chosen: list[_Chosen | None] = []
        for du in sorted(self.units, key=lambda du: (-du.ub, du.min_pods, -du.unit.max_start, du.unit.key)):
            if self._feasible():
                break
            pods: list[_DPod] = []
            if du.partial:
                for dp in du.pods:
                    if len(pods) >= du.unit.limit or self._feasible():
                        break
                    self._take(dp)
                    pods.append(dp)
                if du.whole and not self._feasible():
                    for dp in du.pods[len(pods) :]:
                        self._take(dp)
                    chosen.append(_Chosen(du, True, list(du.pods)))
                elif pods:
                    chosen.append(_Chosen(du, False, pods))
            elif du.whole:
                for dp in du.pods:
                    self._take(dp)
                chosen.append(_Chosen(du, True, list(du.pods)))
        if self._feasible():
            self._reprieve(chosen)
            self._record([c for c in chosen if c is not None])
        for c in chosen:
            if c is not None:
                for dp in c.pods:
                    self._give_back(dp)
        assert not self.taken

    def _reprieve(self, chosen: list[_Chosen | None]) -> None:
        for i in range(len(chosen) - 1, -1, -1):
            c = chosen[i]
            assert c is not None
            for dp in c.pods:
                self._give_back(dp)
            if self._feasible():
                chosen[i] = None
            else:
                for dp in c.pods:
                    self._take(dp)
        for i, c in enumerate(chosen):
            if c is None or not c.unit.partial:
                continue
            kept = list(c.pods)
            for dp in reversed(c.pods):  # the least useful, oldest first
                self._give_back(dp)
                if self._feasible():
                    kept.remove(dp)
                else:
                    self._take(dp)
            if not kept:
                chosen[i] = None
            elif len(kept) <= c.unit.unit.limit:
                chosen[i] = _Chosen(c.unit, False, kept)
            else:
                for dp in c.pods:
                    if dp not in kept:
                        self._take(dp)

    # --- branch and bound --------------------------------------------------------------------------

    def search(self) -> None:
        if self._deficit(self.cur) > 0:
            self._dfs(0, 0)

    def _dfs(self, i: int, depth: int) -> None:
        """cur does not fit; units[i:] are undecided and all counted in max."""
        if depth > _MAX_DEPTH:
            self.run.truncated = True
            return
        deficit = self._deficit(self.cur)
        skipped: list[_DUnit] = []
        for j in range(i, len(self.units)):
            if (
                self.run.tick()
                or self._deficit(self.max) > 0
                or self._beaten(j, self.groups, self.pod_count, self.start_total, deficit)
            ):
                break
            du = self.units[j]
            if du.partial and not self._beaten(
                j + 1, self.groups + 1, self.pod_count + 1, None, deficit - du.ub_partial
            ):
                self._partial(j, 0, depth + 1)
            if (
                du.whole
                and not self.run.exhausted
                and not self._beaten(
                    j + 1,
                    self.groups + 1,
                    self.pod_count + len(du.unit.ids),
                    self.start_total + du.unit.start_total,
                    deficit - du.ub,
                )
            ):
                self._whole(j, depth + 1)
            for dp in du.pods:
                self._apply(self.max, dp, -1)
            skipped.append(du)
        for du in skipped:
            for dp in du.pods:
                self._apply(self.max, dp, 1)

    def _whole(self, j: int, depth: int) -> None:
        du = self.units[j]
        for dp in du.pods:
            self._take(dp)
        self.chosen.append(_Chosen(du, True, du.pods))
        self.groups += 1
        self.pod_count += len(du.unit.ids)
        self.start_total += du.unit.start_total
        if self._feasible():
            self._record(self.chosen)
        else:
            self._dfs(j + 1, depth)
        self.groups -= 1
        self.pod_count -= len(du.unit.ids)
        self.start_total -= du.unit.start_total
        self.chosen.pop()
        for dp in reversed(du.pods):
            self._give_back(dp)

    def _partial(self, j: int, q0: int, depth: int) -> None:
        """Pods of units[j] one by one: the next one taken is pods[q]; those in between are not."""
        du = self.units[j]
        pods = du.pods
        first = q0 == 0
        if first:
            self.chosen.append(_Chosen(du, False, []))
        current = self.chosen[-1]
        skipped: list[_DPod] = []
        for q in range(q0, len(pods)):
            dp = pods[q]
            if q > q0:
                prev = pods[q - 1]
                self._apply(self.max, prev, -1)
                skipped.append(prev)
                if dp.bucket == prev.bucket:
                    continue  # the same node and requests, an older pod: the newer one dominates it
            if self.run.tick() or self._deficit(self.max) > 0:
                break
            if (self.groups + (1 if first else 0), self.pod_count + 1) > self.run.key()[:2]:
                break
            self._take(dp)
            current.pods.append(dp)
            self.groups += 1 if first else 0
            self.pod_count += 1
            self.start_total += dp.start
            if self._feasible():
                self._record(self.chosen)
            elif depth <= _MAX_DEPTH:
                if len(current.pods) < du.unit.limit:
                    self._partial(j, q + 1, depth + 1)
                rest = pods[q + 1 :]
                for r in rest:
                    self._apply(self.max, r, -1)
                self._dfs(j + 1, depth + 1)
                for r in rest:
                    self._apply(self.max, r, 1)
            else:
                self.run.truncated = True
            self.groups -= 1 if first else 0
            self.pod_count -= 1
            self.start_total -= dp.start
            current.pods.pop()
            self._give_back(dp)
        for dp in skipped:
            self._apply(self.max, dp, 1)
        if first:
            self.chosen.pop()


def _victim_ids(chosen: Iterable[_Chosen]) -> list[str]:
    ids: list[str] = []
    for c in chosen:
        if c.whole:
            ids.extend(c.unit.unit.ids)
        else:
            ids.extend(dp.id for dp in c.pods)
    return ids


# --- entry point ----------------------------------------------------------------------------------


def choose_victims(
    snapshot: Snapshot,
    group: GroupRequest,
    priority: int,
    candidates: Iterable[Candidate],
    groups: Iterable[VictimGroup] = (),
    *,
    excluded_pods: Collection[str] = frozenset(),
    excluded_groups: Collection[str] = frozenset(),
    max_steps: int = DEFAULT_MAX_STEPS,
) -> Preemption | None:
    """The cheapest victims whose removal lets `group` (of `priority`) be admitted, or None.

    `candidates`: running pods that might be victims (those with priority >= `priority` never are;
    every running pod of each group in `groups` must be among them). `excluded_pods` /
    `excluded_groups`: never victims (e.g. a PodDisruptionBudget forbids it: the caller searches
    again without them); an excluded pod keeps its whole group from being preempted at once.
    None when the group fits without preemption, or when no choice of victims makes it fit.
    """
    first = decide(snapshot, group)
    if isinstance(first, Admit) or first.reason != "Unschedulable" or first.placements_total == 0:
        return None
    fit = _Fit(snapshot, group)
    if fit.need <= 0 or not fit.eligible_any.any():
        return None
    pool = _Pool(snapshot, fit, priority, candidates, groups, excluded_pods, excluded_groups)
    if not pool.ids:
        return None
    domains = _Domains(snapshot, group)
    base_totals = [domains.sums(b) for b in fit.base]
    pods_by_domain = domains.of_node[pool.node]

    run = _Run(max_steps)
    for _, level in _levels(fit, domains, pool):
        bounds = _domain_bounds(fit, domains, pool, level, base_totals)
        if not bounds:
            continue
        # Trust the per-node model when it is decide's own rule (one pod shape); should decide
        # refuse the set it found, search again with decide as the capacity check.
        for trusted in (True, False) if len(fit.signatures) == 1 else (False,):
            run.best = None
            for bound, d in bounds:
                if bound > run.key():
                    break  # this domain and all after it are dearer than the best set
                pods = level.pods[pods_by_domain[level.pods] == d]
                search = _DomainSearch(
                    run,
                    snapshot,
                    group,
                    fit,
                    pool,
                    level,
                    d,
                    [int(t[d]) for t in base_totals],
                    [int(t[d]) for t in level.totals],
                    pods,
                    trusted,
                )
                search.greedy()
                if not run.exhausted:
                    search.search()
            if run.best is None:
                break  # no victims at this level: try the next one
            preemption = _result(snapshot, group, run.best, not (run.exhausted or run.truncated))
            if preemption is not None:
                return preemption
    return None


def _result(snapshot: Snapshot, group: GroupRequest, best: _Best, exact: bool) -> Preemption | None:
    decision = decide(snapshot.without(best.ids), group)
    if not isinstance(decision, Admit):
        return None
    whole = sorted(c.unit.unit.key for c in best.chosen if c.whole and c.unit.unit.managed)
    partial = sorted(c.unit.unit.key for c in best.chosen if not c.whole)
    top = max(c.unit.unit.priority for c in best.chosen)
    groups, pods, newest, _ = best.key
    return Preemption(
        domain=decision.domain,
        victims=best.ids,
        whole_groups=tuple(whole),
        partial_groups=tuple(partial),
        admit=decision,
        cost=VictimCost(top, groups, pods, newest),
        exact=exact,
    )
