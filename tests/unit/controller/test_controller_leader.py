"""Leader election: the Lease record rules (pure), and the elector against an in-memory Lease."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from phalanx.controller import metrics
from phalanx.controller.process import leader as leader_module
from phalanx.controller.process.leader import (
    KubeLeaseStore,
    LeaderElector,
    LeaseConflictError,
    LeaseRecord,
    Observed,
    Timing,
    claim,
    held_by_other,
    micro_time,
    observe,
    release,
)
from phalanx.kubeclient import ApiClient, ApiException, Credentials

T0 = dt.datetime(2026, 5, 1, 12, 0, 0, 250000, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(seconds=2)


# ---------------------------------------------------------------------- pure rules
def test_timing_follows_client_go_constraints() -> None:
    Timing(15, 10, 2)
    for bad in ((10, 10, 2), (15, 10, 10), (15, 2, 2), (15, 10, 0)):
        with pytest.raises(ValueError, match="lease duration > renew deadline"):
            Timing(*bad)
    assert Timing(1.5, 1.0, 0.2).lease_duration_seconds == 2  # rounded up: never shorter than asked


def test_micro_time_is_utc_with_microseconds() -> None:
    assert micro_time(T0) == "2026-05-01T12:00:00.250000Z"
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert micro_time(T0.astimezone(plus2)) == "2026-05-01T12:00:00.250000Z"


def test_record_round_trips_through_a_lease_spec_and_an_empty_spec_is_free() -> None:
    record = LeaseRecord("a", 15, "t0", "t1", 3)
    assert LeaseRecord.from_spec(record.to_spec()) == record
    assert LeaseRecord.from_spec(None) == LeaseRecord()
    assert LeaseRecord.from_spec({}).holder == ""
    assert LeaseRecord().to_spec()["holderIdentity"] is None  # released: the field is cleared


def test_first_claim_creates_the_record_with_no_transition() -> None:
    assert claim(None, "a", 15, T0) == LeaseRecord("a", 15, micro_time(T0), micro_time(T0), 0)


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    held = LeaseRecord("a", 15, micro_time(T0), micro_time(T0), 4)
    renewed = claim(held, "a", 15, T1)
    assert renewed == LeaseRecord("a", 15, micro_time(T0), micro_time(T1), 4)


def test_takeover_from_another_holder_or_from_nobody_counts_a_transition() -> None:
    theirs = LeaseRecord("b", 15, micro_time(T0), micro_time(T0), 4)
    assert claim(theirs, "a", 15, T1) == LeaseRecord("a", 15, micro_time(T1), micro_time(T1), 5)
    released = release(theirs, T0)
    assert claim(released, "a", 15, T1).transitions == 5


def test_release_clears_the_holder_and_shortens_the_lease() -> None:
    held = LeaseRecord("a", 15, micro_time(T0), micro_time(T0), 4)
    assert release(held, T1) == LeaseRecord("", 1, micro_time(T1), micro_time(T1), 4)


def test_observation_time_moves_only_when_the_record_changes() -> None:
    record = LeaseRecord("b", 15, "t0", "t0", 0)
    seen = observe(None, record, 100.0)
    assert observe(seen, record, 110.0) == Observed(record, 100.0)  # not renewed: still 100
    renewed = LeaseRecord("b", 15, "t0", "t2", 0)
    assert observe(seen, renewed, 112.0) == Observed(renewed, 112.0)


def test_a_lease_held_by_another_is_taken_only_after_its_duration_on_our_clock() -> None:
    seen = Observed(LeaseRecord("b", 15, "t0", "t0", 0), at=100.0)
    assert held_by_other(seen, "a", 100.0)
    assert held_by_other(seen, "a", 114.9)
    assert not held_by_other(seen, "a", 115.0)  # expired: ours to take


def test_a_released_lease_or_our_own_is_never_held_by_other() -> None:
    assert not held_by_other(Observed(LeaseRecord("", 1, "t", "t", 2), at=100.0), "a", 100.0)
    assert not held_by_other(Observed(LeaseRecord("a", 15, "t", "t", 2), at=100.0), "a", 100.0)


# ---------------------------------------------------------------------- the elector, in memory
FAST = Timing(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)


class MemoryLeaseStore:
    """One Lease with resourceVersion checks; `broken` makes every call fail, `hang` never answer."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.broken = False
        self.hang = False
        self.writes: list[tuple[float, str]] = []  # (time, holder) of every successful write

    async def _check(self) -> None:
        if self.hang:
            await asyncio.Event().wait()
        if self.broken:
            raise ConnectionError("apiserver unreachable")

    async def get(self) -> dict[str, Any] | None:
        await self._check()
        return copy.deepcopy(self.lease)

    async def create(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        await self._check()
        if self.lease is not None:
            raise LeaseConflictError("exists")
        return self._store(spec)

    async def replace(self, lease: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
        await self._check()
        if self.lease is None or lease["metadata"]["resourceVersion"] != str(self.version):
            raise LeaseConflictError("changed")
        return self._store(spec)

    def _store(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = {"metadata": {"resourceVersion": str(self.version)}, "spec": dict(spec)}
        self.writes.append((time.monotonic(), str(spec.get("holderIdentity") or "")))
        return copy.deepcopy(self.lease)

    @property
    def holder(self) -> str:
        return LeaseRecord.from_spec((self.lease or {}).get("spec")).holder


class Replica:
    """An elector whose `lead` work records when it started and stopped."""

    def __init__(self, store: MemoryLeaseStore, identity: str, timing: Timing = FAST) -> None:
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.finish = asyncio.Event()
        self.elector = LeaderElector(store, identity, self.work, timing)
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.started.append(time.monotonic())
        try:
            await self.finish.wait()
        finally:
            self.stopped.append(time.monotonic())

    def start(self) -> Replica:
        self.task = asyncio.create_task(self.elector.run())
        return self

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    @property
    def working(self) -> bool:
        return len(self.started) > len(self.stopped)


def leader_metric() -> float | None:
    return metrics.REGISTRY.get_sample_value("phalanx_leader")


async def until(what: str, probe: Any, timeout: float = 5.0) -> float:
    """Wait until probe() is true; the time it became so."""
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)
    return time.monotonic()


async def holds(what: str, probe: Callable[[], bool], seconds: float) -> None:
    """`probe` stays true for `seconds` (something that must not happen, watched for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        await asyncio.sleep(0.01)


async def test_exactly_one_of_two_replicas_leads_and_a_graceful_stop_hands_over_at_once() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    b = Replica(store, "b").start()
    # For longer than a lease duration b sees a renew and never takes over.
    await holds(
        "a leads alone",
        lambda: a.working and not b.working and store.holder == "a",
        1.5 * FAST.lease_duration,
    )
    assert b.elector.observed is not None and b.elector.observed.record.holder == "a"

    await a.stop()
    # a stopped its work, then released the Lease: no holder, or already b — b's next try may come between
    # the release and this line (a loaded machine: CI saw "b"); a Lease not released would still name a
    # until it expired, a lease duration from now.
    assert not a.working and store.holder in ("", "b"), "a stopped its work, then released the Lease"
    # Released: b may take it at its next try, without waiting for the lease to expire.
    assert b.elector.observed is not None
    await until("b leads", lambda: b.working)
    assert store.holder == "b"
    assert LeaseRecord.from_spec(store.lease["spec"]).transitions == 1  # type: ignore[index]
    await b.stop()
    assert store.holder == ""


async def test_a_leader_cut_off_from_the_api_stops_before_anyone_may_take_over() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    assert leader_metric() == 1
    b = Replica(store, "b").start()
    await holds("a keeps leading while b watches", lambda: a.working and not b.working, 2 * FAST.retry_period)

    # a cannot reach the API any more, b still can: route a's calls through a broken store.
    broken = MemoryLeaseStore()
    broken.broken = True
    a.elector.store = broken
    last_renew = max(t for t, holder in store.writes if holder == "a")
    await until("a stops working", lambda: not a.working, timeout=3)
    assert leader_metric() == 0
    took_over = await until("b leads", lambda: b.working, timeout=5)
    assert took_over > a.stopped[-1], "b acted only after a had stopped"
    assert took_over - last_renew >= FAST.lease_duration, "b waited for the Lease to expire"
    await asyncio.gather(a.stop(), b.stop())


async def test_a_hanging_renewal_does_not_keep_a_replica_leading() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    store.hang = True  # every call from now on waits forever
    await until("a stops working", lambda: not a.working, timeout=3)
    assert not a.elector.leading
    await a.stop()  # the release hangs too; the stop is not held up by it for more than its timeout


async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    seized = await store.replace(store.lease or {}, LeaseRecord("x", 60, "t", "t", 1).to_spec())
    assert seized["spec"]["holderIdentity"] == "x"
    await until("a stops working", lambda: not a.working, timeout=2)
    assert store.holder == "x", "a does not release a Lease that is no longer its own"
    await a.stop()


async def test_when_the_loop_ends_by_itself_the_leader_steps_down_and_competes_again() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    a.finish.set()
    await until("a released the Lease", lambda: store.holder == "")
    a.finish.clear()
    await until("a leads again", lambda: len(a.started) == 2)
    assert a.elector.terms == 2
    await a.stop()


async def test_a_lost_leader_leads_again_when_the_api_comes_back_and_nobody_took_over() -> None:
    store = MemoryLeaseStore()
    a = Replica(store, "a").start()
    await until("a leads", lambda: a.working)
    store.broken = True
    await until("a stops working", lambda: not a.working, timeout=3)
    store.broken = False
    await until("a leads again", lambda: a.working, timeout=3)
    assert store.holder == "a"
    await a.stop()


# ---------------------------------------------------------------------- the API side
class ScriptedServer:
    """A local HTTP server giving these answers in turn, recording each request (method, path, body)."""

    def __init__(self, *answers: tuple[int, dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, str, Any]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        self.requests.append((request.method, request.path, body))
        status, answer = self.answers.pop(0)
        return web.json_response(answer, status=status)


@contextlib.asynccontextmanager
async def raw_store(
    *answers: tuple[int, dict[str, Any]],
) -> AsyncIterator[tuple[KubeLeaseStore, ScriptedServer]]:
    script = ScriptedServer(*answers)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    server = TestServer(app)
    await server.start_server()
    try:
        async with ApiClient(Credentials(server=str(server.make_url("")).rstrip("/"), source="test")) as api:
            yield KubeLeaseStore(api, "ops", "phalanx-leader"), script
    finally:
        await server.close()


async def test_the_api_store_maps_statuses() -> None:
    lease = {"metadata": {"name": "phalanx-leader", "resourceVersion": "7"}, "spec": {"holderIdentity": "a"}}
    path = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/phalanx-leader"
    async with raw_store(
        (404, {"kind": "Status", "code": 404}),
        (200, lease),
        (409, {"kind": "Status", "code": 409}),
        (200, lease),
        (500, {"kind": "Status", "code": 500}),
    ) as (store, script):
        assert await store.get() is None
        assert await store.get() == lease
        with pytest.raises(LeaseConflictError):
            await store.create({"holderIdentity": "b"})
        assert await store.replace(lease, {"holderIdentity": "b"}) == lease
        with pytest.raises(ApiException) as error:
            await store.get()
    assert error.value.status == 500
    assert [(m, p) for m, p, _ in script.requests] == [
        ("GET", path),
        ("GET", path),
        ("POST", path.rsplit("/", 1)[0]),
        ("PUT", path),
        ("GET", path),
    ]
    replaced = script.requests[3][2]
    assert replaced["metadata"]["resourceVersion"] == "7"  # optimistic concurrency
    assert replaced["spec"] == {"holderIdentity": "b"}


async def test_stopping_the_work_cancels_again_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work that swallows a cancellation (3.11's wait_for, a library's catch-all) is cancelled again: a
    leader's work must not outlive its Lease."""
    monkeypatch.setattr(leader_module, "CANCEL_AGAIN_SECONDS", 0.01)
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 3:
                    raise

    work = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await leader_module._cancel(work)
    assert work.cancelled() and swallowed == 3
