"""The victim search in one domain (preemption.py): a greedy first set, then an exact branch and bound.

`DomainSearch` keeps the capacity model of the domain's tracked nodes in plain lists (a `_Layer` for the
victims taken, one for every undecided candidate gone) and updates it in O(resources) per pod taken or
given back. `SearchRun` is shared by the domains of one call: the step budget and the best set so far,
compared by `SearchKey`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

from .columns import IndexArray, IntArray
from .victim_domains import PriorityLevel
from .victim_fit import PreemptorFit
from .victim_pool import VictimPool, VictimUnit

__all__ = [
    "MAX_DEPTH",
    "MAX_TABLE",
    "NO_COMBINATION",
    "ORACLE_STEPS",
    "BestSet",
    "Chosen",
    "DomainSearch",
    "DomainUnit",
    "SearchContext",
    "SearchKey",
    "SearchRun",
    "victim_ids",
]

ORACLE_STEPS: Final = 25
"""A capacity check through `decide` (groups with several pod shapes) counts as this many steps."""

MAX_DEPTH: Final = 250
"""The branch and bound recurses once per unit or single pod taken (two frames each); deeper branches
are not explored, and the result is then not exact."""

_NEVER: Final = (1 << 62,)

NO_COMBINATION: Final = -(1 << 62)
"""In the combination table: no choice of units gives that many groups and pods."""

MAX_TABLE: Final = 1 << 21
"""The combination table (`DomainSearch._combinations`) is built only up to this many entries."""


SearchKey = tuple[int, ...]
"""(groups, pods, -start total, *spread, domain rank): the order victim sets are compared in (the
priority is the level being searched)."""


@dataclass(slots=True, eq=False)
class _DPod:
    """A takeable pod on a node of the domain that some pod of the group may use."""

    id: str
    slot: int
    nz: tuple[tuple[int, int], ...]  # (fit column, amount) it frees
    start: int
    bucket: int  # same node and same requests in one unit: interchangeable


@dataclass(slots=True, eq=False)
class DomainUnit:
    """A victim unit as the search in one domain sees it: its takeable pods there and its bounds."""

    unit: VictimUnit
    pods: list[_DPod]
    partial: bool
    whole: bool
    ub: int  # at most this many more pods placed with all its pods gone
    ub_partial: int  # ... with at most `limit` of them gone
    ratio: tuple[int, int]  # (pods, gain): each pod placed costs at least pods/gain victim pods
    min_pods: int
    most_pods: int


@dataclass(slots=True, eq=False)
class Chosen:
    """A unit of a victim set: whole, or these pods of it."""

    unit: DomainUnit
    whole: bool
    pods: list[_DPod]  # the partial pods (whole: all the unit's pods go)


@dataclass(slots=True)
class BestSet:
    """The cheapest victim set found so far."""

    key: SearchKey
    ids: tuple[str, ...]
    chosen: list[Chosen]


class SearchRun:
    """State shared by the domains of one call: the step budget and the best set so far."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.steps = 0
        self.exhausted = False
        """The step budget is spent: the search stopped early."""
        self.truncated = False
        """A branch deeper than MAX_DEPTH was not explored."""
        self.best: BestSet | None = None

    def tick(self, steps: int = 1) -> bool:
        """Count steps; True once the budget is spent."""
        self.steps += steps
        if self.steps > self.max_steps:
            self.exhausted = True
        return self.exhausted

    def key(self) -> SearchKey:
        return _NEVER if self.best is None else self.best.key


@dataclass(slots=True)
class SearchContext:
    """What the domain searches of one call share."""

    run: SearchRun
    fit: PreemptorFit
    pool: VictimPool
    lower: list[IndexArray]
    """Per level below the domains (nodes last): the domain code of every node (VictimCost.spread)."""
    oracle: Callable[[int, frozenset[str]], bool]
    """Whether the preemptor is admitted in the domain (its index) with these pods gone (`decide`, or
    `decide_composite`)."""


class _Layer:
    """Freed capacity per tracked node and the resulting counts per signature."""

    __slots__ = ("counts", "extra", "totals")

    def __init__(self, extra: list[list[int]], counts: list[list[int]], totals: list[int]) -> None:
        self.extra = extra
        self.counts = counts
        self.totals = totals


