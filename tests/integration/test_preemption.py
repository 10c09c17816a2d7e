"""Workload-aware preemption on a stock cluster (issue 9): the article's cases, without upstream's faults."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.http import ApiError

from .kube import LB_KEY, NB_KEY, Namespace, bound, domains_of, gpu_job, hold, wait_for
from .test_phalanx_admission import MANAGED, group_of, wait_bound, wait_condition

pytestmark = pytest.mark.integration

LOW, MIDDLE, HIGH = "phalanx-test-low", "phalanx-test-middle", "phalanx-test-high"
VALUES = {LOW: 10, MIDDLE: 100, HIGH: 1000}


@pytest.fixture(scope="module", autouse=True)
def priority_classes(stock_cluster: ClusterState) -> Iterator[None]:
    api = stock_cluster.client()
    for name, value in VALUES.items():
        try:
            api.request(
                "POST",
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        except ApiError as e:
            if e.status != 409:
                raise
    yield
    for name in VALUES:
        api.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def job(name: str, count: int, priority: str, key: str, **annotations: str) -> dict[str, Any]:
    notes = {"phalanx.dev/topology-key": key, **annotations}
    return gpu_job(name, count, labels=MANAGED, annotations=notes, priority_class=priority)


def read_job(ns: Namespace, name: str) -> dict[str, Any]:
    result: dict[str, Any] = ns.get(f"/apis/batch/v1/namespaces/{{ns}}/jobs/{name}")
    return result


def preempted_jobs(ns: Namespace) -> set[str]:
    return {
        e["involvedObject"]["name"]
        for e in ns.events()
        if e["reason"] == "Preempted" and e["involvedObject"]["kind"] == "Job"
    }


def gated(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if any(g["name"] == "phalanx.dev/admission" for g in p["spec"].get("schedulingGates") or [])
    ]


def two_low_gangs(ns: Namespace, mode: str) -> None:
    """low-a and low-b: 4 pods each, one network block each (the cluster is full)."""
    for name in ("low-a", "low-b"):
        ns.create(job(name, 4, LOW, NB_KEY, **{"phalanx.dev/disruption-mode": mode}))
        wait_bound(ns, name, 4)


@pytest.mark.parametrize("mode", ["single", "all"])
def test_the_articles_preemption_requeues_one_low_gang_whole_and_high_2_runs(
    ns: Namespace, mode: str
) -> None:
    two_low_gangs(ns, mode)
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    started = time.monotonic()
    pods = wait_bound(ns, "high-2", 2, timeout=90)
    assert len(domains_of(ns.api, pods, LB_KEY)) == 1
    (victim,) = wait_for("one preempted low Job", lambda: preempted_jobs(ns) or None)
    survivor = "low-b" if victim == "low-a" else "low-a"
    assert len(bound(ns.job_pods(survivor))) == 4  # only what was needed: one gang, not both

    # The victim was requeued whole, not left running 2 of 4: it was resumed, its new pods are gated
    # and wait for a whole placement; the Job controller counted no failure.
    def new_pods_gated() -> list[dict[str, Any]] | None:
        current = ns.job_pods(victim)
        return current if len(current) == 4 and len(gated(current)) == 4 else None

    wait_for(f"{victim}'s new pods, gated", new_pods_gated, timeout=30)
    print(
        f"{mode}: {victim} requeued; its new pods exist and are gated {time.monotonic() - started:.1f} s "
        "after high-2 was created (upstream v1.37 with 'all': about 80 s of Job failure backoff)"
    )
    body = read_job(ns, victim)
    assert not body["spec"].get("suspend")
    assert int(body.get("status", {}).get("failed") or 0) == 0
    assert "phalanx.dev/requeued" not in (body["metadata"].get("annotations") or {})
    hold("the requeued gang is held whole", lambda: not bound(ns.job_pods(victim)), seconds=2)
    cond = wait_condition(ns, victim, "Admitted", "False")
    assert cond["reason"] in ("Unschedulable", "WaitingForPods")
    group = group_of(ns, victim)
    assert group is not None
    disruption = next(c for c in group["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert disruption["reason"] in ("PreemptionByPhalanx", "Requeued")


def test_no_preemption_when_a_free_local_block_fits(ns: Namespace) -> None:
    ns.create(job("low-a", 4, LOW, NB_KEY))
    wait_bound(ns, "low-a", 4)
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    wait_bound(ns, "high-2", 2)
    assert len(bound(ns.job_pods("low-a"))) == 4
    assert not preempted_jobs(ns)


def test_the_cheapest_victim_is_the_lowest_priority(ns: Namespace) -> None:
    """Either gang would make room; the lower-priority one goes."""
    ns.create(job("middle", 4, MIDDLE, NB_KEY))
    wait_bound(ns, "middle", 4)
    ns.create(job("low", 4, LOW, NB_KEY))
    wait_bound(ns, "low", 4)
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    wait_bound(ns, "high-2", 2, timeout=90)
    assert preempted_jobs(ns) == {"low"}
    assert len(bound(ns.job_pods("middle"))) == 4


def test_equal_priority_never_preempts_and_never_policy_waits_saying_so(ns: Namespace) -> None:
    for name in ("peer-a", "peer-b"):
        ns.create(job(name, 4, HIGH, NB_KEY))
        wait_bound(ns, name, 4)
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    wait_condition(ns, "high-2", "Admitted", "False", "Unschedulable")
    ns.create(job("polite", 2, HIGH, LB_KEY, **{"phalanx.dev/preemption-policy": "Never"}))
    cond = wait_condition(ns, "polite", "Admitted", "False", "Unschedulable")
    assert "preemptionPolicy Never" in cond["message"]
    hold("nothing is preempted", lambda: not preempted_jobs(ns), seconds=3)


def pinned_job(name: str, count: int, priority: str, nodes: list[str]) -> dict[str, Any]:
    """A Job Phalanx does not manage, its pods (8 GPUs each: one per node) kept to these nodes."""
    body = gpu_job(name, count, priority_class=priority)
    body["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                        ]
                    }
                ]
            }
        }
    }
    return body


def test_a_budget_that_blocks_the_cheapest_victim_leads_to_another_choice(ns: Namespace) -> None:
    """lb-a1 and lb-a2 run two low pods each (Jobs Phalanx does not manage: victims one by one, like
    kube-scheduler's); nb-b runs pods of high-2's own priority. free-a started last, so it is the cheapest
    victim — but a PodDisruptionBudget keeps it: free-b is evicted instead, and high-2 runs."""
    ns.create(pinned_job("blockers", 4, HIGH, ["was-worker5", "was-worker6", "was-worker7", "was-worker8"]))
    wait_for("4 blockers bound", lambda: len(bound(ns.job_pods("blockers"))) == 4)
    ns.create(pinned_job("free-b", 2, LOW, ["was-worker3", "was-worker4"]))
    wait_for("free-b bound", lambda: len(bound(ns.job_pods("free-b"))) == 2)
    ns.create(pinned_job("free-a", 2, LOW, ["was-worker", "was-worker2"]))
    wait_for("free-a bound", lambda: len(bound(ns.job_pods("free-a"))) == 2)
    ns.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-free-a"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"job-name": "free-a"}}},
        },
        path=f"/apis/policy/v1/namespaces/{ns.name}/poddisruptionbudgets",
    )
    wait_for(
        "the budget to be computed",
        lambda: (
            ns.get("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/keep-free-a")
            .get("status", {})
            .get("currentHealthy")
            == 2
        ),
    )
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    pods = wait_bound(ns, "high-2", 2, timeout=120)
    assert domains_of(ns.api, pods, LB_KEY) == {"lb-a2"}
    assert len(bound(ns.job_pods("free-a"))) == 2
