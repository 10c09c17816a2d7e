"""The scheduling loop's pipeline (loop/scheduler.py): a unit's setup (creating its Workload and groups) is
applied beside the passes, so a gang whose group exists is decided and released while the creates of other
new Jobs (seen before their pods) are still in flight; one plan per unit at a time.

`HeldKube` is a stand-in with Kube's write methods that answers like the API and holds every create until
the test lets it through (the same loop against a real apiserver runs in every integration test: the
operator's runtime turns the pipeline on).
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, cast

import pytest
from testkit import group_of, job_body, node_body, pod_body, waiting_status

from phalanx.api.status import PodGroupStatus, Reservation
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.loop.scheduler import Scheduler
from phalanx.controller.model.actions import (
    CreatePodGroup,
    CreateWorkload,
    PatchStatus,
    PostEvent,
    RecordAdmission,
    ReleasePod,
    RememberAnnounced,
    UnitPlan,
    places_nothing,
)
from phalanx.controller.model.records import WorkloadRecord
from phalanx.controller.model.refs import ObjectRef


class HeldKube:
    def __init__(self) -> None:
        self.let_through = asyncio.Event()
        self.calls: list[tuple[str, str]] = []
        self.version = 10

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    async def create_object(self, plural: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", f"{plural}/{body['metadata']['name']}"))
        await self.let_through.wait()
        created = copy.deepcopy(dict(body))
        created["metadata"].update(uid=f"uid-{body['metadata']['name']}", resourceVersion=self._next())
        created["metadata"].setdefault("generation", 1)
        return created

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any], resource_version: str = ""
    ) -> dict[str, Any]:
        self.calls.append(("patch_status", f"{namespace}/{name}"))
        raise AssertionError("not expected: the test reads what the applier sent before it answers")

    async def release_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        group: str,
        by_name: bool = True,
        domain: Iterable[tuple[str, str]] = (),
    ) -> dict[str, Any]:
        self.calls.append(("release", f"{namespace}/{name}"))
        body = pod_body(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1]), released_to=node, gated=False)
        body["metadata"]["labels"]["phalanx.dev/pod-group"] = group
        body["metadata"]["resourceVersion"] = self._next()
        return body


class RecordingKube(HeldKube):
    """Answers status patches with the group as written (the admission's record)."""

    def __init__(self, groups: Mapping[str, dict[str, Any]]) -> None:
        super().__init__()
        self.groups = groups

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any], resource_version: str = ""
    ) -> dict[str, Any]:
        self.calls.append(("patch_status", f"{namespace}/{name}"))
        body = copy.deepcopy(self.groups.get(name) or _group_body(name, f"uid-{name}"))
        body["status"] = dict(status)
        body["metadata"]["resourceVersion"] = self._next()
        return body


class Events:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None:
        self.posted.append((involved.key, reason))


def _cache() -> tuple[ClusterCache, dict[str, Any]]:
    """Job `ready` has its Workload and PodGroup and all 4 pods (gated); Job `new` was just created: the Job
    controller has not made its pods yet, so its plan is its setup alone."""
    cache = ClusterCache()
    for n in range(1, 9):
        cache.upsert("Node", node_body(n))
    ready = job_body("ready")
    group = group_of(ready, waiting_status(dt.datetime(2026, 11, 30, 11, 0, 1, tzinfo=dt.UTC), "Pending"))
    cache.pod_groups.put(group)
    cache.workloads.put(WorkloadRecord("wl-uid", "ml", "ready-wl", "uid-ready", owner_kind="Job"))
    for i in range(4):
        cache.upsert("Pod", pod_body("ready", i))
    cache.upsert("Job", ready)
    cache.upsert("Job", job_body("new", created="2026-11-30T11:00:05Z"))
    return cache, {group.name: _group_body(group.name, group.uid)}


def _group_body(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.phalanx.dev/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }


@pytest.mark.parametrize(
    ("actions", "setup"),
    [
        ((CreateWorkload, CreatePodGroup), True),
        ((PostEvent, RememberAnnounced), True),
        ((CreatePodGroup, RecordAdmission), False),  # a decision recorded: later passes read it
        ((ReleasePod,), False),  # places a pod
        ((ReleasePod, PostEvent), False),
        ((), True),
    ],
)
def test_only_setup_actions_make_a_plan_safe_to_apply_beside_the_passes(
    actions: tuple[type[Any], ...], setup: bool
) -> None:
    plan = UnitPlan("ml/x", tuple(object.__new__(kind) for kind in actions))
    assert places_nothing(plan) is setup


async def test_a_ready_gang_is_released_while_another_jobs_creates_are_still_in_flight() -> None:
    cache, groups = _cache()
    kube = RecordingKube(groups)
    scheduler = Scheduler(cache, cast(Kube, kube), Events(), pipeline=True)

    await scheduler.pass_once()

    # The ready gang was decided and released in this pass; the new Job's creates are still held.
    released = sorted(name for verb, name in kube.calls if verb == "release")
    assert released == [f"ml/ready-{i}" for i in range(4)]
    (create,) = [name for verb, name in kube.calls if verb == "create"]
    assert create.startswith("workloads/new")
    (in_flight,) = scheduler.in_flight.values()
    assert not in_flight.done()

    # A pass meanwhile plans the new Job again but sends nothing more for it: one plan per unit at a time.
    calls = len(kube.calls)
    await scheduler.pass_once()
    assert [c for c in kube.calls[calls:] if c[0] == "create"] == []

    # Let the creates through: the unit leaves the pipeline and asks for a pass.
    cache.changed.clear()
    kube.let_through.set()
    await asyncio.wait_for(in_flight, timeout=5)
    await asyncio.sleep(0)
    assert scheduler.in_flight == {}
    assert cache.changed.is_set()
    assert cache.workloads.of_owner("uid-new")
    assert any(key.startswith("ml/new-") for key in cache.pod_groups.items)


