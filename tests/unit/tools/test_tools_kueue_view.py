"""`phalanx explain` shows Kueue's view beside Phalanx's for a Job Kueue manages (tools/kueue_view.py): its
Kueue Workload's conditions, its queues, and which of the two holds it, in text and in `-o json`."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from test_tools_explain import facts
from tools_testkit import JOB_UID, condition, job_pod, managed_job, pod_group

from phalanx.tools.explain import explain, render, to_json
from phalanx.tools.kueue_view import KUEUE, PHALANX, kueue_view


def queued(**kwargs: Any) -> dict[str, Any]:
    job = managed_job(**kwargs)
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "lq"
    return job


def kueue_workload(*conditions: dict[str, Any], cluster_queue: str | None = "cq", active: bool = True) -> Any:
    status: dict[str, Any] = {"conditions": list(conditions)}
    if cluster_queue:
        status["admission"] = {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [{"name": "main", "count": 4}],
        }
    return {
        "metadata": {
            "name": "job-gang-4-1a2b3",
            "ownerReferences": [{"kind": "Job", "name": "gang-4", "uid": JOB_UID, "controller": True}],
        },
        "spec": {"queueName": "lq", "active": active},
        "status": status,
    }


PENDING = condition(
    "QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main: insufficient quota"
)
ADMITTED = (
    condition("QuotaReserved", "True", "QuotaReserved", "reserved"),
    condition("Admitted", "True", "Admitted"),
)


def test_a_job_waiting_in_kueues_queue_is_said_to_be_held_by_kueue() -> None:
    job = queued()
    job["spec"]["suspend"] = True
    held = pod_group(conditions=[condition("Admitted", "False", "HeldByKueue", "held by Kueue: ...")])
    base = facts(job=job, group=held, group_pods=[])
    result = explain(
        dataclasses.replace(base, kueue_workloads=(kueue_workload(PENDING, cluster_queue=None),))
    )
    assert result.state == "held-by-kueue"
    assert result.summary.startswith(
        "held by Kueue: waiting in Kueue's LocalQueue lq (Pending: couldn't assign"
    )
    text = render(result)
    assert "  Kueue: Kueue holds it: waiting in Kueue's LocalQueue lq" in text
    assert "    Workload: job-gang-4-1a2b3 (LocalQueue lq)" in text
    assert (
        "    QuotaReserved: False (Pending): couldn't assign flavors to pod set main: insufficient quota"
        in text
    )
    shape = json.loads(json.dumps(to_json(result)))["kueue"]
    assert (
        shape["holder"] == KUEUE and shape["workload"] == "job-gang-4-1a2b3" and shape["clusterQueue"] is None
    )
    assert shape["conditions"] == [
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient quota",
        }
    ]


def test_a_job_kueue_admitted_is_phalanxs_to_place_and_explain_still_runs_the_engine() -> None:
    base = facts(job=queued(), group=pod_group())
    result = explain(dataclasses.replace(base, kueue_workloads=(kueue_workload(*ADMITTED),)))
    assert result.state == "waiting" and result.placement is not None  # Phalanx's view, unchanged
    assert result.kueue is not None and result.kueue.holder == PHALANX
    assert "Kueue admitted it into ClusterQueue cq" in render(result)
    assert {c["type"] for c in to_json(result)["kueue"]["conditions"]} == {"QuotaReserved", "Admitted"}


def test_an_evicted_or_deactivated_workload_is_kueues_again() -> None:
    evicted = kueue_workload(*ADMITTED, condition("Evicted", "True", "Preempted", "Preempted to accommodate"))
    view = kueue_view(queued(), [evicted])
    assert view is not None and view.holder == KUEUE and "Kueue is evicting it (Preempted" in view.summary
    off = kueue_view(queued(), [kueue_workload(*ADMITTED, active=False)])
    assert off is not None and off.holder == KUEUE and "deactivated" in off.summary


def test_a_workload_kueue_evicted_and_requeued_is_said_to_wait_in_its_queue_not_to_be_evicted() -> None:
    """Evicted stays True once Kueue has released the quota of a preempted Job and requeued it: it waits in
    its LocalQueue again (naming the eviction); Requeued=False says Kueue has not requeued it yet."""
    said = "Preempted to accommodate a workload"
    evicted = condition("Evicted", "True", "Preempted", said)
    requeued = condition("Requeued", "True", "Preempted", said)
    view = kueue_view(queued(), [kueue_workload(PENDING, evicted, requeued, cluster_queue=None)])
    assert view is not None and view.holder == KUEUE and "evicting" not in view.summary, view
    assert view.summary.startswith(
        "waiting in Kueue's LocalQueue lq since Kueue evicted it (Preempted) (Pending: couldn't assign"
    ), view.summary
    later = condition("Requeued", "False", "BackoffLimitExceeded", "no more requeues")
    view = kueue_view(queued(), [kueue_workload(PENDING, evicted, later, cluster_queue=None)])
    assert view is not None and view.holder == KUEUE
    assert "Kueue evicted it (Preempted) and has not requeued it yet (BackoffLimitExceeded" in view.summary


def test_a_job_kueue_does_not_manage_has_no_kueue_view_and_json_says_null() -> None:
    result = explain(
        facts(job=managed_job(), group=pod_group(), group_pods=[job_pod("gang-4", i) for i in range(4)])
    )
    assert result.kueue is None and to_json(result)["kueue"] is None
    assert "Kueue" not in render(result)


def test_workloads_that_could_not_be_read_are_said_so() -> None:
    base = facts(job=queued(), group=pod_group())
    result = explain(dataclasses.replace(base, kueue_error="GET ...: HTTP 403: forbidden"))
    assert (
        result.kueue is not None
        and "could not be read (GET ...: HTTP 403: forbidden)" in result.kueue.summary
    )
