"""Scaling a running gang up on a full domain (issue 16 item 8), on the dev cluster: an elastic Indexed Job
of 2 pods runs in one network block whose other nodes are taken; its parallelism (and completions) go to 4.
The new pods wait, past the node-failure grace period, while the running pods keep running and the Job is
not suspended; once the block has room they join the running pods there."""

from __future__ import annotations

from typing import Any

from .kube import NB_KEY, Namespace, bound, hold, node_labels, wait_for
from .test_phalanx_admission import group_of, managed_job

GRACE = 30.0  # phalanx run's default --node-failure-grace


def running(ns: Namespace, count: int) -> list[dict[str, Any]] | None:
    pods = bound(ns.job_pods("train"))
    return pods if len(pods) == count else None


def min_count(ns: Namespace) -> int | None:
    spec = (group_of(ns, "train") or {}).get("spec") or {}
    found: int | None = ((spec.get("schedulingPolicy") or {}).get("gang") or {}).get("minCount")
    return found


def test_new_pods_of_a_scaled_up_gang_wait_beside_the_running_ones_then_join_them(ns: Namespace) -> None:
    ns.create(managed_job("train", 2, NB_KEY))
    first = wait_for("train's 2 pods bound", lambda: running(ns, 2), timeout=120)
    labels = node_labels(ns.api)
    nodes = {p["spec"]["nodeName"] for p in first}
    (home,) = {labels[n][NB_KEY] for n in nodes}
    others = sorted(n for n, lb in labels.items() if lb.get(NB_KEY) == home and n not in nodes)
    ns.fill(*others)
    uids = {p["metadata"]["uid"] for p in first}

    ns.patch_job("train", {"spec": {"parallelism": 4, "completions": 4}})
    wait_for("the PodGroup's minCount 4", lambda: min_count(ns) == 4 or None)
    wait_for("4 pods", lambda: len(ns.job_pods("train")) == 4 or None, timeout=60)

    def untouched() -> bool:
        job = ns.get("/apis/batch/v1/namespaces/{ns}/jobs/train")
        alive = {p["metadata"]["uid"] for p in bound(ns.job_pods("train"))}
        return not job["spec"].get("suspend") and uids <= alive

    hold("the running pods kept, the Job not suspended", untouched, seconds=GRACE + 15)

    for node in others:
        ns.unfill(node)
    now = wait_for("train's 4 pods bound", lambda: running(ns, 4), timeout=120)
    assert uids <= {p["metadata"]["uid"] for p in now}
    assert {labels[p["spec"]["nodeName"]][NB_KEY] for p in now} == {home}
