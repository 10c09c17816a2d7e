"""What a PodGroup's status should say, computed from facts (pure, typed).

Two conditions: upstream's `PodGroupInitiallyScheduled` (sticky once True, exactly as upstream), and
Phalanx's `Admitted`, which always tells the present: why the group waits now, also after a resume.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, TypeVar

from phalanx.api import conditions as c
from phalanx.api.conditions import Condition, ConditionStatus
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
    Admission,
    GroupStatus,
    Phase,
    Reservation,
)
from phalanx.controller.model.quota import QUOTA_DEADLOCK

PREEMPTED_PREFIX = "preempted by "  # how a Job's requeue note starts when it was preempted

# Seconds after a group began waiting for its pods, or was admitted, in which a change of its counters alone
# (waiting, scheduled, succeeded) is not written: its pods are still coming (the Job controller makes them in
# slow-start batches) or binding, a pass or two apart, and each pass wrote the group again (3.7 status writes
# per 8-pod gang in a burst at 1,000 nodes). The state change that ends it (admitted, Running) is written at
# once with the counters of that moment; if it does not come, the next pass past this writes them (one runs
# at least every --resync-seconds). The Job controller batches its status the same way (1 s).
SETTLE_SECONDS = 5.0

# Seconds after this process wrote a group's status in which a change of numbers alone is not written (nor,
# for why it waits, said again as an event): its counters (pods waiting, bound, succeeded, and the messages
# that count them) and the words of a False condition under the same reason. A gang waiting for room is
# refused with the closest placement's counts ("... 5 scheduled, 3 remaining"), which change with every pod
# that binds or ends anywhere, and a running gang's counters change with each of its pods that ends: under
# contention (150 8-pod gangs on 1,000 nodes, a third waiting) that was ten status writes and ten event
# writes per gang, a third of Phalanx's requests. A change of state (phase, reason, decision, domain) is
# written at once, with the numbers of that moment; the numbers alone at most this often (kube-scheduler
# backs its retries of an unschedulable pod off to 10 s, client-go's event spam filter to one per 5 min).
REFRESH_SECONDS = 30.0

G = TypeVar("G", bound=GroupStatus)


@dataclass(frozen=True)
class Outcome:
    """What the latest scheduling pass concluded for the group (reason + message), or nothing new."""

    reason: str  # one of the c.REASON_* of the Admitted condition
    message: str
    # Upstream's sentence alone, for upstream's own condition (PodGroupInitiallyScheduled), when `message`
    # adds Phalanx's explanation to it; None: the same as `message`.
    upstream: str | None = None


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
    held: bool = True  # its pods are born behind Phalanx's gate (False: a Job labelled after creation)
    finished_how: str = ""  # "succeeded" or "failed (...)" once finished
    requeued: str = ""  # why Phalanx suspended the Job to place it again whole
    members: str = "pod(s)"  # what the counters count ("child group(s)" on a CompositePodGroup)
    note: str = ""  # added to the Admitted message while admitted (e.g. a preferred group that climbed)
    owner_kind: str = "Job"  # what the messages call the owner
    held_by: str = ""  # while suspended: why another system (Kueue) holds the owner
    succeeded: int = 0  # members that ran to their end (not counted as placed: they hold no node)
    to_come: int = 0  # a staged unit's pods not made yet whose room its decision holds (staging.py)
    # Of its held slots, those that no longer count (staging.slots_to_come): their node no longer takes their
    # pod, or others' pods took their room.
    room_gone: int = 0


def _condition(
    current: Condition | None,
    kind: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: dt.datetime,
    generation: int,
) -> Condition:
    changed = current is None or current.status != status
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now if changed or current is None else current.last_transition_time,
        observed_generation=generation,
    )


def climbed_note(admission: Admission | None, key: str | None) -> str:
    """What the Admitted message adds for a preferred group placed at a wider level than its key, and for
    an auto group which level applied and why."""
    if admission is not None and admission.mode_note:
        return f" ({admission.mode_note})"
    if admission is None or admission.level is None:
        return ""
    wider = f"one domain of {admission.level}" if admission.level else "no common domain"
    return f" (topology mode preferred: no domain of {key} had room, so it went to {wider})"


def present_outcome(facts: GroupFacts, outcome: Outcome | None, previous: Condition | None) -> Outcome:
    """The Admitted condition's reason and message now."""
    if facts.finished:
        return Outcome(c.REASON_FINISHED, f"the {facts.owner_kind} {facts.finished_how or 'finished'}")
    if facts.suspended and facts.requeued:
        tail = (
            f"; the {facts.owner_kind} resumes once its pods are gone and its new pods wait for a whole "
            "placement"
        )
        if facts.requeued.startswith(QUOTA_DEADLOCK):
            tail = ""  # it says when it resumes
        elif facts.held_by:
            tail = f"; {facts.held_by}"  # requeued through Kueue (kinds/kueue.py): Kueue stops and queues it
        return Outcome(c.REASON_REQUEUED, f"requeued by Phalanx: {facts.requeued}{tail}")
    if facts.suspended and facts.held_by:
        return Outcome(c.REASON_HELD_BY_KUEUE, facts.held_by)
    if facts.suspended:
        return Outcome(
            c.REASON_SUSPENDED,
            f"the {facts.owner_kind} is suspended; its pods will be held again when it resumes",
        )
    if outcome is not None and outcome.reason == c.REASON_REQUEUED:
        return outcome  # being taken back whole: whatever is placed is about to go
    if not facts.held and outcome is not None:
        return outcome  # Phalanx admitted none of its pods: never say it did
    placed = facts.scheduled + facts.released + facts.to_come
    need = facts.min_count if facts.gang else 1
    if outcome is not None and outcome.reason != c.REASON_ADMITTED and placed < need:
        return outcome
    if placed >= need and placed > 0:
        where = f" in {facts.domain}" if facts.domain else ""
        message = f"{placed} {facts.members} admitted{where}{facts.note}"
        if facts.to_come:
            message += f" ({facts.to_come} still to come, their room held)"
        if facts.succeeded:
            message += f"; {facts.succeeded} more succeeded"
        if facts.waiting:
            message += f"; {facts.waiting} more waiting for room{where}"
        return Outcome(c.REASON_ADMITTED, message)
    if outcome is not None:
        return outcome
    if facts.room_gone:
        return Outcome(
            c.REASON_WAITING_FOR_PODS,
            f"waiting for the {facts.owner_kind}'s pods: the room held for {facts.room_gone} pod(s) still to "
            "come is gone (its node no longer takes them, or other pods took it); they are placed afresh "
            "when they come",
        )
    if previous is not None and previous.status == c.FALSE:
        return Outcome(previous.reason, previous.message)
    return Outcome(c.REASON_WAITING_FOR_PODS, f"waiting for the {facts.owner_kind}'s pods")


