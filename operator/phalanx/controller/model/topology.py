"""Topologies as the controller sees them: typed records, the label → Topology lookup, and their status.

`TopologyIndex.levels_for(key)` is what placement asks: the levels (coarse to fine) of the Topology that
lists the topology key, or None (no Topology lists it: today's single-key behaviour). At most one Topology
may list a label (the webhook refuses a second one); if two do anyway (created while Phalanx was away), the
oldest is used and the other is not used at all, its Active condition saying which label it shares with
which Topology. Their status (`status.nodes`, `Active`) is planned in plan/topologies.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import conditions as c
from phalanx.api.group import API_VERSION, TOPOLOGY_KIND
from phalanx.api.topology import ACTIVE, TopologySpec, TopologyStatus
from phalanx.controller.model.refs import ObjectRef


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
