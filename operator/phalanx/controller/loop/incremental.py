"""What a pass need not do again: the units of owners whose records did not change, and the plan of a
settled unit that nothing it reads changed for.

At 5,000 nodes and 500 gangs, a pass that made every unit again from the cache and planned each of them
spent ~0.19 s of CPU, most of it on gangs already running, and passes ran back to back through a burst:
the operator's CPU was most of what it took from a machine the apiserver and kube-scheduler also need.
Kueue's scheduler looks only at pending workloads; the rest is usage in its snapshot. The same here, by
two memos whose keys are what the result is a function of:

1. *An owner's units* (`OwnerKind.owner_units`) are a pure function of its `OwnerState` (the owner, its
   Workload, its groups, its pods, its children's names: immutable, replaced whenever they change) and of
   what the cache says beside them (`ClusterCache.view_generation`: priority classes, quotas, notes said,
   Kueue's objects, owners another kind reads). They are made again only when one of those records is a
   different object, or that generation moved. Hand-made groups (not an owner kind) are made every pass.
2. *A settled unit's plan*: a unit whose plan was empty and whose pods neither wait nor are released unbound,
   with no status write held back (plan/machine.py `settled`), plans nothing again until its unit changes
   (a new `Unit` object, by 1.) or the nodes or Topologies do (`ClusterCache.placement_generation`): what
   else its plan reads (the time, the snapshot other units fill) cannot change its outcome. It is skipped
   (`PlanInput.skip`) and stays settled (a staged unit holding slots never is: its status reads the room
   others leave there, plan/report.py); it is still a unit of the pass, for the victim search, staging and
   quota deadlocks, which read every unit.

`--verify-incremental` (the integration tests turn it on) plans every pass whole as well and logs any
difference (`DIFFERS`), using the whole plan then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.base import OwnerKind, OwnerState, Unit, WorkloadKind
from phalanx.controller.kinds.common import owner_units_of

DIFFERS = "the incremental plan differs from the whole plan"  # what verify mode logs on a difference


def same_state(a: OwnerState, b: OwnerState) -> bool:
    """The same records, object for object (records are replaced on every change, never mutated)."""
    return (
        a.owner is b.owner
        and a.workload is b.workload
        and _same(a.pod_groups, b.pod_groups)
        and _same(a.composites, b.composites)
        and _same(a.pods, b.pods)
        and a.children is b.children
    )


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class _Made:
    state: OwnerState
    units: tuple[Unit, ...]


class UnitMemo:
    """The two memos of the module docstring, kept by the loop across passes."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str], _Made] = {}
        self._view_generation = -1
        self._settled: dict[str, Unit] = {}  # unit key -> the unit that was settled in the last pass
        self._placement_generation = -1
        self.made = 0  # units made in the last call of `units` (the rest were the memo's)

    def units(self, cache: ClusterCache, kinds: Iterable[WorkloadKind]) -> tuple[Unit, ...]:
        """Every kind's units, in the order `kind.units(cache)` gives them, made again only where needed."""
        if cache.view_generation != self._view_generation:
            self._made.clear()
            self._view_generation = cache.view_generation
        out: list[Unit] = []
        seen: set[tuple[str, str]] = set()
        self.made = 0
        for kind in kinds:
            if not isinstance(kind, OwnerKind):
                made = tuple(kind.units(cache))
                self.made += len(made)
                out.extend(made)
                continue
            for state in cache.owner_states(kind.name):
                key = (kind.name, state.owner.uid)
                seen.add(key)
                memo = self._made.get(key)
                if memo is None or not same_state(memo.state, state):
                    memo = _Made(state, owner_units_of(kind, state, cache))
                    self._made[key] = memo
                    self.made += len(memo.units)
                out.extend(memo.units)
        for key in self._made.keys() - seen:
            del self._made[key]
        return tuple(out)

    def skip(self, units: Sequence[Unit], placement_generation: int) -> frozenset[str]:
        """The keys of units settled in the last pass that are the very same units now, with the nodes and
        Topologies unchanged: not planned in this pass."""
        if placement_generation != self._placement_generation:
            return frozenset()
        return frozenset(u.key for u in units if self._settled.get(u.key) is u)

    def planned(self, units: Sequence[Unit], settled: Iterable[str], placement_generation: int) -> None:
        """What a pass planned with `placement_generation` found settled (its `Plan.settled`). A key two
        units share (an owner's unit and its clean-up) is never skipped."""
        counts = Counter(u.key for u in units)
        keys = set(settled)
        self._settled = {u.key: u for u in units if u.key in keys and counts[u.key] == 1}
        self._placement_generation = placement_generation

    def forget(self) -> None:
        """Plan everything again next pass (after a pass that failed)."""
        self._settled.clear()
        self._placement_generation = -1
