"""Test-only fault injection: switches read once from the environment at start, inert unless set.

They exist so that tests can prove crash safety at exact points of an admission; production never sets them.

    PHALANX_FAULT_PAUSE_BEFORE_RELEASE=S    wait S seconds between recording a decision and releasing its pods
    PHALANX_FAULT_ABORT_AFTER_RECORD=N      SIGKILL this process right after its Nth recorded decision
    PHALANX_FAULT_ABORT_AFTER_RELEASES=N    ... right after its Nth pod release the API confirmed (releases
                                            are then sent one at a time, so the kill falls between two)
    PHALANX_FAULT_ABORT_BEFORE_STATUS=N     ... right before its Nth PodGroup status write
    PHALANX_FAULT_ABORT_AFTER_DEACTIVATE=N  ... right after its Nth Kueue Workload deactivation the API
                                            confirmed (a requeue through Kueue, before its activation)
    PHALANX_FAULT_ABORT_AFTER_VICTIMS=N     ... right after its Nth victim action of a preemption the API
                                            confirmed: a victim Job/JobSet/TrainJob suspended, a victim
                                            LWS group's pod deleted, a single pod evicted (or a Kueue-managed
                                            victim's Workload deactivated); victim actions are then sent one
                                            at a time, so the kill can fall inside one victim's take-back

An abort is a real SIGKILL of the operator's own process (what `kill -9` does: no cleanup, no Lease
release, requests in flight lost or not), not an exception the code could handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("phalanx.faults")

PAUSE_BEFORE_RELEASE_ENV = "PHALANX_FAULT_PAUSE_BEFORE_RELEASE"
AFTER_RECORD = "PHALANX_FAULT_ABORT_AFTER_RECORD"
AFTER_RELEASES = "PHALANX_FAULT_ABORT_AFTER_RELEASES"
BEFORE_STATUS = "PHALANX_FAULT_ABORT_BEFORE_STATUS"
AFTER_DEACTIVATE = "PHALANX_FAULT_ABORT_AFTER_DEACTIVATE"
AFTER_VICTIMS = "PHALANX_FAULT_ABORT_AFTER_VICTIMS"
ABORT_POINTS = (AFTER_RECORD, AFTER_RELEASES, BEFORE_STATUS, AFTER_DEACTIVATE, AFTER_VICTIMS)


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Faults:
    pause_before_release: float = 0.0
    abort_at: Mapping[str, int] = field(default_factory=dict)  # point -> the count that kills
    seen: Counter[str] = field(default_factory=Counter)
    kill: Callable[[], None] = _kill_self  # replaced in unit tests
    _serial: asyncio.Lock = field(default_factory=asyncio.Lock)
    _victims_serial: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Faults:
        abort_at = {point: int(env[point]) for point in ABORT_POINTS if int(env.get(point) or 0) > 0}
        faults = cls(float(env.get(PAUSE_BEFORE_RELEASE_ENV) or 0), abort_at)
        if faults.armed:
            log.warning(
                "TEST-ONLY fault injection armed: pause %s s, abort at %s",
                faults.pause_before_release,
                abort_at,
            )
        return faults

    @property
    def armed(self) -> bool:
        return bool(self.pause_before_release or self.abort_at)

    def reached(self, point: str) -> None:
        """Count one passage of `point`; the armed count of it kills the process."""
        limit = self.abort_at.get(point)
        if not limit:
            return
        self.seen[point] += 1
        if self.seen[point] >= limit:
            log.warning("fault injection: SIGKILL at %s #%d", point, self.seen[point])
            for handler in logging.getLogger().handlers:
                handler.flush()
            self.kill()

    def release_slot(self) -> AbstractAsyncContextManager[Any]:
        """Releases one at a time while an abort after the Nth is armed (a gang is then cut in two)."""
        return self._serial if AFTER_RELEASES in self.abort_at else contextlib.nullcontext()

    def victim_slot(self) -> AbstractAsyncContextManager[Any]:
        """Victim actions one at a time while an abort after the Nth is armed (an LWS group whose pods are
        deleted one by one is then cut in two)."""
        return self._victims_serial if AFTER_VICTIMS in self.abort_at else contextlib.nullcontext()

    async def before_release(self) -> None:
        if self.pause_before_release:
            log.warning("fault injection: pausing %.1f s before releasing pods", self.pause_before_release)
            await asyncio.sleep(self.pause_before_release)
