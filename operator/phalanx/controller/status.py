"""What a PodGroup's status should say, computed from facts (pure).

Two conditions: upstream's `PodGroupInitiallyScheduled` (sticky once True, exactly as upstream), and
Phalanx's `Admitted`, which always tells the present: why the group waits now, also after a resume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api import conditions as c
from phalanx.api.status import (
    ADMITTED,
    BASIC,
    FINISHED,
    GANG,
    PENDING,
    RUNNING,
    SUSPENDED,
    UNSCHEDULABLE,
    WAITING_FOR_PODS,
)


@dataclass(frozen=True)
class Outcome:
    """What the latest scheduling pass concluded for the group (reason + message), or nothing new."""

    reason: str  # one of the c.REASON_* of the Admitted condition
    message: str


@dataclass(frozen=True)
class GroupFacts:
    gang: bool
    min_count: int
    scheduled: int  # pods bound to nodes (running or about to)
    released: int  # pods Phalanx released that kube-scheduler has not bound yet
    waiting: int  # pods still held behind the gate
    domain: str | None
    suspended: bool = False
    finished: bool = False


def _condition(
    current: Mapping[str, Any] | None,
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    generation: int,
) -> dict[str, Any]:
    changed = current is None or current.get("status") != status
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now if changed or not current else current.get("lastTransitionTime", now),
        "observedGeneration": generation,
    }


def find(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((x for x in conditions if x.get("type") == kind), None)


def present_outcome(
    facts: GroupFacts, outcome: Outcome | None, previous: Mapping[str, Any] | None
) -> Outcome:
    """The Admitted condition's reason and message now."""
    if facts.finished:
        return Outcome(c.REASON_FINISHED, "the Job finished")
    if facts.suspended:
        return Outcome(
            c.REASON_SUSPENDED, "the Job is suspended; its pods will be held again when it resumes"
        )
    placed = facts.scheduled + facts.released
    need = facts.min_count if facts.gang else 1
    if outcome is not None and outcome.reason != c.REASON_ADMITTED and placed < need:
        return outcome
    if placed >= need and placed > 0:
        where = f" in {facts.domain}" if facts.domain else ""
        message = f"{placed} pod(s) admitted{where}"
        if facts.waiting:
            message += f"; {facts.waiting} more waiting for room{where}"
        return Outcome(c.REASON_ADMITTED, message)
    if outcome is not None:
        return outcome
    if previous is not None and previous.get("status") == "False":
        return Outcome(str(previous.get("reason")), str(previous.get("message", "")))
    return Outcome(c.REASON_WAITING_FOR_PODS, "waiting for the Job's pods")


def phase_of(facts: GroupFacts, present: Outcome) -> str:
    if facts.finished:
        return FINISHED
    if facts.suspended:
        return SUSPENDED
    need = facts.min_count if facts.gang else 1
    if facts.scheduled >= need and facts.scheduled > 0:
        return RUNNING
    if present.reason == c.REASON_ADMITTED:
        return ADMITTED
    if present.reason == c.REASON_UNSCHEDULABLE:
        return UNSCHEDULABLE
    if present.reason == c.REASON_WAITING_FOR_PODS:
        return WAITING_FOR_PODS
    return PENDING


def desired_status(
    current: Mapping[str, Any],
    facts: GroupFacts,
    outcome: Outcome | None,
    now: str,
    generation: int,
) -> dict[str, Any]:
    """The full status (conditions are replaced as a whole list by a merge patch)."""
    conditions: list[Mapping[str, Any]] = list(current.get("conditions") or [])
    initial = find(conditions, c.POD_GROUP_INITIALLY_SCHEDULED)
    admitted = find(conditions, c.ADMITTED)
    present = present_outcome(facts, outcome, admitted)

    if initial is not None and initial.get("status") == "True":
        new_initial: Mapping[str, Any] = initial  # upstream: never flipped back
    elif present.reason == c.REASON_ADMITTED:
        new_initial = _condition(
            initial, c.POD_GROUP_INITIALLY_SCHEDULED, "True", c.REASON_SCHEDULED, "", now, generation
        )
    elif present.reason == c.REASON_UNSCHEDULABLE:
        new_initial = _condition(
            initial,
            c.POD_GROUP_INITIALLY_SCHEDULED,
            "False",
            c.REASON_UNSCHEDULABLE,
            present.message,
            now,
            generation,
        )
    else:
        new_initial = initial or {}

    admitted_status = "True" if present.reason == c.REASON_ADMITTED else "False"
    new_admitted = _condition(
        admitted, c.ADMITTED, admitted_status, present.reason, present.message, now, generation
    )

    others = [x for x in conditions if x.get("type") not in (c.POD_GROUP_INITIALLY_SCHEDULED, c.ADMITTED)]
    new_conditions = [x for x in (new_initial, new_admitted) if x] + others
    return {
        "conditions": new_conditions,
        "phase": phase_of(facts, present),
        "policy": GANG if facts.gang else BASIC,
        "domain": facts.domain,
        "scheduled": facts.scheduled,
        "waiting": facts.waiting,
    }


def status_changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Ignore timestamps-only differences so an unchanged group costs no write."""

    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in status.items() if k != "conditions" and k != "admission"}
        out["conditions"] = sorted(
            (
                (
                    x.get("type"),
                    x.get("status"),
                    x.get("reason"),
                    x.get("message"),
                    x.get("observedGeneration"),
                )
                for x in status.get("conditions") or []
            ),
            key=str,
        )
        return out

    return strip(current) != strip(desired)
