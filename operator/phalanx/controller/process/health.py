"""What /healthz and /readyz answer: liveness of the scheduling loop, readiness of the process.

Plain state with no I/O, so the loop reports into it cheaply and the tests drive it with a fake clock.
It also keeps the two leader gauges (`phalanx_leader`, client-go's `leader_election_master_status`):
the loop's start and stop are reported here, with or without leader election, so they say 1 exactly
while this replica runs the scheduling loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from phalanx.controller import metrics

DEFAULT_LEASE = "phalanx-leader"  # --lease-name's default


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str


class Health:
    """Liveness: if this replica runs the scheduling loop, a pass finished within `stale_after` seconds
    (counted from the loop's start until its first pass). A replica that does not lead is live.

    Readiness: the CRDs are installed, the cache is primed and the webhook server listens.
    """

    def __init__(
        self,
        stale_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        lease: str = DEFAULT_LEASE,
    ) -> None:
        self.stale_after = stale_after
        self._clock = clock
        self._lease = lease
        self._loop_running = False
        self._last_pass: float | None = None
        self._since = 0.0
        self.passes = 0
        self.crds_installed = False
        self.cache_primed = False
        self.webhook_started = False

    @property
    def lease(self) -> str:
        """The leader Lease's name: the `name` label of leader_election_master_status."""
        return self._lease

    @lease.setter
    def lease(self, name: str) -> None:
        if name != self._lease:
            metrics.LEADER_ELECTION_MASTER.remove(self._lease)
            self._lease = name
        metrics.set_leading(self._lease, self._loop_running)  # a standby says 0, not nothing

    # -- the scheduling loop reports
    def loop_started(self) -> None:
        """This replica started its scheduling loop (at start, or when it became the leader)."""
        self._loop_running = True
        self._since = self._clock()
        self._last_pass = None
        metrics.set_leading(self._lease, True)

    def loop_stopped(self) -> None:
        """This replica stopped its loop (it lost the lead, or it is stopping): liveness no longer asks."""
        self._loop_running = False
        metrics.set_leading(self._lease, False)

    def pass_done(self) -> None:
        """One scheduling pass finished (the scheduler's `on_pass`); a pass whose writes failed and
        backed off counts, a pass that raised does not."""
        self._last_pass = self._clock()
        self.passes += 1

    # -- readiness steps
    def mark_crds_installed(self) -> None:
        self.crds_installed = True

    def mark_cache_primed(self) -> None:
        self.cache_primed = True

    def mark_webhook_started(self) -> None:
        self.webhook_started = True

    # -- the answers
    @property
    def loop_running(self) -> bool:
        return self._loop_running

    def seconds_since_pass(self) -> float | None:
        """Since the last pass (or the loop's start, before its first pass); None when no loop runs."""
        if not self._loop_running:
            return None
        reference = self._last_pass if self._last_pass is not None else self._since
        return self._clock() - reference

    def liveness(self) -> Verdict:
        quiet = self.seconds_since_pass()
        if quiet is None:
            return Verdict(True, "ok: the scheduling loop does not run in this replica")
        if quiet > self.stale_after:
            return Verdict(False, f"no scheduling pass for {quiet:.1f} s (limit {self.stale_after:.0f} s)")
        return Verdict(True, f"ok: last scheduling pass {quiet:.1f} s ago")

    def readiness(self) -> Verdict:
        missing = [
            what
            for what, done in (
                ("CRDs not installed", self.crds_installed),
                ("cache not primed", self.cache_primed),
                ("webhook server not started", self.webhook_started),
            )
            if not done
        ]
        if missing:
            return Verdict(False, "; ".join(missing))
        return Verdict(True, "ok")
