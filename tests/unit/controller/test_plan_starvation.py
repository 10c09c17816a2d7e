"""Bounded waiting through the state machine (plan/starvation.py): a gang that has waited longer than
`--starvation-age` gets the room it needs held; later units backfill elsewhere, earlier ones are not held
back; the hold is recorded, kept, and ends with the admission.

The seed cluster: nb-a = n1-n4, nb-b = n5-n8. `small-a` runs on n1, n2 and `small-b` on n5, n6, so each
network block has two free nodes and the 4-pod block gang `big` fits neither."""

from __future__ import annotations

import datetime as dt
from typing import Any

from testkit import (
    NB,
    NOW,
    TOPOLOGY,
    cluster,
    group_of,
    job_body,
    job_key,
    only,
    pod_body,
    running,
    waiting_status,
    written_statuses,
)

from phalanx.api import conditions as c
from phalanx.api.status import BOUNDED_WAITING, PodGroupStatus
from phalanx.controller.model.actions import PatchStatus, ReleasePod
from phalanx.controller.model.records import PodGroupRecord
from phalanx.controller.plan import Plan, PlanInput, plan

AGE = 60.0


def _big(status: PodGroupStatus | None) -> tuple[dict[str, Any], PodGroupRecord, list[dict[str, Any]]]:
    job = job_body("big", 4, annotations=TOPOLOGY, created="2026-11-30T10:00:00Z")
    group = group_of(job, status)
    return job, group, [pod_body("big", i, group=group.name) for i in range(4)]


def _small(name: str, nodes: tuple[str, ...] = (), *, created: str, priority: int = 0) -> Any:
    job = job_body(name, 2, created=created)
    group = group_of(job)
    if priority:
        group = dataclasses_replace_priority(group, priority)
    if nodes:
        pods = [running(name, i, node, group.name, priority=priority) for i, node in enumerate(nodes)]
    else:
        pods = [pod_body(name, i, group=group.name, priority=priority) for i in range(2)]
    return job, group, pods


def dataclasses_replace_priority(group: PodGroupRecord, priority: int) -> PodGroupRecord:
    import dataclasses

    return dataclasses.replace(group, spec=group.spec.model_copy(update={"priority": priority}))


def _state(waited: float, *more: Any, big_status: PodGroupStatus | None = None) -> PlanInput:
    status = big_status or waiting_status(NOW - dt.timedelta(seconds=waited))
    jobs = [
        _big(status),
        _small("small-a", ("n1", "n2"), created="2026-11-30T10:01:00Z"),
        _small("small-b", ("n5", "n6"), created="2026-11-30T10:02:00Z"),
        *more,
    ]
    return cluster(jobs, starvation_age=AGE)


def _released(result: Plan, job: str) -> list[str]:
    unit = next((u for u in result.units if u.key == job_key(job)), None)
    return sorted(a.node for a in unit.actions if isinstance(a, ReleasePod)) if unit else []


def _status(result: Plan, prefix: str) -> PodGroupStatus:
    (status,) = [s for name, s in written_statuses(result).items() if name.startswith(prefix)]
    return status  # type: ignore[no-any-return]


def test_before_the_age_a_younger_small_gang_takes_the_room_the_big_one_waits_for() -> None:
    result = plan(_state(AGE - 1, _small("small-c", created="2026-11-30T11:00:00Z")), NOW)
    assert _released(result, "small-c") == ["n3", "n4"]
    assert result.next_due == NOW + dt.timedelta(seconds=1)  # a pass then holds the room, not a resync later
    big = _status(result, "big")
    assert big.reservation is None
    cond = big.condition(c.ADMITTED)
    assert cond is not None and cond.reason == c.REASON_UNSCHEDULABLE and "reservation" not in cond.message


