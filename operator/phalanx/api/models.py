"""Every API model in one import, for callers that do not care which module defines what."""

from __future__ import annotations

from phalanx.api.base import ApiModel, Marker
from phalanx.api.compositepodgroup import CompositePodGroup, CompositePodGroupSpec
from phalanx.api.conditions import Condition
from phalanx.api.podgroup import PodGroup, PodGroupSpec
from phalanx.api.scheduling import (
    AllDisruptionMode,
    BasicSchedulingPolicy,
    CompositeGangSchedulingPolicy,
    CompositeSchedulingPolicy,
    ControllerRef,
    DisruptionMode,
    GangSchedulingPolicy,
    SchedulingConstraints,
    SchedulingPolicy,
    SingleDisruptionMode,
    TopologyConstraint,
    WorkloadRef,
)
from phalanx.api.status import Admission, Assignment, CompositePodGroupStatus, GroupStatus, PodGroupStatus
from phalanx.api.workload import (
    CompositePodGroupTemplate,
    PodGroupTemplate,
    Workload,
    WorkloadSpec,
    WorkloadStatus,
)

__all__ = [
    "Admission",
    "AllDisruptionMode",
    "ApiModel",
    "Assignment",
    "BasicSchedulingPolicy",
    "CompositeGangSchedulingPolicy",
    "CompositePodGroup",
    "CompositePodGroupSpec",
    "CompositePodGroupStatus",
    "CompositePodGroupTemplate",
    "CompositeSchedulingPolicy",
    "Condition",
    "ControllerRef",
    "DisruptionMode",
    "GangSchedulingPolicy",
    "GroupStatus",
    "Marker",
    "PodGroup",
    "PodGroupSpec",
    "PodGroupStatus",
    "PodGroupTemplate",
    "SchedulingConstraints",
    "SchedulingPolicy",
    "SingleDisruptionMode",
    "TopologyConstraint",
    "Workload",
    "WorkloadRef",
    "WorkloadSpec",
    "WorkloadStatus",
]
