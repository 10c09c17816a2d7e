"""PodGroup status: upstream's sticky condition, and an Admitted condition that tells the present."""

from __future__ import annotations

import datetime as dt
from typing import Any

from phalanx.api import conditions as c
from phalanx.api.status import PodGroupStatus
from phalanx.controller.apply.applier import status_patch
from phalanx.controller.plan.status import GroupFacts, Outcome, desired_status, status_changed

UNSCHEDULABLE = Outcome(c.REASON_UNSCHEDULABLE, "pod group is unschedulable, 0/1 placements are available")
EMPTY = PodGroupStatus()


def t(n: int) -> dt.datetime:
    return dt.datetime(2026, 11, 30, 12, 0, n, tzinfo=dt.UTC)


def facts(**overrides: Any) -> GroupFacts:
    base: dict[str, Any] = dict(gang=True, min_count=4, scheduled=0, released=0, waiting=4, domain=None)
    base.update(overrides)
    return GroupFacts(**base)


def desired(current: PodGroupStatus, f: GroupFacts, outcome: Outcome | None, now: int) -> PodGroupStatus:
    return desired_status(current, f, outcome, t(now), 1, current.admission)


def cond(status: PodGroupStatus, kind: str) -> c.Condition:
    found = status.condition(kind)
    assert found is not None, kind
    return found


def test_waiting_gang_is_unschedulable_in_both_conditions() -> None:
    status = desired(EMPTY, facts(), UNSCHEDULABLE, 0)
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED).status == "False"
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED).message == UNSCHEDULABLE.message
    assert cond(status, c.ADMITTED).reason == c.REASON_UNSCHEDULABLE
    assert status.phase == "Unschedulable"
    assert status.policy == "Gang"


def test_admission_sets_both_true_and_the_first_never_flips_back() -> None:
    admitted = desired(EMPTY, facts(released=4, waiting=0, domain="nb-a"), Outcome(c.REASON_ADMITTED, ""), 1)
    assert cond(admitted, c.POD_GROUP_INITIALLY_SCHEDULED).reason == c.REASON_SCHEDULED
    assert cond(admitted, c.ADMITTED).status == "True"
    assert admitted.phase == "Admitted"
    running = desired(admitted, facts(scheduled=4, waiting=0, domain="nb-a"), None, 2)
    assert running.phase == "Running"

    suspended = desired(running, facts(waiting=0, suspended=True), None, 3)
    assert suspended.phase == "Suspended"
    assert cond(suspended, c.ADMITTED).reason == c.REASON_SUSPENDED

    resumed = desired(suspended, facts(), UNSCHEDULABLE, 4)
    first = cond(resumed, c.POD_GROUP_INITIALLY_SCHEDULED)
    assert (first.status, first.reason, first.last_transition_time) == ("True", "Scheduled", t(1))
    now = cond(resumed, c.ADMITTED)
    assert (now.status, now.reason, now.message) == ("False", "Unschedulable", UNSCHEDULABLE.message)
    assert now.last_transition_time == t(3)  # False since the suspension: the status did not change
    assert resumed.phase == "Unschedulable"


def test_a_pass_with_nothing_new_keeps_the_last_reason_and_writes_nothing() -> None:
    first = desired(EMPTY, facts(), UNSCHEDULABLE, 0)
    again = desired(first, facts(), None, 9)
    assert cond(again, c.ADMITTED).message == UNSCHEDULABLE.message
    assert not status_changed(first, again)


def test_basic_group_is_scheduled_once_one_pod_runs() -> None:
    status = desired(EMPTY, facts(gang=False, min_count=1, scheduled=3, waiting=0), None, 0)
    assert status.policy == "Basic"
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED).status == "True"
    assert status.phase == "Running"


def test_partial_placement_below_min_count_is_not_admitted() -> None:
    status = desired(EMPTY, facts(scheduled=2, waiting=2), UNSCHEDULABLE, 0)
    assert cond(status, c.ADMITTED).status == "False"
    assert status.phase == "Unschedulable"


def test_the_status_patch_clears_what_is_unset_and_round_trips() -> None:
    status = desired(EMPTY, facts(), UNSCHEDULABLE, 0)
    patch = status_patch(status)["status"]
    assert patch["admission"] is None and patch["domain"] is None
    assert PodGroupStatus.model_validate({k: v for k, v in patch.items() if v is not None}) == status
