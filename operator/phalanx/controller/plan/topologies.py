"""Topologies' status, planned like a unit's (pure): `status.nodes` (how many nodes carry every level) and
the `Active` condition (used, or not used because it shares a label with an older Topology), one patch
per change."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from phalanx.api import conditions as c
from phalanx.api.conditions import Condition
from phalanx.api.group import TOPOLOGY_KIND
from phalanx.api.topology import ACTIVE, REASON_ACTIVE, REASON_LABEL_CONFLICT, TopologyStatus
from phalanx.controller.model.actions import PatchTopologyStatus, UnitPlan
from phalanx.controller.model.keys import unit_key
from phalanx.controller.model.topology import TopologyIndex, TopologyRecord
from phalanx.placement import NodeInfo


def nodes_with_all(levels: tuple[str, ...], nodes: Iterable[NodeInfo]) -> int:
    """How many nodes carry every level's label (the others are in no domain of the Topology)."""
    return sum(1 for node in nodes if all(label in node.labels for label in levels))


@dataclass
class NodeCounts:
    """`nodes_with_all` for each Topology, recounted only when node labels or the Topologies changed."""

    _seen: tuple[int, frozenset[tuple[str, ...]]] | None = None
    _counts: dict[tuple[str, ...], int] = field(default_factory=dict)

    def get(
        self, node_labels_generation: int, topologies: Iterable[TopologyRecord], nodes: Mapping[str, NodeInfo]
    ) -> Mapping[tuple[str, ...], int]:
        wanted = frozenset(t.levels for t in topologies)
        if self._seen != (node_labels_generation, wanted):
            self._counts = {levels: nodes_with_all(levels, nodes.values()) for levels in wanted}
            self._seen = (node_labels_generation, wanted)
        return self._counts


def desired_status(
    record: TopologyRecord, index: TopologyIndex, nodes: int, now: dt.datetime
) -> TopologyStatus:
    conflict = index.conflicts.get(record.name)
    if conflict is None:
        status, reason = c.TRUE, REASON_ACTIVE
        message = f"used for groups whose topology key is one of its {len(record.levels)} level(s)"
    else:
        status, reason = c.FALSE, REASON_LABEL_CONFLICT
        message = (
            f"not used: nodeLabel {conflict.label!r} is also a level of the older Topology "
            f"{conflict.with_topology!r} (at most one Topology may list a label)"
        )
    before = record.status.condition(ACTIVE)
    since = now
    if before is not None and before.status == status:
        since = before.last_transition_time
    condition = Condition(
        type=ACTIVE,
        status=status,
        observed_generation=record.generation,
        last_transition_time=since,
        reason=reason,
        message=message,
    )
    return TopologyStatus(nodes=nodes, conditions=[condition])


def plan_status(
    topologies: Iterable[TopologyRecord],
    index: TopologyIndex,
    counts: Mapping[tuple[str, ...], int],
    now: dt.datetime,
    backing_off: frozenset[str] = frozenset(),
) -> tuple[UnitPlan, ...]:
    """One status patch for each Topology whose status is not what it should be (none when it is)."""
    plans = []
    for record in sorted(topologies, key=lambda t: t.name):
        key = unit_key(TOPOLOGY_KIND, "", record.name)
        if key in backing_off:
            continue
        desired = desired_status(record, index, counts.get(record.levels, 0), now)
        if desired != record.status:
            plans.append(UnitPlan(key, (PatchTopologyStatus(record.ref, desired),)))
    return tuple(plans)