def phase_of(facts: GroupFacts, present: Outcome) -> Phase:
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
    current: G,
    facts: GroupFacts,
    outcome: Outcome | None,
    now: dt.datetime,
    generation: int,
    admission: Admission | None,
    reservation: Reservation | None = None,
    *,
    initial_type: str = c.POD_GROUP_INITIALLY_SCHEDULED,
) -> G:
    """The full status: conditions (a merge patch replaces the list whole), counters and the admission.

    `initial_type`: upstream's sticky condition (CompositePodGroupInitiallyScheduled on a composite)."""
    initial = current.condition(initial_type)
    admitted = current.condition(c.ADMITTED)
    present = present_outcome(facts, outcome, admitted)

    new_initial: Condition | None
    if initial is not None and initial.status == c.TRUE:
        new_initial = initial  # upstream: never flipped back
    elif present.reason == c.REASON_ADMITTED:
        new_initial = _condition(initial, initial_type, c.TRUE, c.REASON_SCHEDULED, "", now, generation)
    elif present.reason == c.REASON_UNSCHEDULABLE and outcome is None and initial is not None:
        new_initial = initial  # nothing new decided: upstream's sentence stays as it was
    elif present.reason == c.REASON_UNSCHEDULABLE:
        new_initial = _condition(
            initial,
            initial_type,
            c.FALSE,
            c.REASON_UNSCHEDULABLE,
            present.upstream if present.upstream is not None else present.message,
            now,
            generation,
        )
    else:
        new_initial = initial

    admitted_status: ConditionStatus = c.TRUE if present.reason == c.REASON_ADMITTED else c.FALSE
    new_admitted = _condition(
        admitted, c.ADMITTED, admitted_status, present.reason, present.message, now, generation
    )
    disruption = _disruption(current.condition(c.DISRUPTION_TARGET), facts, now, generation)
    mine = (initial_type, c.ADMITTED, c.DISRUPTION_TARGET)
    others = [x for x in current.conditions or [] if x.type not in mine]
    conditions = [x for x in (new_initial, new_admitted, disruption) if x is not None] + others
    return type(current)(
        conditions=conditions,
        phase=phase_of(facts, present),
        policy=GANG if facts.gang else BASIC,
        # A finished group keeps the domain it ran in (its pods are gone, the record of where stays).
        domain=current.domain if facts.finished and facts.domain is None else facts.domain,
        admission=admission,
        reservation=reservation,
        admissions=_admissions(current, admission),
        last_domain=None if present.reason == c.REASON_REQUEUED else last_domain(current, facts, admission),
        scheduled=facts.scheduled,
        # A composite's counters count child groups; one whose members completed counts as scheduled.
        succeeded=facts.succeeded if initial_type == c.POD_GROUP_INITIALLY_SCHEDULED else None,
        waiting=facts.waiting,
    )


