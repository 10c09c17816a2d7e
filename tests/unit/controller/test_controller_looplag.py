"""The event loop's lag (process/looplag.py): each wake-up records how much later than asked it came, on a
clock the test drives and on a real loop that something blocks."""

from __future__ import annotations

import asyncio
import time

import pytest

from phalanx.controller.process.looplag import watch_lag


class Driven:
    """A clock and a sleep for watch_lag: each sleep advances the clock by what it was asked plus the next
    planned lateness; after the last one it stops the watch."""

    def __init__(self, lateness: list[float]) -> None:
        self.now = 100.0
        self.lateness = list(lateness)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if not self.lateness:
            raise asyncio.CancelledError
        self.now += seconds + self.lateness.pop(0)


@pytest.mark.parametrize(
    ("lateness", "observed"),
    [
        ([0.0], [0.0]),  # on time
        ([0.05, 0.3, 0.0], [0.05, 0.3, 0.0]),  # each wake-up by itself, not summed
        ([-0.001], [0.0]),  # a timer a hair early (clock resolution) is on time, never negative
    ],
)
async def test_each_wake_up_records_how_late_it_came(lateness: list[float], observed: list[float]) -> None:
    seen: list[float] = []
    driven = Driven(lateness)
    with pytest.raises(asyncio.CancelledError):
        await watch_lag(seen.append, 0.25, clock=driven.clock, sleep=driven.sleep)
    assert seen == pytest.approx(observed)


async def test_a_loop_blocked_for_a_while_shows_as_lag() -> None:
    seen: list[float] = []
    task = asyncio.create_task(watch_lag(seen.append, 0.01))
    try:
        async with asyncio.timeout(10):
            while not seen:  # the watch runs: its first wake-up is in
                await asyncio.sleep(0.005)
            time.sleep(0.2)  # the loop does 0.2 s of work without yielding (what is measured, not a wait)
            while not any(lag >= 0.15 for lag in seen):
                await asyncio.sleep(0.005)
    finally:
        task.cancel()
