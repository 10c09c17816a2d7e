"""The one scheduling loop: cache → `plan_input` (every kind's units) → `plan()` → applier.

A pass runs when something that can change a decision changed (the cache says so), when a
backing-off group may try again, when a rule of time ends for a unit (a grace, the bind timeout, the
starvation age: the plan's next_due), and every `resync` seconds as a safety net. A short debounce lets a
burst of pod creations land in one pass — only while changes stream in: the first change after a quiet
spell at least as long as the debounce is planned at once (a burst's first Job, and the first pod of a
gang that completes it, each waited 50 ms for nothing on the way to the first pod bound), and so is the
pass after a unit's setup went through: the debounce gathers what other controllers create one at a time,
while the end of our own creates is what a new gang's decision waited for (the first gang of a burst: its
PodGroup created, its pods long there, 50 ms more before the pass that decides it).

A pass waits for the writes of its decisions (records, releases, requeues, status) before the next pass
plans on what they did. A unit's *setup* (creating its Workload and groups, its gang size, events: nothing
that places, frees or holds room, model/actions.places_nothing) is applied beside the passes instead
(`pipeline`): in a burst, the first pass creates the groups of every new Job, and each gang whose group
exists is decided by the next pass at once rather than after the last create. A unit with a plan in
flight is still planned (what it decides counts for the units after it) but its new plan is dropped: one
plan per unit at a time; the end of the one in flight asks for a pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TypeVar

from phalanx.api.group import TOPOLOGY_KIND
from phalanx.controller import metrics
from phalanx.controller.apply.applier import Applier, Backoff, EventSink, GroupResult
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds import KINDS
from phalanx.controller.kinds.base import WorkloadKind
from phalanx.controller.loop.incremental import DIFFERS, UnitMemo
from phalanx.controller.model.actions import UnitPlan, places_nothing
from phalanx.controller.model.keys import unit_key
from phalanx.controller.plan import Plan, PlanInput, plan
from phalanx.controller.plan.topologies import NodeCounts, plan_status

log = logging.getLogger("phalanx.scheduler")

RESYNC_SECONDS = 10.0  # a pass also runs this often with no event, as a safety net
DEBOUNCE_SECONDS = 0.05  # let a burst of pod creations land in one pass
NODE_FAILURE_GRACE_SECONDS = 30.0
STARVATION_AGE_SECONDS = 60.0
BIND_TIMEOUT_SECONDS = 120.0  # released pods no scheduler bound for this long are rolled back
DUE_MARGIN_SECONDS = 0.01  # a pass for a time that is due runs just after it, not a hair before


K = TypeVar("K")
V = TypeVar("V")


def _view(mapping: dict[K, V], detached: bool) -> Mapping[K, V]:
    return dict(mapping) if detached else MappingProxyType(mapping)


def plan_input(
    cache: ClusterCache,
    backing_off: frozenset[str] = frozenset(),
    node_failure_grace: float = NODE_FAILURE_GRACE_SECONDS,
    kinds: Iterable[WorkloadKind] = KINDS,
    starvation_age: float = STARVATION_AGE_SECONDS,
    bind_timeout: float = BIND_TIMEOUT_SECONDS,
    memo: UnitMemo | None = None,
    detached: bool = False,
    failing: frozenset[str] = frozenset(),
) -> PlanInput:
    """One consistent view of the cache for `plan()`: every kind's units, and the cluster (records and the
    snapshot are immutable; the mappings are read-only views, read synchronously before the applier
    changes anything). With `memo`, units are made again only for owners that changed, and the units
    settled in the memo's last pass and unchanged since are skipped (loop/incremental.py). `detached`: the
    mappings and Kueue's index are copies instead (each a C-level copy of one dict, ~1 ms at 50,000 pods),
    for planning on another thread while the loop's thread goes on changing the cache."""
    if memo is None:
        units = tuple(unit for kind in kinds for unit in kind.units(cache))
        skip: frozenset[str] = frozenset()
    else:
        units = memo.units(cache, kinds)
        skip = memo.skip(units, cache.placement_generation)
    return PlanInput(
        units=units,
        skip=skip,
        levels={label: t.levels for label, t in cache.topology_index.by_label.items()},
        snapshot=cache.snapshot(),
        nodes=_view(cache.nodes, detached),  # not copies (50,000 nodes) unless detached
        priority_classes=_view(cache.priority_classes, detached),
        pods=_view(cache.pods, detached),
        unevictable=cache.evictions.unevictable(),
        node_failure_grace=node_failure_grace,
        starvation_age=starvation_age,
        backing_off=backing_off,
        failing=failing,
        kueue=cache.kueue.copy() if detached else cache.kueue,
        bind_timeout=bind_timeout,
        reported=_view(cache.reported, detached),
    )


