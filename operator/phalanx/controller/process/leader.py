"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

Every replica keeps its watches and cache warm and serves the webhook; only the holder of the Lease
runs the scheduling loop (the `lead` coroutine, started as a task when the Lease is won and cancelled
when it is lost or the replica stops).

- A candidate takes the Lease when nobody holds it (absent, or released: empty holderIdentity), or
  when its record has not changed for leaseDurationSeconds **on the candidate's own clock** (the time
  it first saw that record, not the holder's timestamps: clocks of two hosts are never compared).
- The holder renews every retry period. If no renewal succeeded within the renew deadline (measured
  from when the last successful one was sent), it cancels the loop at once: renew deadline < lease
  duration, so it has stopped acting before any other replica can see the Lease as expired. Each
  API call is cut off at the deadline, so a hanging request cannot keep it leading.
- On a graceful stop the holder first stops the loop, then releases the Lease (empty holderIdentity,
  leaseDurationSeconds 1), so a standby takes over at its next try instead of after a lease duration.

The pure rules (`LeaseRecord`, `claim`, `release`, `held_by_other`, `Observed`) are unit-tested; the
`LeaderElector` drives them against a `LeaseStore` (the API, or a fake in tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import math
import random
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp

from phalanx.controller import metrics
from phalanx.kubeclient import ApiClient, ApiException, resource_path

log = logging.getLogger("phalanx.leader")

JITTER_FACTOR = 1.2  # client-go's: a candidate retries after retry_period * (1 + [0, 1.2))
RELEASE_TIMEOUT_SECONDS = 2.0  # within `phalanx run`'s bounded stop (main.HARD_EXIT_SECONDS)
CANCEL_AGAIN_SECONDS = 1.0  # a stopped leader's work not ended after this long is cancelled again


# ---------------------------------------------------------------------- pure rules
@dataclass(frozen=True)
class Timing:
    """client-go's three durations, in seconds (defaults there: 15, 10, 2).

    The holder stops leading `renew_deadline` after its last successful renewal; the margin to
    `lease_duration` covers requests it had in flight when it stopped."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs lease duration > renew deadline > retry period > 0; got "
                f"{self.lease_duration}, {self.renew_deadline}, {self.retry_period}"
            )

    @property
    def lease_duration_seconds(self) -> int:
        return max(1, math.ceil(self.lease_duration))


def micro_time(at: dt.datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds, UTC)."""
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's spec. holder "" = nobody holds it (released or never taken)."""

    holder: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> LeaseRecord:
        spec = spec or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder or None,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


@dataclass(frozen=True)
class Observed:
    """A Lease record and when (our monotonic clock) we first saw it as it is.

    The holder's renewals show as changes; a record that stops changing expires
    leaseDurationSeconds after we first saw it."""

    record: LeaseRecord
    at: float

    def update(self, record: LeaseRecord, now: float) -> Observed:
        return self if record == self.record else Observed(record, now)

    def expires_at(self) -> float:
        return self.at + self.record.lease_duration_seconds


def observe(previous: Observed | None, record: LeaseRecord, now: float) -> Observed:
    return Observed(record, now) if previous is None else previous.update(record, now)


def held_by_other(observed: Observed, identity: str, now: float) -> bool:
    """Someone else holds the Lease and it has not expired: we may not take it."""
    holder = observed.record.holder
    return bool(holder) and holder != identity and now < observed.expires_at()


def claim(current: LeaseRecord | None, identity: str, duration_seconds: int, now: dt.datetime) -> LeaseRecord:
    """The record to write to take or renew the Lease: a renewal keeps acquireTime and the count of
    transitions; taking it over from anyone else (or from nobody) counts one more transition."""
    stamp = micro_time(now)
    if current is not None and current.holder == identity:
        return replace(current, lease_duration_seconds=duration_seconds, renew_time=stamp)
    return LeaseRecord(
        holder=identity,
        lease_duration_seconds=duration_seconds,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=current.transitions + 1 if current is not None else 0,
    )


def release(current: LeaseRecord, now: dt.datetime) -> LeaseRecord:
    """client-go's release: nobody holds it, and it would expire in a second anyway."""
    stamp = micro_time(now)
    return LeaseRecord(
        holder="",
        lease_duration_seconds=1,
        acquire_time=stamp,
        renew_time=stamp,
        transitions=current.transitions,
    )


# ---------------------------------------------------------------------- the Lease in the API
class LeaseConflictError(Exception):
    """Someone else created or changed the Lease since we read it (HTTP 409)."""


class LeaseStore(Protocol):
    async def get(self) -> dict[str, Any] | None:
        """The Lease object, or None if it does not exist."""

    async def create(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create it with this spec; LeaseConflictError if it exists."""

    async def replace(self, lease: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
        """Replace the spec of the Lease read as `lease` (at its resourceVersion).

        LeaseConflictError if it changed since."""


class KubeLeaseStore:
    """One coordination.k8s.io/v1 Lease. RBAC: get, create, update on leases in its namespace."""

    def __init__(self, api: ApiClient, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.collection = resource_path("coordination.k8s.io", "v1", "leases", namespace=namespace)
        self.path = resource_path("coordination.k8s.io", "v1", "leases", namespace=namespace, name=name)

    async def get(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = await self.api.json("GET", self.path)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return lease

    async def create(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": dict(spec),
        }
        return await self._write("POST", self.collection, body)

    async def replace(self, lease: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease["metadata"]["resourceVersion"],
            },
            "spec": dict(spec),
        }
        return await self._write("PUT", self.path, body)

    async def _write(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            written: dict[str, Any] = await self.api.json(method, path, body=body)
        except ApiException as e:
            if e.status == 409:
                raise LeaseConflictError(str(e.reason)) from e
            raise
        return written


# Failures of one try: the API said no, or did not answer (logged in a line). Anything else is a bug,
# logged with its traceback, and counts as a failed try too: the election must go on, and a leader
# must still stop at its deadline.
TRY_ERRORS = (ApiException, aiohttp.ClientError, OSError, TimeoutError)


def _log_failure(what: str, error: Exception) -> None:
    if isinstance(error, TRY_ERRORS):
        log.warning("%s failed: %s", what, _describe(error))
    else:
        log.error("%s failed", what, exc_info=error)


# ---------------------------------------------------------------------- the elector
class LeaderElector:
    """Compete for the Lease forever; run `lead()` as a task while holding it.

    `run()` is meant to be a task of its own: cancelling it stops the loop and releases the Lease."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        lead: Callable[[], Coroutine[Any, Any, None]],
        timing: Timing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        describe: str = "the Lease",
    ) -> None:
        if not identity:
            raise ValueError("leader election needs a non-empty identity")
        self.store = store
        self.identity = identity
        self.lead = lead
        self.timing = timing or Timing()
        self.clock = clock
        self.wall = wall
        self.describe = describe
        self.leading = False
        self.terms = 0  # how many times this replica became the leader
        self.observed: Observed | None = None
        self._lease: dict[str, Any] | None = None  # the Lease as we last wrote it
        self._last_holder_logged: str | None = None

    async def run(self) -> None:
        metrics.LEADER.set(0)
        while True:
            acquired_at = await self._acquire()
            await self._hold(acquired_at)
            # Lost it (or the loop ended): compete again after a pause, with a fresh loop if we win.
            await asyncio.sleep(self.timing.retry_period)

    # -- one try
    async def try_acquire_or_renew(self) -> bool:
        """Read the Lease; take or renew it if allowed. True when we hold it afterwards."""
        lease = await self.store.get()
        now = self.clock()
        if lease is None:
            record = claim(None, self.identity, self.timing.lease_duration_seconds, self.wall())
            try:
                self._lease = await self.store.create(record.to_spec())
            except LeaseConflictError:
                return False
            self.observed = Observed(record, self.clock())
            return True
        current = LeaseRecord.from_spec(lease.get("spec"))
        self.observed = observe(self.observed, current, now)
        if held_by_other(self.observed, self.identity, now):
            self._log_holder(current.holder)
            return False
        record = claim(current, self.identity, self.timing.lease_duration_seconds, self.wall())
        try:
            self._lease = await self.store.replace(lease, record.to_spec())
        except LeaseConflictError:
            return False
        self.observed = Observed(record, self.clock())
        return True

    def _log_holder(self, holder: str) -> None:
        if holder != self._last_holder_logged:
            self._last_holder_logged = holder
            log.info("standing by as %s: %s is held by %s", self.identity, self.describe, holder)

    # -- candidate
    async def _acquire(self) -> float:
        """Try until we hold the Lease; the time the successful try started (our clock)."""
        while True:
            started = self.clock()
            try:
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that arrives as
                # the call completes, and a stopped elector would then compete on for ever.
                async with asyncio.timeout(self.timing.renew_deadline):
                    acquired = await self.try_acquire_or_renew()
                if acquired:
                    return started
            except Exception as e:
                _log_failure(f"{self.identity}: trying {self.describe}", e)
            pause = self.timing.retry_period * (1 + random.random() * JITTER_FACTOR)
            await asyncio.sleep(pause)

    # -- leader
    async def _hold(self, acquired_at: float) -> None:
        self.leading = True
        self.terms += 1
        self._last_holder_logged = None
        metrics.LEADER.set(1)
        log.info(
            "%s acquired %s (term %d); starting the scheduling loop", self.identity, self.describe, self.terms
        )
        work = asyncio.create_task(self.lead(), name="phalanx-leader-work")
        last_renew = acquired_at
        release_after = True
        try:
            while True:
                deadline = last_renew + self.timing.renew_deadline
                await asyncio.wait(
                    {work}, timeout=max(0.0, min(self.timing.retry_period, deadline - self.clock()))
                )
                if work.done():
                    _report_end(work)
                    break
                started = self.clock()
                if started >= deadline:
                    log.error(
                        "%s lost %s: no renewal succeeded for %.1f s; stopping the scheduling loop",
                        self.identity,
                        self.describe,
                        started - last_renew,
                    )
                    release_after = False
                    break
                try:
                    async with asyncio.timeout(deadline - started):
                        renewed = await self.try_acquire_or_renew()
                except Exception as e:
                    _log_failure(f"{self.identity}: renewing {self.describe}", e)
                    renewed = False
                if renewed:
                    last_renew = started
                elif self.observed is not None and self.observed.record.holder not in ("", self.identity):
                    log.error(
                        "%s lost %s to %s; stopping the scheduling loop",
                        self.identity,
                        self.describe,
                        self.observed.record.holder,
                    )
                    release_after = False
                    break
        finally:
            # Stop acting first; only then may another replica take over.
            await _cancel(work)
            self.leading = False
            metrics.LEADER.set(0)
            if release_after:
                await self._release()

    async def _release(self) -> None:
        """Give the Lease up (if still ours), so a standby takes over at its next try."""
        try:
            await asyncio.shield(self._release_within())
        except Exception as e:
            log.warning(
                "%s: releasing %s failed (it expires instead): %s", self.identity, self.describe, _describe(e)
            )

    async def _release_within(self) -> None:
        async with asyncio.timeout(self._release_timeout):  # not wait_for (see _acquire)
            await self._release_once()

    @property
    def _release_timeout(self) -> float:
        return min(RELEASE_TIMEOUT_SECONDS, self.timing.renew_deadline)

    async def _release_once(self) -> None:
        lease = self._lease or await self.store.get()
        if lease is None:
            return
        current = LeaseRecord.from_spec(lease.get("spec"))
        if current.holder != self.identity:
            return
        try:
            await self.store.replace(lease, release(current, self.wall()).to_spec())
        except LeaseConflictError:
            # Our copy was stale: read again, and clear it only if it is still ours.
            lease = await self.store.get()
            if lease is None or LeaseRecord.from_spec(lease.get("spec")).holder != self.identity:
                return
            await self.store.replace(
                lease, release(LeaseRecord.from_spec(lease.get("spec")), self.wall()).to_spec()
            )
        self._lease = None
        log.info("%s released %s", self.identity, self.describe)


async def _cancel(task: asyncio.Task[None]) -> None:
    """Cancel the leader's work and wait until it ended, cancelling again while it runs on: a cancellation
    can be swallowed (3.11's wait_for, a library's catch-all), and work that outlives its Lease would run
    beside the next leader's."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_AGAIN_SECONDS)
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task  # its end retrieved (a cancellation or a failure, already reported)


def _report_end(task: asyncio.Task[None]) -> None:
    error = None if task.cancelled() else task.exception()
    if error is not None:
        log.error("the scheduling loop failed; stepping down", exc_info=error)
    else:
        log.error("the scheduling loop ended; stepping down")


def _describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
