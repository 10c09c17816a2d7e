"""The working state of one scheduling pass: the pass (`Pass`: the snapshot as it fills, counters) and, per
unit, what has been concluded so far (`UnitWork`, one `LeafWork` per PodGroup). Each step of the state
machine (machine.py) reads and extends these; only the step that decides changes `outcome`, `admission`
or `released_now`. Pure."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from phalanx.api.status import Admission, Reservation
from phalanx.controller.kinds.base import Leaf, Owner, Unit
from phalanx.controller.model.actions import Action
from phalanx.controller.model.records import (
    CompositePodGroupRecord,
    PodGroupRecord,
    PodRecord,
    PriorityClassRecord,
)
from phalanx.controller.plan import status as st
from phalanx.controller.plan.victims import Victims
from phalanx.placement import NodeInfo, Snapshot


@dataclass
class Pass:
    """What one pass shares across units: the snapshot (each admission is assumed into it, so the next unit
    cannot take its room), the nodes and Topologies, and what is counted for metrics."""

    snapshot: Snapshot
    nodes: Mapping[str, NodeInfo]
    now: dt.datetime
    victims: Victims
    node_failure_grace: float = 30.0
    starvation_age: float = 60.0  # seconds a gang waits before the room it needs is held (starvation.py)
    bind_timeout: float = 120.0  # released pods no scheduler bound for this long are rolled back
    failing: frozenset[str] = frozenset()  # keys of units whose last apply failed (requeue.released_in_part)
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClassRecord] = field(default_factory=dict)
    decision_seconds: list[float] = field(default_factory=list)
    waiting: Counter[str] = field(default_factory=Counter)
    longest_wait: float = 0.0  # seconds, of the gang that has waited longest (report.py)
    # Slots of staged units whose room the pass assumed at its start (staging.py): "<namespace>/<slot>"
    reserved_slots: set[str] = field(default_factory=set)
    # Unit key -> the (node, requests) of its slots that room was assumed for at the pass's start: given back
    # when the unit is decided again (staging.lift_own_hold), not to count its own room twice
    held_slots: dict[str, list[tuple[str, Mapping[str, int]]]] = field(default_factory=dict)
    # Unit key -> why: gangs requeued to break a deadlock on a ResourceQuota (quota.py)
    quota_deadlocks: Mapping[str, str] = field(default_factory=dict)
    # ObjectRef.kind_key -> when this process last wrote that group's status (status.refreshing)
    reported: Mapping[str, dt.datetime] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)  # keys of units that planned nothing (machine.settled)
    # The earliest time a rule of time (a grace, the bind timeout, the starvation age) changes a unit's
    # answer with nothing else changed: the loop runs a pass then, not at its next resync (Pass.over).
    due: dt.datetime | None = None

    def over(self, seconds: float, since: dt.datetime, work: UnitWork | None = None) -> bool:
        """Whether `seconds` have passed since `since`; if not, a pass is asked for when they will have, and
        `work`'s unit is not settled meanwhile (its next plan depends on the time)."""
        at = since + dt.timedelta(seconds=seconds)
        if at <= self.now:
            return True
        if work is not None:
            work.timed = True
        if self.due is None or at < self.due:
            self.due = at
        return False


@dataclass
class LeafWork:
    """One PodGroup of a unit in this pass."""

    leaf: Leaf
    min_count: int
    gang: bool
    waiting: tuple[PodRecord, ...]  # gated by us, to place, in rank order
    ready: tuple[PodRecord, ...]  # of those, the ones no other controller's gate holds
    placed: tuple[PodRecord, ...]  # bound or released: they take node capacity now
    admission: Admission | None
    domain: str | None = None
    released_now: int = 0
    ungated: int = 0
    outcome: st.Outcome | None = None
    reservation: Reservation | None = None  # kept only while it waits for room freed for it
    # A staged unit's pods not made yet, as placeholders named by their slot (staging.py): decided with the
    # real ones, recorded, their room held; never released.
    virtual: tuple[PodRecord, ...] = ()
    label_waiting: bool = True  # its waiting pods get their PodGroup's label now (report.py)

    @property
    def group(self) -> PodGroupRecord:
        return self.leaf.group

    @property
    def to_place(self) -> tuple[PodRecord, ...]:
        """What the engine places for it: its ready pods, then a staged unit's placeholders."""
        return (*self.ready, *self.virtual)

    @property
    def holds_a_node(self) -> bool:
        """A pod of its decision still holds a node, or is released in this pass: the decision stands."""
        return bool(self.placed) or bool(self.released_now)

    @property
    def done(self) -> bool:
        """Its pods ran to completion (kinds.base.Leaf.done): it counts as placed; nothing is placed."""
        return self.leaf.done

    @property
    def enough(self) -> bool:
        """Its pods (ready to place, placeholders of a staged unit, or placed) reach its minCount."""
        return self.done or len(self.to_place) + len(self.placed) >= self.min_count

    @property
    def whole(self) -> bool:
        """The pods placed now alone reach its minCount."""
        return self.done or len(self.placed) >= self.min_count

    def whole_with(self, count: int) -> bool:
        """`count` pods placed (the placed ones and those about to be) reach its minCount."""
        return self.done or count >= self.min_count


