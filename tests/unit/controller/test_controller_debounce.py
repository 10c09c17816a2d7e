"""The loop's debounce (loop/scheduler.py): while changes stream in, a pass waits `debounce` seconds so a
burst lands in one pass; the first change after a quiet spell at least that long is planned at once (a
burst's first Job and a gang's last pod each waited 50 ms for nothing on the way to the first pod bound).
The loop's clock and sleep are the test's: no time passes for real (but for the last test's 0.2 s, a due
time on the wall clock the plan names)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import cast

import pytest

from phalanx.controller.apply.applier import GroupResult
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.loop.scheduler import Scheduler
from phalanx.controller.model.actions import UnitPlan

DEBOUNCE = 0.05


class Events:
    async def post(self, involved: object, type_: str, reason: str, message: str) -> None:
        pass


class Recording(Scheduler):
    """A loop whose passes only count, and whose debounce sleeps are noted, not slept."""

    def __init__(self) -> None:
        super().__init__(ClusterCache(), cast(Kube, None), Events(), debounce=DEBOUNCE, resync=3600)
        self.now = 0.0
        self.slept: list[float] = []
        self.during_pass: list[float] = []  # clock advances to make while the next pass runs
        self.ran = asyncio.Event()
        self.clock = lambda: self.now

        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)

        self.sleep = sleep

    async def pass_once(self) -> list[GroupResult]:
        self.passes += 1
        if self.during_pass:
            self.now += self.during_pass.pop(0)
            self.cache.changed.set()  # a change came in while the pass ran
        self.ran.set()
        return []


async def passes(loop: Recording, count: int) -> None:
    async with asyncio.timeout(5):
        while loop.passes < count:
            loop.ran.clear()
            await loop.ran.wait()


async def test_the_first_change_after_a_quiet_spell_is_planned_at_once() -> None:
    loop = Recording()
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)  # the loop waits for a change, its clock at 0
    loop.now = 10.0  # ten quiet seconds
    loop.cache.changed.set()
    await passes(loop, 1)
    task.cancel()
    assert loop.slept == []


async def test_changes_that_stream_in_wait_for_the_debounce() -> None:
    loop = Recording()
    loop.during_pass = [0.0, DEBOUNCE / 2]  # a change during the first pass and during the second
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    loop.now = 10.0
    loop.cache.changed.set()
    await passes(loop, 3)
    task.cancel()
    assert loop.slept == [DEBOUNCE, DEBOUNCE]  # the second and third passes waited, the first did not


class SetupRecording(Recording):
    """During its first pass, a unit's setup is started whose apply ends as `outcome` says."""

    def __init__(self, outcome: str) -> None:
        super().__init__()
        self.outcome = outcome

        async def apply_setup(unit: UnitPlan, written: Callable[[], None] | None = None) -> GroupResult:
            if outcome == "cancelled":
                raise asyncio.CancelledError
            if outcome == "ok" and written is not None:
                written()  # as Applier._group: its writes went through, its events are posted after
            return GroupResult(unit.key, ok=outcome == "ok")

        self.applier.apply_setup = apply_setup  # type: ignore[method-assign]

    async def pass_once(self) -> list[GroupResult]:
        if self.passes == 0:
            self._start_setup(UnitPlan("ml/new", ()))  # its end asks for the next pass
        return await super().pass_once()


@pytest.mark.parametrize(
    ("outcome", "slept"),
    [
        ("ok", []),  # the group exists now: the pass that may decide its gang runs at once
        ("failed", [DEBOUNCE]),  # nothing new to decide on: a change streaming in, debounced
        ("cancelled", [DEBOUNCE]),
    ],
)
async def test_the_pass_after_a_setup_that_went_through_is_not_debounced(
    outcome: str, slept: list[float]
) -> None:
    loop = SetupRecording(outcome)
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    loop.now = 10.0
    loop.cache.changed.set()
    await passes(loop, 2)
    task.cancel()
    assert loop.slept == slept
    assert not loop.setup_went_through  # taken by the pass it hurried


async def test_a_pass_runs_when_the_last_plan_says_a_rule_of_time_ends_not_at_the_resync() -> None:
    """A grace or timeout that ends (Plan.next_due) has its pass then: a gang left short past its grace is
    requeued at once, not up to a resync (here an hour) later."""
    loop = Recording()
    first = loop.pass_once

    async def planned() -> list[GroupResult]:
        result = await first()
        if loop.passes == 1:
            loop.due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.2)
        else:
            loop.due = None
        return result

    loop.pass_once = planned  # type: ignore[method-assign]
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(0)
    loop.cache.changed.set()
    await passes(loop, 2)  # with no change and an hour's resync: the second pass came from the due time
    task.cancel()
    assert loop.passes == 2
