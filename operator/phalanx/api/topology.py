"""The Topology kind: the levels of a cluster's network, coarse to fine, as node labels (like Kueue's).

A group whose topology key is one of a Topology's labels is placed with all of that Topology's levels
known: a domain of a lower level is the path of label values from the top level down, so racks that
share a label value under two blocks are two domains. At most one Topology may list a given label
(checked by Phalanx's validating webhook, since that spans objects; one that slips past it while Phalanx
is away is not used, and its status says why).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from phalanx.api.base import ApiModel
from phalanx.api.conditions import Condition
from phalanx.api.formats import LabelKey
from phalanx.api.group import API_VERSION, TOPOLOGY_KIND
from phalanx.api.markers import ATOMIC_LIST, immutable, list_map, rule, validations

MAX_LEVELS = 8
HOSTNAME_LABEL = "kubernetes.io/hostname"

# The one condition Phalanx writes: is this Topology the one used for its labels?
ACTIVE = "Active"
REASON_ACTIVE = "Active"
REASON_LABEL_CONFLICT = "LabelConflict"

_UNIQUE = rule(
    "self.all(x, self.exists_one(y, y.nodeLabel == x.nodeLabel))",
    "each nodeLabel may appear in one level only",
)
_HOSTNAME_LAST = rule(
    f"!self.exists(x, x.nodeLabel == '{HOSTNAME_LABEL}') "
    f"|| self[size(self) - 1].nodeLabel == '{HOSTNAME_LABEL}'",
    f"{HOSTNAME_LABEL} can only be the last (finest) level",
)


class TopologyLevel(ApiModel):
    """One level of the topology: the node label whose values name its domains."""

    node_label: LabelKey
    """The node label of this level, e.g. a network block, a rack or kubernetes.io/hostname."""


class TopologySpec(ApiModel):
    """The levels, from the coarsest (e.g. network block) to the finest (e.g. rack or node)."""

    model_config = ConfigDict(json_schema_extra=validations(immutable("levels")))

    levels: list[TopologyLevel] = Field(
        min_length=1,
        max_length=MAX_LEVELS,
        json_schema_extra={**ATOMIC_LIST, **validations(_UNIQUE, _HOSTNAME_LAST)},
    )
    """1 to 8 levels, coarse to fine, each a distinct node label; fixed once created (recreate to change)."""

    @model_validator(mode="after")
    def _labels_valid(self) -> Self:
        problems = level_problems([level.node_label for level in self.levels])
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(level.node_label for level in self.levels)


def level_problems(labels: list[str]) -> list[str]:
    """What is wrong with these level labels as a whole (each one alone is a valid label key)."""
    problems = []
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            problems.append(f"nodeLabel {label!r} appears in more than one level")
        seen.add(label)
    if HOSTNAME_LABEL in labels[:-1]:
        problems.append(f"{HOSTNAME_LABEL} can only be the last (finest) level")
    return problems


class TopologyStatus(ApiModel):
    """What Phalanx observes about the Topology."""

    nodes: int | None = Field(default=None, ge=0)
    """How many nodes carry the labels of all its levels (nodes missing one are in no domain of it)."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=list_map("type"))
    """Active: True when Phalanx uses it for its labels, False (LabelConflict) when an older one lists one."""

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions or [] if c.type == type_), None)


class Topology(ApiModel):
    """A Topology object (scheduling.phalanx.dev/v1beta1, cluster-scoped)."""

    api_version: str = API_VERSION
    kind: str = TOPOLOGY_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TopologySpec
    status: TopologyStatus | None = None