@dataclass
class UnitWork:
    """One unit in this pass: its leaves, the actions planned so far, and the root's conclusion."""

    unit: Unit
    leaves: dict[str, LeafWork]
    actions: list[Action] = field(default_factory=list)
    outcome: st.Outcome | None = None  # the root CompositePodGroup's (one-leaf units: the leaf's)
    admission: Admission | None = None  # the root's record
    domain: str | None = None
    first_admission: bool = False  # the unit was admitted for the first time in this pass
    decided: bool = False  # a new decision was recorded in this pass (its room assumed taken)
    reservation: Reservation | None = None  # a tree's, on its root (a one-leaf unit's is on its leaf)
    preempted: int = 0  # pods it preempted in this pass
    # A status change of a group was held back (report.py: numbers alone, a first wait for pods): a later
    # pass may write it with nothing else changed, so the unit is not settled.
    deferred: bool = False
    # Its next plan depends on the time and the room, though nothing of it changes (lost.py: a gang short of
    # pods its controller has not made again yet): not settled.
    timed: bool = False

    @property
    def owner(self) -> Owner | None:
        return self.unit.owner

    @property
    def root(self) -> CompositePodGroupRecord | None:
        assert self.unit.tree is not None
        return self.unit.tree.root

    @property
    def single(self) -> LeafWork | None:
        """The one leaf of a unit without a root CompositePodGroup."""
        return next(iter(self.leaves.values())) if self.root is None else None

    @property
    def released(self) -> int:
        return sum(leaf.released_now for leaf in self.leaves.values())

    @property
    def placed(self) -> int:
        return sum(len(leaf.placed) for leaf in self.leaves.values())

    def children(self, parent: str) -> tuple[list[CompositePodGroupRecord], list[LeafWork]]:
        assert self.unit.tree is not None
        composites = [g for g in self.unit.tree.composites if g.parent == parent]
        leaves = [leaf for leaf in self.leaves.values() if leaf.group.parent == parent]
        return composites, leaves

    def whole(
        self, composite: CompositePodGroupRecord | None = None, counts: Mapping[str, int] | None = None
    ) -> bool:
        """Whether the pods placed now alone meet every min count (under `composite`, default the root);
        with `counts` (leaf name -> pods), whether that many pods per leaf would."""
        assert self.unit.tree is not None

        def leaf_whole(leaf: Leaf) -> bool:
            work = self.leaves[leaf.group.name]
            return work.whole if counts is None else work.whole_with(counts.get(leaf.group.name, 0))

        return self.unit.tree.whole(leaf_whole, composite)

    def countable(self, composite: CompositePodGroupRecord) -> bool:
        """Whether the pods there (ready or placed) can meet every min count under `composite`."""
        composites, leaves = self.children(composite.name)
        ok = sum(1 for leaf in leaves if leaf.enough) + sum(1 for g in composites if self.countable(g))
        return ok >= (composite.min_group_count or 1)


def leaf_work(leaf: Leaf, owner: Owner | None, single: bool) -> LeafWork:
    """A leaf classified for scheduling: its pods that wait (rank order, as the kind gave them), that are
    placed, and its minCount now (`Leaf.gang_min`)."""
    waiting = tuple(p for p in leaf.live if p.gated)
    min_count = leaf.gang_min(owner, single)
    return LeafWork(
        leaf=leaf,
        min_count=min_count or 1,
        gang=min_count is not None,
        waiting=waiting,
        ready=tuple(p for p in waiting if not p.other_gates),
        placed=leaf.placed,
        admission=leaf.group.status.admission,
    )


def unit_work(unit: Unit) -> UnitWork:
    assert unit.tree is not None
    single = unit.tree.root is None
    leaves = {leaf.group.name: leaf_work(leaf, unit.owner, single) for leaf in unit.tree.leaves}
    work = UnitWork(unit, leaves, actions=list(unit.setup))
    root = unit.tree.root
    if root is not None:
        work.admission = root.status.admission
        if work.admission is not None and any(leaf.placed for leaf in leaves.values()):
            work.domain = root.status.domain
    return work
