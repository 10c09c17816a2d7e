"""The CompositePodGroup kind: a group of PodGroups (or further composites) admitted together."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from phalanx.api.base import ApiModel
from phalanx.api.formats import DNSSubdomain
from phalanx.api.group import API_VERSION, COMPOSITE_POD_GROUP_KIND
from phalanx.api.markers import immutable, validations
from phalanx.api.scheduling import (
    PREEMPT_LOWER_PRIORITY,
    SETTINGS_ARE_IMMUTABLE,
    CompositeSchedulingPolicy,
    DisruptionMode,
    PreemptionPolicy,
    Priority,
    SchedulingConstraints,
    WorkloadRef,
)
from phalanx.api.status import CompositePodGroupStatus


class CompositePodGroupSpec(ApiModel):
    """The desired state of a CompositePodGroup, copied from a Workload's CompositePodGroupTemplate."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            immutable("workloadRef"),
            immutable("parentCompositePodGroupName"),
            # Upstream (v1alpha3) freezes the whole policy here, minGroupCount included.
            immutable("schedulingPolicy"),
            *SETTINGS_ARE_IMMUTABLE,
        )
    )

    parent_composite_pod_group_name: DNSSubdomain | None = None
    """The parent CompositePodGroup; unset for the root of a Workload's tree."""
    workload_ref: WorkloadRef
    """The Workload template this group was made from."""
    scheduling_policy: CompositeSchedulingPolicy
    """Basic or gang over the child groups."""
    scheduling_constraints: SchedulingConstraints | None = None
    """Topology constraints for all pods under this group."""
    disruption_mode: DisruptionMode = DisruptionMode.of_single()
    """Single (default) or all: may child groups be disrupted independently?"""
    priority_class_name: DNSSubdomain | None = None
    """The PriorityClass of the group."""
    priority: Priority | None = None
    """The group's priority value; higher goes first."""
    preemption_policy: PreemptionPolicy = PREEMPT_LOWER_PRIORITY
    """PreemptLowerPriority (default) or Never."""


class CompositePodGroup(ApiModel):
    """A CompositePodGroup object (scheduling.phalanx.dev/v1beta1)."""

    api_version: str = API_VERSION
    kind: str = COMPOSITE_POD_GROUP_KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: CompositePodGroupSpec
    status: CompositePodGroupStatus | None = None