class Scheduler:
    def __init__(
        self,
        cache: ClusterCache,
        kube: Kube,
        events: EventSink,
        on_pass: Callable[[], None] | None = None,
        *,
        resync: float = RESYNC_SECONDS,
        debounce: float = DEBOUNCE_SECONDS,
        backoff: Backoff | None = None,
        node_failure_grace: float = NODE_FAILURE_GRACE_SECONDS,
        starvation_age: float = STARVATION_AGE_SECONDS,
        bind_timeout: float = BIND_TIMEOUT_SECONDS,
        pipeline: bool = False,
        verify_incremental: bool = False,
        plan_thread: bool = False,
    ) -> None:
        self.node_failure_grace = node_failure_grace
        self.starvation_age = starvation_age
        self.bind_timeout = bind_timeout
        self.cache = cache
        self.applier = Applier(cache, kube, events, backoff)
        self.on_pass = on_pass
        self.resync = resync
        self.debounce = debounce
        self.passes = 0
        self.pipeline = pipeline
        self.in_flight: dict[str, asyncio.Task[GroupResult]] = {}  # unit key -> its setup being applied
        self._posting: set[asyncio.Task[GroupResult]] = set()  # setups written, their events being posted
        self._reasons: set[str] = set()
        self._plan_errors: dict[str, str] = {}  # unit key -> the error its planning last raised
        self._node_counts = NodeCounts()
        self.memo = UnitMemo()
        self.clock: Callable[[], float] = time.monotonic  # the debounce's clock and sleep (tests set them)
        self.setup_went_through = False  # a setup ended well since the last pass: the next one is at once
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self.verify_incremental = verify_incremental
        # `plan()` on a thread of its own (its input detached from the cache): the loop's thread goes on
        # serving reviews and watch events while a pass plans (at 5,000 nodes a pass planned ~90 ms on
        # average and the loop lagged 240 ms at p99 behind it). The GIL still runs one at a time, but hands
        # over every few ms instead of after the whole plan.
        self._planner = ThreadPoolExecutor(1, "phalanx-plan") if plan_thread else None
        self.differences = 0  # passes whose incremental plan differed from the whole one (verify mode)
        self.due: dt.datetime | None = None  # the last plan's next_due: a pass runs then (a grace's end)

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self.stop_setup()
            if self._planner is not None:
                self._planner.shutdown(wait=False, cancel_futures=True)

    async def stop_setup(self) -> None:
        """Cancel the setup plans in flight and wait for them (a create cut short is made again by the
        next pass: the cache did not get it)."""
        tasks = [*self.in_flight.values(), *self._posting]
        for task in tasks:
            task.cancel()  # a setup's events cut short are posted in the background (Applier._group)
        if tasks:
            await asyncio.wait(tasks)
        self.in_flight.clear()
        self._posting.clear()

    async def _loop(self) -> None:
        while True:
            timeout = self.resync
            retry = self.applier.backoff.next_retry_in()
            if retry is not None:
                timeout = min(timeout, retry)
            if self.due is not None:  # a grace or timeout ends: its requeue is planned then, not at a resync
                until = (self.due - dt.datetime.now(dt.UTC)).total_seconds() + DUE_MARGIN_SECONDS
                timeout = min(timeout, max(0.0, until))
            try:
                waiting = self.clock()
                # asyncio.timeout, not wait_for: 3.11's wait_for returns a wait that finished in the turn a
                # cancellation came, and drops the cancellation: a loop stopped on a lost Lease would go on.
                async with asyncio.timeout(timeout):
                    await self.cache.changed.wait()
                if self.clock() - waiting < self.debounce and not self.setup_went_through:
                    await self.sleep(self.debounce)  # changes stream in: let more land in this pass
            except TimeoutError:
                pass
            self.cache.changed.clear()
            self.setup_went_through = False
            try:
                await self.pass_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in one pass must not stop scheduling; the next event or resync retries.
                log.exception("scheduling pass failed")
                self.memo.forget()
                await asyncio.sleep(1.0)
                self.cache.changed.set()

    async def pass_once(self) -> list[GroupResult]:
        started = time.perf_counter()
        self.passes += 1
        self.cache.settle_expectations()
        backoff = self.applier.backoff
        topologies = self.cache.topologies.values()
        placement_generation = self.cache.placement_generation
        state = plan_input(
            self.cache,
            backoff.waiting(),
            self.node_failure_grace,
            starvation_age=self.starvation_age,
            bind_timeout=self.bind_timeout,
            memo=self.memo,
            detached=self._planner is not None,
            failing=backoff.failing(),
        )
        backoff.forget_missing(
            {unit.key for unit in state.units} | {unit_key(TOPOLOGY_KIND, "", t.name) for t in topologies}
        )
        now = dt.datetime.now(dt.UTC)
        if self._planner is None:
            decided = plan(state, now, isolate=True)
        else:
            isolated = functools.partial(plan, isolate=True)
            decided = await asyncio.get_running_loop().run_in_executor(self._planner, isolated, state, now)
        if self.verify_incremental:
            decided = self._verified(state, decided, now)
        self.memo.planned(state.units, decided.settled, placement_generation)
        self.due = decided.next_due
        metrics.UNITS_MADE.inc(self.memo.made)
        metrics.UNITS_SKIPPED.inc(len(state.skip))
        # Topologies' status (node count, Active): patched only when it differs from what it should be.
        counts = self._node_counts.get(self.cache.node_labels_generation, topologies, self.cache.nodes)
        statuses = plan_status(topologies, self.cache.topology_index, counts, now, backoff.waiting())
        metrics.PLAN_DURATION.observe(time.perf_counter() - started)
        self._observe(decided)
        now_units = []
        for unit in decided.units:
            if unit.key in self.in_flight:
                continue  # one plan per unit at a time: the end of the one in flight asks for a pass
            if self.pipeline and places_nothing(unit):
                self._start_setup(unit)
            else:
                now_units.append(unit)
        results = await self.applier.apply((*now_units, *statuses))
        metrics.PASS_DURATION.observe(time.perf_counter() - started)
        if self.on_pass is not None:
            self.on_pass()
        return results

    def _verified(self, state: PlanInput, decided: Plan, now: dt.datetime) -> Plan:
        """The whole pass planned as well, from units made afresh and with nothing skipped: a difference
        is logged (DIFFERS) and the whole plan is used."""
        units = tuple(unit for kind in KINDS for unit in kind.units(self.cache))
        whole = plan(dataclasses.replace(state, units=units, skip=frozenset()), now, isolate=True)
        problems = []
        if units != state.units:
            made = {u.key: u for u in units}
            problems.append(
                "units made again differ from the memo's: "
                + ", ".join(
                    sorted(
                        {u.key for u in state.units if made.get(u.key) != u}
                        | made.keys() - {u.key for u in state.units}
                    )
                )
            )
        if whole.units != decided.units:
            mine = {u.key: u for u in decided.units}
            theirs = {u.key: u for u in whole.units}
            keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            problems.append(f"plans of {', '.join(keys)} (skipped: {sorted(state.skip & set(keys))})")
            for key in keys[:3]:
                problems.append(f"{key}: incremental {mine.get(key)!r}; whole {theirs.get(key)!r}")
        if (whole.waiting_by_reason, whole.longest_wait_seconds) != (
            decided.waiting_by_reason,
            decided.longest_wait_seconds,
        ):
            problems.append("the waiting gangs' counts differ")
        if problems:
            self.differences += 1
            log.error("%s: %s", DIFFERS, "; ".join(problems))
            return whole
        return decided

    def _start_setup(self, unit: UnitPlan) -> None:
        def written() -> None:
            """Its creates went through: the unit leaves the pipeline and the next pass runs at once,
            without waiting for the unit's events ("PodGroupCreated": a round trip, and the loop's turn,
            on the way from a burst's first Job to its first pod)."""
            if self.in_flight.get(unit.key) is task:
                del self.in_flight[unit.key]
                self._posting.add(task)
            self.setup_went_through = True
            self.cache.changed.set()

        task = asyncio.create_task(self.applier.apply_setup(unit, written), name=f"phalanx-setup-{unit.key}")
        self.in_flight[unit.key] = task

        def done(_: asyncio.Task[GroupResult]) -> None:
            self._posting.discard(task)
            if self.in_flight.get(unit.key) is task:  # it failed or was cancelled before `written`
                del self.in_flight[unit.key]
                if not task.cancelled() and task.exception() is None and task.result().ok:
                    self.setup_went_through = True
                self.cache.changed.set()  # what it created (or why it failed) is for the next pass to see

        task.add_done_callback(done)

    def _failed(self, failed: Iterable[tuple[str, str]]) -> None:
        """Units whose planning raised (plan(isolate=True)): counted each pass, logged when new or changed
        (not once per pass while it lasts), and said mended when the unit plans again."""
        now = dict(failed)
        for key, error in now.items():
            metrics.PLAN_ERRORS.inc()
            if self._plan_errors.get(key) != error:
                log.error("planning %s failed; it plans nothing until this is mended:\n%s", key, error)
        for key in self._plan_errors.keys() - now.keys():
            log.info("planning %s no longer fails", key)
        self._plan_errors = now

    def _observe(self, decided: Plan) -> None:
        self._failed(decided.failed)
        for seconds in decided.decision_seconds:
            metrics.DECISION_DURATION.observe(seconds)
        metrics.LONGEST_WAIT.set(decided.longest_wait_seconds)
        self._reasons |= set(decided.waiting_by_reason)
        for reason in self._reasons:
            metrics.GROUPS_WAITING.labels(reason).set(decided.waiting_by_reason.get(reason, 0))