class DomainSearch:
    """The cheapest victim set in one domain: a greedy first set (`greedy`), then a branch and bound."""

    def __init__(
        self,
        ctx: SearchContext,
        level: PriorityLevel,
        domain: int,
        base_totals: list[int],
        max_totals: list[int],
        pods: IndexArray,
        trusted: bool,
    ) -> None:
        self.run = ctx.run
        self.oracle = ctx.oracle
        self.fit = fit = ctx.fit
        pool = ctx.pool
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
        # Per lower level (nodes last): the domain of each tracked node, and victims taken per domain.
        self.slot_codes: list[list[int]] = [codes[nodes].tolist() for codes in ctx.lower]
        self.spread_count: list[dict[int, int]] = [{} for _ in ctx.lower]
        self.spread: list[int] = [0] * len(ctx.lower)

        by_unit = _domain_pods(pool, pods, slot_of.reshape(-1))
        self.units = [_domain_unit(pool.unit_record(u), dpods, gain) for u, dpods in by_unit.items()]
        # Branch and bound order: newest first (the start-time bound fills in this order).
        self.units.sort(key=lambda du: (-du.unit.max_start, -du.ub, du.unit.key))
        self._suffix_bounds()

        self.combos: IntArray | None = None
        """[j, k, p]: the newest start total of exactly k units of units[j:] with exactly p pods
        (`_combinations`; None: not built)."""

        self.chosen: list[Chosen] = []
        self.taken: list[_DPod] = []
        self.groups = 0
        self.pod_count = 0
        self.start_total = 0

    def _suffix_bounds(self) -> None:
        """Per position in `units`: bounds over the units from there on (the branch and bound's pruning)."""
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

    def fits_as_is(self) -> bool:
        """The model places the preemptor in this domain with no victim. The check refused that (else there
        would be no preemption), so the model, blind to what refuses it here, offers no set and bounds no
        set in this domain: trusted, its cheapest set elsewhere proves nothing about this one."""
        return self._deficit(self.cur) <= 0

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
            self.run.tick(ORACLE_STEPS)
            known = self.oracle(self.rank, ids)
            self.oracle_memo[ids] = known
        return known

    def _take(self, dp: _DPod) -> None:
        self._apply(self.cur, dp, 1)
        self.taken.append(dp)
        for i, codes in enumerate(self.slot_codes):
            counts = self.spread_count[i]
            code = codes[dp.slot]
            before = counts.get(code, 0)
            counts[code] = before + 1
            if not before:
                self.spread[i] += 1

    def _give_back(self, dp: _DPod) -> None:
        self._apply(self.cur, dp, -1)
        if self.taken[-1] is dp:
            self.taken.pop()
        else:
            self.taken.remove(dp)
        for i, codes in enumerate(self.slot_codes):
            counts = self.spread_count[i]
            code = codes[dp.slot]
            counts[code] -= 1
            if not counts[code]:
                self.spread[i] -= 1

    # --- cost --------------------------------------------------------------------------------------

    def _record(self, chosen: list[Chosen]) -> None:
        """Offer a feasible victim set as the best one."""
        if not chosen:
            return  # the model says the group fits as is; decide() said no (see _result)
        groups = len(chosen)
        pods = sum(len(c.unit.unit.ids) if c.whole else len(c.pods) for c in chosen)
        starts = sum(c.unit.unit.start_total if c.whole else sum(dp.start for dp in c.pods) for c in chosen)
        # Every chosen pod is taken now (the caller records the sets it holds), so `spread` is theirs.
        key = (groups, pods, -starts, *self.spread, self.rank)
        best = self.run.best
        if best is not None and key > best.key:
            return
        ids = tuple(sorted(victim_ids(chosen)))
        if best is not None and key == best.key and ids >= best.ids:
            return
        self.run.best = BestSet(key, ids, [Chosen(c.unit, c.whole, list(c.pods)) for c in chosen])

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
        combos = self.combos
        if combos is not None and more < combos.shape[1] and n - pods < combos.shape[2]:
            # (g, n) is the best set's: a set that beats it adds exactly `more` units and `n - pods` pods.
            exact = int(combos[j, more, n - pods])
            if exact == NO_COMBINATION:
                return True
            fill = min(fill, exact)
        # Victims added never make the room less scattered: the spread now is a lower bound.
        return (-(starts + fill), *self.spread, self.rank) > best[2:]

    # --- greedy ------------------------------------------------------------------------------------

    def greedy(self) -> None:
        """Add units (most capacity first) until the group fits, give back units, then single pods."""
        chosen: list[Chosen | None] = []
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
                    chosen.append(Chosen(du, True, list(du.pods)))
                elif pods:
                    chosen.append(Chosen(du, False, pods))
            elif du.whole:
                for dp in du.pods:
                    self._take(dp)
                chosen.append(Chosen(du, True, list(du.pods)))
        if self._feasible():
            self._reprieve(chosen)
            self._record([c for c in chosen if c is not None])
        for c in chosen:
            if c is not None:
                for dp in c.pods:
                    self._give_back(dp)
        assert not self.taken

    def _reprieve(self, chosen: list[Chosen | None]) -> None:
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
                chosen[i] = Chosen(c.unit, False, kept)
            else:
                for dp in c.pods:
                    if dp not in kept:
                        self._take(dp)

    # --- branch and bound --------------------------------------------------------------------------

    def search(self) -> None:
        # Untrusted (several pod shapes), the per-node model may count a node's room once per shape, so
        # it can say "fits as is" where decide() says no: the search runs whenever the check refuses (the
        # model's deficits stay lower bounds, so its pruning stays exact), not only when the model does.
        if not self._feasible():
            self._combinations()
            self._dfs(0, 0)

    def _combinations(self) -> None:
        """The start-time bound for sets as many groups and pods as the best one: per position j in `units`,
        per k and p up to the best set's groups and pods, the largest start total of exactly k units of
        units[j:] with exactly p pods (each whole, or 1..limit of its newest pods here), capacity aside.

        A set that ties the best one on groups and pods adds exactly that many (their lower bounds in
        `_beaten` are reached), so this bounds its start times as tightly as the units allow; `_fill`
        (pods newest first, units mixed) is looser where units differ in size. Not built past MAX_TABLE."""
        best = self.run.best
        if best is None:
            return
        groups, pods = best.key[0], best.key[1]
        u = len(self.units)
        if (u + 1) * (groups + 1) * (pods + 1) > MAX_TABLE:
            return
        table = np.full((u + 1, groups + 1, pods + 1), NO_COMBINATION, dtype=np.int64)
        table[u, 0, 0] = 0
        for j in range(u - 1, -1, -1):
            du = self.units[j]
            nxt, rest = table[j], table[j + 1]
            nxt[...] = rest
            if groups == 0:
                continue
            for q, start in _unit_options(du):
                if q > pods:
                    continue
                prev = rest[:-1, : pods + 1 - q]
                np.maximum(
                    nxt[1:, q:],
                    np.where(prev == NO_COMBINATION, NO_COMBINATION, prev + start),
                    out=nxt[1:, q:],
                )
        self.combos = table

    def _dfs(self, i: int, depth: int) -> None:
        """cur does not fit; units[i:] are undecided and all counted in max."""
        if depth > MAX_DEPTH:
            self.run.truncated = True
            return
        deficit = self._deficit(self.cur)
        skipped: list[DomainUnit] = []
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
        self.chosen.append(Chosen(du, True, du.pods))
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
            self.chosen.append(Chosen(du, False, []))
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
            elif depth <= MAX_DEPTH:
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


