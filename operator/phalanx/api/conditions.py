"""Status conditions: the standard metav1.Condition shape, and the types and reasons Phalanx uses."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, Field

from phalanx.api.base import ApiModel

ConditionStatus = Literal["True", "False", "Unknown"]
TRUE: ConditionStatus = "True"
FALSE: ConditionStatus = "False"
UNKNOWN: ConditionStatus = "Unknown"

# Upstream's condition: set once the whole group has been placed; it never goes back to False.
POD_GROUP_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

# The composite counterpart of PodGroupInitiallyScheduled.
COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED = "CompositePodGroupInitiallyScheduled"

# Phalanx's present-tense condition: is the group admitted (its pods released) right now?
ADMITTED = "Admitted"
REASON_ADMITTED = "Admitted"
REASON_WAITING_FOR_PODS = "WaitingForPods"
# Other controllers' gates are still on pods: releasing them would hold room kube-scheduler cannot see.
REASON_WAITING_FOR_GATES = "WaitingForGates"
# A Job labelled after its creation (or whose template lost the gate in an edit the webhooks did not see):
# its pods were never gated, so Phalanx admits nothing for it.
REASON_NOT_GATED = "NotGated"
REASON_SUSPENDED = "Suspended"
# Kueue holds its owner: queued, not admitted yet, or being evicted (docs/kueue.md); nothing is held for it.
REASON_HELD_BY_KUEUE = "HeldByKueue"
# Suspended by Phalanx to be placed again as a whole (preempted, or its domain failed).
REASON_REQUEUED = "Requeued"
REASON_FINISHED = "Finished"
# The Job's pod template names a PriorityClass that does not exist: the Job controller cannot create its pods.
REASON_PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
# A ResourceQuota of the namespace refuses the pods the gang still lacks (gated pods count against quotas).
REASON_QUOTA_EXCEEDED = "QuotaExceeded"
# REASON_UNSCHEDULABLE is also an Admitted reason.

# Upstream's condition: the group is about to be terminated by a disruption.
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
# Phalanx's: the group's pods are preempted by Phalanx to make room for a higher-priority group.
REASON_PREEMPTION_BY_PHALANX = "PreemptionByPhalanx"
# A group waits for the pods it preempted to terminate; the room is reserved for it.
REASON_PREEMPTING = "Preempting"


class Condition(ApiModel):
    """One aspect of the object's state (metav1.Condition)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    """The condition type in CamelCase, e.g. Admitted."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation the condition was set for."""
    last_transition_time: AwareDatetime
    """When status last changed."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """A CamelCase word saying why, e.g. Unschedulable."""
    message: str = Field(max_length=32768)
    """A human-readable explanation; may be empty."""