async def test_without_the_pipeline_a_pass_waits_for_every_create() -> None:
    cache, groups = _cache()
    kube = RecordingKube(groups)
    kube.let_through.set()
    scheduler = Scheduler(cache, cast(Kube, kube), Events())
    await scheduler.pass_once()
    assert scheduler.in_flight == {}
    creates = [name.split("/")[0] for verb, name in kube.calls if verb == "create"]
    assert creates == ["workloads", "podgroups"]


async def test_stopping_the_loop_cancels_the_setup_in_flight() -> None:
    cache, groups = _cache()
    kube = RecordingKube(groups)
    scheduler = Scheduler(cache, cast(Kube, kube), Events(), pipeline=True, debounce=0)
    cache.changed.set()
    loop = asyncio.create_task(scheduler.run())
    async with asyncio.timeout(5):
        while not scheduler.in_flight:
            await asyncio.sleep(0.01)
    (in_flight,) = scheduler.in_flight.values()
    loop.cancel()
    await asyncio.wait({loop})
    assert in_flight.cancelled() and scheduler.in_flight == {}


def test_a_status_is_setup_unless_it_holds_room() -> None:
    group = ObjectRef("scheduling.phalanx.dev/v1beta1", "PodGroup", "ml", "pg", "u")
    at = dt.datetime(2026, 11, 30, 11, 0, tzinfo=dt.UTC)
    held = Reservation(nodes=["n1"], reserved_at=at, expires_at=at + dt.timedelta(minutes=2))
    waiting = PatchStatus(group, PodGroupStatus())
    holding = PatchStatus(group, PodGroupStatus(reservation=held))
    assert places_nothing(UnitPlan("ml/x", (waiting, PostEvent(group, "Normal", "Pending", "waits"))))
    assert not places_nothing(UnitPlan("ml/x", (holding,)))


class HeldEvents(Events):
    """Holds every post about the new Job (its setup's) until the test lets it through."""

    def __init__(self) -> None:
        super().__init__()
        self.let_through = asyncio.Event()
        self.holding: list[str] = []

    async def post(self, involved: ObjectRef, type_: str, reason: str, message: str) -> None:
        if "new" in involved.name:
            self.holding.append(reason)
            await self.let_through.wait()
        await super().post(involved, type_, reason, message)


async def written_setup() -> tuple[ClusterCache, Scheduler, HeldEvents, asyncio.Task[Any]]:
    """The new Job's setup started by a pass, its creates let through, its event held: once the unit
    has left the pipeline."""
    cache, groups = _cache()
    kube = RecordingKube(groups)
    events = HeldEvents()
    scheduler = Scheduler(cache, cast(Kube, kube), events, pipeline=True)
    await scheduler.pass_once()
    (task,) = scheduler.in_flight.values()
    cache.changed.clear()
    kube.let_through.set()
    async with asyncio.timeout(5):
        while scheduler.in_flight:
            await asyncio.sleep(0.01)
    return cache, scheduler, events, task


async def until_posted(events: HeldEvents, said: tuple[str, str]) -> None:
    async with asyncio.timeout(5):
        while said not in events.posted:
            await asyncio.sleep(0.01)


async def test_a_setup_leaves_the_pipeline_when_its_creates_went_through_not_its_events() -> None:
    """The next pass (which decides the gang once its pods exist) does not wait for "PodGroupCreated"."""
    cache, scheduler, events, task = await written_setup()
    assert cache.workloads.of_owner("uid-new")
    assert any(key.startswith("ml/new-") for key in cache.pod_groups.items)
    assert cache.changed.is_set() and scheduler.setup_went_through, "the next pass runs at once"
    assert events.holding == ["PodGroupCreated"] and not task.done(), "its event is still being posted"

    # Its event goes out after all; nothing more is asked of the loop.
    cache.changed.clear()
    events.let_through.set()
    await asyncio.wait_for(task, timeout=5)
    assert ("ml/new", "PodGroupCreated") in events.posted
    assert not cache.changed.is_set()


async def test_stopping_the_loop_cancels_a_setup_posting_its_event_and_the_event_still_goes_out() -> None:
    _, scheduler, events, task = await written_setup()
    await scheduler.stop_setup()
    assert task.done()
    events.let_through.set()
    await until_posted(events, ("ml/new", "PodGroupCreated"))
    assert events.posted.count(("ml/new", "PodGroupCreated")) == 1


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_a_cancel_just_after_a_change_stops_the_loop(turns: int) -> None:
    """The elector stops the loop when the Lease is lost, and a watch event may have woken it a loop turn
    before: the cancel must end the loop, not be taken for the wake-up (3.11's wait_for returns the finished
    wait and drops the cancellation), or the old leader's loop would go on beside the new leader's."""
    cache = ClusterCache()  # nothing to schedule: a pass plans nothing
    scheduler = Scheduler(cache, cast(Kube, HeldKube()), Events(), debounce=0)
    cache.changed.set()
    loop = asyncio.create_task(scheduler.run())
    async with asyncio.timeout(5):
        while scheduler.passes == 0 or cache.changed.is_set():
            await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)  # parked again, waiting for the next change
    cache.changed.set()
    for _ in range(turns):
        await asyncio.sleep(0)
    loop.cancel()
    done, _ = await asyncio.wait({loop}, timeout=5)
    assert loop in done and loop.cancelled(), f"the loop went on after its cancel ({scheduler.passes} passes)"
