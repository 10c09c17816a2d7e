"""Victims' failure budget, the controller side (issue 16, item 2): a `single` victim loses pods one by one
only when losing them cannot fail its Job (a podFailurePolicy ignoring DisruptionTarget, or backoff budget
left, per index with backoffLimitPerIndex); otherwise it is requeued whole. The engine's side
(`VictimGroup(partial=False)` priced whole) is property-tested in tests/unit/placement."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from testkit import LB, NOW, cluster, group_of, job_body, only, pod_body

from phalanx.controller.kinds.job_budget import failure_budget
from phalanx.controller.model.actions import EvictPod, SuspendJob
from phalanx.controller.model.records import PodRecord
from phalanx.controller.plan import Plan, plan

IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def victim(name: str, first_node: int, min_count: int, **spec: Any) -> tuple[Any, Any, Any]:
    """A low-priority gang of 4 running pods on n<first_node>.. (single disruption mode)."""
    job = job_body(
        name, 4, annotations={"phalanx.dev/min-count": str(min_count)}, created="2026-11-30T10:00:00Z"
    )
    job["spec"].update(spec)
    failed = spec.pop("failed", None)
    if failed is not None:
        job["spec"].pop("failed")
        job["status"]["failed"] = failed
    group = group_of(job)
    pods = [
        pod_body(
            name, i, gated=False, node=f"n{first_node + i}", phase="Running", priority=10, group=group.name
        )
        for i in range(4)
    ]
    return job, group, pods


def with_index_failures(gang: tuple[Any, Any, Any], count: int) -> tuple[Any, Any, Any]:
    job, group, pods = gang
    for pod in pods:
        pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-index-failure-count": str(count)}
    return job, group, pods


def preempt(low: tuple[Any, Any, Any]) -> Plan:
    """A 2-pod high-priority gang needing one local block; the cluster is full (low on n1-n4, a 4-pod
    gang that cannot lose single pods on n5-n8)."""
    other = victim("other", 5, 4)
    high = job_body("high", 2, annotations={"phalanx.dev/topology-key": LB})
    group = group_of(high)
    group = dataclasses.replace(group, spec=group.spec.model_copy(update={"priority": 1000}))
    pods = [pod_body("high", i, priority=1000, group=group.name) for i in range(2)]
    return plan(cluster([low, other, (high, group, pods)]), NOW)


@pytest.mark.parametrize(
    ("spec", "partial"),
    [
        ({}, True),  # backoffLimit 6 (the default): 2 failures fit
        ({"backoffLimit": 0}, False),  # the Job: 2 evictions would fail it
        ({"backoffLimit": 1}, False),  # one failure left, two pods would go
        ({"backoffLimit": 3, "failed": 2}, False),  # 2 spent already
        ({"backoffLimit": 4, "failed": 2}, True),
        ({"backoffLimit": 0, "podFailurePolicy": IGNORE_DISRUPTIONS}, True),
        (
            {
                "backoffLimit": 6,
                "podFailurePolicy": {
                    "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
                },
            },
            False,
        ),
        (
            {
                "backoffLimit": 6,
                "podFailurePolicy": {
                    "rules": [
                        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}},
                        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    ]
                },
            },
            False,  # the first rule may match the evicted container's exit code
        ),
    ],
)
def test_a_single_victim_is_taken_pod_by_pod_only_within_its_failure_budget(
    spec: dict[str, Any], partial: bool
) -> None:
    result = preempt(victim("low", 1, 2, **spec))
    evicted = {e.pod.name for e in only(result.actions, EvictPod)}
    suspended = [s.job.name for s in only(result.actions, SuspendJob)]
    if partial:
        assert len(evicted) == 2 and all(p.startswith("low-") for p in evicted) and not suspended
    else:
        assert not evicted, "a victim whose Job would fail must not lose single pods"
        assert len(suspended) == 1  # requeued whole: suspended, which counts no failure


def test_per_index_budgets_count_each_running_index() -> None:
    spec = {"backoffLimitPerIndex": 1, "completionMode": "Indexed"}
    fresh = preempt(victim("low", 1, 2, **spec))
    assert len(only(fresh.actions, EvictPod)) == 2
    spent = preempt(with_index_failures(victim("low", 1, 2, **spec), 1))
    assert not only(spent.actions, EvictPod) and len(only(spent.actions, SuspendJob)) == 1


def test_the_budget_rule_reads_the_job_as_the_job_controller_does() -> None:
    running = [
        PodRecord.from_body(pod_body("j", i, gated=False, node="n1", phase="Running")) for i in range(2)
    ]
    assert failure_budget({"backoffLimit": 2}, 1, running) == 1
    assert failure_budget({"backoffLimit": 2}, 5, running) == 0
    assert failure_budget({}, 0, running) == 6
    assert failure_budget({"podFailurePolicy": IGNORE_DISRUPTIONS}, 99, running) is None
    count = {"rules": [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    assert failure_budget({"backoffLimit": 3, "podFailurePolicy": count}, 0, running) == 3
    # a condition rule for status False does not match an evicted pod (DisruptionTarget=True)
    other = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}]
    }
    assert failure_budget({"backoffLimit": 0, "podFailurePolicy": other}, 0, running) == 0
