"""The test-only fault switches: inert by default, and an armed abort kills at exactly the counted passage."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from phalanx.controller.apply.faults import (
    ABORT_POINTS,
    AFTER_DEACTIVATE,
    AFTER_RECORD,
    AFTER_RELEASES,
    AFTER_VICTIMS,
    BEFORE_STATUS,
    Faults,
)


def test_no_variable_set_means_nothing_armed() -> None:
    faults = Faults.from_env({})
    assert not faults.armed
    killed: list[bool] = []
    faults.kill = lambda: killed.append(True)
    for _ in range(100):
        for point in ABORT_POINTS:
            faults.reached(point)
    assert killed == []


def test_zero_or_empty_is_inert() -> None:
    assert not Faults.from_env(
        {AFTER_RELEASES: "0", BEFORE_STATUS: "", AFTER_RECORD: "0", AFTER_DEACTIVATE: "0", AFTER_VICTIMS: "0"}
    ).armed


def test_the_nth_passage_of_the_armed_point_kills_and_no_other_point_counts() -> None:
    faults = Faults.from_env({AFTER_RELEASES: "3"})
    killed: list[int] = []
    faults.kill = lambda: killed.append(faults.seen[AFTER_RELEASES])
    faults.reached(BEFORE_STATUS)
    faults.reached(AFTER_RECORD)
    faults.reached(AFTER_RELEASES)
    faults.reached(AFTER_RELEASES)
    assert killed == []
    faults.reached(AFTER_RELEASES)
    assert killed == [3]


def test_the_abort_after_a_kueue_workload_deactivation_is_a_switch_of_its_own() -> None:
    """PHALANX_FAULT_ABORT_AFTER_DEACTIVATE=N: the Nth deactivation kills; records, releases and status
    writes do not count towards it, and it counts towards none of them."""
    assert AFTER_DEACTIVATE == "PHALANX_FAULT_ABORT_AFTER_DEACTIVATE" and AFTER_DEACTIVATE in ABORT_POINTS
    faults = Faults.from_env({AFTER_DEACTIVATE: "2"})
    assert faults.armed and faults.abort_at == {AFTER_DEACTIVATE: 2}
    killed: list[int] = []
    faults.kill = lambda: killed.append(faults.seen[AFTER_DEACTIVATE])
    for point in (AFTER_RECORD, AFTER_RELEASES, BEFORE_STATUS, AFTER_DEACTIVATE):
        faults.reached(point)
    assert killed == []
    faults.reached(AFTER_DEACTIVATE)
    assert killed == [2]
    others = Faults.from_env({AFTER_RECORD: "1"})
    others.kill = lambda: killed.append(-1)
    others.reached(AFTER_DEACTIVATE)
    assert killed == [2]


def test_an_armed_abort_is_a_real_sigkill_of_the_process() -> None:
    code = (
        "from phalanx.controller.apply.faults import Faults, BEFORE_STATUS\n"
        "f = Faults.from_env()\n"
        "f.reached(BEFORE_STATUS)\n"
        "print('after first', flush=True)\n"
        "f.reached(BEFORE_STATUS)\n"
        "print('after second', flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, BEFORE_STATUS: "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL
    assert "after first" in result.stdout and "after second" not in result.stdout


def test_releases_go_one_at_a_time_only_while_an_abort_after_releases_is_armed() -> None:
    async def most_at_once(faults: Faults) -> int:
        inside, most = 0, 0

        async def release() -> None:
            nonlocal inside, most
            async with faults.release_slot():
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.01)
                inside -= 1

        await asyncio.gather(*(release() for _ in range(4)))
        return most

    assert asyncio.run(most_at_once(Faults.from_env({}))) == 4
    assert asyncio.run(most_at_once(Faults.from_env({BEFORE_STATUS: "1"}))) == 4
    assert asyncio.run(most_at_once(Faults.from_env({AFTER_RELEASES: "9"}))) == 1


def test_the_abort_after_victim_actions_is_a_switch_of_its_own_and_serializes_them() -> None:
    """PHALANX_FAULT_ABORT_AFTER_VICTIMS=N: the Nth victim action kills; no other point counts towards it;
    while it is armed victim actions go one at a time (releases do not), so a kill can cut one victim's
    take-back (an LWS group's pods deleted one by one) in two."""
    assert AFTER_VICTIMS == "PHALANX_FAULT_ABORT_AFTER_VICTIMS" and AFTER_VICTIMS in ABORT_POINTS
    faults = Faults.from_env({AFTER_VICTIMS: "2"})
    assert faults.armed and faults.abort_at == {AFTER_VICTIMS: 2}
    killed: list[int] = []
    faults.kill = lambda: killed.append(faults.seen[AFTER_VICTIMS])
    for point in ABORT_POINTS:
        faults.reached(point)
    assert killed == []
    faults.reached(AFTER_VICTIMS)
    assert killed == [2]

    async def most_at_once(faults: Faults, slot: str) -> int:
        inside, most = 0, 0

        async def act() -> None:
            nonlocal inside, most
            async with getattr(faults, slot)():
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0.01)
                inside -= 1

        await asyncio.gather(*(act() for _ in range(4)))
        return most

    assert asyncio.run(most_at_once(Faults.from_env({}), "victim_slot")) == 4
    assert asyncio.run(most_at_once(Faults.from_env({AFTER_RELEASES: "1"}), "victim_slot")) == 4
    assert asyncio.run(most_at_once(Faults.from_env({AFTER_VICTIMS: "9"}), "victim_slot")) == 1
    assert asyncio.run(most_at_once(Faults.from_env({AFTER_VICTIMS: "9"}), "release_slot")) == 4
