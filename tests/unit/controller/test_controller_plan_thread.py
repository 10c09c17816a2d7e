"""A pass's plan on a thread of its own (loop/scheduler.py `plan_thread`): it decides what the same pass
decides in the loop, from an input the loop's later changes to the cache do not reach, while the loop goes on
running its other tasks (a review, a watch event)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

import pytest
from test_controller_pipeline import Events, RecordingKube, _cache
from testkit import node_body, pod_body

from phalanx.controller.apply.kube import Kube
from phalanx.controller.loop import scheduler as loop
from phalanx.controller.loop.scheduler import Scheduler, plan_input
from phalanx.controller.plan import Plan, PlanInput


def _recording_plan(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which thread each plan() ran on."""
    threads: list[str] = []
    real = loop.plan

    def plan(state: PlanInput, now: Any, *, isolate: bool = False) -> Plan:
        threads.append(threading.current_thread().name)
        return real(state, now, isolate=isolate)

    monkeypatch.setattr(loop, "plan", plan)
    return threads


@pytest.mark.parametrize("plan_thread", [False, True])
async def test_a_pass_decides_the_same_on_either_thread(
    plan_thread: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = _recording_plan(monkeypatch)
    cache, groups = _cache()
    kube = RecordingKube(groups)
    kube.let_through.set()
    scheduler = Scheduler(cache, cast(Kube, kube), Events(), plan_thread=plan_thread)
    await scheduler.pass_once()
    released = sorted(name for verb, name in kube.calls if verb == "release")
    assert released == [f"ml/ready-{i}" for i in range(4)]
    assert [v for v, _ in kube.calls].count("create") == 2  # the new Job's Workload and PodGroup
    assert threads == (["phalanx-plan_0"] if plan_thread else [threading.current_thread().name])


async def test_the_loop_runs_its_other_tasks_while_a_pass_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan waits for an event only another task of the loop sets: in the loop itself it would wait in
    vain (and time out); on its own thread it sees it set."""
    other_task_ran = threading.Event()
    seen: list[bool] = []
    real = loop.plan

    def plan(state: PlanInput, now: Any, *, isolate: bool = False) -> Plan:
        seen.append(other_task_ran.wait(timeout=10))
        return real(state, now, isolate=isolate)

    monkeypatch.setattr(loop, "plan", plan)
    cache, groups = _cache()
    kube = RecordingKube(groups)
    kube.let_through.set()
    scheduler = Scheduler(cache, cast(Kube, kube), Events(), plan_thread=True)

    async def review() -> None:
        await asyncio.sleep(0)  # scheduled after the pass starts planning
        other_task_ran.set()

    await asyncio.gather(scheduler.pass_once(), review())
    assert seen == [True]


def test_a_detached_input_is_not_changed_by_later_changes_to_the_cache() -> None:
    cache, _ = _cache()
    state = plan_input(cache, detached=True)
    attached = plan_input(cache)
    nodes, pods, kueue_items = (
        dict(state.nodes),
        dict(state.pods),
        dict(state.kueue.items if state.kueue else {}),
    )
    cache.delete("Node", node_body(1))
    cache.upsert("Pod", pod_body("other", 0))
    cache.kueue.upsert(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ml", "uid": "w-uid", "ownerReferences": []},
        }
    )
    assert dict(state.nodes) == nodes and dict(state.pods) == pods
    assert state.kueue is not None and dict(state.kueue.items) == kueue_items
    assert len(attached.nodes) == len(nodes) - 1  # the attached view follows the cache
    assert len(attached.pods) == len(pods) + 1
