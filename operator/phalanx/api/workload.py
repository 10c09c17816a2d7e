"""The Workload kind: the templates a controller's PodGroups and CompositePodGroups are made from."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Self

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, model_validator

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
    ALL_NEEDS_GANG,
    SETTINGS_ARE_IMMUTABLE,
    CompositeSchedulingPolicy,
    ControllerRef,
    DisruptionMode,
    PreemptionPolicy,
    Priority,
    SchedulingConstraints,
    SchedulingPolicy,
    check_all_needs_gang,
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

    model_config = ConfigDict(json_schema_extra=validations(*SETTINGS_ARE_IMMUTABLE, ALL_NEEDS_GANG))

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

    @model_validator(mode="after")
    def _all_needs_gang(self) -> Self:
        check_all_needs_gang(self.scheduling_policy, self.disruption_mode)
        return self


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
    def _check_tree(self, info: ValidationInfo) -> Self:
        if (self.pod_group_templates is None) == (self.composite_pod_group_templates is None):
            raise ValueError("exactly one of podGroupTemplates or compositePodGroupTemplates must be set")
        if isinstance(info.context, dict) and info.context.get(_TREE_PROBLEMS_LATER):
            return self  # workload_problems() asks for them one by one, with their paths
        problems = self.tree_problems()
        if problems:
            raise ValueError("; ".join(f"{path}: {text}" for path, text in problems))
        return self

    def tree_problems(self) -> list[tuple[str, str]]:
        """Upstream's rules over the whole template tree, as (path from spec, problem): names unique across
        the tree, at most 4 levels, and one priorityClassName and priority for every template."""
        problems: list[tuple[str, str]] = []
        names: dict[str, str] = {}
        settings: tuple[str | None, int | None] | None = None
        first_path = ""
        for template, level, path in self._walk():
            if template.name in names:
                problems.append(
                    (
                        f"{path}.name",
                        f"template name {template.name!r} is used twice (first at {names[template.name]}): "
                        "names must be unique across the Workload",
                    )
                )
            else:
                names[template.name] = path
            if isinstance(template, CompositePodGroupTemplate) and level > MAX_COMPOSITE_LEVELS:
                problems.append((path, f"maximum template hierarchy depth is {MAX_TEMPLATE_DEPTH}"))
            mine = (template.priority_class_name, template.priority)
            if settings is None:
                settings, first_path = mine, path
            elif mine != settings:
                problems.append(
                    (
                        path,
                        f"priorityClassName {mine[0]!r} and priority {mine[1]!r} differ from {first_path}'s "
                        f"({settings[0]!r}, {settings[1]!r}): all templates must have the same "
                        "priorityClassName and priority",
                    )
                )
        return problems

    def _walk(self) -> Iterator[tuple[AnyTemplate, int, str]]:
        """Every template with its level (1 at the top) and its path from spec, parents before children."""

        def walk(
            leaves: list[PodGroupTemplate] | None,
            composites: list[CompositePodGroupTemplate] | None,
            level: int,
            at: str,
        ) -> Iterator[tuple[AnyTemplate, int, str]]:
            for i, leaf in enumerate(leaves or []):
                yield leaf, level, f"{at}podGroupTemplates[{i}]"
            for i, parent in enumerate(composites or []):
                path = f"{at}compositePodGroupTemplates[{i}]"
                yield parent, level, path
                yield from walk(
                    parent.pod_group_templates, parent.composite_pod_group_templates, level + 1, f"{path}."
                )

        return walk(self.pod_group_templates, self.composite_pod_group_templates, 1, "")

    def templates(self) -> Iterator[tuple[AnyTemplate, int]]:
        """Every template of the tree with its level (1 at the top), parents before children."""
        return ((template, level) for template, level, _ in self._walk())


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


def workload_problems(spec: Any) -> list[str]:
    """Everything wrong with a Workload's spec, each problem naming its field from ``spec``; [] if valid.

    For the validating webhook: the CRD schema cannot express the tree-wide rules, and pydantic words the
    rest as the schema does.
    """
    if spec is None:
        return ["spec: Required value"]
    try:
        parsed = WorkloadSpec.model_validate(spec, context={_TREE_PROBLEMS_LATER: True})
    except ValidationError as e:
        return [
            f"{field_path('spec', error.get('loc') or ())}: "
            + str(error.get("msg", "")).removeprefix("Value error, ")
            for error in e.errors()
        ]
    return [f"spec.{path}: {text}" for path, text in parsed.tree_problems()]


_TREE_PROBLEMS_LATER = "phalanx.tree-problems-later"


def field_path(root: str, loc: Sequence[int | str]) -> str:
    """pydantic's error location as the apiserver names a field: ``spec.podGroupTemplates[0].name``."""
    path = root
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path
