"""A node fails under a running gang (the article's case, issue 10): replaced in its domain while it can
be, requeued whole into another domain once it cannot — never left running below its minCount."""

from __future__ import annotations

import time
from typing import Any

import pytest

from phalanx.devcluster.tools import fail_node, heal_node

from .kube import NB_KEY, Namespace, bound, domains_of, hold, wait_for
from .test_phalanx_admission import group_of, managed_job, wait_bound

pytestmark = pytest.mark.integration

NB_B = ("was-worker5", "was-worker6", "was-worker7", "was-worker8")
GRACE = 30.0  # phalanx run's default --node-failure-grace


def nodes_of(pods: list[dict[str, Any]]) -> set[str]:
    return {p["spec"]["nodeName"] for p in bound(pods)}


def test_train_3_is_replaced_in_its_block_then_requeued_whole_into_the_other(ns: Namespace) -> None:
    ns.fill(*NB_B)  # train-3 goes to nb-a, which keeps one free node
    ns.create(managed_job("train-3", 3, key=NB_KEY))
    pods = wait_bound(ns, "train-3", 3)
    assert domains_of(ns.api, pods, NB_KEY) == {"nb-a"}
    for node in NB_B:
        ns.unfill(node)  # nb-b is free again: the requeued Job can go there
    failed: list[str] = []
    try:
        # First failure: the replacement pod goes to nb-a's free node; nothing is requeued.
        first = sorted(nodes_of(pods))[0]
        fail_node(ns.api, first, how="taint")
        failed.append(first)
        pods = wait_for(
            "3 bound again, in nb-a, off the failed node",
            lambda: (
                ps if len(bound(ps := ns.job_pods("train-3"))) == 3 and first not in nodes_of(ps) else None
            ),
            timeout=60,
        )
        assert domains_of(ns.api, pods, NB_KEY) == {"nb-a"}

        # Second failure: nb-a has no free node left. Upstream stays at 2 Running + 1 Pending for ever;
        # Phalanx requeues the Job whole after the grace period and it runs in nb-b.
        second = sorted(nodes_of(pods))[0]
        fail_node(ns.api, second, how="taint")
        failed.append(second)
        failed_at = time.monotonic()
        pods = wait_for(
            "3 bound in nb-b",
            lambda: (
                ps
                if len(bound(ps := ns.job_pods("train-3"))) == 3
                and domains_of(ns.api, ps, NB_KEY) == {"nb-b"}
                else None
            ),
            timeout=GRACE + 60,
        )
        took = time.monotonic() - failed_at
        print(f"second failure -> whole Job running in nb-b: {took:.1f} s (grace {GRACE:.0f} s)")
        job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train-3")
        # The two pods the NoExecute taints evicted are the Job's only failures: the requeue (the
        # suspension of the two that were still running) added none.
        assert int(job.get("status", {}).get("failed") or 0) == len(failed)
        reasons = [e["reason"] for e in ns.events("involvedObject.name=train-3")]
        assert "Requeued" in reasons
        wait_for(
            "the PodGroup says nb-b",
            lambda: ((group_of(ns, "train-3") or {}).get("status") or {}).get("domain") == "nb-b",
        )
        hold("it stays whole in nb-b", lambda: len(bound(ns.job_pods("train-3"))) == 3, seconds=2)
    finally:
        for node in failed:
            heal_node(ns.api, node)


HOLD = "phalanx.dev/test-hold"  # a finalizer of the test's own, as another tool may keep on a Job


def test_a_job_being_deleted_under_a_finalizer_that_loses_a_node_is_taken_down_not_left_split(
    ns: Namespace,
) -> None:
    """The user deletes a running gang's Job (background propagation) while another tool's finalizer holds
    it: its pods would run until the garbage collector takes them after the Job. A node of the gang fails
    meanwhile and its pod is evicted; the Job controller makes no pod for a Job being deleted, and Phalanx
    places none, so the other two would run split for as long as the finalizer holds. Phalanx deletes them
    at once and says so on the Job; nothing is made again for it."""
    ns.create(managed_job("held-3", 3, key=NB_KEY))
    pods = wait_bound(ns, "held-3", 3)
    ns.patch_job("held-3", {"metadata": {"finalizers": [HOLD]}})
    path = f"/apis/batch/v1/namespaces/{ns.name}/jobs/held-3"
    failed = ""
    try:
        ns.api.request(
            "DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        )
        wait_for("the Job being deleted", lambda: ns.get(path)["metadata"].get("deletionTimestamp"))
        # Whole, it is left alone: its pods run until the finalizer goes.
        hold("the whole gang keeps running", lambda: len(bound(ns.job_pods("held-3"))) == 3, seconds=3)
        failed = sorted(nodes_of(pods))[0]
        fail_node(ns.api, failed, how="taint")
        wait_for("no pod of the Job left running", lambda: not ns.job_pods("held-3"), timeout=60)
        events = ns.events_until(
            "the Job told why",
            lambda evs: any(
                e["reason"] == "SplitWhileDeleting" and e["involvedObject"]["name"] == "held-3" for e in evs
            ),
        )
        (said,) = {e["message"] for e in events if e["reason"] == "SplitWhileDeleting"}
        assert "is being deleted and its gang runs short" in said
        assert ns.get(path)["metadata"].get("deletionTimestamp")  # still held by the finalizer
        hold("nothing runs again for it", lambda: not ns.job_pods("held-3"), seconds=3)
    finally:
        if failed:
            heal_node(ns.api, failed)
        ns.api.request("PATCH", path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    wait_for("the Job gone", lambda: not [j for j in ns.get("/apis/batch/v1/namespaces/{ns}/jobs")["items"]])
