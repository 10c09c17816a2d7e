"""The victim candidates as victim choice sees them (see preemption.py): units and the pods that may go.

A unit is what is preempted together: a Phalanx group (whole, or some pods of a `single` one) or a pod
Phalanx does not manage. The pool keeps one array entry per pod that may go (its node, unit, start time,
priority and the capacity it frees per fit column) and per unit (priority, size, how many pods may go one
by one, whether it may go whole), so the per-level and per-domain bounds are numpy over all candidates;
the `VictimUnit` record of a unit is built only when a domain search needs it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np

from .columns import BoolArray, IndexArray, IntArray
from .model import PODS
from .preemption_model import Candidate, VictimGroup
from .snapshot import Snapshot
from .victim_fit import PreemptorFit

__all__ = ["MICROSECONDS", "VictimPool", "VictimUnit", "victim_deltas"]

MICROSECONDS: Final = 1_000_000
"""Start times are compared in whole microseconds."""


@dataclass(slots=True, eq=False)
class VictimUnit:
    """What is preempted together: a group (whole, or some pods of a `single` one) or a loose pod."""

    key: str
    managed: bool
    priority: int
    ids: list[str]  # every running pod: the whole option takes them all
    whole: bool  # all of them may go at once (none is excluded)
    limit: int  # at most this many may go one by one (single groups)
    start_total: int
    max_start: int


@dataclass(slots=True)
class _Members:
    """The running pods of the groups that may lose pods, contiguous per group (code = group position)."""

    keys: list[str]
    flat: list[Candidate]
    code: IndexArray
    node: IndexArray
    priority: IntArray
    start: IntArray
    out: BoolArray  # excluded pods


def _members(
    snapshot: Snapshot, members: dict[str, list[Candidate]], keys: list[str], excluded_pods: Collection[str]
) -> _Members:
    """Group members, contiguous per group; only pods the snapshot counts are running."""
    counted = snapshot.bound_pod_ids
    node_index = snapshot.node_index
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
    priority = np.array([c.priority for c in flat], dtype=np.int64)
    start = np.array([round(c.started * MICROSECONDS) for c in flat], dtype=np.int64)
    out = np.fromiter((c.id in excluded_pods for c in flat), dtype=np.bool_, count=len(flat))
    return _Members(keys, flat, code, node, priority, start, out)


@dataclass(slots=True)
class _GroupUnits:
    """Per group of `_Members`: whether it can be a unit, and the unit's arrays."""

    useful: BoolArray
    top: IntArray
    size: IntArray
    limit: IntArray
    whole: BoolArray
    newest: IntArray


def _group_units(m: _Members, definitions: Mapping[str, VictimGroup], priority: int) -> _GroupUnits:
    g = len(m.keys)
    size = np.bincount(m.code, minlength=g)
    top = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, m.code, m.priority)
    held = np.bincount(m.code[m.out], minlength=g)  # excluded pods: the group never goes all at once
    partial = np.array(
        [definitions[k].disruption == "single" and definitions[k].partial for k in m.keys], dtype=np.bool_
    )
    min_count = np.array([max(1, definitions[k].min_count) for k in m.keys], dtype=np.int64)
    limit = np.where(partial, np.maximum(size - min_count, 0), 0)
    whole = held == 0
    useful = (size > held) & (top < priority) & (whole | (limit > 0))
    newest = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(newest, m.code, m.start)
    return _GroupUnits(useful, top, size, limit, whole, newest)


class VictimPool:
    """The candidates that may be preempted: one entry per pod that may go (arrays), and per unit
    (arrays; the `VictimUnit` record of a unit is built when a domain search needs it). Units are the
    useful groups (in key order), then the loose pods."""

    def __init__(
        self,
        snapshot: Snapshot,
        fit: PreemptorFit,
        priority: int,
        candidates: Iterable[Candidate],
        groups: Iterable[VictimGroup],
        excluded_pods: Collection[str],
        excluded_groups: Collection[str],
    ) -> None:
        counted = snapshot.bound_pod_ids
        node_index = snapshot.node_index
        loose: list[Candidate] = []
        members: dict[str, list[Candidate]] = {}
        for c in {c.id: c for c in candidates}.values():
            if c.group is None:
                if c.priority < priority and c.id not in excluded_pods:
                    loose.append(c)
            else:
                members.setdefault(c.group, []).append(c)
        definitions = {g.key: g for g in groups}
        keys = [k for k in sorted(members) if k in definitions and k not in excluded_groups]
        m = _members(snapshot, members, keys, excluded_pods)
        gu = _group_units(m, definitions, priority)
        n_groups = int(gu.useful.sum())
        group_unit = np.full(len(keys), -1, dtype=np.intp)
        group_unit[gu.useful] = np.arange(n_groups)
        loose = [c for c in loose if c.id in counted and node_index(c.node) is not None]

        # Units: useful groups (members _ids[first:first + size]), then loose pods.
        self._keys = [k for k, u in zip(keys, gu.useful.tolist(), strict=True) if u] + [c.id for c in loose]
        self._managed = n_groups
        self._first = np.searchsorted(m.code, np.flatnonzero(gu.useful))
        self._ids = [c.id for c in m.flat]
        self._starts: list[int] = m.start.tolist()
        loose_start = np.array([round(c.started * MICROSECONDS) for c in loose], dtype=np.int64)
        self.unit_priority: IntArray = np.concatenate(
            [gu.top[gu.useful], np.array([c.priority for c in loose], dtype=np.int64)]
        )
        self.unit_size: IntArray = np.concatenate([gu.size[gu.useful], np.ones(len(loose), dtype=np.int64)])
        self.unit_limit: IntArray = np.concatenate(
            [gu.limit[gu.useful], np.zeros(len(loose), dtype=np.int64)]
        )
        self.unit_whole: BoolArray = np.concatenate(
            [gu.whole[gu.useful], np.ones(len(loose), dtype=np.bool_)]
        )
        self.unit_min_pods: IntArray = np.where(self.unit_limit > 0, 1, self.unit_size)
        self.unit_max_start: IntArray = np.concatenate([gu.newest[gu.useful], loose_start])
        self._units: dict[int, VictimUnit] = {}

        # Pods that may go: group members, then loose pods.
        picked = np.flatnonzero(gu.useful[m.code] & ~m.out)
        self.ids = [m.flat[i].id for i in picked.tolist()] + [c.id for c in loose]
        self.node: IndexArray = np.concatenate(
            [m.node[picked], np.array([node_index(c.node) for c in loose], dtype=np.intp)]
        ).astype(np.intp)
        self.unit: IndexArray = np.concatenate(
            [group_unit[m.code[picked]], n_groups + np.arange(len(loose), dtype=np.intp)]
        ).astype(np.intp)
        self.start: IntArray = np.concatenate([m.start[picked], loose_start])
        self.priority: IntArray = self.unit_priority[self.unit]
        requests = [m.flat[i].requests for i in picked.tolist()] + [c.requests for c in loose]
        self.delta = victim_deltas(fit, requests)

    def unit_record(self, u: int) -> VictimUnit:
        record = self._units.get(u)
        if record is None:
            managed = u < self._managed
            if managed:
                first, last = int(self._first[u]), int(self._first[u] + self.unit_size[u])
                ids, start_total = self._ids[first:last], sum(self._starts[first:last])
            else:
                ids, start_total = [self._keys[u]], int(self.unit_max_start[u])
            record = VictimUnit(
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


def victim_deltas(fit: PreemptorFit, requests: list[Mapping[str, int]]) -> IntArray:
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