def test_past_the_age_the_big_gangs_room_is_held_and_the_small_one_backfills_the_other_block() -> None:
    result = plan(_state(AGE + 1, _small("small-c", created="2026-11-30T11:00:00Z")), NOW)
    assert _released(result, "small-c") == ["n7", "n8"]  # backfill, off the held nodes
    big = _status(result, "big")
    held = big.reservation
    assert held is not None and held.cause == BOUNDED_WAITING
    assert (held.domain, held.nodes, held.victims) == ("nb-a", ["n1", "n2", "n3", "n4"], [])
    assert held.waiting_since == NOW - dt.timedelta(seconds=AGE + 1)
    cond = big.condition(c.ADMITTED)
    assert cond is not None and cond.reason == c.REASON_UNSCHEDULABLE
    assert "a reservation holds 4 node(s) in nb-a for it (n1, n2, n3, n4)" in cond.message, cond.message
    assert "--starvation-age (60 s)" in cond.message
    assert result.longest_wait_seconds >= AGE + 1


def test_with_no_room_elsewhere_the_small_gang_waits_rather_than_take_held_nodes() -> None:
    busy = _small("small-d", ("n7", "n8"), created="2026-11-30T10:03:00Z")
    result = plan(_state(AGE + 1, busy, _small("small-c", created="2026-11-30T11:00:00Z")), NOW)
    assert _released(result, "small-c") == []
    assert _status(result, "small-c").condition(c.ADMITTED).reason == c.REASON_UNSCHEDULABLE  # type: ignore[union-attr]


def test_a_higher_priority_gang_is_planned_before_the_hold_and_not_held_back() -> None:
    high = _small("high", created="2026-11-30T11:00:00Z", priority=100)
    result = plan(_state(AGE + 1, high), NOW)
    assert _released(result, "high") == ["n3", "n4"]


def test_the_recorded_hold_is_kept_and_ends_with_the_admission() -> None:
    held = _status(plan(_state(AGE + 1), NOW), "big")
    assert held.reservation is not None
    later = NOW + dt.timedelta(seconds=5)

    # Next pass, with the hold read back: a new small gang still backfills nb-b, the hold stays (no write).
    job, group, pods = _big(held)
    small_a = _small("small-a", ("n1", "n2"), created="2026-11-30T10:01:00Z")
    small_b = _small("small-b", ("n5", "n6"), created="2026-11-30T10:02:00Z")
    small_c = _small("small-c", created="2026-11-30T11:00:00Z")
    result = plan(cluster([(job, group, pods), small_a, small_b, small_c], starvation_age=AGE), later)
    assert _released(result, "small-c") == ["n7", "n8"]
    assert not [a for a in only(result.actions, PatchStatus) if a.group.name.startswith("big")]

    # small-a ended: the held nodes are free, the big gang is admitted there and the reservation cleared.
    done = plan(cluster([(job, group, pods), small_b], starvation_age=AGE), later)
    assert _released(done, "big") == ["n1", "n2", "n3", "n4"]
    status = _status(done, "big")
    assert status.reservation is None
    assert status.condition(c.ADMITTED).reason == c.REASON_ADMITTED  # type: ignore[union-attr]


def test_a_hold_moves_only_to_a_domain_where_fewer_pods_are_missing() -> None:
    first = _status(plan(_state(AGE + 1), NOW), "big")
    assert first.reservation is not None and first.reservation.domain == "nb-a"
    # small-b lost one pod (n6 is free): nb-b now misses one pod, nb-a two: the hold moves to nb-b.
    job, group, pods = _big(first)
    jobs = [
        (job, group, pods),
        _small("small-a", ("n1", "n2"), created="2026-11-30T10:01:00Z"),
        _small("small-b", ("n5",), created="2026-11-30T10:02:00Z"),
        _small("small-c", created="2026-11-30T11:00:00Z"),
    ]
    result = plan(cluster(jobs, starvation_age=AGE), NOW + dt.timedelta(seconds=5))
    moved = _status(result, "big").reservation
    assert moved is not None and moved.domain == "nb-b" and moved.nodes == ["n5", "n6", "n7", "n8"]
    assert _released(result, "small-c") == ["n3", "n4"]  # backfill where the hold was


def test_the_hold_is_chosen_for_the_level_of_the_key() -> None:
    result = plan(_state(AGE + 1), NOW)
    held = _status(result, "big").reservation
    assert held is not None
    labels = {f"n{i}": "nb-a" if i <= 4 else "nb-b" for i in range(1, 9)}
    assert {labels[n] for n in held.nodes} == {held.domain}
    assert NB in TOPOLOGY.values()
