"""Scheduling building blocks shared by Workloads, PodGroups and CompositePodGroups.

They mirror upstream ``scheduling.k8s.io/v1beta1`` field for field, so an object moves between
the two groups by changing its apiVersion.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from phalanx.api.base import ApiModel, Marker
from phalanx.api.formats import DNS_SUBDOMAIN_MAX, DNSLabel, DNSSubdomain, LabelKey
from phalanx.api.markers import ATOMIC_LIST, exactly_one, immutable, rule, same_variant, validations

INT32_MAX = 2**31 - 1
HIGHEST_USER_PRIORITY = 1_000_000_000
"""Priorities above this are reserved for system priority classes, as upstream."""

Priority = Annotated[int, Field(ge=-(2**31), le=HIGHEST_USER_PRIORITY)]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
PREEMPT_LOWER_PRIORITY: PreemptionPolicy = "PreemptLowerPriority"
PREEMPT_NEVER: PreemptionPolicy = "Never"

# Upstream freezes these on templates and groups alike once the object exists.
_SETTINGS = ("schedulingConstraints", "disruptionMode", "priorityClassName", "priority", "preemptionPolicy")
SETTINGS_ARE_IMMUTABLE = tuple(immutable(field) for field in _SETTINGS)

# KEP-5710: a basic group's pods are placed (and may be disrupted) one by one, so "all" cannot hold for them.
# The Job annotations refuse the same pair (phalanx.api.job_policy).
ALL_NEEDS_GANG_MESSAGE = (
    "disruptionMode all needs schedulingPolicy gang: a basic group's pods are placed one by one and cannot "
    "be disrupted as one"
)
ALL_NEEDS_GANG = rule(
    "!has(self.disruptionMode) || !has(self.disruptionMode.all) || !has(self.schedulingPolicy.basic)",
    ALL_NEEDS_GANG_MESSAGE,
    field_path=".disruptionMode",
)


def _exactly_one(model: ApiModel, first: str, second: str) -> None:
    if (getattr(model, first) is None) == (getattr(model, second) is None):
        raise ValueError(f"exactly one of {first} or {second} must be set")


class BasicSchedulingPolicy(Marker):
    """Standard pod-by-pod scheduling; present and empty when chosen."""


class GangSchedulingPolicy(ApiModel):
    """All-or-nothing scheduling of the group's pods."""

    min_count: int = Field(ge=1, le=INT32_MAX)
    """The number of pods that must be placeable together before any of them is released."""


class SchedulingPolicy(ApiModel):
    """How a PodGroup's pods are scheduled: exactly one of basic or gang.

    The choice is fixed at creation; gang.minCount stays mutable.
    """

    model_config = ConfigDict(
        json_schema_extra=validations(exactly_one("basic", "gang"), same_variant("basic", "gang"))
    )

    basic: BasicSchedulingPolicy | None = None
    """Schedule pods one by one, as without Phalanx."""
    gang: GangSchedulingPolicy | None = None
    """Schedule at least gang.minCount pods together, or none of them."""

    @model_validator(mode="after")
    def _one_policy(self) -> Self:
        _exactly_one(self, "basic", "gang")
        return self

    @classmethod
    def of_gang(cls, min_count: int) -> SchedulingPolicy:
        return cls(gang=GangSchedulingPolicy(min_count=min_count))

    @classmethod
    def of_basic(cls) -> SchedulingPolicy:
        return cls(basic=BasicSchedulingPolicy())


class CompositeGangSchedulingPolicy(ApiModel):
    """All-or-nothing scheduling of a composite group's child groups."""

    min_group_count: int = Field(ge=1, le=INT32_MAX)
    """The number of child groups that must be placeable together before any is released."""


class CompositeSchedulingPolicy(ApiModel):
    """How a CompositePodGroup's child groups are scheduled: exactly one of basic or gang."""

    model_config = ConfigDict(
        json_schema_extra=validations(exactly_one("basic", "gang"), same_variant("basic", "gang"))
    )

    basic: BasicSchedulingPolicy | None = None
    """Schedule the child groups independently."""
    gang: CompositeGangSchedulingPolicy | None = None
    """Schedule at least gang.minGroupCount child groups together, or none of them."""

    @model_validator(mode="after")
    def _one_policy(self) -> Self:
        _exactly_one(self, "basic", "gang")
        return self


def check_all_needs_gang(policy: SchedulingPolicy, mode: DisruptionMode | None) -> None:
    """The model's side of ALL_NEEDS_GANG."""
    if policy.basic is not None and mode is not None and mode.all is not None:
        raise ValueError(ALL_NEEDS_GANG_MESSAGE)


class TopologyConstraint(ApiModel):
    """All pods of the group land in one domain of a node label."""

    key: LabelKey
    """The node label whose values are the domains, e.g. topology.kubernetes.io/zone."""


class SchedulingConstraints(ApiModel):
    """Where the group's pods may go, together."""

    topology: list[TopologyConstraint] | None = Field(
        default=None, max_length=1, json_schema_extra=ATOMIC_LIST
    )
    """At most one topology constraint, as upstream."""


class SingleDisruptionMode(Marker):
    """Members may be disrupted one at a time."""


class AllDisruptionMode(Marker):
    """Members may only be disrupted together."""


class DisruptionMode(ApiModel):
    """How the group's members may be disrupted: exactly one of single or all."""

    model_config = ConfigDict(json_schema_extra=validations(exactly_one("single", "all")))

    single: SingleDisruptionMode | None = None
    """Members can be disrupted independently."""
    all: AllDisruptionMode | None = None
    """Members can only be disrupted (e.g. preempted) together."""

    @model_validator(mode="after")
    def _one_mode(self) -> Self:
        _exactly_one(self, "single", "all")
        return self

    @classmethod
    def of_single(cls) -> DisruptionMode:
        return cls(single=SingleDisruptionMode())

    @classmethod
    def of_all(cls) -> DisruptionMode:
        return cls(all=AllDisruptionMode())


class WorkloadRef(ApiModel):
    """The Workload template a group was created from."""

    workload_name: DNSSubdomain
    """The Workload's name, in the group's namespace."""
    template_name: DNSLabel
    """The name of the template inside the Workload."""


class ControllerRef(ApiModel):
    """The object that owns a Workload, e.g. a batch Job."""

    api_group: DNSSubdomain | None = None
    """The owner's API group; empty for the core group."""
    kind: str = Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX, pattern=r"^[^/%]+$")
    """The owner's kind."""
    name: str = Field(min_length=1, max_length=DNS_SUBDOMAIN_MAX, pattern=r"^[^/%]+$")
    """The owner's name, in the Workload's namespace."""