def _disruption(
    current: Condition | None, facts: GroupFacts, now: dt.datetime, generation: int
) -> Condition | None:
    """Upstream's DisruptionTarget, on the group: True while it is requeued because it was preempted."""
    if facts.requeued.startswith(PREEMPTED_PREFIX):
        message = f"phalanx: {facts.requeued}; the whole group is requeued"
        return _condition(
            current, c.DISRUPTION_TARGET, c.TRUE, c.REASON_PREEMPTION_BY_PHALANX, message, now, generation
        )
    if current is not None and current.status == c.TRUE:
        return _condition(
            current,
            c.DISRUPTION_TARGET,
            c.FALSE,
            c.REASON_REQUEUED,
            "the Job was resumed after its preemption",
            now,
            generation,
        )
    return current


def last_domain(current: GroupStatus, facts: GroupFacts, admission: Admission | None) -> str | None:
    """The domain a restart's new pods prefer: the present decision's, else the one remembered; none once
    Phalanx requeued the owner whole (a Job requeue places it afresh; so does a requeue by deleting the
    pods, whose pass says Requeued: the caller)."""
    if facts.requeued:
        return None
    if admission is not None:
        return admission.domain
    return current.last_domain


def next_attempt(current: GroupStatus) -> int:
    """The attempt number of the next decision: it never goes back, also after a decision is cleared."""
    recorded = current.admission.attempt + 1 if current.admission is not None else 0
    return max(current.admissions or 0, recorded)


def _admissions(current: GroupStatus, admission: Admission | None) -> int | None:
    made = admission.attempt + 1 if admission is not None else 0
    total = max(current.admissions or 0, made)
    return total or None


def _comparable(status: GroupStatus, counters: bool = True, messages: bool = True) -> tuple[Any, ...]:
    """Everything but timestamps, so an unchanged group costs no write; with `counters` False, also but the
    pod counters and the messages that state them (WaitingForPods: "0 scheduled, 2 waiting"; Admitted:
    "8 pod(s) admitted in b1; 3 more succeeded"); with `messages` False, also but the messages of False
    conditions (why it waits, in words)."""

    def words(x: Condition) -> str | None:
        if not counters and x.reason in (c.REASON_WAITING_FOR_PODS, c.REASON_ADMITTED):
            return None
        return None if not messages and x.status == c.FALSE else x.message

    conditions = sorted(
        (x.type, x.status, x.reason, words(x), x.observed_generation) for x in status.conditions or []
    )
    admission = status.admission
    decision = (
        None
        if admission is None
        else (admission.domain, tuple((a.pod, a.node) for a in admission.assignments), admission.attempt)
    )
    held = status.reservation
    reservation = (
        None
        if held is None
        else (held.domain, tuple(held.nodes), tuple(held.victims), held.cause, held.reserved_at)
    )
    return (
        tuple(conditions),
        status.phase,
        status.policy,
        status.domain,
        decision,
        status.admissions,
        status.last_domain,
        (status.scheduled, status.succeeded, status.waiting) if counters else None,
        reservation,
    )


def status_changed(current: GroupStatus, desired: GroupStatus) -> bool:
    return _comparable(current) != _comparable(desired)


def settling(current: GroupStatus, desired: GroupStatus, now: dt.datetime) -> bool:
    """Whether the change from `current` to `desired` is one of counters alone in a group's first
    SETTLE_SECONDS of waiting for its pods or of being admitted: not written yet."""
    if desired.phase not in (WAITING_FOR_PODS, ADMITTED):
        return False
    admitted = desired.condition(c.ADMITTED)
    if admitted is None or (now - admitted.last_transition_time).total_seconds() >= SETTLE_SECONDS:
        return False
    return _comparable(current, counters=False) == _comparable(desired, counters=False)


def refreshing(
    current: GroupStatus, desired: GroupStatus, now: dt.datetime, reported: dt.datetime | None
) -> bool:
    """Whether the change from `current` to `desired` is one of numbers alone (counters, and the words of why
    it waits under the same reason), within REFRESH_SECONDS of this process's last write of the group's
    status (`reported`; None: not written since it started): not written yet."""
    if reported is None or (now - reported).total_seconds() >= REFRESH_SECONDS:
        return False
    return _comparable(current, counters=False, messages=False) == _comparable(
        desired, counters=False, messages=False
    )


def first_wait(
    current: GroupStatus, desired: GroupStatus, now: dt.datetime, created: dt.datetime | None
) -> bool:
    """Whether `desired` is a group's first status and says only that it waits for its pods, in the first
    SETTLE_SECONDS of the group's life (`created` None: made in this pass): not written yet. A gang's pods
    mostly come within a second of its group, and the admission that follows is then its first status
    write (one write per gang less, and one round trip less before its first pod binds); a gang whose pods
    do not come is written as waiting at the first pass past the window."""
    if current.conditions or desired.phase != WAITING_FOR_PODS:
        return False
    return created is None or (now - created).total_seconds() < SETTLE_SECONDS
