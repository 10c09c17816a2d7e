"""The status Phalanx writes on PodGroups and CompositePodGroups."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import AwareDatetime, Field, model_validator

from phalanx.api.base import ApiModel
from phalanx.api.conditions import Condition
from phalanx.api.formats import DNSSubdomain
from phalanx.api.markers import list_map

Phase = Literal["Pending", "WaitingForPods", "Unschedulable", "Admitted", "Running", "Suspended", "Finished"]
PENDING: Phase = "Pending"
WAITING_FOR_PODS: Phase = "WaitingForPods"
UNSCHEDULABLE: Phase = "Unschedulable"
ADMITTED: Phase = "Admitted"
RUNNING: Phase = "Running"
SUSPENDED: Phase = "Suspended"
FINISHED: Phase = "Finished"

PolicyName = Literal["Gang", "Basic"]
GANG: PolicyName = "Gang"
BASIC: PolicyName = "Basic"


def _unique(values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r}")
        seen.add(value)


class Assignment(ApiModel):
    """One pod bound to one node by an admission."""

    pod: DNSSubdomain
    """The pod's name."""
    node: DNSSubdomain
    """The node's name."""


class Admission(ApiModel):
    """The placement decision for the group.

    Recorded before any pod is released, so an operator that restarts halfway can finish
    releasing the pods, or undo the decision, instead of deciding twice.
    """

    domain: str | None = None
    """The topology domain (node label value) chosen; unset without a topology constraint."""
    assignments: list[Assignment] = Field(default_factory=list, json_schema_extra=list_map("pod"))
    """The node chosen for each pod."""
    admitted_at: AwareDatetime
    """When the decision was made."""
    attempt: int = Field(ge=0)
    """How many admissions were made for this group before this one (0 for the first)."""
    level: str | None = None
    """Preferred topology: the wider level (node label, "" anywhere) used as no domain of the key fit."""
    mode_note: str | None = None
    """Topology mode auto: which level applied and why (as the Admitted condition says it)."""
    scaled_up: bool | None = None
    """Made for the new pods of a gang scaled up while it ran whole: the pods it names from the decisions
    before it ran whole without them, so they are not taken back if its new pods' releases fail."""

    @model_validator(mode="after")
    def _pods_unique(self) -> Self:
        _unique([a.pod for a in self.assignments], "assignment for pod")
        return self


ReservationCause = Literal["Preemption", "BoundedWaiting"]
PREEMPTION: ReservationCause = "Preemption"
BOUNDED_WAITING: ReservationCause = "BoundedWaiting"


class Reservation(ApiModel):
    """Room held for this group until it is admitted: being freed by preemption, or kept as it frees for
    a gang that waited too long behind smaller ones (bounded waiting).

    No other group is admitted into these nodes meanwhile (for bounded waiting: no group after this one in
    the scheduling order). It ends when the group is admitted, when the group no longer waits (deleted,
    suspended, admitted elsewhere), or at `expiresAt`.
    """

    domain: str | None = None
    """The topology domain the room is in."""
    nodes: list[DNSSubdomain] = Field(default_factory=list)
    """Preemption: the nodes the group's pods go to once the victims are gone (one entry per pod).
    BoundedWaiting: the nodes held, each once (no other group's pod is placed on them)."""
    victims: list[str] = Field(default_factory=list)
    """The preempted pods (namespace/name) being waited for."""
    reserved_at: AwareDatetime
    """When the victims were chosen."""
    expires_at: AwareDatetime
    """When the reservation lapses if the group was not admitted by then."""
    cause: ReservationCause | None = None
    """Why the room is held: Preemption (the default when unset) or BoundedWaiting."""
    waiting_since: AwareDatetime | None = None
    """BoundedWaiting: since when the group has waited."""


class GroupStatus(ApiModel):
    """The observed state of a PodGroup or CompositePodGroup."""

    conditions: list[Condition] | None = Field(default=None, json_schema_extra=list_map("type"))
    """The latest observations, one per type (PodGroupInitiallyScheduled, Admitted, DisruptionTarget)."""
    phase: Phase | None = None
    """Where the group is now (Pending, WaitingForPods, Unschedulable, Admitted, Running, ...)."""
    policy: PolicyName | None = None
    """Gang or Basic, for kubectl get."""
    domain: str | None = None
    """The topology domain the group was placed in, for kubectl get."""
    admission: Admission | None = None
    """The current placement decision, if any."""
    reservation: Reservation | None = None
    """Room being freed for the group by preemption, if any."""
    admissions: int | None = Field(default=None, ge=0)
    """How many placement decisions were made for this group so far (the next one's attempt number)."""
    last_domain: str | None = None
    """The domain of the latest placement decision, kept after its pods are gone (a JobSet's failurePolicy
    restart, a LeaderWorkerSet group recreated): the next decision goes there again when the whole group
    fits there. Cleared when Phalanx requeues the group whole (suspended, or broken and its pods deleted); a
    LeaderWorkerSet group taken as a preemption victim keeps it (it goes back only if it fits there whole)."""
    scheduled: int | None = Field(default=None, ge=0)
    """How many members are bound to nodes (running, or about to)."""
    succeeded: int | None = Field(default=None, ge=0)
    """How many members ran to their end: they count toward the gang (with `scheduled`, a gang whose
    members partly completed is whole) but hold no node. Not set on a CompositePodGroup (a child group
    whose members all completed counts as scheduled there)."""
    waiting: int | None = Field(default=None, ge=0)
    """How many members exist but are held back by the admission gate."""

    @model_validator(mode="after")
    def _condition_types_unique(self) -> Self:
        _unique([c.type for c in self.conditions or []], "condition type")
        return self

    def condition(self, type_: str) -> Condition | None:
        """The condition of the given type, if present."""
        return next((c for c in self.conditions or [] if c.type == type_), None)


class PodGroupStatus(GroupStatus):
    """The observed state of a PodGroup."""


class CompositePodGroupStatus(GroupStatus):
    """The observed state of a CompositePodGroup; its counters count child groups."""
