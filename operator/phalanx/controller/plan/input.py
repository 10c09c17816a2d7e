"""What `plan()` reads and returns (pure, immutable)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from phalanx.controller.kinds.base import Unit
from phalanx.controller.model.actions import Action, UnitPlan
from phalanx.controller.model.kueue import KueueIndex
from phalanx.controller.model.records import PodRecord, PriorityClassRecord
from phalanx.placement import NodeInfo, Snapshot


@dataclass(frozen=True)
class PlanInput:
    """One consistent view of the cluster for one pass: every unit of every kind (kinds/), and the cluster
    they are placed in."""

    units: tuple[Unit, ...]
    snapshot: Snapshot
    nodes: Mapping[str, NodeInfo]
    priority_classes: Mapping[str, PriorityClassRecord] = field(default_factory=dict)
    backing_off: frozenset[str] = frozenset()  # unit keys that wait before their next try
    # Unit keys whose last apply failed (in their backoff window or out of it): a recorded decision such a
    # unit released only in part is requeued whole after the bind timeout (requeue.released_in_part).
    failing: frozenset[str] = frozenset()
    pods: Mapping[str, PodRecord] = field(default_factory=dict)  # every pod, for victim choice
    unevictable: frozenset[str] = frozenset()  # pods a PodDisruptionBudget protected recently
    node_failure_grace: float = 30.0  # seconds a running gang may stay below minCount before a requeue
    starvation_age: float = 60.0  # seconds a gang waits before the room it needs is held for it
    bind_timeout: float = 120.0  # seconds released pods may stay unbound before they are rolled back
    # node label -> the levels (coarse to fine) of the Topology listing it (TopologyIndex.levels_for)
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kueue: KueueIndex | None = None  # Kueue's Workloads, read in the same pass (plan/kueue.py)
    # ObjectRef.kind_key -> when this process last wrote that group's status (status.refreshing)
    reported: Mapping[str, dt.datetime] = field(default_factory=dict)
    # Keys of units settled in the last pass and unchanged since (loop/incremental.py): not planned again,
    # still units of the pass (victims, staging, quota deadlocks read them) and settled in its Plan.
    skip: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Plan:
    units: tuple[UnitPlan, ...]
    waiting_by_reason: Mapping[str, int]  # gangs not admitted, by the reason they wait
    decision_seconds: tuple[float, ...] = ()  # one per placement decision (for metrics)
    longest_wait_seconds: float = 0.0  # how long the gang that has waited longest has waited
    # Keys of the units that planned nothing and can plan nothing new until their own records, the nodes
    # or the Topologies change (machine.settled); the loop skips them next pass if so (PlanInput.skip).
    settled: frozenset[str] = frozenset()
    next_due: dt.datetime | None = None  # when a rule of time next changes an answer (Pass.over)
    # (unit key, the error) of each unit whose planning raised (plan(isolate=True)): it planned nothing
    failed: tuple[tuple[str, str], ...] = ()

    @property
    def actions(self) -> list[Action]:
        return [a for u in self.units for a in u.actions]
