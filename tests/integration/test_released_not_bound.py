"""Released but not bound (issue 10): a node goes bad between Phalanx's release and kube-scheduler's
binding. Phalanx sees the scheduler refuse (PodScheduled=False), rolls the release back by requeueing the
Job, and places the gang again whole — no pod is left Pending behind a stale nodeSelector."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from phalanx.devcluster.cluster import ClusterState
from phalanx.devcluster.tools import fail_node, heal_node

from .kube import NB_KEY, Namespace, bound, domains_of, wait_for
from .test_phalanx_admission import managed_job

pytestmark = pytest.mark.integration


@pytest.fixture
def paused_scheduler(stock_cluster: ClusterState) -> Iterator[Any]:
    """kube-scheduler stopped (SIGSTOP) until the test resumes it: the window between release and binding."""
    pid = stock_cluster.pids["kube-scheduler"]

    class Scheduler:
        def pause(self) -> None:
            os.kill(pid, signal.SIGSTOP)

        def resume(self) -> None:
            os.kill(pid, signal.SIGCONT)

    scheduler = Scheduler()
    scheduler.pause()
    try:
        yield scheduler
    finally:
        scheduler.resume()


def released(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if not p["spec"].get("schedulingGates")
        and (p["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
    ]


def test_a_release_the_scheduler_cannot_bind_is_rolled_back_and_placed_again(
    ns: Namespace, paused_scheduler: Any
) -> None:
    ns.create(managed_job("train", 2, key=NB_KEY))
    pods = wait_for("2 pods released", lambda: ps if len(released(ps := ns.job_pods("train"))) == 2 else None)
    doomed = pods[0]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    fail_node(ns.api, doomed, how="taint")  # the node goes bad before the scheduler binds
    try:
        paused_scheduler.resume()
        final = wait_for(
            "2 pods bound, none on the failed node",
            lambda: (
                ps
                if len(bound(ps := ns.job_pods("train"))) == 2
                and doomed not in {p["spec"]["nodeName"] for p in ps}
                else None
            ),
            timeout=90,
        )
        assert len(domains_of(ns.api, final, NB_KEY)) == 1
        messages = [e["message"] for e in ns.events("involvedObject.name=train") if e["reason"] == "Requeued"]
        assert any("released but not bound" in m for m in messages), messages
        print(messages[0])
    finally:
        heal_node(ns.api, doomed)
