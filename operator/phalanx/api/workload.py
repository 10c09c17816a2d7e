"""The Workload kind: the templates a controller's PodGroups and CompositePodGroups are made from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from phalanx.api.base import ApiModel
from phalanx.api.conditions import Condition
from phalanx.api.formats import DNSLabel, DNSSubdomain
from phalanx.api.group import API_VERSION, WORKLOAD_KIND
from phalanx.api.markers import (
    exactly_one,
    immutable,
    list_map,
    no_added_or_removed_items,
    rule,
    same_variant,
    validations,
)
from phalanx.api.scheduling import (
    SETTINGS_ARE_IMMUTABLE,
    CompositeSchedulingPolicy,
    ControllerRef,
    DisruptionMode,
    PreemptionPolicy,
    Priority,
    SchedulingConstraints,
    SchedulingPolicy,
)

MAX_TEMPLATES = 8
"""Templates per list, as upstream."""
MAX_TEMPLATE_DEPTH = 4
"""Levels of the template tree, leaves included, as upstream: so at most 3 levels of composites."""
MAX_COMPOSITE_LEVELS = MAX_TEMPLATE_DEPTH - 1


def _templates(**kwargs: Any) -> Any:
    """A template list: a list-map keyed by name, 1 to 8 entries, none added or removed later."""
    return Field(
        min_length=1,
        max_length=MAX_TEMPLATES,
        json_schema_extra=list_map("name", rules=(no_added_or_removed_items("name"),)),
        **kwargs,
    )


class PodGroupTemplate(ApiModel):
    """The template of one PodGroup."""

    model_config = ConfigDict(json_schema_extra=validations(*SETTINGS_ARE_IMMUTABLE))

    name: DNSLabel
    """Unique among all templates of the Workload."""
    scheduling_policy: SchedulingPolicy
    """Basic or gang; copied to the PodGroup."""
    scheduling_constraints: SchedulingConstraints | None = None
    """Topology constraints; copied to the PodGroup."""
    disruption_mode: DisruptionMode | None = None
    """Single or all; copied to the PodGroup."""
    priority_class_name: DNSSubdomain | None = None
    """The PriorityClass of the PodGroup."""
    priority: Priority | None = None
    """The PodGroup's priority value; higher goes first."""
    preemption_policy: PreemptionPolicy | None = None
    """Whether the PodGroup may preempt lower-priority ones: PreemptLowerPriority or Never."""


class CompositePodGroupTemplate(ApiModel):
    """The template of one CompositePodGroup: a group of child groups."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.podGroupTemplates) || has(self.compositePodGroupTemplates)",
                "a composite template needs at least one child template",
            ),
            same_variant("podGroupTemplates", "compositePodGroupTemplates"),
            *SETTINGS_ARE_IMMUTABLE,
        )
    )

    name: DNSLabel
    """Unique among all templates of the Workload."""
    scheduling_policy: CompositeSchedulingPolicy
    """Basic or gang over the child groups; copied to the CompositePodGroup."""
    scheduling_constraints: SchedulingConstraints | None = None
    """Topology constraints; copied to the CompositePodGroup."""
    disruption_mode: DisruptionMode | None = None
    """Single or all; copied to the CompositePodGroup."""
    priority_class_name: DNSSubdomain | None = None
    """The PriorityClass of the CompositePodGroup."""
    priority: Priority | None = None
    """The CompositePodGroup's priority value."""
    preemption_policy: PreemptionPolicy | None = None
    """PreemptLowerPriority or Never."""
    pod_group_templates: list[PodGroupTemplate] | None = _templates(default=None)
    """Child PodGroup templates."""
    composite_pod_group_templates: list[CompositePodGroupTemplate] | None = _templates(default=None)
    """Child CompositePodGroup templates (at most 3 levels of composites in all)."""

    @model_validator(mode="after")
    def _has_children(self) -> Self:
        if not self.pod_group_templates and not self.composite_pod_group_templates:
            raise ValueError(f"composite template {self.name!r} needs at least one child template")
        return self


AnyTemplate = PodGroupTemplate | CompositePodGroupTemplate


class WorkloadSpec(ApiModel):
    """The desired state of a Workload: exactly one of podGroupTemplates or compositePodGroupTemplates."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            exactly_one("podGroupTemplates", "compositePodGroupTemplates"),
            same_variant("podGroupTemplates", "compositePodGroupTemplates"),
            immutable("controllerRef"),
        )
    )

    controller_ref: ControllerRef | None = None
    """The object (such as a Job) this Workload was made for."""
    pod_group_templates: list[PodGroupTemplate] | None = _templates(default=None)
    """The PodGroup templates; names cannot be added or removed later."""
    composite_pod_group_templates: list[CompositePodGroupTemplate] | None = _templates(default=None)
    """The CompositePodGroup templates; names cannot be added or removed later."""

    @model_validator(mode="after")
    def _check_tree(self) -> Self:
        if (self.pod_group_templates is None) == (self.composite_pod_group_templates is None):
            raise ValueError("exactly one of podGroupTemplates or compositePodGroupTemplates must be set")
        names: set[str] = set()
        settings: set[tuple[str | None, int | None]] = set()
        for template, level in self.templates():
            if template.name in names:
                raise ValueError(f"template name {template.name!r} is used twice; names must be unique")
            names.add(template.name)
            if isinstance(template, CompositePodGroupTemplate) and level > MAX_COMPOSITE_LEVELS:
                raise ValueError(f"maximum template hierarchy depth is {MAX_TEMPLATE_DEPTH}")
            settings.add((template.priority_class_name, template.priority))
        if len(settings) > 1:
            raise ValueError("all templates must have the same priorityClassName and priority")
        return self

    def templates(self) -> Iterator[tuple[AnyTemplate, int]]:
        """Every template of the tree with its level (1 at the top), parents before children."""

        def walk(
            leaves: list[PodGroupTemplate] | None,
            composites: list[CompositePodGroupTemplate] | None,
            level: int,
        ) -> Iterator[tuple[AnyTemplate, int]]:
            for leaf in leaves or []:
                yield leaf, level
            for parent in composites or []:
                yield parent, level
                yield from walk(parent.pod_group_templates, parent.composite_pod_group_templates, level + 1)

        return walk(self.pod_group_templates, self.composite_pod_group_templates, 1)


class WorkloadStatus(ApiModel):
    """The observed state of a Workload; upstream has none, Phalanx only reports conditions."""

    conditions: list[Condition] | None = Field(default=None, json_schema_extra=list_map("type"))
    """The latest observations, one per type."""


class Workload(ApiModel):
    """A Workload object (scheduling.phalanx.dev/v1beta1)."""

    api_version: str = API_VERSION
    kind: str = WORKLOAD_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: WorkloadSpec
    status: WorkloadStatus | None = None
