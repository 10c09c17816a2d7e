"""Victims' failure budget on the dev cluster (issue 16, item 2): a `single` victim whose Job would fail
from losing pods (backoffLimit 0, no podFailurePolicy) is requeued whole, not evicted pod by pod; with a
podFailurePolicy that ignores DisruptionTarget it still loses only the pods the preemptor needs. With
`backoffLimitPerIndex` the budget is counted per index: taken pod by pod while every running index has a
failure left (limit 1), requeued whole when none has (limit 0)."""

from __future__ import annotations

from typing import Any

import pytest

from .kube import LB_KEY, NB_KEY, Namespace, bound, wait_for
from .test_phalanx_admission import wait_bound
from .test_preemption import HIGH, LOW, job, preempted_jobs, priority_classes, read_job  # noqa: F401

pytestmark = pytest.mark.integration

IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def failed(body: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Failed" and c["status"] == "True" for c in body.get("status", {}).get("conditions", [])
    )


def preempted_low(ns: Namespace, low: dict[str, Any]) -> set[str]:
    """keeper (high priority, never a victim) runs in nb-b, `low` (4 pods, min-count 2) in nb-a; high-2
    needs one local block, and evicting 2 pods of low is the cheapest set. low's pods before, once low was
    chosen as the victim and high-2 runs."""
    ns.create(job("keeper", 4, HIGH, NB_KEY))
    wait_bound(ns, "keeper", 4)
    ns.create(low)
    before = {p["metadata"]["name"] for p in wait_bound(ns, "low", 4)}
    ns.create(job("high-2", 2, HIGH, LB_KEY))
    wait_bound(ns, "high-2", 2, timeout=90)
    assert wait_for("low preempted", lambda: preempted_jobs(ns) == {"low"} or None)
    return before


def taken_pod_by_pod(ns: Namespace, before: set[str]) -> dict[str, Any]:
    """Two pods went, two run on, the Job not suspended: low's Job as it is then."""
    kept = wait_for(
        "2 of low's pods left running",
        lambda: (
            k if len(k := {p["metadata"]["name"] for p in bound(ns.job_pods("low"))} & before) == 2 else None
        ),
        timeout=60,
    )
    print(f"low kept {sorted(kept)} running")
    body = read_job(ns, "low")
    assert not body["spec"].get("suspend")
    return body


def requeued_whole(ns: Namespace, before: set[str]) -> dict[str, Any]:
    """Suspended (no failure counted), its pods gone, then resumed with new gated pods: low's Job then."""

    def requeued_and_back() -> dict[str, Any] | None:
        current = ns.job_pods("low")
        names = {p["metadata"]["name"] for p in current}
        body = read_job(ns, "low")
        return body if current and not names & before and not body["spec"].get("suspend") else None

    body = wait_for("low requeued whole and resumed", requeued_and_back, timeout=90)
    events = [e["message"] for e in ns.events("involvedObject.name=low") if e["reason"] == "Preempted"]
    print("\n".join(events))
    assert int(body.get("status", {}).get("failed") or 0) == 0
    return body


@pytest.mark.parametrize("ignores_disruptions", [False, True], ids=["backoff-0", "ignores-disruptions"])
def test_a_single_victim_is_taken_pod_by_pod_only_when_that_cannot_fail_its_job(
    ns: Namespace, ignores_disruptions: bool
) -> None:
    """low has backoffLimit 0: evicting 2 of its pods would fail its Job unless its podFailurePolicy
    ignores disruptions; otherwise Phalanx requeues low whole instead."""
    low = job("low", 4, LOW, NB_KEY, **{"phalanx.dev/min-count": "2"})
    low["spec"]["backoffLimit"] = 0
    if ignores_disruptions:
        low["spec"]["podFailurePolicy"] = IGNORE_DISRUPTIONS
    before = preempted_low(ns, low)
    body = taken_pod_by_pod(ns, before) if ignores_disruptions else requeued_whole(ns, before)
    assert not failed(body), f"low's Job failed: {body.get('status')}"


@pytest.mark.parametrize("per_index", [1, 0], ids=["per-index-budget-left", "per-index-spent"])
def test_a_single_victim_with_backoff_limit_per_index_is_taken_partially_only_with_budget_left(
    ns: Namespace, per_index: int
) -> None:
    """As above, with low's budget per index (`backoffLimitPerIndex`, no podFailurePolicy; the apiserver
    then sets backoffLimit to its maximum): with a limit of 1, each index losing its pod has a failure
    left, so 2 of low's pods go and 2 run on; with 0, losing any pod would fail its index, so low is
    requeued whole (suspended: no failure counted) and its Job never fails."""
    low = job("low", 4, LOW, NB_KEY, **{"phalanx.dev/min-count": "2"})
    low["spec"].pop("backoffLimit", None)
    low["spec"]["backoffLimitPerIndex"] = per_index
    before = preempted_low(ns, low)
    body = taken_pod_by_pod(ns, before) if per_index else requeued_whole(ns, before)
    if per_index:
        # The Job controller counts the two evictions as one failure of each index, within its budget.
        body = wait_for(
            "the 2 evictions counted",
            lambda: b if int((b := read_job(ns, "low")).get("status", {}).get("failed") or 0) == 2 else None,
            timeout=90,
        )
    assert not body.get("status", {}).get("failedIndexes"), body.get("status")
    assert not failed(body), f"low's Job failed: {body.get('status')}"
    # v1.37.2's Job controller never removes the job-tracking finalizers of a backoffLimitPerIndex Job's
    # pods when their namespace is deleted with the Job in it (reproduced on a bare dev cluster, without
    # Phalanx: the namespace stays Terminating); deleted first, the Job's pods go.
    ns.api.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns.name}/jobs/low", {"propagationPolicy": "Background"}
    )
    wait_for("low's pods gone", lambda: not ns.job_pods("low") or None, timeout=90)
