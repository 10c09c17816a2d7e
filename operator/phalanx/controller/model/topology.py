"""Topologies as the controller sees them: typed records, the label → Topology lookup, and their status.

`TopologyIndex.levels_for(key)` is what placement asks: the levels (coarse to fine) of the Topology that
lists the topology key, or None (no Topology lists it: today's single-key behaviour). At most one Topology
may list a label (the webhook refuses a second one); if two do anyway (created while Phalanx was away), the
oldest is used and the other is not used at all, its Active condition saying which label it shares with
which Topology. Status (`status.nodes`, `Active`) is planned here as actions, one patch per change.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import conditions as c
from phalanx.api.conditions import Condition
from phalanx.api.group import API_VERSION, TOPOLOGY_KIND
from phalanx.api.topology import ACTIVE, REASON_ACTIVE, REASON_LABEL_CONFLICT, TopologySpec, TopologyStatus
from phalanx.controller.model.actions import GroupPlan, PatchTopologyStatus
from phalanx.controller.model.refs import ObjectRef
from phalanx.placement import NodeInfo

GROUP_KEY_PREFIX = "Topology/"  # a plan key no Job can have (namespaces are lower case)


@dataclass(frozen=True, slots=True)
class TopologyRecord:
    uid: str
    name: str
    generation: int
    created: dt.datetime | None
    levels: tuple[str, ...]  # node labels, coarse to fine
    status: TopologyStatus
    resource_version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return self.name

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(API_VERSION, TOPOLOGY_KIND, "", self.name, self.uid)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> TopologyRecord:
        """Raises pydantic.ValidationError for an object our CRD schema should have refused."""
        meta = body.get("metadata") or {}
        created = meta.get("creationTimestamp")
        return cls(
            uid=str(meta.get("uid", "")),
            name=str(meta.get("name", "")),
            generation=int(meta.get("generation") or 1),
            created=dt.datetime.fromisoformat(created.replace("Z", "+00:00")) if created else None,
            levels=TopologySpec.model_validate(body.get("spec") or {}).labels,
            status=TopologyStatus.model_validate(body.get("status") or {}),
            resource_version=str(meta.get("resourceVersion") or ""),
        )


def _age(record: TopologyRecord) -> tuple[dt.datetime, bool, str]:
    """Oldest first. creationTimestamp has whole seconds: of two made in the same second, the one already in
    use (Active=True) stays in use, so a newcomer never displaces it; then by name."""
    active = record.status.condition(ACTIVE)
    in_use = active is not None and active.status == c.TRUE
    return (record.created or dt.datetime.max.replace(tzinfo=dt.UTC), not in_use, record.name)


@dataclass(frozen=True)
class Conflict:
    label: str
    with_topology: str  # the older Topology that lists the label and is used for it


@dataclass(frozen=True)
class TopologyIndex:
    """Which Topology each node label belongs to (only Topologies in use), and which ones are not used."""

    by_label: Mapping[str, TopologyRecord] = field(default_factory=dict)
    conflicts: Mapping[str, Conflict] = field(default_factory=dict)  # by Topology name

    @classmethod
    def build(cls, records: Iterable[TopologyRecord]) -> TopologyIndex:
        """Oldest first (then by name): a Topology sharing a label with one already in use is left out."""
        by_label: dict[str, TopologyRecord] = {}
        conflicts: dict[str, Conflict] = {}
        for record in sorted(records, key=_age):
            shared = next((label for label in record.levels if label in by_label), None)
            if shared is not None:
                conflicts[record.name] = Conflict(shared, by_label[shared].name)
                continue
            by_label.update(dict.fromkeys(record.levels, record))
        return cls(by_label, conflicts)

    def topology_for(self, key: str) -> TopologyRecord | None:
        """The Topology in use whose levels contain `key`, or None."""
        return self.by_label.get(key)

    def levels_for(self, key: str) -> tuple[str, ...] | None:
        """The levels (node labels, coarse to fine) of the Topology that lists `key`, or None."""
        record = self.by_label.get(key)
        return None if record is None else record.levels


def label_conflicts(
    name: str, levels: Iterable[str], others: Iterable[tuple[str, Iterable[str]]]
) -> list[str]:
    """What the webhook says when Topology `name` lists a label another Topology already lists."""
    wanted = set(levels)
    problems = []
    for other, other_levels in sorted(others, key=lambda o: o[0]):
        if other == name:
            continue  # an update of the same object
        for label in [lab for lab in other_levels if lab in wanted]:
            problems.append(f"nodeLabel {label!r} is already a level of Topology {other!r}")
    if problems:
        problems.append("at most one Topology may list a given label: add levels to that one, or delete it")
    return problems


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
) -> tuple[GroupPlan, ...]:
    """One status patch for each Topology whose status is not what it should be (none when it is)."""
    plans = []
    for record in sorted(topologies, key=lambda t: t.name):
        key = GROUP_KEY_PREFIX + record.name
        if key in backing_off:
            continue
        desired = desired_status(record, index, counts.get(record.levels, 0), now)
        if desired != record.status:
            plans.append(GroupPlan(key, (PatchTopologyStatus(record.ref, desired),)))
    return tuple(plans)