def victim_ids(chosen: Iterable[Chosen]) -> list[str]:
    ids: list[str] = []
    for c in chosen:
        if c.whole:
            ids.extend(c.unit.unit.ids)
        else:
            ids.extend(dp.id for dp in c.pods)
    return ids


def _unit_options(du: DomainUnit) -> list[tuple[int, int]]:
    """(pods, newest start total) of each way the unit can be among the victims: whole, or 1..limit pods."""
    options: list[tuple[int, int]] = []
    if du.whole:
        options.append((len(du.unit.ids), du.unit.start_total))
    if du.partial:
        total = 0
        for q, start in enumerate(sorted((dp.start for dp in du.pods), reverse=True)[: du.unit.limit], 1):
            total += start
            options.append((q, total))
    return options


def _domain_pods(pool: VictimPool, pods: IndexArray, slot_of: IndexArray) -> dict[int, list[_DPod]]:
    """The domain's takeable pods by unit; pods of a unit on one node that free the same share a bucket."""
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
    return by_unit


def _domain_unit(unit: VictimUnit, dpods: list[_DPod], gain: list[int]) -> DomainUnit:
    """A unit as the search in one domain sees it: its pods there in the order to take them, and bounds."""
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
    return DomainUnit(unit, dpods, partial, whole, ub, ub_partial, ratio, min_pods, most)
