"""The PodGroup kind: a set of pods that Phalanx admits together (gang) or one by one (basic)."""

from __future__ import annotations

from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from phalanx.api.base import ApiModel
from phalanx.api.formats import DNSSubdomain
from phalanx.api.group import API_VERSION, POD_GROUP_KIND
from phalanx.api.markers import immutable, rule, validations
from phalanx.api.scheduling import (
    ALL_NEEDS_GANG,
    PREEMPT_LOWER_PRIORITY,
    SETTINGS_ARE_IMMUTABLE,
    DisruptionMode,
    PreemptionPolicy,
    Priority,
    SchedulingConstraints,
    SchedulingPolicy,
    WorkloadRef,
    check_all_needs_gang,
)
from phalanx.api.status import PodGroupStatus


class PodGroupSpec(ApiModel):
    """The desired state of a PodGroup, normally copied from a Workload's PodGroupTemplate."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "!has(self.parentCompositePodGroupName) || has(self.workloadRef)",
                "workloadRef must be set when parentCompositePodGroupName is set",
            ),
            immutable("workloadRef"),
            immutable("parentCompositePodGroupName"),
            *SETTINGS_ARE_IMMUTABLE,
            ALL_NEEDS_GANG,
        )
    )

    parent_composite_pod_group_name: DNSSubdomain | None = None
    """The CompositePodGroup this group belongs to; unset for a root group."""
    workload_ref: WorkloadRef | None = None
    """The Workload template this group was made from."""
    scheduling_policy: SchedulingPolicy
    """Basic or gang; only gang.minCount may change later."""
    scheduling_constraints: SchedulingConstraints | None = None
    """Topology constraints."""
    disruption_mode: DisruptionMode = DisruptionMode.of_single()
    """Single (default) or all."""
    priority_class_name: DNSSubdomain | None = None
    """The PriorityClass of the group."""
    priority: Priority | None = None
    """The group's priority value; higher goes first."""
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY
    """Whether the group may preempt lower-priority ones: PreemptLowerPriority (default) or Never."""

    @model_validator(mode="after")
    def _parent_needs_workload(self) -> Self:
        if self.parent_composite_pod_group_name is not None and self.workload_ref is None:
            raise ValueError("workloadRef must be set when parentCompositePodGroupName is set")
        check_all_needs_gang(self.scheduling_policy, self.disruption_mode)
        return self


class PodGroup(ApiModel):
    """A PodGroup object (scheduling.phalanx.dev/v1beta1)."""

    api_version: str = API_VERSION
    kind: str = POD_GROUP_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PodGroupSpec
    status: PodGroupStatus | None = None
