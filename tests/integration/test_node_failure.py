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
