"""A unit whose planning raises (a bug met in its records) must not stop every other unit's admission:
`plan(isolate=True)`, the loop's, skips it — nothing of it planned, the room it assumed given back — and
names it in `Plan.failed`; the loop logs it once and counts it (`phalanx_plan_errors_total`). Without
`isolate` (the tests' default) the error is raised."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from testkit import NOW, cluster, group_of, job_body, job_key, pod_body

import phalanx.controller.plan as plan_module
from phalanx.controller import metrics
from phalanx.controller.apply.kube import Kube
from phalanx.controller.cache.store import ClusterCache
from phalanx.controller.kinds.base import Unit
from phalanx.controller.loop.scheduler import Scheduler
from phalanx.controller.model.actions import ReleasePod, UnitPlan
from phalanx.controller.plan import Plan, plan
from phalanx.controller.plan.work import Pass


def two_gangs() -> Any:
    """Two 4-pod Jobs on the seed's 8 nodes; `old` is planned first (older) and takes nb-a."""
    old = job_body("old", 4, created="2026-11-30T10:00:00Z")
    new = job_body("new", 4)
    return cluster(
        [
            (old, group_of(old), [pod_body("old", i) for i in range(4)]),
            (new, group_of(new), [pod_body("new", i) for i in range(4)]),
        ]
    )


def failing_after_deciding(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """`schedule` of the unit `key` decides (its room assumed into the pass's snapshot), then raises."""
    schedule = plan_module.schedule

    def flaky(unit: Unit, ctx: Pass) -> UnitPlan | None:
        planned = schedule(unit, ctx)
        if unit.key == key:
            raise RuntimeError(f"a bug met planning {unit.key}")
        return planned

    monkeypatch.setattr(plan_module, "schedule", flaky)


def released(result: Plan) -> dict[str, str]:
    return {a.pod.name: a.node for a in result.actions if isinstance(a, ReleasePod)}


def test_isolated_a_unit_whose_planning_raises_plans_nothing_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = two_gangs()
    whole = released(plan(state, NOW))
    assert {n for p, n in whole.items() if p.startswith("old-")} == {"n1", "n2", "n3", "n4"}
    failing_after_deciding(monkeypatch, job_key("old"))
    result = plan(state, NOW, isolate=True)
    assert not [u for u in result.units if u.key == job_key("old")]
    assert [key for key, _ in result.failed] == [job_key("old")]
    assert "RuntimeError: a bug met planning Job/ml/old" in result.failed[0][1]
    assert job_key("old") not in result.settled
    # Its room was given back: the younger gang is placed as if the older one had not decided (nb-a first).
    assert set(released(result)) == {f"new-{i}" for i in range(4)}
    assert set(released(result).values()) == {"n1", "n2", "n3", "n4"}


def test_not_isolated_the_error_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    failing_after_deciding(monkeypatch, job_key("old"))
    with pytest.raises(RuntimeError, match="a bug met planning"):
        plan(two_gangs(), NOW)


class Events:
    async def post(self, involved: object, type_: str, reason: str, message: str) -> None:
        pass


def test_the_loop_logs_a_failing_unit_once_counts_every_pass_and_says_when_it_no_longer_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = Scheduler(ClusterCache(), cast(Kube, None), Events())
    before = metrics.REGISTRY.get_sample_value("phalanx_plan_errors_total") or 0.0
    failing = Plan((), {}, failed=(("Job/ml/a", "Traceback: boom"),))
    with caplog.at_level(logging.INFO, logger="phalanx.scheduler"):
        for _ in range(3):
            loop._observe(failing)
        loop._observe(Plan((), {}, failed=(("Job/ml/a", "Traceback: another"),)))
        loop._observe(Plan((), {}))
    said = [r.getMessage() for r in caplog.records]
    assert [m.splitlines()[0] for m in said] == [
        "planning Job/ml/a failed; it plans nothing until this is mended:",
        "planning Job/ml/a failed; it plans nothing until this is mended:",
        "planning Job/ml/a no longer fails",
    ]
    assert said[0].endswith("Traceback: boom") and said[1].endswith("Traceback: another")
    assert metrics.REGISTRY.get_sample_value("phalanx_plan_errors_total") == before + 4
