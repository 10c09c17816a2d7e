"""PodGroup status: upstream's sticky condition, and an Admitted condition that tells the present."""

from __future__ import annotations

from typing import Any

from phalanx.api import conditions as c
from phalanx.controller.status import GroupFacts, Outcome, desired_status, find, status_changed

UNSCHEDULABLE = Outcome(c.REASON_UNSCHEDULABLE, "pod group is unschedulable, 0/1 placements are available")


def facts(**overrides: Any) -> GroupFacts:
    base: dict[str, Any] = dict(gang=True, min_count=4, scheduled=0, released=0, waiting=4, domain=None)
    base.update(overrides)
    return GroupFacts(**base)


def cond(status: dict[str, Any], kind: str) -> dict[str, Any]:
    found = find(status["conditions"], kind)
    assert found is not None, kind
    return dict(found)


def test_waiting_gang_is_unschedulable_in_both_conditions() -> None:
    status = desired_status({}, facts(), UNSCHEDULABLE, "t0", 1)
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED)["status"] == "False"
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED)["message"] == UNSCHEDULABLE.message
    assert cond(status, c.ADMITTED)["reason"] == c.REASON_UNSCHEDULABLE
    assert status["phase"] == "Unschedulable"
    assert status["policy"] == "Gang"


def test_admission_sets_both_true_and_the_first_never_flips_back() -> None:
    admitted = desired_status(
        {}, facts(released=4, waiting=0, domain="nb-a"), Outcome(c.REASON_ADMITTED, ""), "t1", 1
    )
    assert cond(admitted, c.POD_GROUP_INITIALLY_SCHEDULED)["reason"] == c.REASON_SCHEDULED
    assert cond(admitted, c.ADMITTED)["status"] == "True"
    assert admitted["phase"] == "Admitted"
    running = desired_status(admitted, facts(scheduled=4, waiting=0, domain="nb-a"), None, "t2", 1)
    assert running["phase"] == "Running"

    suspended = desired_status(running, facts(waiting=0, suspended=True), None, "t3", 1)
    assert suspended["phase"] == "Suspended"
    assert cond(suspended, c.ADMITTED)["reason"] == c.REASON_SUSPENDED

    resumed = desired_status(suspended, facts(), UNSCHEDULABLE, "t4", 1)
    first = cond(resumed, c.POD_GROUP_INITIALLY_SCHEDULED)
    assert (first["status"], first["reason"], first["lastTransitionTime"]) == ("True", "Scheduled", "t1")
    now = cond(resumed, c.ADMITTED)
    assert (now["status"], now["reason"], now["message"]) == ("False", "Unschedulable", UNSCHEDULABLE.message)
    assert now["lastTransitionTime"] == "t3"  # False since the suspension: the status did not change
    assert resumed["phase"] == "Unschedulable"


def test_a_pass_with_nothing_new_keeps_the_last_reason_and_writes_nothing() -> None:
    first = desired_status({}, facts(), UNSCHEDULABLE, "t0", 1)
    again = desired_status(first, facts(), None, "t9", 1)
    assert cond(again, c.ADMITTED)["message"] == UNSCHEDULABLE.message
    assert not status_changed(first, again)


def test_basic_group_is_scheduled_once_one_pod_runs() -> None:
    status = desired_status({}, facts(gang=False, min_count=1, scheduled=3, waiting=0), None, "t0", 1)
    assert status["policy"] == "Basic"
    assert cond(status, c.POD_GROUP_INITIALLY_SCHEDULED)["status"] == "True"
    assert status["phase"] == "Running"


def test_partial_placement_below_min_count_is_not_admitted() -> None:
    status = desired_status({}, facts(scheduled=2, waiting=2), UNSCHEDULABLE, "t0", 1)
    assert cond(status, c.ADMITTED)["status"] == "False"
    assert status["phase"] == "Unschedulable"
